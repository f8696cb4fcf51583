#!/usr/bin/env bash
# Registered runs trained on a lent GPU and brought back: the sweep (as batched fleets on CUDA, which took over from
# the packed jobs amendment 15 item 3 named for the runs of a size that move to a GPU; a plain sweep elsewhere) under
# one time limit, then every run directory that finished, without its
# weights, packed into $OUT/runs.tar.gz (the device tool brings back at most 8 files). A run cut off by the limit
# does not come back: its checkpoint is too large to return, so it starts again on the next machine.
#
#   bash scripts/gpu_sweep.sh SECONDS STUDY [sweep arguments...]
#   e.g. EMBNORM_SOURCE_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_sweep.sh 520 ladder --only preset=ladder-4 --seeds 2-4
#
# Prepared here as for gpu_session.sh (scripts/code_only.sh on, .whl/, .gpudata/). Back here, after
# `bash scripts/code_only.sh off`: `tar -xzf FILES_AT/runs.tar.gz` in the repository root, then
# `python -m embnorm_lib sweep STUDY --index-only` and the study's report; each run records its device and precision.
set -u
budget=${1:?SECONDS}; study=${2:?STUDY}; shift 2
start=$(date +%s)
marker=$(mktemp)  # what finished after this moment comes back
out=${OUT:-/tmp/gpu-sweep-out}; mkdir -p "$out"
log="$out/gpu_sweep.log"
source scripts/gpu_env.sh
limit=$(( budget - 25 - ($(date +%s) - start) ))  # room to pack the results
mode=()  # the fleet only where it pays: `sweep --fleet` refuses a CPU
python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' && mode=(--fleet)
echo "== sweep $study $* ${mode[*]} (limit ${limit}s) $(date -u +%T)" | tee -a "$log"
timeout --signal=INT --kill-after=10 "$limit" python3 -m embnorm_lib sweep "$study" "$@" "${mode[@]}" >>"$log" 2>&1
echo "== sweep: rc=$? in $(( $(date +%s) - start ))s" | tee -a "$log"
finished=$(find "runs/$study" -name summary.json -newer "$marker" -printf '%h\n' 2>/dev/null | sort)
echo "== finished runs: $(echo "$finished" | grep -c . )" | tee -a "$log"
[ -n "$finished" ] && tar -czf "$out/runs.tar.gz" --exclude='*.pt' --exclude='.*' $finished
rm -f "$marker"
echo "== done in $(( $(date +%s) - start ))s" | tee -a "$log"
