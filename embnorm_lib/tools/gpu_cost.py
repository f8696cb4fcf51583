"""What the practitioner's path costs on a GPU (issue 115): GPU-hours per run and per study (3 arms x 5 seeds) for
the GPT-2 small presets, from the throughput measured in runs/bench-gpu.json.

    python -m embnorm_lib gpu-cost        # the table docs/GUIDE.md carries (tests/test_shards.py holds them equal)

The measured figure is the model FLOP/s of the `gpt-small` benchmark run (12 x 768, block 1024, bf16,
torch.compile) on the GPU the file names. A preset's training FLOPs per token (model.flops_per_token: 6N plus
attention) over that rate gives its seconds per token. Assumed, and said with the table: the same FLOP/s at GPT-2's
vocabulary (the benchmark's is 65 characters; the larger head is a larger matmul) and no time for evaluation,
checkpoints or compilation."""
from __future__ import annotations

import argparse
import json
import sys

import torch

from ..core.config import PRESETS, preset_config
from ..core.errors import entry
from ..core.nets.model import GPT
from ..core.records.io import repo_root

BENCH = repo_root() / "runs" / "bench-gpu.json"
MEASURED = "gpt-small"  # the benchmark part whose FLOP/s the table uses
COST_PRESETS = ("gpt2-124m-chinchilla", "gpt2-124m-chinchilla-speedrun", "gpt2-124m")
STUDY_RUNS = 3 * 5  # none, ln, rms x 5 seeds


def cost_rows(bench: dict | None = None) -> tuple[dict, list[dict]]:
    bench = bench if bench is not None else json.loads(BENCH.read_text())
    part = bench["parts"][MEASURED]
    rate = part["achieved_tflops"] * 1e12
    rows = []
    for name in COST_PRESETS:
        cfg = preset_config(name, variant="ln")
        with torch.device("meta"):
            flops = GPT(cfg).flops_per_token()
        tokens = cfg.max_iters * cfg.batch_size * cfg.block_size
        hours = tokens * flops / rate / 3600
        rows.append({"preset": name, "steps": cfg.max_iters, "tokens": tokens, "flops_per_token": flops,
                     "gpu_hours_per_run": hours, "gpu_hours_per_study": hours * STUDY_RUNS})
    measured = {"gpu": bench["gpu"], "date": bench["date"], "achieved_tflops": part["achieved_tflops"],
                "mfu": part.get("mfu_vs_measured_bf16_peak"), "precision": part["precision"]}
    return measured, rows


def render(measured: dict, rows: list[dict]) -> str:
    lines = [f"Measured: {measured['achieved_tflops']:.0f} model TFLOP/s ({measured['precision']}, torch.compile; "
             f"{measured['mfu']:.0%} of the measured bf16 matmul peak) on one {measured['gpu']} "
             f"({measured['date']}, `{MEASURED}` in runs/bench-gpu.json).", "",
             "| preset | steps | tokens | GPU-hours per run | per study (3 arms x 5 seeds) | on 8 GPUs, wall hours |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['preset']}` | {r['steps']:,} | {r['tokens'] / 1e9:.2f}B | {r['gpu_hours_per_run']:,.1f} | "
                     f"{r['gpu_hours_per_study']:,.0f} | {r['gpu_hours_per_study'] / 8:,.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(
        argv)
    missing = [p for p in COST_PRESETS if p not in PRESETS]
    if missing or not BENCH.is_file():
        print(f"error: needs {BENCH.name} and the presets {', '.join(COST_PRESETS)}", file=sys.stderr)
        return 2
    print(render(*cost_rows()), end="")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
