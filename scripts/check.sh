#!/usr/bin/env bash
# Lint, format check and strict typing; the same script people and CI run.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check reservoir agent lab server kmod-pacing campaigns config web scripts tests setup.py
.venv/bin/ruff format --check reservoir agent lab server kmod-pacing campaigns config web scripts tests setup.py
.venv/bin/python scripts/typecheck.py
