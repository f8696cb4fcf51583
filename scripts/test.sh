#!/usr/bin/env bash
# Fresh machine -> tests: install, then the default suite (long runs are behind `-m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
ruff check .  # lint (config in pyproject.toml)
python -m pytest "$@"
