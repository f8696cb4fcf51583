"""Inference throughput per arm (issue 17, item 3; the pre-registered tie-breaker after calibration).

    python -m embnorm_lib throughput [--preset <preset>] [--rounds 7]    # writes runs/throughput.json

Measured paired: in every round each arm runs once, in an order rotated from round to round, in this one process
at one thread count, so drift of the machine (another process, thermal state) falls on every arm alike. Scoring:
tokens/s of the forward pass over full windows (what evaluation and zero-shot scoring do). Generation: tokens/s
of greedy decoding one token at a time from a one-token prompt to the full block (the model has no KV cache, so
each token re-reads its context). Per arm, the ratio to `none` in each round, its median and range over rounds.
Throughput does not depend on the trained values, so the arms are fresh initialisations of one seed."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from ..core.config import DEFAULT_PRESET, preset_config
from ..core.errors import entry
from ..core.nets.model import GPT
from ..core.records.io import environment_info, git_commit, runs_root, write_json
from ..runner.registry import ABC


@torch.inference_mode()
def scoring_tokens_per_s(model: GPT, windows: torch.Tensor) -> float:
    t = time.perf_counter()
    for chunk in windows.split(32):
        model(chunk)
    return windows.numel() / (time.perf_counter() - t)


@torch.inference_mode()
def generation_tokens_per_s(model: GPT, prompts: torch.Tensor, new_tokens: int) -> float:
    idx = prompts
    t = time.perf_counter()
    for _ in range(new_tokens):
        logits, _, _ = model(idx[:, -model.cfg.block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return prompts.shape[0] * new_tokens / (time.perf_counter() - t)


def measure(preset: str = DEFAULT_PRESET, arms=ABC, rounds: int = 7, windows: int = 64, streams: int = 8,
            seed: int = 0) -> dict:
    """Tokens/s per arm and round for scoring and generation, and each arm's per-round ratio to none's."""
    if "none" not in arms:
        raise ValueError(f"invalid arms {list(arms)}; allowed: a list that includes none (the ratios' reference)")
    models = {arm: GPT(preset_config(preset, variant=arm, seed=seed)).eval() for arm in arms}
    cfg = models["none"].cfg
    g = torch.Generator().manual_seed(seed)
    batch = torch.randint(0, cfg.vocab_size, (windows, cfg.block_size), generator=g)
    prompts = torch.randint(0, cfg.vocab_size, (streams, 1), generator=g)
    for model in models.values():  # warm-up: first calls allocate
        scoring_tokens_per_s(model, batch[:32])
        generation_tokens_per_s(model, prompts, 4)
    raw = {kind: {arm: [] for arm in arms} for kind in ("scoring", "generation")}
    order = list(arms)
    for r in range(rounds):
        for arm in order[r % len(order):] + order[:r % len(order)]:
            raw["scoring"][arm].append(scoring_tokens_per_s(models[arm], batch))
            raw["generation"][arm].append(generation_tokens_per_s(models[arm], prompts, cfg.block_size - 1))
    summary = {}
    for kind, by_arm in raw.items():
        summary[kind] = {}
        for arm, values in by_arm.items():
            ratios = [v / n for v, n in zip(values, by_arm["none"], strict=True)]
            summary[kind][arm] = {"tokens_per_s_median": statistics.median(values),
                                  "ratio_to_none_median": statistics.median(ratios),
                                  "ratio_to_none_min": min(ratios), "ratio_to_none_max": max(ratios)}
    return {"preset": preset, "rounds": rounds, "threads": torch.get_num_threads(), "scoring_windows": windows,
            "generation_streams": streams, "generated_tokens": cfg.block_size - 1, "summary": summary, "raw": raw}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--save", default=None, help="default: runs/throughput.json")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args.preset, rounds=args.rounds)
    for kind, by_arm in result["summary"].items():
        for arm, s in by_arm.items():
            print(f"{kind:10s} {arm:6s} {s['tokens_per_s_median']:10,.0f} tokens/s   ratio to none "
                  f"{s['ratio_to_none_median']:.3f} (rounds {s['ratio_to_none_min']:.3f}-{s['ratio_to_none_max']:.3f})")
    save = args.save or runs_root() / "throughput.json"
    write_json(save, {**result, "git_commit": git_commit(), **environment_info()})
    print(f"wrote {save} ({result['rounds']} interleaved rounds, {result['threads']} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
