#!/usr/bin/env bash
# Writes constraints.txt: every package of the development environment (.venv, as
# `make install` made it: every extra) pinned at its installed version, the project
# itself left out. scripts/install.sh installs every profile with these versions, so
# people, CI and storage nodes run what was tested together.
#
# To move to newer versions: .venv/bin/pip install --upgrade -e '.[coordinator,lio,dev]',
# run the tests, then this script, and commit constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
{
    echo "# Versions installed and tested together; written by scripts/constraints.sh,"
    echo "# used by scripts/install.sh (pip install -c constraints.txt) for every profile."
    .venv/bin/python -m pip freeze --exclude-editable | grep -viE '^reservoir(==| @ )'
} >constraints.txt.tmp
mv constraints.txt.tmp constraints.txt
echo "constraints: $(grep -vc '^#' constraints.txt) packages pinned in constraints.txt"
