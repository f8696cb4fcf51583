#!/usr/bin/env bash
# Fresh machine -> study: install, prepare the data, run a study's sweep (default seeds-final),
# then the diagnostics and statistics notebooks, and print the report.
#   bash scripts/study.sh [STUDY] [extra sweep args]
set -euo pipefail
cd "$(dirname "$0")/.."
study="${1:-seeds-final}"; shift || true
bash scripts/install.sh
mkdir -p "runs/$study"
papermill notebooks/01_data.ipynb "runs/$study/01_data.ipynb" --cwd notebooks ${EMBNORM_DATA:+-p data_path "$EMBNORM_DATA"}
python -m embnorm_lib.sweep "$study" "$@"
python -m embnorm_lib.publish "$study"   # 03/04 notebooks -> figures, REPORT.md, report.html
