#!/usr/bin/env bash
# The README's main job. Fresh machine -> study: install, verify the data, then either prove the committed
# study is real (re-train one random cell per arm and compare bit for bit, re-publish, print the findings)
# or run what is missing.
#   bash scripts/study.sh [STUDY] [--fresh]      (default study: seeds-final; see python -m embnorm_lib job -h)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "embnorm: installing the pinned requirements (quiet; minutes on a fresh machine, seconds after), then the study"
bash scripts/install.sh
exec python -m embnorm_lib job "$@"
