"""Robustness trials behind the safety claims (not part of the test suite: they take minutes).

    python scripts/trials.py concurrent 10   # two runs with different lr race for one run directory
    python scripts/trials.py kill 10         # a run SIGKILLed at a random moment, then resumed

`concurrent`: per trial, two `python -m embnorm_lib run` processes (lr 5e-3 and 1e-3) start together on one
run directory. A trial is *mixed* when the directory's config.json names an lr that did not produce its
metrics (the warm-up ramp in the metrics log pins the lr that trained). `kill`: per trial, a run is killed
(whole process group, SIGKILL) after a random delay, resumed, and compared with an uninterrupted run:
every logged step and the final validation loss must match bit for bit."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from embnorm_lib.core.records.steplog import read_step_log  # noqa: E402 (the checkout's package, beside this script)


def run_cmd(out: Path, lr: float, iters: int = 60) -> list[str]:
    return [sys.executable, "-m", "embnorm_lib", "run", "--preset", "tiny", "--variant", "ln", "--study", "trial",
            "--out-dir", str(out), "--set", f"lr={lr}", "--set", f"max_iters={iters}", "--set", "torch_threads=1",
            "--set", "checkpoint_interval=5"]


def strip(rows):
    return [{k: v for k, v in r.items() if k not in ("step_ms", "wall_s", "eval_s")} for r in rows]


def concurrent(n: int) -> dict:
    mixed = refused = both_ok = 0
    for _ in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            procs = [subprocess.Popen(run_cmd(out, lr), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for lr in (5e-3, 1e-3)]
            results = [(p.wait(), p.stderr.read()) for p in procs]
            run = out / "trial" / "ln" / "seed0"
            config = json.loads((run / "config.json").read_text())
            metrics = read_step_log(run, "metrics")
            warmup = max(1, round(config["warmup_frac"] * config["max_iters"]))
            trained_lr = metrics[0]["lr"] * warmup
            summary = json.loads((run / "summary.json").read_text())
            mixed += abs(trained_lr - config["lr"]) > 1e-12 or summary["steps"] != len(metrics)
            refused += sum(code != 0 and ("in use" in err or "different config" in err) for code, err in results)
            both_ok += all(code == 0 for code, _ in results)
    return {"trials": n, "mixed": int(mixed), "second_run_refused": int(refused), "both_exit_0": int(both_ok)}


def kill_resume(n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    identical = 0
    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp) / "reference"
        subprocess.run(run_cmd(reference, 1e-3, 150), cwd=REPO, check=True, capture_output=True)
        ref = Path(reference) / "trial" / "ln" / "seed0"
        for i in range(n):
            out = Path(tmp) / f"k{i}"
            proc = subprocess.Popen(run_cmd(out, 1e-3, 150), cwd=REPO, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(rng.uniform(3.0, 9.0))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            subprocess.run(run_cmd(out, 1e-3, 150), cwd=REPO, check=True, capture_output=True)
            run = out / "trial" / "ln" / "seed0"
            same = all(strip(read_step_log(run, log)) == strip(read_step_log(ref, log))
                       for log in ("metrics", "evals", "diagnostics"))
            same &= json.loads((run / "summary.json").read_text())["val_loss"] == \
                json.loads((ref / "summary.json").read_text())["val_loss"]
            identical += same
    return {"trials": n, "bitwise_identical": identical}


if __name__ == "__main__":
    kind, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
    result = concurrent(count) if kind == "concurrent" else kill_resume(count)
    print(json.dumps({"kind": kind, **result}))
