"""The engine's benchmark: where a run's time goes, as figures and ratios measured in one run (never pass/fail).

    python -m embnorm_lib bench                   # writes runs/bench.json (about 3 minutes here)
    python -m embnorm_lib bench --study           # also times the registry's default study end to end (~20 min)
    python -m embnorm_lib bench --parallelism     # only: sweep workers, 1 x all threads vs cores x 1 thread
    python -m embnorm_lib bench --precision --preset nanogpt-cpu   # only: bf16 autocast vs fp32 loop time

Training loop: ms/iteration at the given thread count, MFU = achieved model FLOP/s (6N + 12*L*d*T per
token, fwd+bwd) / the fp32 matmul peak measured in this process; machine it/s in the sweep's default
layout (one single-threaded worker per core). Evaluation: one full-validation pass (and the old 128-window
forward beside it), and per run under the committed plan (every pass on every window) and the interim-subset
plan (studies.INTERIM_EVAL). One run through the training notebook, as the sweep runs it: its wall time outside
the training loop without lm-eval, and lm-eval's time. The fleet (fleet.py): member-iterations/s of the three arms
as one fleet in one process, and `fleet_speedup` = that / the sweep's default layout."""
from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import torch

from ..core.config import DEFAULT_PRESET, preset_config
from ..core.corpora.data import evenly_spaced, load_corpus, validation_windows
from ..core.device import Precision
from ..core.nets.model import GPT
from ..core.records.io import environment_info, git_commit, read_json, runs_root, write_json
from ..core.scoring.evaluate import evaluate
from ..core.training.train import train
from ..runner.registry import INTERIM_EVAL, Cell, default_study, study_cells

FLEET_ARMS = ("none", "ln", "rms")  # the fleet timed: one member per arm


def matmul_peak_gflops(n: int = 2048, repeats: int = 10, trials: int = 3) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = max(best, 2 * n ** 3 * repeats / (time.perf_counter() - t) / 1e9)
    return best


def loop_seconds(summary: dict) -> float:
    """Training-loop wall time without the evaluation passes."""
    return summary["wall_s"] - summary["eval_s_total"]


def _loop_worker(preset: str, iters: int, threads: int, data_path, queue) -> None:
    torch.set_num_threads(threads)
    cfg = preset_config(preset, max_iters=iters, eval_interval=0, eval_at_init=False, checkpoint_interval=0,
                        diag_interval=0, torch_threads=threads)
    with tempfile.TemporaryDirectory() as tmp:
        summary = train(cfg, f"{tmp}/run", data_path, progress=False)
    queue.put(summary["steps"] / loop_seconds(summary))


def parallelism(preset: str, iters: int, data_path=None) -> dict:
    """Iterations/s of the whole machine: one worker using every core vs one 1-thread worker per core."""
    import multiprocessing as mp

    cores = mp.cpu_count()
    ctx = mp.get_context("spawn")
    result = {}
    for workers, threads in ((1, cores), (cores, 1)):
        queue = ctx.Queue()
        procs = [ctx.Process(target=_loop_worker, args=(preset, iters, threads, data_path, queue))
                 for _ in range(workers)]
        for proc in procs:
            proc.start()
        rates = [queue.get() for _ in procs]
        for proc in procs:
            proc.join()
        result[f"{workers}x{threads}"] = sum(rates)
    one, many = result[f"1x{cores}"], result[f"{cores}x1"]
    print(f"machine it/s     1 worker x {cores} threads {one:.2f}; {cores} workers x 1 thread {many:.2f} (together); "
          f"ratio {many / one:.2f}")
    return result


def fleet_it_per_s(preset: str, iters: int, data_path=None) -> float:
    """Member-iterations/s of one fleet of the three arms (none, ln, rms; seed 0) in this process at its thread count:
    the time of `iters` steps less that of 3, each a fresh fleet (which cancels building it and its final pass)."""
    from ..core.training.fleet import train_fleet
    from ..core.training.fleet_ops import fleet_configs

    base = dict(eval_interval=0, eval_at_init=False, checkpoint_interval=0, diag_interval=0, lm_eval=False,
                torch_threads=torch.get_num_threads(), eval_windows=8)
    seconds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for steps in (3, 3, iters):  # the first is a warm-up
            cfgs = fleet_configs([preset_config(preset, variant=v, seed=0, max_iters=steps, **base)
                                  for v in FLEET_ARMS])
            t = time.perf_counter()
            train_fleet(cfgs, [f"{tmp}/{steps}-{len(seconds)}-{c.variant}" for c in cfgs], data_path)
            seconds[steps] = time.perf_counter() - t
    return len(FLEET_ARMS) * (iters - 3) / (seconds[iters] - seconds[3])


def precision_ratio(preset: str, iters: int, data_path=None, threads: int = 0, repeats: int = 2) -> dict:
    """ms/iteration of the training loop in fp32 and in bf16 autocast on this machine's device, alternated in one
    process (best of `repeats` each): whether a bf16 study is affordable here."""
    cfg = preset_config(preset, max_iters=iters, eval_interval=0, eval_at_init=False, checkpoint_interval=0,
                        diag_interval=0, torch_threads=threads)
    ms: dict[str, list[float]] = {"fp32": [], "bf16": []}
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg.replace(max_iters=2), f"{tmp}/warm", data_path, progress=False)
        for rep in range(repeats):
            for precision in ms:
                s = train(cfg.replace(precision=precision), f"{tmp}/{precision}{rep}", data_path, progress=False)
                ms[precision].append(loop_seconds(s) / s["steps"] * 1e3)
                device, threads_used = s["device"], s["torch_threads"]
    best = {p: min(v) for p, v in ms.items()}
    result = {"preset": preset, "iters": iters, "device": device, "threads": threads_used,
              "ms_per_iter": best, "bf16_over_fp32": best["bf16"] / best["fp32"]}
    print(f"train loop on {device} at {result['threads']} thread(s), {preset}: fp32 {best['fp32']:.1f} ms/iter, "
          f"bf16 autocast {best['bf16']:.1f} ms/iter; bf16 / fp32 = {result['bf16_over_fp32']:.2f}x")
    return result


def eval_seconds(preset: str, data_path, threads: int) -> dict:
    """Seconds of one full-validation pass (today's 32-window forward and the old 128) and of one pass over the
    interim subset; per run, the evaluations of the committed plan and of the interim-subset plan."""
    torch.set_num_threads(threads)
    cfg = preset_config(preset)
    corpus = load_corpus(data_path)
    model = GPT(cfg)
    x, y = validation_windows(corpus.val, cfg.block_size)
    keep = evenly_spaced(len(x), INTERIM_EVAL["interim_eval_windows"])
    precision = Precision("fp32", torch.device("cpu"))
    evaluate(model, x[:64], y[:64], precision)

    def timed(**kw) -> float:
        t = time.perf_counter()
        evaluate(model, **kw)
        return time.perf_counter() - t

    full = min(timed(x=x, y=y, precision=precision) for _ in range(2))
    full_128 = min(timed(x=x, y=y, precision=precision, forward_windows=128) for _ in range(2))
    subset = min(timed(x=x[keep], y=y[keep], precision=precision) for _ in range(3))
    passes = cfg.max_iters // cfg.eval_interval + (1 if cfg.eval_at_init else 0) + (cfg.max_iters % cfg.eval_interval > 0)
    return {"threads": threads, "full_val_eval_s": full, "full_val_eval_s_forward128": full_128,
            "interim_eval_s": subset, "passes_per_run": passes, "val_chars": y.numel(),
            "eval_s_per_run_committed_plan": passes * full_128,
            "eval_s_per_run": (passes - 1) * subset + full}


def notebook_run(preset: str, iters: int, data_path, threads: int) -> dict:
    """One run through the training notebook, as a sweep worker runs it (papermill, lm-eval on, the
    interim-subset plan), timed per cell: what is outside the training loop, and lm-eval's share."""
    import nbformat

    from ..runner.sweep import execute_cell

    cell = Cell("bench", preset, "ln", 0, (("max_iters", iters), ("lm_eval", True),
                                           *INTERIM_EVAL.items()))
    with tempfile.TemporaryDirectory(prefix="embnorm-bench-") as tmp:
        record = execute_cell(cell, tmp, data_path, threads, str(_train_notebook()))
        if record["status"] != "ok":
            raise RuntimeError(f"bench run failed: {record}")
        run = cell.run_dir(Path(tmp))
        summary = read_json(run / "summary.json")
        nb = nbformat.read(run / "02_train.ipynb", as_version=4)
    cells = [(c.source, float(c.metadata.papermill.get("duration") or 0)) for c in nb.cells if c.cell_type == "code"]
    lm_s = sum(d for src, d in cells if "score_if_asked(" in src)
    train_cell_s = sum(d for src, d in cells if "train_job(" in src)
    if not (lm_s and train_cell_s):
        raise RuntimeError("bench: the training notebook's train or lm-eval cell was not found (renamed call?)")
    total = record["seconds"]
    return {"iters": iters, "threads": threads, "notebook_s": total, "loop_and_eval_s": summary["wall_s"],
            "lm_eval_s_per_run": lm_s, "run_overhead_s": total - summary["wall_s"] - lm_s,
            "overhead_parts": {"kernel_start_and_save_s": total - sum(d for _, d in cells),
                               "train_cell_outside_loop_s": train_cell_s - summary["wall_s"],
                               "other_cells_s": sum(d for _, d in cells) - train_cell_s - lm_s}}


def study_wall(study: str, data_path, workers: int = 0) -> dict:
    """The whole study, end to end as the sweep runs it (default layout, lm-eval on), with the interim-subset
    plan, into a temporary directory; its final numbers must be those of the committed runs' plan."""
    from ..runner.sweep import run_sweep

    cells = [Cell(c.study, c.preset, c.variant, c.seed, (*c.overrides, *INTERIM_EVAL.items()), c.tag_axes)
             for c in study_cells(study)]
    with tempfile.TemporaryDirectory(prefix="embnorm-bench-study-") as tmp:
        t = time.perf_counter()
        report = run_sweep(cells, tmp, data_path, workers=workers, echo=lambda *a: None, reuse=False)
        wall = time.perf_counter() - t
        finals = {c.label(): read_json(c.run_dir(Path(tmp)) / "summary.json").get("val_loss") for c in cells}
    return {"study": study, "runs": len(cells), "failures": len(report.failures), "study_wall_s": wall,
            "workers": workers or "default",
            "val_loss": finals, "git_commit": git_commit(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _train_notebook() -> Path:
    from ..core.records.io import repo_root
    from ..runner.sweep import TRAIN_NOTEBOOK

    return repo_root() / TRAIN_NOTEBOOK


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--threads", type=int, default=0, help="torch threads of the loop timing (0: torch's default)")
    parser.add_argument("--data-path", default=None)
    parser.add_argument("--save", default=None, help="where to write the figures (default: runs/bench.json)")
    parser.add_argument("--study", action="store_true", help="also time the whole default study (~20 min)")
    parser.add_argument("--parallelism", action="store_true", help="only compare the sweep's worker layouts")
    parser.add_argument("--precision", action="store_true", help="only: the loop in bf16 autocast against fp32")
    return parser


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    save = Path(args.save) if args.save else runs_root() / "bench.json"
    if args.parallelism:
        return parallelism(args.preset, args.iters, args.data_path)
    if args.precision:
        return precision_ratio(args.preset, args.iters, args.data_path, args.threads)
    result = measure(args, save)
    print_result(result, args.preset)
    write_json(save, {**result, "git_commit": git_commit(), **environment_info(),
                      "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    print(f"wrote {save}")
    return result


def measure(args: argparse.Namespace, save: Path) -> dict:
    """Every figure of runs/bench.json: the loop, its FLOPs and MFU, diagnostics, the sweep's layouts, the fleet,
    evaluation, one notebook run, and (with --study, else kept from the last file) the default study end to end."""
    cores = os.cpu_count() or 1
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = preset_config(args.preset, max_iters=args.iters, eval_interval=0, eval_at_init=False,
                        checkpoint_interval=0, torch_threads=args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg.replace(diag_interval=0, max_iters=3), f"{tmp}/warm", args.data_path, progress=False)
        plain = train(cfg.replace(diag_interval=0), f"{tmp}/plain", args.data_path, progress=False)
        with_diag = train(cfg, f"{tmp}/diag", args.data_path, progress=False)
    threads = torch.get_num_threads()
    ms_per_iter = loop_seconds(plain) / plain["steps"] * 1e3
    tokens_per_s = cfg.tokens_per_iter / (ms_per_iter / 1e3)
    achieved = plain["flops_per_token"] * tokens_per_s / 1e9
    peak = matmul_peak_gflops()
    layouts = parallelism(args.preset, args.iters, args.data_path)
    torch.set_num_threads(threads)
    fleet = fleet_it_per_s(args.preset, args.iters, args.data_path)
    per_worker = eval_seconds(args.preset, args.data_path, 1)  # the sweep's default: one thread per worker
    all_threads = eval_seconds(args.preset, args.data_path, threads)
    torch.set_num_threads(threads)
    run = notebook_run(args.preset, 20, args.data_path, 1)
    previous = read_json(save) if save.is_file() else {}
    study = study_wall(default_study(), args.data_path) if args.study else previous.get("study")

    return {
        "preset": args.preset, "threads": threads, "n_params": plain["n_params"],
        "flops_per_token": plain["flops_per_token"], "ms_per_iter": ms_per_iter, "tokens_per_s": tokens_per_s,
        "achieved_gflops": achieved, "peak_gflops": peak, "mfu": achieved / peak,
        "diag_overhead": loop_seconds(with_diag) / loop_seconds(plain),
        "machine_it_per_s": layouts[f"{cores}x1"], "machine_it_per_s_one_worker": layouts[f"1x{cores}"],
        "full_val_eval_s": all_threads["full_val_eval_s"], "eval": {"1": per_worker, str(threads): all_threads},
        "eval_s_per_run": per_worker["eval_s_per_run"],
        "run_overhead_s": run["run_overhead_s"], "lm_eval_s_per_run": run["lm_eval_s_per_run"], "notebook_run": run,
        "study_wall_s": study["study_wall_s"] if study else None, "study": study,
        # the fleet against the sweep's default layout, per member-iteration (issue 114 asks for at least 0.8)
        "fleet_speedup": fleet / layouts[f"{cores}x1"],
        "fleet": {"device": "cpu", "threads": threads, "arms": list(FLEET_ARMS), "machine_it_per_s": fleet},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def print_result(result: dict, preset: str) -> None:
    """The figures as the lines a reader compares across machines."""
    cores = os.cpu_count() or 1
    threads, ms_per_iter, peak = result["threads"], result["ms_per_iter"], result["peak_gflops"]
    tokens_per_s, achieved = result["tokens_per_s"], result["achieved_gflops"]
    run, study = result["notebook_run"], result["study"]
    diag_interval = preset_config(preset).diag_interval
    e1, ea = result["eval"]["1"], result["eval"][str(threads)]
    print(f"preset {preset}: {result['n_params']:,} params, {result['flops_per_token']:,} FLOPs/token, fp32")
    print(f"train loop       {ms_per_iter:8.1f} ms/iter at {threads} threads   {tokens_per_s:10,.0f} tokens/s   "
          f"{achieved:7.1f} GFLOP/s achieved")
    print(f"fp32 matmul peak {peak:8.1f} GFLOP/s (2048^3, this process)   MFU {result['mfu']:.3f}")
    print(f"diagnostics      {result['diag_overhead']:8.3f}   (loop time with / without, interval {diag_interval})")
    print(f"full-val pass    {ea['full_val_eval_s']:8.2f} s at {threads} threads, {e1['full_val_eval_s']:.2f} s at 1; "
          f"ratio to the old 128-window forward {ea['full_val_eval_s_forward128'] / ea['full_val_eval_s']:.2f}x, "
          f"{e1['full_val_eval_s_forward128'] / e1['full_val_eval_s']:.2f}x")
    print(f"eval per run     {e1['eval_s_per_run']:8.2f} s at 1 thread with the interim subset "
          f"({e1['passes_per_run']} passes), {e1['eval_s_per_run_committed_plan']:.2f} s as committed: "
          f"ratio {e1['eval_s_per_run_committed_plan'] / e1['eval_s_per_run']:.2f}x")
    if "fleet_speedup" in result:
        print(f"fleet            {result['fleet']['machine_it_per_s']:.2f} member-it/s, {len(result['fleet']['arms'])} "
              f"arms in one process at {threads} threads; / {cores} workers x 1 thread: {result['fleet_speedup']:.2f}x")
    parts = run["overhead_parts"]
    print(f"run overhead     {run['run_overhead_s']:8.2f} s outside the loop without lm-eval (kernel start + save "
          f"{parts['kernel_start_and_save_s']:.2f}, train cell outside the loop {parts['train_cell_outside_loop_s']:.2f}, "
          f"other cells {parts['other_cells_s']:.2f}); lm-eval {run['lm_eval_s_per_run']:.2f} s per run")
    if study:
        print(f"study            {study['study']} end to end {study['study_wall_s'] / 60:.1f} min "
              f"({study['runs']} runs, {study['failures']} failed; commit {study['git_commit'][:7]})")


if __name__ == "__main__":
    main()
