"""Where a GPU training step's time goes (issue 20): eager against compiled, bf16 against fp32, per-step ms, the time
outside the loop, and the top operators of a profiled run. CUDA only; writes diag.json and profile.txt to $OUT.

    OUT=/tmp/diag python scripts/gpu_diag.py

This is the script that measured runs/bench-gpu/2026-11-27-h100/ (there it ran from an ignored folder; its lines
were only split for the linter since). The runs have no interim evaluations, checkpoints or diagnostics."""
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from embnorm_lib.config import preset_config
from embnorm_lib.io import read_jsonl
from embnorm_lib.train import train

out = Path(os.environ.get("OUT", "/tmp"))
results = []


def one(preset, iters, compile, **kw):
    cfg = preset_config(preset, max_iters=iters, eval_interval=0, checkpoint_interval=0, diag_interval=0,
                        device="cuda", compile=compile, lm_eval=False, **kw)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        s = train(cfg, f"{tmp}/run", None, progress=False)
        total = time.perf_counter() - t
        rows = read_jsonl(Path(tmp) / "run" / "metrics.jsonl")
    ms = [r["step_ms"] for r in rows]
    row = {"preset": preset, "iters": iters, "compile": compile, "precision": s["precision"], **kw,
           "train_call_s": round(total, 2), "loop_wall_s": round(s["wall_s"], 2),
           "first10_ms": [round(m, 1) for m in ms[:10]], "median_ms_from10": round(statistics.median(ms[10:] or ms), 2),
           "p90_ms_from10": round(sorted(ms[10:] or ms)[int(0.9 * len(ms[10:] or ms))], 2),
           "sum_step_ms_s": round(sum(ms) / 1e3, 2), "val_loss": s["val_loss"], "init_val_loss": s.get("init_val_loss")}
    print(json.dumps(row), flush=True)
    results.append(row)
    (out / "diag.json").write_text(json.dumps(results, indent=1))


t0 = time.perf_counter()
torch.zeros(1, device="cuda")
print("cuda init s", round(time.perf_counter() - t0, 1), flush=True)
one("seeds-final", 100, False)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    one("seeds-final", 30, False)
table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60)
print(table[:6000], flush=True)
(out / "profile.txt").write_text(table)
for args in [("gpt-small", 12, False, {}), ("seeds-final", 100, True, {}),
             ("seeds-final", 100, False, {"precision": "fp32"})]:
    try:
        one(args[0], args[1], args[2], **args[3])
    except Exception as e:  # one failed configuration must not cost the others
        print("FAILED", args, repr(e)[:300], flush=True)
