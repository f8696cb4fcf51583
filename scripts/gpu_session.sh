#!/usr/bin/env bash
# One lent-GPU session's checks (issue 20), in order of what they settle, each part under its own time limit so a
# slow part cannot take the ones after it: the CUDA tests, the design card's papermill command, a whole study as the
# sweep runs it, a hundred steps of gpt-small, then the loop's figures (compile on/off, MFU). The first lent session
# (2026-11-27, an H100) ran out of time in every part after the tests; with the limits that followed, the second
# (2026-11-28, an H200) ran notebook, study main, gpt-small and profile in 293 s (runs/bench-gpu/).
# Every part merges its figures into runs/bench-gpu.json (bench_gpu.py); the log and that file are copied to
# $OUT (the device tool's return folder) after each part, so a session cut short still brings back what finished.
#
#   bash scripts/gpu_session.sh [SECONDS] [STUDY] [PART...]   # SECONDS: the whole script's budget (default 540);
#                                                              # PARTS: some of cuda-tests notebook study gpt-small loop profile
#                                                              # shards vs-nanogpt
#
# Prepared here beforehand (scripts/gpu_env.sh uses them there): `bash scripts/code_only.sh on` (the tree must
# stay under 64 MiB), the wheels the device lacks in .whl/ (`python scripts/offline_wheels.py --have have.txt`),
# the corpus copied to .gpudata/input.txt; the device call carries .whl and .gpudata and sets
# EMBNORM_SOURCE_COMMIT to the commit the tree came from.
set -u
budget=${1:-540}; study=${2:-main}; shift $(( $# < 2 ? $# : 2 ))
wanted=" ${*:-cuda-tests notebook study gpt-small loop profile shards vs-nanogpt} "
start=$(date +%s)
out=${OUT:-/tmp/gpu-session-out}; mkdir -p "$out"
log="$out/gpu_session.log"
source scripts/gpu_env.sh

left() { echo $(( budget - ($(date +%s) - start) )); }
part() {  # part NAME LIMIT COMMAND...: runs COMMAND under min(LIMIT, time left - 5 s)
  local name=$1 limit=$2; shift 2
  [[ "$wanted" == *" ${name%% *} "* ]] || return 0
  local t; t=$(left); t=$(( t - 5 < limit ? t - 5 : limit ))
  if [ "$t" -lt 20 ]; then echo "== $name: skipped (${t}s left)" | tee -a "$log"; return; fi
  echo "== $name (limit ${t}s) $(date -u +%T)" | tee -a "$log"
  local t0; t0=$(date +%s)
  timeout --signal=INT --kill-after=5 "$t" "$@" >>"$log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$log"
  [ -f runs/bench-gpu.json ] && cp runs/bench-gpu.json "$out/"
}

# OMP threads: four pytest workers on 16 cores would otherwise start 16 torch threads each for their CPU halves
part cuda-tests 120 env OMP_NUM_THREADS=4 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_bench_gpu.py
part notebook 150 python3 -m embnorm_lib bench-gpu notebook
part "study $study" 240 python3 -m embnorm_lib bench-gpu study "$study"
part gpt-small 150 python3 -m embnorm_lib bench-gpu gpt-small --iters 100
part loop 150 python3 -m embnorm_lib bench-gpu loop --iters 100
part profile 60 python3 -m embnorm_lib bench-gpu profile
# the practitioner's check (issue 115): GPT-2 small steps on synthetic shards, and beside nanoGPT's own model when a
# checkout of it was carried as .nanogpt/ (its code is not part of this project)
part shards 120 python3 -m embnorm_lib bench-nanogpt shards --steps 60
[ -f .nanogpt/model.py ] && part vs-nanogpt 150 python3 -m embnorm_lib bench-nanogpt side-by-side --nanogpt .nanogpt
echo "== done in $(( $(date +%s) - start ))s" | tee -a "$log"
