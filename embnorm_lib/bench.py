"""Throughput benchmark of the real training loop: prints ratios, not pass/fail.

    python -m embnorm_lib.bench [--preset seeds-final] [--iters 40] [--threads N]
    python -m embnorm_lib.bench --parallelism     # sweep workers: 1 x all threads vs cores x 1 thread

MFU = achieved model FLOP/s (6N + 12*L*d*T per token, fwd+bwd) / fp32 matmul peak measured
in this process with the same thread count. Diagnostics overhead = loop time with
diagnostics at the preset's interval / loop time with diagnostics off."""
from __future__ import annotations

import argparse
import resource
import tempfile
import time

import torch

from .config import preset_config
from .data import load_corpus, validation_windows
from .device import Precision
from .evaluate import evaluate
from .io import environment_info, git_commit, write_json
from .model import GPT
from .train import train


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
    print(f"{preset}: 1 worker x {cores} threads {one:.2f} it/s; {cores} workers x 1 thread {many:.2f} it/s "
          f"(together); ratio {many / one:.2f}")
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="seeds-final")
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--data-path", default=None)
    parser.add_argument("--save", default=None, help="also write the figures as JSON to this path")
    parser.add_argument("--parallelism", action="store_true",
                        help="compare one multi-threaded worker with one single-threaded worker per core")
    args = parser.parse_args(argv)
    if args.parallelism:
        result = parallelism(args.preset, args.iters, args.data_path)
        _save(args.save, {"mode": "parallelism", "preset": args.preset, "iters": args.iters, "it_per_s": result})
        return result
    if args.threads:
        torch.set_num_threads(args.threads)
    corpus = load_corpus(args.data_path)
    common = dict(max_iters=args.iters, eval_interval=0, eval_at_init=False, checkpoint_interval=0,
                  torch_threads=args.threads)
    cfg = preset_config(args.preset, **common)
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg.replace(diag_interval=0, max_iters=3), f"{tmp}/warm", args.data_path, progress=False)
        plain = train(cfg.replace(diag_interval=0), f"{tmp}/plain", args.data_path, progress=False)
        with_diag = train(cfg, f"{tmp}/diag", args.data_path, progress=False)
    ms_per_iter = loop_seconds(plain) / plain["steps"] * 1e3
    tokens_per_s = cfg.tokens_per_iter / (ms_per_iter / 1e3)
    achieved = plain["flops_per_token"] * tokens_per_s / 1e9
    peak = matmul_peak_gflops()

    model = GPT(cfg)
    val_x, val_y = validation_windows(corpus.val, cfg.block_size)
    precision = Precision("fp32", torch.device("cpu"))
    evaluate(model, val_x[:64], val_y[:64], precision)
    t = time.perf_counter()
    evaluate(model, val_x, val_y, precision)
    eval_s = time.perf_counter() - t
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    result = {
        "preset": args.preset, "threads": torch.get_num_threads(), "n_params": plain["n_params"],
        "flops_per_token": plain["flops_per_token"], "ms_per_iter": ms_per_iter, "tokens_per_s": tokens_per_s,
        "achieved_gflops": achieved, "peak_gflops": peak, "mfu": achieved / peak,
        "diag_overhead": loop_seconds(with_diag) / loop_seconds(plain),
        "full_val_eval_s": eval_s, "val_chars": val_y.numel(), "peak_rss_mib": rss_mib,
    }
    print(f"preset {args.preset}: {plain['n_params']:,} params, {plain['flops_per_token']:,} FLOPs/token, "
          f"{torch.get_num_threads()} threads, fp32")
    print(f"train loop       {ms_per_iter:8.1f} ms/iter   {tokens_per_s:10,.0f} tokens/s   "
          f"{achieved:7.1f} GFLOP/s achieved")
    print(f"fp32 matmul peak {peak:8.1f} GFLOP/s (2048^3, this process)")
    print(f"MFU              {result['mfu']:8.3f}   (achieved / peak)")
    print(f"diagnostics      {result['diag_overhead']:8.3f}   (loop time with / without, interval {cfg.diag_interval})")
    print(f"full-val eval    {eval_s:8.2f} s for {val_y.numel():,} chars")
    print(f"peak RSS         {rss_mib:8.0f} MiB")
    _save(args.save, {"mode": "throughput", **result})
    return result


def _save(path, payload: dict) -> None:
    if path:
        write_json(path, {**payload, "git_commit": git_commit(), **environment_info(),
                          "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})


if __name__ == "__main__":
    main()
