#!/usr/bin/env bash
# Install the pinned requirements and this package (editable) into the current Python.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r requirements.txt
python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps -e .
