#!/usr/bin/env bash
# The fleet engine (embnorm_lib/core/training/fleet.py, issue 75) on a lent GPU in at most SECONDS (default 420): the fleet's CUDA
# tests, the `main` study through the fleet (wall, split by part, MFU), its final losses against the committed CPU
# runs, a 1,000-member LR x seed x arm sweep of the tiny preset, then the zero/few-shot suite on the kept runs for
# whatever time is left. Each part runs under its own limit, so a slow part cannot take the ones after it; each
# merges its figures into $OUT/bench-fleet.json, and that file and the log are in $OUT after every part.
#
#   bash scripts/gpu_fleet.sh [SECONDS] [PART...]   # PARTS: some of cuda-tests main compare sweep lm-eval
#
# Prepared here beforehand, as for scripts/gpu_session.sh: `bash scripts/code_only.sh on`, the wheels the device
# lacks in .whl/, the corpus in .gpudata/input.txt, and the committed runs of `main` that `compare` reads (their
# summaries only; the run directories stay here):
#   for f in runs/main/*/seed*/summary.json; do mkdir -p ".gpudata/$(dirname "$f")"; cp "$f" ".gpudata/$f"; done
# Back here: `python -m embnorm_lib bench-fleet absorb FILES_AT/bench-fleet.json` merges the figures into
# runs/bench-gpu.json (refused if they were measured on another GPU than the one that file describes).
set -u
budget=${1:-420}; shift $(( $# < 1 ? $# : 1 ))
wanted=" ${*:-cuda-tests main compare sweep lm-eval} "
start=$(date +%s)
out=${OUT:-/tmp/gpu-fleet-out}; mkdir -p "$out"
log="$out/gpu_fleet.log"
save="$out/bench-fleet.json"
kept=/tmp/embnorm-fleet-main  # the study's runs, for the lm-eval part
source scripts/gpu_env.sh

left() { echo $(( budget - ($(date +%s) - start) )); }
part() {  # part NAME LIMIT COMMAND...: runs COMMAND under min(LIMIT, time left - 5 s)
  local name=$1 limit=$2; shift 2
  [[ "$wanted" == *" $name "* ]] || return 0
  local t; t=$(left); t=$(( t - 5 < limit ? t - 5 : limit ))
  if [ "$t" -lt 15 ]; then echo "== $name: skipped (${t}s left)" | tee -a "$log"; return; fi
  echo "== $name (limit ${t}s) $(date -u +%T)" | tee -a "$log"
  local t0; t0=$(date +%s)
  timeout --signal=INT --kill-after=5 "$t" "$@" >>"$log" 2>&1
  echo "== $name: rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$log"
}

rm -rf "$kept"
part cuda-tests 75 env OMP_NUM_THREADS=4 python3 -m pytest -q -p no:cacheprovider tests/test_fleet_cuda.py
part main 150 python3 -m embnorm_lib bench-fleet study main --keep "$kept" --save "$save"
part compare 20 python3 -m embnorm_lib bench-fleet compare main --save "$save"
part sweep 120 python3 -m embnorm_lib bench-fleet sweep --members 1000 --preset tiny --iters 200 --save "$save"
part lm-eval 60 python3 -m embnorm_lib bench-fleet lm-eval main --keep "$kept" --save "$save"
echo "== done in $(( $(date +%s) - start ))s" | tee -a "$log"
