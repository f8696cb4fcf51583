"""One training run: paired, resumable, and written to its run directory as it goes."""
from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import diagnostics as diag
from . import distributed as D
from .config import RunConfig
from .data import BatchSampler, load_corpus, validation_windows
from .device import Precision, resolve_precision, select_device
from .evaluate import evaluate
from .errors import ConfigError, RunDirError
from .io import (RunLock, default_runs_dir, environment_info, git_commit, read_json, read_jsonl, save_torch,
                 write_json, write_jsonl)
from .model import GPT


class ResumeError(RunDirError):
    """A run directory holds state that does not belong to the requested run."""


@dataclass(frozen=True)
class RunDir:
    root: Path

    config = property(lambda self: self.root / "config.json")
    metrics = property(lambda self: self.root / "metrics.jsonl")
    evals = property(lambda self: self.root / "evals.jsonl")
    diagnostics = property(lambda self: self.root / "diagnostics.jsonl")
    summary = property(lambda self: self.root / "summary.json")
    checkpoint = property(lambda self: self.root / "ckpt.pt")
    final_model = property(lambda self: self.root / "model.pt")
    lock = property(lambda self: self.root / ".lock")  # held while a process trains or writes this run


def run_dir_for(study: str, variant: str, seed: int, out_dir: str | os.PathLike | None = None,
                tag: str = "") -> Path:
    """runs/<study>/<variant>[<tag>]/seed<k>; the tag names any extra sweep axes (e.g. '_lr=1e-3').
    Study and tag are path components: a name that would leave `out_dir` is refused."""
    from .config import check_name
    from .variants import canonical_variant

    check_name("study", study)
    check_name("run_tag", tag, allow_empty=True)
    base = Path(out_dir) if out_dir else default_runs_dir()
    return base / study / f"{canonical_variant(variant)}{tag}" / f"seed{seed}"


def lr_at(cfg: RunConfig, step: int) -> float:
    """Learning rate for optimizer update `step` (1-based): linear warmup, then cosine to min_lr."""
    min_lr = cfg.lr * cfg.min_lr_ratio
    if step <= cfg.warmup_iters:
        return cfg.lr * step / max(1, cfg.warmup_iters)
    progress = (step - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))) * (cfg.lr - min_lr)


def make_optimizer(model: GPT, cfg: RunConfig, device: torch.device) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]  # matrices and embeddings; norms and biases are not decayed
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused)


def _rng_state() -> dict:
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": random.getstate(),
    }


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    random.setstate(tuple(tuple(x) if isinstance(x, list) else x for x in state["python"]))


def load_checkpoint(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or foreign file: say which and what to do
        raise ResumeError(f"checkpoint {path} is unreadable ({type(e).__name__}); "
                          f"delete it to restart the run from scratch") from None


def _check_same_run(run: RunDir, cfg: RunConfig) -> None:
    """Refuse to mix two different runs in one directory."""
    if not run.config.is_file():
        return
    old = RunConfig.load(run.config).training_identity()
    new = cfg.training_identity()
    changed = {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
    if changed:
        detail = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
        raise ResumeError(f"run dir {run.root} holds a run with a different config ({detail}); "
                          f"use another study/out_dir or delete that directory")


def check_fits_data(cfg: RunConfig, corpus) -> None:
    """Everything about the data that can fail, checked before the run directory is touched."""
    if corpus.vocab_size != cfg.vocab_size:
        raise ConfigError(f"invalid vocab_size={cfg.vocab_size}; allowed: {corpus.vocab_size} "
                          f"(the corpus's character count)")
    if len(corpus.train) <= cfg.block_size + 1:
        raise ConfigError(f"invalid block_size={cfg.block_size}; allowed: < {len(corpus.train) - 1} "
                          f"(the training split has {len(corpus.train)} characters)")
    if len(corpus.val) < cfg.block_size + 1:
        raise ConfigError(f"invalid block_size={cfg.block_size}; allowed: <= {len(corpus.val) - 1} "
                          f"(the validation split has {len(corpus.val)} characters, less than one window)")


def expected_log_steps(cfg: RunConfig, step: int) -> dict[str, list[int]]:
    """The steps each log holds after a checkpoint at `step` (the final step is never checkpointed)."""
    head = [0] if cfg.eval_at_init else []
    every = lambda k: [s for s in range(1, step + 1) if k and s % k == 0]  # noqa: E731
    return {"metrics": list(range(1, step + 1)), "evals": head + every(cfg.eval_interval),
            "diagnostics": head + every(cfg.diag_interval)}


def _check_logs_cover(run: RunDir, cfg: RunConfig, step: int, logs: dict[str, list[dict]]) -> None:
    """A checkpoint is only resumed when the logs hold every row up to it, so the summary is complete."""
    for name, expected in expected_log_steps(cfg, step).items():
        found = [r["step"] for r in logs[name]]
        if found != expected:
            missing = sorted(set(expected) - set(found))
            detail = f"missing steps {_ranges(missing)}" if missing else f"steps {_ranges(found)} out of order"
            raise ResumeError(f"{name}.jsonl in {run.root} does not cover the checkpoint at step {step} ({detail}); "
                              f"allowed: logs complete up to the checkpoint (delete the run directory to retrain)")


def _ranges(steps: list[int]) -> str:
    return f"{steps[0]}..{steps[-1]} ({len(steps)} rows)" if len(steps) > 3 else ", ".join(map(str, steps)) or "none"


def train(cfg: RunConfig, run_dir: str | os.PathLike, data_path: str | os.PathLike | None = None, *,
          until_step: int | None = None, progress: bool = True,
          on_eval: Callable[[dict], None] | None = None) -> dict:
    """Train one run into `run_dir` and return its summary.

    A finished run with the same config is not retrained; a partial one resumes from its
    checkpoint. `until_step` stops after checkpointing that step (train in chunks). Everything that
    can be checked is checked before the directory is written; the run holds the directory's lock
    (another process training into it is refused). The torch thread count (part of what makes CPU
    numbers bitwise reproducible) is restored afterwards."""
    threads_before = torch.get_num_threads()
    try:
        return _train(cfg, run_dir, data_path, until_step=until_step, progress=progress, on_eval=on_eval)
    finally:
        torch.set_num_threads(threads_before)


@contextlib.contextmanager
def _holding(run: RunDir, is_main: bool):
    """The run directory's lock for the main rank; directories this call created and left empty are removed."""
    if not is_main:
        yield
        return
    created = [p for p in (run.root, *run.root.parents) if not p.exists()]
    try:
        with RunLock(run.lock):
            yield
    finally:
        if run.root.is_dir() and [p.name for p in run.root.iterdir()] in ([], [run.lock.name]):
            if created:  # nothing was written: leave no trace of this attempt
                run.lock.unlink(missing_ok=True)
                for p in created:
                    with contextlib.suppress(OSError):
                        p.rmdir()


def _train(cfg: RunConfig, run_dir, data_path, *, until_step, progress, on_eval) -> dict:
    run = RunDir(Path(run_dir))
    corpus = load_corpus(data_path)  # verified before anything is written
    check_fits_data(cfg, corpus)
    device = select_device(cfg.device)
    ddp = D.setup(device.type)
    with _holding(run, ddp.is_main):
        _check_same_run(run, cfg)  # under the lock: two processes cannot both pass it and then write
        if run.summary.is_file():
            D.cleanup(ddp)
            return _with_lm_eval(cfg, run, data_path)
        return _train_locked(cfg, run, corpus, device, ddp, data_path, until_step=until_step, progress=progress,
                             on_eval=on_eval)


def _train_locked(cfg: RunConfig, run: RunDir, corpus, device, ddp, data_path, *, until_step, progress,
                  on_eval) -> dict:
    if ddp.active and device.type == "cuda":
        device = torch.device("cuda", ddp.local_rank)
        torch.cuda.set_device(device)
    micro = D.micro_batch_size(cfg.batch_size, ddp.world_size, cfg.grad_accum)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    precision = Precision(resolve_precision(cfg.precision, device), device)
    torch.manual_seed(cfg.seed)  # dropout; data order and init have generators of their own
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)

    model = GPT(cfg).to(device)
    optimizer = make_optimizer(model, cfg, device)
    scaler = precision.grad_scaler()
    sampler = BatchSampler(corpus.train, cfg.block_size, cfg.batch_size, cfg.seed)
    val_x, val_y = validation_windows(corpus.val, cfg.block_size)
    probe_x = val_x[:8]
    groups = diag.parameter_groups(model)
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if ddp.active else model
    use_compile = cfg.compile is True or (cfg.compile == "auto" and device.type == "cuda")
    forward = torch.compile(wrapped) if use_compile else wrapped

    step, elapsed_before = 0, 0.0
    rows, eval_rows, diag_rows = [], [], []
    if run.checkpoint.is_file():
        ckpt = load_checkpoint(run.checkpoint)
        saved = RunConfig.from_dict(ckpt["config"])
        if saved.training_identity() != cfg.training_identity():
            raise ResumeError(f"checkpoint {run.checkpoint} was written by a different config; "
                              f"delete it or use another run dir")
        saved_threads = ckpt.get("torch_threads")
        if device.type == "cpu" and saved_threads is not None and saved_threads != torch.get_num_threads():
            raise ResumeError(f"checkpoint {run.checkpoint} was written with {saved_threads} torch thread(s), this "
                              f"process has {torch.get_num_threads()}; allowed: torch_threads={saved_threads} "
                              f"(CPU results are bitwise reproducible for one thread count only)")
        step, elapsed_before = ckpt["step"], ckpt["elapsed_s"]
        logs = {"metrics": [r for r in read_jsonl(run.metrics) if r["step"] <= step],
                "evals": [r for r in read_jsonl(run.evals) if r["step"] <= step],
                "diagnostics": [r for r in read_jsonl(run.diagnostics) if r["step"] <= step]}
        _check_logs_cover(run, cfg, step, logs)
        rows, eval_rows, diag_rows = logs["metrics"], logs["evals"], logs["diagnostics"]
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scaler.load_state_dict(ckpt["scaler"])
        sampler.load_state_dict(ckpt["sampler"])
        _set_rng_state(ckpt["rng"])
    if ddp.is_main:  # every check has passed: only now does the directory say which run it holds
        write_json(run.config, cfg.to_dict())

    final_logits = None

    def record_eval(at_step: int) -> None:
        nonlocal final_logits
        t = time.perf_counter()
        is_final = at_step == cfg.max_iters
        result = evaluate(model, val_x, val_y, precision, keep_logits=is_final)
        if is_final:
            result, final_logits = result
        row = {"step": at_step, "tokens": at_step * cfg.tokens_per_iter, **result,
               "eval_s": time.perf_counter() - t}
        eval_rows.append(row)
        if on_eval:
            on_eval(row)

    def save_progress(with_checkpoint: bool) -> None:
        if not ddp.is_main:
            return
        write_jsonl(run.metrics, rows)
        write_jsonl(run.evals, eval_rows)
        write_jsonl(run.diagnostics, diag_rows)
        if with_checkpoint:
            state = {"config": cfg.to_dict(), "step": step, "elapsed_s": elapsed_before + time.perf_counter() - t0,
                     "torch_threads": torch.get_num_threads(),
                     "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scaler": scaler.state_dict(), "sampler": sampler.state_dict(), "rng": _rng_state()}
            save_torch(state, run.checkpoint)

    t0 = time.perf_counter()
    if step == 0 and cfg.eval_at_init and not eval_rows and ddp.is_main:
        record_eval(0)
        diag_rows.append({"step": 0, **diag.probe(model, probe_x, corpus.chars)})
    diverged_step = None
    bar = _progress_bar(cfg, step, progress and ddp.is_main)
    last = until_step if until_step is not None else cfg.max_iters
    while step < min(last, cfg.max_iters):
        step += 1
        lr = lr_at(cfg, step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = sampler.next_batch()  # the global batch: every rank draws it, each keeps its own slice
        x, y = D.rank_slice(x, ddp), D.rank_slice(y, ddp)
        t_step = time.perf_counter()
        train_loss, block1_input_norm = 0.0, 0.0
        for i in range(cfg.grad_accum):
            xm = x[i * micro:(i + 1) * micro].to(device, non_blocking=True)
            ym = y[i * micro:(i + 1) * micro].to(device, non_blocking=True)
            # gradients are all-reduced once per step, on the last micro-batch
            sync = wrapped.no_sync() if ddp.active and i < cfg.grad_accum - 1 else contextlib.nullcontext()
            with sync:
                with precision.autocast():
                    _, loss, b1_norm = forward(xm, ym)
                scaler.scale(loss / cfg.grad_accum if cfg.grad_accum > 1 else loss).backward()
            train_loss += loss.item() / cfg.grad_accum
            block1_input_norm += b1_norm.item() / cfg.grad_accum
        train_loss, block1_input_norm = D.mean_across_ranks([train_loss, block1_input_norm], ddp)
        scaler.unscale_(optimizer)
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm_total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True).item()
        do_diag = cfg.diag_interval and step % cfg.diag_interval == 0 and ddp.is_main
        diag_row = {"step": step}
        if do_diag:
            diag_row.update(diag.grad_norms(groups))
            before = diag.snapshot(groups)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        rows.append({"step": step, "tokens": step * cfg.tokens_per_iter, "lr": lr, "train_loss": train_loss,
                     "grad_norm_total": grad_norm_total, "clipped": bool(grad_norm_total > max_norm),
                     "block1_input_norm": block1_input_norm,
                     "step_ms": (time.perf_counter() - t_step) * 1e3,
                     "wall_s": elapsed_before + time.perf_counter() - t0})
        if not math.isfinite(train_loss) or (precision.name != "fp16" and not math.isfinite(grad_norm_total)):
            diverged_step = step  # a result, not a crash: record and stop
            break
        if do_diag:
            diag_row.update(diag.update_ratios(before, groups))
            diag_row.update(diag.adam_second_moments(optimizer, groups))
            diag_row.update(diag.probe(model, probe_x, corpus.chars))
            diag_rows.append(diag_row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{train_loss:.3f}", refresh=False)
        is_last = step == cfg.max_iters
        if ((cfg.eval_interval and step % cfg.eval_interval == 0) or is_last) and ddp.is_main:
            record_eval(step)
        if is_last:
            break
        if cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0:
            save_progress(with_checkpoint=True)
    if bar is not None:
        bar.close()

    if diverged_step is None and step < cfg.max_iters:  # stopped early on request: resumable
        save_progress(with_checkpoint=True)
        D.cleanup(ddp)
        return {"finished": False, "step": step}
    D.cleanup(ddp)
    if not ddp.is_main:
        return {"rank": ddp.rank, "finished": True, "step": step}
    save_progress(with_checkpoint=False)
    summary = _summarize(cfg, rows, eval_rows, diag_rows, diverged_step, model, corpus, device, precision,
                         elapsed_before + time.perf_counter() - t0, ddp.world_size)
    if final_logits is not None:
        from .calibration import calibration_from_logits

        calib = calibration_from_logits(final_logits, val_y)
        write_json(run.root / "calibration.json", calib)
        summary.update({k: v for k, v in calib.items() if not isinstance(v, (list, dict))})
    save_torch(model.state_dict(), run.final_model)
    write_json(run.summary, summary)
    run.checkpoint.unlink(missing_ok=True)
    return _with_lm_eval(cfg, run, data_path)


def _with_lm_eval(cfg: RunConfig, run: RunDir, data_path) -> dict:
    """The run's summary, after the zero/few-shot suite has been added to it when the config asks."""
    summary = read_json(run.summary)
    if cfg.lm_eval and not summary.get("diverged") and not (run.root / "lm_eval.json").is_file():
        if not run.final_model.is_file():
            raise RunDirError(f"run {run.root} has no lm_eval.json and no model.pt to score (weights are not "
                              f"committed); allowed: a run with its weights, or retrain it into a fresh directory")
        from .lm_eval_adapter import evaluate_run

        evaluate_run(run.root, data_path)
        summary = read_json(run.summary)
    return summary


def _progress_bar(cfg: RunConfig, start: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    # coarse refresh: under papermill every refresh becomes a stored output (papermill #765)
    return tqdm(total=cfg.max_iters, initial=start, desc=f"{cfg.variant} seed{cfg.seed}", unit="it",
                mininterval=10.0, file=sys.stderr, leave=False)


def _summarize(cfg, rows, eval_rows, diag_rows, diverged_step, model, corpus, device, precision, wall_s,
               world_size: int = 1) -> dict:
    final_eval = eval_rows[-1] if eval_rows and diverged_step is None else {}
    losses = [r["train_loss"] for r in rows]
    spikes = diag.find_spikes(losses, cfg.spike_factor, cfg.spike_window)
    grad_norms = [r["grad_norm_total"] for r in rows if math.isfinite(r["grad_norm_total"])]
    tail = losses[-10:]
    summary = {
        "variant": cfg.variant, "seed": cfg.seed, "preset": cfg.preset,
        "steps": len(rows), "max_iters": cfg.max_iters, "tokens": len(rows) * cfg.tokens_per_iter,
        "token_budget": cfg.token_budget,
        "diverged": diverged_step is not None, "diverged_step": diverged_step,
        "val_loss": final_eval.get("val_loss", float("nan")),
        "val_ppl": final_eval.get("val_ppl", float("nan")),
        "val_bpc": final_eval.get("val_bpc", float("nan")),
        "val_acc": final_eval.get("val_acc", float("nan")),
        "best_val_loss": min((r["val_loss"] for r in eval_rows), default=float("nan")),
        "init_val_loss": eval_rows[0]["val_loss"] if eval_rows and eval_rows[0]["step"] == 0 else float("nan"),
        "final_train_loss": sum(tail) / len(tail) if tail else float("nan"),
        "final_grad_norm": rows[-1]["grad_norm_total"] if rows else float("nan"),
        "peak_grad_norm": max(grad_norms, default=float("nan")),
        "clipped_frac": sum(r["clipped"] for r in rows) / len(rows) if rows else float("nan"),
        "final_block1_input_norm": rows[-1]["block1_input_norm"] if rows else float("nan"),
        "spike_count": len(spikes), "spike_steps": [rows[i]["step"] for i in spikes],
        "max_attn_logit": max((v for r in diag_rows for k, v in r.items() if k.startswith("attn_logit_max.")),
                              default=float("nan")),
        "n_params": model.num_params(),
        "flops_per_token": model.flops_per_token(),
        "wall_s": wall_s,
        "train_ms_per_iter": sum(r["step_ms"] for r in rows) / len(rows) if rows else float("nan"),
        "eval_s_total": sum(r["eval_s"] for r in eval_rows),
        "device": str(device), "precision": precision.name, "torch_threads": torch.get_num_threads(),
        "world_size": world_size, "grad_accum": cfg.grad_accum,
        "data_sha256": corpus.sha256, "git_commit": git_commit(),
        **environment_info(),
    }
    return summary
