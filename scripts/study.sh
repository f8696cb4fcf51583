#!/usr/bin/env bash
# Fresh machine -> study: install, prepare the data, run a study's sweep (default seeds-final),
# then the diagnostics and statistics notebooks that exist, and print where the results are.
#   bash scripts/study.sh [STUDY] [extra sweep args]
set -euo pipefail
cd "$(dirname "$0")/.."
study="${1:-seeds-final}"; shift || true
bash scripts/install.sh
mkdir -p "runs/$study"
papermill notebooks/01_data.ipynb "runs/$study/01_data.ipynb" --cwd notebooks ${EMBNORM_DATA:+-p data_path "$EMBNORM_DATA"}
python -m embnorm_lib.sweep "$study" "$@"
for nb in 03_diagnostics 04_statistics; do
  if [ -f "notebooks/$nb.ipynb" ]; then
    papermill "notebooks/$nb.ipynb" "runs/$study/$nb.ipynb" --cwd notebooks -p study "$study"
  fi
done
python -m embnorm_lib.report summary "$study"
