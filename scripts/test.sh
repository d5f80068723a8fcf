#!/usr/bin/env bash
# The whole test suite: lint/typing, unit, integration against real peers, bounded fuzzing.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/check.sh || exit 1
.venv/bin/python -m pytest --durations=25 "$@"
rc=$?
# 5 = no tests collected: a suite that ran nothing is a failure here.
if [[ $rc -eq 5 ]]; then
    echo "test: pytest collected no tests" >&2
    exit 1
fi
exit $rc
