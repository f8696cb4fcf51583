"""The fleet (fleet.py, issue 75) timed where it was built for: figures for runs/bench-gpu.json.

    python -m embnorm_lib bench-fleet study main --keep DIR   # a study through the fleet: wall, split, MFU, final losses
    python -m embnorm_lib bench-fleet compare main            # those losses against the committed CPU runs (and the
                                                              # solo GPU runs of runs/bench-gpu.json, where recorded)
    python -m embnorm_lib bench-fleet lm-eval main --keep DIR # the zero/few-shot suite on the kept runs, timed per run
    python -m embnorm_lib bench-fleet sweep --members 1000    # an LR x seed x arm sweep of a small preset, timed
    python -m embnorm_lib bench-fleet dry-run                 # (CPU) the same code path on the tiny preset, against
                                                              # single runs of the same cells
    python -m embnorm_lib bench-fleet cpu-ratio --save F      # (CPU) 8 tiny runs as a fleet vs one after another

Each part merges its figures into --save under its own key ("fleet:<part>...") beside the device's name, as
bench_gpu does (scripts/gpu_fleet.sh saves into $OUT; `absorb FILE` merges such a file into runs/bench-gpu.json
when it was measured on the GPU that file describes). Figures, never pass/fail."""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..core.errors import entry
from ..core.records.io import read_json, repo_root, runs_root, write_json
from ..core.records.steplog import read_step_log
from ..core.training.fleet import train_fleet
from ..runner.registry import ABCD, INTERIM_EVAL, Cell, grid, study_cells
from ..runner.results import build_index
from .bench_gpu import against_committed, gpu_study, matmul_peak_tflops, merge

PARTS = ("study", "compare", "lm-eval", "sweep", "dry-run", "cpu-ratio", "absorb")
SWEEP_SEEDS = 10
SWEEP_LR_RANGE = (1e-4, 1.0)


def fleet_cells(cells: list[Cell], lm_eval: bool = False, interim: bool = True) -> list[Cell]:
    """A study's cells as the fleet runs them in a bench: lm-eval as a separate, timed stage (not part of a run's
    training identity), and the interim-subset evaluation plan bench.study_wall timed the solo runs with."""
    extra = {"lm_eval": lm_eval, "execution": "fleet", **(INTERIM_EVAL if interim else {})}
    return [Cell(c.study, c.preset, c.variant, c.seed, tuple(sorted({**dict(c.overrides), **extra}.items())),
                 c.tag_axes) for c in cells]


def _cuda_init_s() -> float:
    t = time.perf_counter()
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    return time.perf_counter() - t


def flop_counts(run_dirs: list[Path], summaries: list[dict]) -> dict:
    """Model FLOPs done: training (flops_per_token x tokens, fwd+bwd) and evaluation (a third of it per token
    scored: the forward only), summed over the runs."""
    train_flop = sum(s["flops_per_token"] * s["tokens"] for s in summaries)
    eval_flop = sum(s["flops_per_token"] / 3 * r["val_tokens"] for d, s in zip(run_dirs, summaries, strict=True)
                    for r in read_step_log(d, "evals"))
    return {"train_flop": train_flop, "eval_flop": eval_flop}


def run_cells(cells: list[Cell], out: Path, data_path=None) -> dict:
    """Train the cells through the fleet into `out`, index them, and return the figures: the wall split by part
    (CUDA start, each group's setup/steps/evaluations/diagnostics/finish, indexing), FLOPs and MFU."""
    t0 = time.perf_counter()
    cuda_init = _cuda_init_s()
    cfgs, dirs = [c.config() for c in cells], [c.run_dir(out) for c in cells]
    groups: list[dict] = []
    summaries = train_fleet(cfgs, dirs, data_path, echo=lambda line: print(line, flush=True), timings=groups)
    trained = time.perf_counter() - t0
    t = time.perf_counter()
    for study in sorted({c.study for c in cells}):
        build_index(study, out)
    index_s = time.perf_counter() - t
    wall = time.perf_counter() - t0
    flop = flop_counts(dirs, summaries)
    achieved = (flop["train_flop"] + flop["eval_flop"]) / wall / 1e12
    figures = {"runs": len(cells), "failures": 0, "diverged": sum(bool(s["diverged"]) for s in summaries),
               "fleet_wall_s": wall, "train_and_finish_s": trained, "cuda_init_s": cuda_init, "index_s": index_s,
               "groups": groups, "device": summaries[0]["device"], "precision": summaries[0]["precision"],
               "cuda_graph": all(g["cuda_graph"] for g in groups), **flop, "achieved_tflops": achieved,
               "val_loss": {c.label(): s["val_loss"] if math.isfinite(s["val_loss"]) else None
                            for c, s in zip(cells, summaries, strict=True)}}
    if torch.cuda.is_available():
        figures["bf16_matmul_peak_tflops"] = matmul_peak_tflops()
        figures["mfu_vs_measured_bf16_peak"] = achieved / figures["bf16_matmul_peak_tflops"]
    return figures


def study_part(study: str, data_path=None, keep: str | None = None) -> dict:
    cells = fleet_cells(study_cells(study))
    with tempfile.TemporaryDirectory(prefix="embnorm-fleet-") as tmp:
        out = Path(keep) if keep else Path(tmp)
        return {"study": study, **run_cells(cells, out, data_path)}


def committed_root(study: str, given: str | None = None) -> Path:
    """The committed runs to compare with: the checkout's, or (a code-only copy on a lent GPU) the summaries
    carried in .gpudata/runs (`scripts/gpu_fleet.sh` says how to prepare them)."""
    if given:
        return Path(given)
    if (runs_root() / study / "runs.csv").is_file():
        return runs_root()
    return repo_root() / ".gpudata" / "runs"


def compare_part(save: Path, study: str, root: Path) -> dict:
    """The fleet's final losses against the committed CPU runs (bench_gpu.against_committed), and, where
    runs/bench-gpu.json holds the same study trained solo on this GPU, against those runs and that study's own
    difference to the committed runs (the cross-device tolerance measured so far)."""
    key = f"fleet:study:{study}"
    figures = read_json(save) if save.is_file() else {}
    part = figures.get("parts", {}).get(key)
    if part is None:
        raise ValueError(f"compare: {save} has no {key!r} part; allowed: a study timed there first")
    result = against_committed(study, part["val_loss"], root)
    solo_file = runs_root() / "bench-gpu.json"
    solo = read_json(solo_file).get("parts", {}).get(f"study:{study}") if solo_file.is_file() else None
    if solo:
        tolerance = solo.get("against_committed_cpu", {}).get("max_abs_val_loss_diff")
        both = [k for k, v in part["val_loss"].items() if v is not None and solo["val_loss"].get(k) is not None]
        result["solo_gpu"] = {
            "gpu": read_json(solo_file).get("gpu"), "runs_compared": len(both),
            "max_abs_val_loss_diff_to_solo_gpu": max((abs(part["val_loss"][k] - solo["val_loss"][k]) for k in both),
                                                     default=None),
            "solo_gpu_max_abs_val_loss_diff_to_committed": tolerance,
            "within_solo_gpu_difference": tolerance is not None and result["max_abs_val_loss_diff"] <= tolerance}
    part["against_committed_cpu"] = result
    write_json(save, figures)
    return result


def lm_eval_part(study: str, keep: str, data_path=None, solo_runs: int = 2) -> dict:
    """The zero/few-shot suite on the fleet's kept runs: all of them with one shared forward per shape group
    (fleet_lmeval), timed as a whole; then `solo_runs` of them again one harness pass each (as a single run scores),
    for the ratio. Interrupted by a time limit, it returns what it measured."""
    from ..core.scoring.fleet_lmeval import score_if_asked
    from ..core.scoring.lm_eval_adapter import evaluate_run

    cells = fleet_cells(study_cells(study))
    dirs = [cell.run_dir(Path(keep)) for cell in cells]
    out: dict = {"study": study, "runs": len(dirs), "stopped_by_time_limit": False}
    t = time.perf_counter()
    try:
        score_if_asked([cell.config().replace(lm_eval=True) for cell in cells], dirs, data_path)
        out["shared_seconds_total"] = time.perf_counter() - t
        solo = []
        for run_dir in dirs[:solo_runs]:
            t = time.perf_counter()
            evaluate_run(run_dir, data_path, force=True)
            solo.append(time.perf_counter() - t)
        out["solo_seconds_per_run_median"] = statistics.median(solo) if solo else None
    except KeyboardInterrupt:
        out["stopped_by_time_limit"] = True
    return out


def sweep_cells(members: int, preset: str, iters: int, study: str = "fleet-sweep") -> list[Cell]:
    """Arms none/ln/rms/scaled x up to SWEEP_SEEDS seeds x log-spaced peak LRs: `members` runs (rounded down to
    a whole grid)."""
    seeds = min(SWEEP_SEEDS, max(1, members // len(ABCD)))
    n_lr = max(1, members // (len(ABCD) * seeds))
    low, high = (math.log10(x) for x in SWEEP_LR_RANGE)
    lrs = [float(f"{10 ** (low + (high - low) * i / max(1, n_lr - 1)):.3g}") for i in range(n_lr)]
    fixed = {"max_iters": iters, "eval_interval": max(1, iters // 4), "diag_interval": 0, "lm_eval": False,
             "execution": "fleet"}
    return grid(study, preset, ABCD, range(seeds), fixed=fixed, axes={"lr": lrs})


def sweep_part(members: int = 1000, preset: str = "tiny", iters: int = 200, data_path=None) -> dict:
    cells = sweep_cells(members, preset, iters)
    with tempfile.TemporaryDirectory(prefix="embnorm-fleet-sweep-") as tmp:
        figures = run_cells(cells, Path(tmp), data_path)
    losses = figures.pop("val_loss")
    seeds = len({c.seed for c in cells})
    best = {}
    for arm in ABCD:
        by_lr: dict[float, list[float]] = {}
        for c in cells:
            if c.variant == arm and losses[c.label()] is not None:
                by_lr.setdefault(dict(c.overrides)["lr"], []).append(losses[c.label()])
        full = {lr: statistics.median(v) for lr, v in by_lr.items() if len(v) == seeds}
        best[arm] = min(full, key=full.get) if full else None
    steps = sum(c.config().max_iters for c in cells)
    return {"preset": preset, "iters": iters, "members": len(cells), **figures,
            "member_steps_per_s": steps / figures["fleet_wall_s"],
            "best_lr_by_arm_median_over_seeds": best}


def dry_run_part(data_path=None) -> dict:
    """The GPU script's path on this machine's CPU at the tiny preset: a two-arm study through the fleet (with
    its index), each run against its single run, and a small sweep."""
    from ..core.training.train import train

    cells = fleet_cells(grid("fleet-dry-run", "tiny", ["none", "ln"], [0],
                             fixed={"max_iters": 8, "eval_interval": 4, "diag_interval": 4, "torch_threads": 1}),
                        interim=False)
    with tempfile.TemporaryDirectory(prefix="embnorm-fleet-dry-") as tmp:
        figures = run_cells(cells, Path(tmp) / "fleet", data_path)
        diffs = []
        for cell in cells:
            solo = train(cell.config().replace(execution="single"), Path(tmp) / "solo" / cell.label(), data_path,
                         progress=False)
            diffs.append(abs(figures["val_loss"][cell.label()] / solo["val_loss"] - 1))
    sweep = sweep_part(members=2 * len(ABCD), preset="tiny", iters=6, data_path=data_path)
    return {**figures, "members": len(cells), "against_solo": {"max_rel_val_loss_diff": max(diffs)},
            "sweep": {k: sweep[k] for k in ("members", "fleet_wall_s", "member_steps_per_s")}}


def cpu_ratio_part(members: int = 8, iters: int = 100, data_path=None) -> dict:
    """The fleet against the same runs trained one after another as single runs, on this machine at one torch
    thread: whole runs (training, evaluations, diagnostics, files) and the training steps alone."""
    from ..core.config import preset_config
    from ..core.training.fleet import fleet_configs
    from ..core.training.train import train

    cfgs = [preset_config("tiny", variant=("none", "ln")[i % 2], seed=i // 2, max_iters=iters, torch_threads=1)
            for i in range(members)]
    with tempfile.TemporaryDirectory(prefix="embnorm-fleet-cpu-") as tmp:
        train(cfgs[0].replace(max_iters=3), Path(tmp) / "warm", data_path, progress=False)  # imports, caches
        t = time.perf_counter()
        solo = [train(c, Path(tmp) / "solo" / str(i), data_path, progress=False) for i, c in enumerate(cfgs)]
        solo_s = time.perf_counter() - t
        groups: list[dict] = []
        t = time.perf_counter()
        train_fleet(fleet_configs(cfgs), [Path(tmp) / "fleet" / str(i) for i in range(members)], data_path,
                    timings=groups)
        fleet_s = time.perf_counter() - t
    solo_steps_s = sum(s["train_ms_per_iter"] * s["steps"] for s in solo) / 1e3
    return {"members": members, "iters": iters, "preset": "tiny", "torch_threads": 1,
            "solo_sequential_s": solo_s, "fleet_s": fleet_s, "speedup_whole_runs": solo_s / fleet_s,
            "solo_steps_s": solo_steps_s, "fleet_steps_s": groups[0]["steps_s"],
            "speedup_steps": solo_steps_s / groups[0]["steps_s"], "fleet_groups": groups}


def absorb(source: Path, target: Path) -> int:
    """Merge the fleet parts of `source` (a file this module wrote on a lent GPU) into `target`
    (runs/bench-gpu.json), refusing a file measured on another GPU than the one `target` describes."""
    new, old = read_json(source), read_json(target) if target.is_file() else {}
    if old and old.get("gpu") != new.get("gpu"):
        print(f"error: {source} was measured on {new.get('gpu')!r}, {target} describes {old.get('gpu')!r}; allowed: "
              f"the same GPU (bench_gpu replaces a file measured elsewhere)", file=sys.stderr)
        return 2
    parts = {k: v for k, v in new.get("parts", {}).items() if k.startswith("fleet:")}
    write_json(target, {**(old or {k: v for k, v in new.items() if k != "parts"}),
                        "parts": {**old.get("parts", {}), **parts}})
    print(f"merged {', '.join(parts) or 'nothing'} into {target}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=PARTS)
    p.add_argument("study", nargs="?", default=None,
                   help="the study (study, compare, lm-eval; default: the GPU check's) or file (absorb)")
    p.add_argument("--keep", default=None, help="run directory root to keep the study's runs in (lm-eval reads it)")
    p.add_argument("--members", type=int, default=1000)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--committed-root", default=None)
    p.add_argument("--data-path", default=None)
    p.add_argument("--save", default=None, help="default: $OUT/bench-fleet.json, else runs/bench-fleet.json")
    args = p.parse_args(argv)
    args.study = args.study or gpu_study()
    save = Path(args.save) if args.save else Path(os.environ.get("OUT") or runs_root()) / "bench-fleet.json"
    if args.part == "absorb":
        return absorb(Path(args.study), runs_root() / "bench-gpu.json")
    try:
        if args.part == "compare":
            result = compare_part(save, args.study, committed_root(args.study, args.committed_root))
            print(f"fleet:study:{args.study} against the committed runs: {result}")
            return 0
        if args.part == "lm-eval" and not args.keep:
            raise ValueError("lm-eval: --keep DIR is required (the directory the study part kept its runs in)")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.part == "study":
        key, figures = f"fleet:study:{args.study}", study_part(args.study, args.data_path, args.keep)
    elif args.part == "lm-eval":
        key, figures = f"fleet:lm-eval:{args.study}", lm_eval_part(args.study, args.keep, args.data_path)
    elif args.part == "sweep":
        key = f"fleet:sweep:{args.members}x{args.preset}x{args.iters}"
        figures = sweep_part(args.members, args.preset, args.iters, args.data_path)
    elif args.part == "cpu-ratio":
        torch.set_num_threads(1)
        key, figures = "fleet:cpu-ratio", cpu_ratio_part(args.members if args.members != 1000 else 8,
                                                         args.iters if args.iters != 200 else 100, args.data_path)
    else:
        key, figures = "fleet:dry-run", dry_run_part(args.data_path)
    merge(save, key, figures)
    shown = {k: v for k, v in figures.items() if k not in ("val_loss", "groups")}
    print(f"{key}: {shown}")
    print(f"wrote {save}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
