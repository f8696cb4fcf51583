# Sourced by the lent-GPU scripts (gpu_session.sh, gpu_sweep.sh): installs the wheels carried in .whl/ (the device
# image lacks them) into /tmp/site, and points the project at the corpus carried in .gpudata/. Needs $log.
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$log" 2>&1 || { echo "wheel install failed" | tee -a "$log"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
[ -f .gpudata/input.txt ] && export EMBNORM_DATA=$PWD/.gpudata/input.txt
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nproc; } 2>&1 | tee -a "$log"
