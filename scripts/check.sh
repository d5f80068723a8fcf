#!/usr/bin/env bash
# Lint, format check and strict typing; the same script people and CI run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY_DIRS=(reservoir agent lab server kmod-pacing campaigns config web scripts tests setup.py)
.venv/bin/ruff check "${PY_DIRS[@]}"
.venv/bin/ruff format --check "${PY_DIRS[@]}"
.venv/bin/python scripts/typecheck.py
# The dashboard's JavaScript, type-checked from its JSDoc (tsc --checkJs, web/tsconfig.json).
if [[ ! -x web/node_modules/.bin/tsc ]]; then
    echo "check: web/node_modules has no tsc: run make install (npm ci in web/)" >&2
    exit 1
fi
(cd web && npm run --silent check)
