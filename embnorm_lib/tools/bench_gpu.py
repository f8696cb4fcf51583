"""The GPU half of the benchmark (issue 20): the CUDA paths, timed on the device they ran on -> runs/bench-gpu.json.

    python -m embnorm_lib bench-gpu loop            # ms/iteration, compile time, MFU against the measured bf16 peak
    python -m embnorm_lib bench-gpu notebook        # the design card's papermill command on CUDA, timed by cell
    python -m embnorm_lib bench-gpu study main      # a whole study as the sweep runs it, end to end
    python -m embnorm_lib bench-gpu study main --workers 2   # ... with another worker count (its own key)
    python -m embnorm_lib bench-gpu gpt-small       # a few hundred steps of GPT-2 small: the path works at scale
    python -m embnorm_lib bench-gpu profile         # where an eager step's time goes: top operators, launches/step
    python -m embnorm_lib bench-gpu compare main    # (no GPU needed) a timed study's final losses against the
                                                    # committed CPU runs of the same cells: per run and per pair

A lent GPU comes in slices of minutes, so each part runs on its own and merges its figures into
runs/bench-gpu.json under its own key, beside the GPU's name, compute capability and the torch and CUDA versions
(a part measured on another GPU replaces the file rather than mixing devices). Figures, never pass/fail."""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..core.config import DEFAULT_PRESET, RunConfig, preset_config
from ..core.errors import entry
from ..core.records.io import environment_info, git_commit, read_json, repo_root, runs_root, write_json
from ..core.records.steplog import read_step_log
from ..core.training.train import train
from ..runner.registry import headline_studies, study_cells

PARTS = ("loop", "notebook", "study", "gpt-small", "profile", "compare")
STEADY_FROM = 10  # steps before this one hold compilation and allocator warm-up
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cuLaunchKernel")


def gpu_study() -> str:
    """The study a GPU check re-trains unless told: the largest of the README's headline studies."""
    return headline_studies()[-1]


def loop_presets() -> list[str]:
    """The presets the loop part times: the training regimes of the GPU check's study, in its registry order."""
    return list(dict.fromkeys(c.preset for c in study_cells(gpu_study())))


def gpu_info() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "capability": f"{props.major}.{props.minor}",
            "gpu_memory_gib": props.total_memory / 2 ** 30, "cuda": torch.version.cuda}


def matmul_peak_tflops(dtype: torch.dtype = torch.bfloat16, n: int = 8192, repeats: int = 10) -> float:
    """The device's dense matmul rate in this process (best of three timings of `repeats` products)."""
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(repeats):
            a @ b
        torch.cuda.synchronize()
        best = max(best, 2 * n ** 3 * repeats / (time.perf_counter() - t) / 1e12)
    return best


def bench_config(preset: str, iters: int, device: str, compile: bool | str, **extra) -> RunConfig:
    """A timed run: the preset for `iters` steps with no interim evaluation, checkpoint, diagnostics or lm-eval."""
    return preset_config(preset, max_iters=iters, eval_interval=0, checkpoint_interval=0, diag_interval=0,
                         device=device, compile=compile, lm_eval=False, **extra)


def loop_figures(preset: str, iters: int, device: str = "cuda", compile: bool | str = "auto",
                 data_path=None, eval_at_init: bool = False, **extra) -> dict:
    """One run without interim evaluation passes: the steady ms/iteration (median from step STEADY_FROM on), the
    first steps' extra time (compilation, allocator warm-up) and the achieved model FLOP/s. `extra`: more config
    fields (a shards run's tokenizer and corpus checksum)."""
    cfg = bench_config(preset, iters, device, compile, eval_at_init=eval_at_init, **extra)
    with tempfile.TemporaryDirectory(prefix="embnorm-bench-gpu-") as tmp:
        summary = train(cfg, f"{tmp}/run", data_path, progress=False)
        rows = read_step_log(Path(tmp) / "run", "metrics")
    step_ms = [r["step_ms"] for r in rows]
    steady_ms = sorted(step_ms[STEADY_FROM:] or step_ms)
    steady = statistics.median(steady_ms)
    tokens_per_s = cfg.tokens_per_iter / (steady / 1e3)
    return {"preset": preset, "iters": iters, "device": summary["device"], "precision": summary["precision"],
            "compile": compile, "n_params": summary["n_params"], "ms_per_iter": steady,
            "p90_ms_per_iter": steady_ms[int(0.9 * len(steady_ms))],
            "first_steps_ms": step_ms[:STEADY_FROM],
            "warmup_extra_s": (sum(step_ms[:STEADY_FROM]) - steady * min(STEADY_FROM, len(step_ms))) / 1e3,
            "tokens_per_s": tokens_per_s, "achieved_tflops": summary["flops_per_token"] * tokens_per_s / 1e12,
            "first_train_loss": rows[0]["train_loss"], "last_train_loss": rows[-1]["train_loss"],
            "init_val_loss": summary["init_val_loss"], "val_loss": summary["val_loss"]}


def loop_part(data_path=None, iters: int = 200) -> dict:
    peak = matmul_peak_tflops()
    rows = [loop_figures(p, iters, compile=c, data_path=data_path) for p in loop_presets() for c in (True, False)]
    for row in rows:
        row["mfu_vs_measured_bf16_peak"] = row["achieved_tflops"] / peak
    return {"bf16_matmul_peak_tflops": peak, "runs": rows}


def notebook_part(data_path=None, save_partial=lambda figures: None) -> dict:
    """The design card's command, `papermill notebooks/02_train.ipynb out.ipynb -p variant ln -p seed 3`, run as
    typed (into a temporary directory) and timed end to end; then one run as a sweep worker runs it (lm-eval on),
    split by cell into kernel start, the training loop with its evaluations, lm-eval and the rest
    (`bench.notebook_run`). The design card's figures go to `save_partial` before the second run starts, so a
    time limit that stops the second keeps the first."""
    from .bench import _train_notebook, notebook_run

    with tempfile.TemporaryDirectory(prefix="embnorm-bench-gpu-nb-") as tmp:
        args = [sys.executable, "-m", "papermill", str(_train_notebook()), f"{tmp}/out.ipynb", "-p", "variant", "ln",
                "-p", "seed", "3", "-p", "out_dir", f"{tmp}/runs", "-p", "study", "bench-gpu"]
        if data_path:
            args += ["-p", "data_path", str(data_path)]
        t = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True, text=True)
        total = time.perf_counter() - t
        summary = read_json(next(Path(tmp, "runs").glob("bench-gpu/*/seed3/summary.json")))
    design_card = {"command": "papermill notebooks/02_train.ipynb out.ipynb -p variant ln -p seed 3",
                   "wall_s": total, "device": summary["device"], "precision": summary["precision"],
                   "preset": summary["preset"], "steps": summary["steps"], "val_loss": summary["val_loss"],
                   "train_loop_and_eval_s": summary["wall_s"]}
    save_partial({"design_card": design_card})
    return {"design_card": design_card, "sweep_worker_run": notebook_run(summary["preset"], summary["steps"],
                                                                         data_path, 0)}


def study_part(study: str, data_path=None, workers: int = 0) -> dict:
    from .bench import study_wall

    return study_wall(study, data_path, workers)


def gpt_small_part(iters: int = 300, data_path=None) -> dict:
    row = loop_figures("gpt-small", iters, data_path=data_path, eval_at_init=True)
    row["loss_fell"] = row["val_loss"] < row["init_val_loss"]
    row["bf16_matmul_peak_tflops"] = matmul_peak_tflops()
    row["mfu_vs_measured_bf16_peak"] = row["achieved_tflops"] / row["bf16_matmul_peak_tflops"]
    return row


def profile_part(iters: int = 30, data_path=None, preset: str = DEFAULT_PRESET, device: str = "cuda",
                 top: int = 25) -> dict:
    """Where an eager training step's time goes: `iters` steps under torch.profiler, no interim evaluation or
    diagnostics, and the final evaluation cut to 8 windows so that the steps dominate what is profiled."""
    from torch.profiler import ProfilerActivity, profile

    cfg = bench_config(preset, iters, device, compile=False, eval_at_init=False, eval_windows=8)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with tempfile.TemporaryDirectory(prefix="embnorm-bench-gpu-prof-") as tmp, profile(activities=activities) as prof:
        summary = train(cfg, f"{tmp}/run", data_path, progress=False)
    return {"preset": preset, "iters": iters, "device": summary["device"], "precision": summary["precision"],
            **profile_figures(prof.key_averages(), iters, top)}


def profile_figures(averages, iters: int, top: int = 25) -> dict:
    """A profiler's operator table as data: totals, kernel launches per step, the `top` operators by self CPU time
    (milliseconds over the whole profile, calls per step)."""
    def device_us(event) -> float:  # named self_cuda_time_total before torch 2.4
        return getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0))

    events = list(averages)
    launches = sum(e.count for e in events if e.key in KERNEL_LAUNCHES)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {"self_cpu_s": sum(e.self_cpu_time_total for e in events) / 1e6,
            "self_device_s": sum(device_us(e) for e in events) / 1e6,
            "kernel_launches_per_step": launches / iters,
            "top_ops": [{"name": e.key, "calls_per_step": e.count / iters, "self_cpu_ms": e.self_cpu_time_total / 1e3,
                         "self_device_ms": device_us(e) / 1e3} for e in ranked]}


def against_committed(study: str, val_loss: dict[str, float | None], root: Path | None = None) -> dict:
    """Exploratory, not a registered analysis: a study's final validation losses from another device (label ->
    val_loss, as the study part records them) against the committed runs of the same cells under `root`: the
    per-run difference, and per arm the paired difference to the `none` arm of the same seed on each device."""
    root = runs_root(root)
    cells = {c.label(): c for c in study_cells(study)}
    unknown = sorted(set(val_loss) - set(cells))
    if unknown:
        raise ValueError(f"compare: {unknown[0]!r} is not a cell of study {study!r}; allowed: its labels, "
                         f"e.g. {next(iter(cells))!r}")
    committed = {}
    for label, cell in cells.items():
        summary = cell.run_dir(root) / "summary.json"
        committed[label] = read_json(summary).get("val_loss") if summary.is_file() else None
    both = sorted(label for label, loss in val_loss.items() if loss is not None and committed[label] is not None)
    if not both:
        raise ValueError(f"compare: no cell of {study!r} has a final loss both here ({root}) and in the figures")
    diff = {label: val_loss[label] - committed[label] for label in both}
    by_arm: dict[str, list[float]] = {}
    pairs: dict[str, list[tuple[float, float]]] = {}
    for label in both:
        arm, variant = label.rsplit(" seed", 1)[0], cells[label].variant
        by_arm.setdefault(arm, []).append(diff[label])
        baseline = "none" + label[len(variant):]
        if variant != "none" and baseline in diff:
            pairs.setdefault(arm, []).append(
                (val_loss[label] - val_loss[baseline], committed[label] - committed[baseline]))
    try:
        shown = root.resolve().relative_to(repo_root())
    except ValueError:
        shown = root
    return {"exploratory": True, "runs_compared": len(both), "committed_root": str(shown),
            "max_abs_val_loss_diff": max(abs(d) for d in diff.values()),
            "mean_val_loss_diff_by_arm": {arm: statistics.fmean(d) for arm, d in sorted(by_arm.items())},
            "paired_diff_to_none_by_arm": {
                arm: {"n": len(p), "here_mean": statistics.fmean(g for g, _ in p),
                      "committed_mean": statistics.fmean(c for _, c in p),
                      "here_min": min(g for g, _ in p), "here_max": max(g for g, _ in p),
                      "same_sign_every_seed": all((g > 0) == (c > 0) for g, c in p)}
                for arm, p in sorted(pairs.items())}}


def compare_part(save: Path, study: str, root: Path | None = None) -> dict:
    """Adds `against_committed` to the study part already in `save` (no GPU needed, the device fields stay)."""
    key = f"study:{study}"
    figures = read_json(save) if save.is_file() else {}
    part = figures.get("parts", {}).get(key)
    if part is None:
        raise ValueError(f"compare: {save} has no {key!r} part; allowed: a study timed there "
                         f"({', '.join(k for k in figures.get('parts', {}) if k.startswith('study:')) or 'none'})")
    part["against_committed_cpu"] = against_committed(study, part["val_loss"], root)
    write_json(save, figures)
    return part["against_committed_cpu"]


def merge(save: Path, key: str, figures: dict) -> dict:
    """Add one part's figures under `key`; a file written on another GPU is replaced, not mixed."""
    info = gpu_info() if torch.cuda.is_available() else {"gpu": "none"}
    previous = read_json(save) if save.is_file() else {}
    parts = previous.get("parts", {}) if previous.get("gpu") == info["gpu"] else {}
    parts[key] = {**figures, "git_commit": git_commit(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    result = {**info, **environment_info(), "parts": parts}
    write_json(save, result)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=PARTS)
    p.add_argument("study", nargs="?", default=None,
                   help="the study the `study` part times (default: the largest headline study)")
    p.add_argument("--iters", type=int, default=0,
                   help="steps of the loop, gpt-small or profile part (0: 200 / 300 / 30)")
    p.add_argument("--workers", type=int, default=0, help="the study part's sweep workers (0: the sweep's default)")
    p.add_argument("--data-path", default=None)
    p.add_argument("--save", default=None, help="default: runs/bench-gpu.json")
    args = p.parse_args(argv)
    args.study = args.study or gpu_study()
    save = Path(args.save) if args.save else runs_root() / "bench-gpu.json"
    if args.part == "compare":
        try:
            result = compare_part(save, args.study)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"study:{args.study} against the committed runs: {result}")
        return 0
    if not torch.cuda.is_available():
        print("error: no CUDA device here; bench_gpu times the CUDA paths (allowed: a machine where "
              "torch.cuda.is_available() is True; `python -m embnorm_lib bench` times the CPU)", file=sys.stderr)
        return 2
    if args.part == "loop":
        key, figures = "loop", loop_part(args.data_path, args.iters or 200)
    elif args.part == "notebook":
        key = "notebook"
        figures = notebook_part(args.data_path, save_partial=lambda partial: merge(save, key, partial))
    elif args.part == "study":
        key = f"study:{args.study}" + (f":workers={args.workers}" if args.workers else "")
        figures = study_part(args.study, args.data_path, args.workers)
    elif args.part == "profile":
        key, figures = "profile", profile_part(args.iters or 30, args.data_path)
    else:
        key, figures = "gpt-small", gpt_small_part(args.iters or 300, args.data_path)
    merge(save, key, figures)
    print(f"{key}: {figures}")
    print(f"wrote {save}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
