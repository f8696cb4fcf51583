"""One training run: paired, resumable, and written to its run directory as it goes."""
from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import RunConfig
from ..corpora.data import BatchSampler, evenly_spaced, load_corpus, validation_windows
from ..device import Precision, resolve_compile, resolve_precision, select_device
from ..errors import ConfigError
from ..nets.model import GPT
from ..records.io import cpu_info, environment_info, git_commit, save_torch, write_json
from ..records.rundir import RunDir
from ..records.seal import finish_interrupted, finished_summary, seal_run
from ..records.steplog import TIMING_DECIMALS
from ..scoring import diagnostics as diag
from ..scoring.calibration import calibration
from ..scoring.evaluate import by_position, evaluate
from . import distributed as D
from .checkpoint import (
    TrainingState,
    check_same_run,
    cpu_changed,
    elapsed_clock,
    holding,
    note_machine,
    resume,
    save_checkpoint,
    write_config,
)
from .interrupt import Interrupted, raise_if_stopped, stop_on_interrupt  # noqa: F401 (Interrupted: from here too)
from .optimizer import make_optimizer
from .schedule import lr_at


def check_fits_data(cfg: RunConfig, corpus) -> None:
    """Everything about the data that can fail, checked before the run directory is touched."""
    if corpus.tokenizer == "shards":  # ids tokenized elsewhere: the vocabulary must hold every id
        corpus.check_vocab(cfg.vocab_size)
    elif corpus.vocab_size != cfg.vocab_size:
        raise ConfigError(f"invalid vocab_size={cfg.vocab_size}; allowed: {corpus.vocab_size} "
                          f"(the size of tokenizer {corpus.tokenizer}'s vocabulary for this corpus)")
    if len(corpus.train) <= cfg.block_size + 1:
        raise ConfigError(f"invalid block_size={cfg.block_size}; allowed: < {len(corpus.train) - 1} "
                          f"(the training split has {len(corpus.train)} characters)")
    if len(corpus.val) < cfg.block_size + 1:
        raise ConfigError(f"invalid block_size={cfg.block_size}; allowed: <= {len(corpus.val) - 1} "
                          f"(the validation split has {len(corpus.val)} characters, less than one window)")
    windows = (len(corpus.val) - 1) // cfg.block_size
    for name in ("eval_windows", "interim_eval_windows"):  # more would score it all but record a subset
        if getattr(cfg, name) > windows:
            raise ConfigError(f"invalid {name}={getattr(cfg, name)}; allowed: 0 (the whole validation split) or 1 to "
                              f"{windows} (the split's windows of {cfg.block_size})")


def train(cfg: RunConfig, run_dir: str | os.PathLike, data_path: str | os.PathLike | None = None, *,
          until_step: int | None = None, progress: bool = True, on_eval: Callable[[dict], None] | None = None,
          out_dir: str | os.PathLike | None = None) -> dict:
    """Train one run into `run_dir` and return its summary (the zero/few-shot suite is a later stage:
    lm_eval_adapter.score_if_asked). A finished run with the same config is not retrained; a partial one resumes
    from its checkpoint. `until_step` stops after checkpointing that step (train in chunks). Everything that can be
    checked is checked before the directory is written; the run holds the directory's lock (another process
    training into it is refused). A subword tokenizer is kept under `out_dir` (data.load_corpus). The torch thread
    count (part of what makes CPU numbers bitwise reproducible) is restored afterwards."""
    threads_before = torch.get_num_threads()
    try:
        return _train(cfg, run_dir, data_path, until_step=until_step, progress=progress, on_eval=on_eval,
                      out_dir=out_dir)
    finally:
        torch.set_num_threads(threads_before)


def _train(cfg: RunConfig, run_dir, data_path, *, until_step, progress, on_eval, out_dir) -> dict:
    if cfg.execution != "single":  # the mode is recorded with the run: only the engine that trains it may say so
        raise ConfigError(f"invalid execution={cfg.execution!r} for a single run; allowed: 'single' (a fleet is "
                          "`sweep --fleet`)")
    run = RunDir(Path(run_dir))
    corpus = load_corpus(data_path, cfg.tokenizer, cfg.corpus_sha256, cfg.train_chars, out_dir)  # before any write
    check_fits_data(cfg, corpus)
    device = select_device(cfg.device)
    ddp = D.setup(device.type)
    with holding(run, ddp.is_main):
        check_same_run(run, cfg)  # under the lock: two processes cannot both pass it and then write
        finish_interrupted(run)  # a kill after summary.json or inside a reseal: completed, not retrained
        if (summary := finished_summary(run)) is not None:
            D.cleanup(ddp)
            return summary
        return _train_locked(cfg, run, corpus, device, ddp, until_step=until_step, progress=progress, on_eval=on_eval)


class Evaluator:
    """Validation passes: the final one scores every window and keeps its logits for calibration; the ones before
    it (init included) score an evenly spaced subset when the config asks for one (`interim_eval_windows`)."""

    def __init__(self, cfg: RunConfig, model: GPT, val_x, val_y, precision: Precision, on_eval,
                 char_lengths: torch.Tensor | None = None):
        self.cfg, self.model, self.val_x, self.val_y, self.precision = cfg, model, val_x, val_y, precision
        self.char_lengths, self.on_eval, self.final_logits = char_lengths, on_eval, None
        keep = evenly_spaced(len(val_x), cfg.interim_eval_windows)
        self.interim_x, self.interim_y = val_x[keep], val_y[keep]

    def __call__(self, step: int) -> dict:
        t = time.perf_counter()
        is_final = step == self.cfg.max_iters
        x, y = (self.val_x, self.val_y) if is_final else (self.interim_x, self.interim_y)
        result = evaluate(self.model, x, y, self.precision, keep_logits=is_final, char_lengths=self.char_lengths)
        if is_final:
            result, self.final_logits = result
        row = {"step": step, "tokens": step * self.cfg.tokens_per_iter, **result, "eval_s": time.perf_counter() - t}
        if self.on_eval:
            self.on_eval(row)
        return row


@dataclass
class ActiveRun:
    """One run inside a training loop (the single-run loop below): its directory,
    state and evaluator, and the per-step work that does not depend on how the loss was computed."""

    cfg: RunConfig
    run: RunDir
    state: TrainingState
    evaluator: Evaluator
    precision: Precision
    groups: dict
    probe_x: torch.Tensor
    chars: str
    elapsed: Callable[[], float]
    is_main: bool = True
    diverged_step: int | None = None
    code_commit: str = "unknown"  # the checkout's commit when this process started the run (the code it runs)

    @property
    def max_norm(self) -> float:
        return self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")

    @property
    def finished(self) -> bool:
        return self.diverged_step is not None or self.state.step >= self.cfg.max_iters

    def set_lr(self, step: int) -> float:
        lr = lr_at(self.cfg, step)
        for group in self.state.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def clip_gradients(self) -> torch.Tensor:
        """Unscale (fp16) and clip; the total norm stays on the device until the loop reads it."""
        self.state.scaler.unscale_(self.state.optimizer)
        return torch.nn.utils.clip_grad_norm_(self.state.model.parameters(), self.max_norm, foreach=True)

    def update(self, step: int, lr: float, train_loss: float, grad_norm_total: float, block1_input_norm: float,
               t_step: float) -> bool:
        """Diagnostics, the optimizer step and the step's log row. True if the run diverged (a result: it stops)."""
        cfg, state, logs = self.cfg, self.state, self.state.logs
        do_diag = cfg.diag_interval and step % cfg.diag_interval == 0 and self.is_main
        diag_row = {"step": step, **diag.grad_norms(self.groups)} if do_diag else {}
        before = diag.snapshot(self.groups) if do_diag else None
        state.scaler.step(state.optimizer)
        state.scaler.update()
        state.optimizer.zero_grad(set_to_none=True)
        logs.metrics.append({"step": step, "tokens": step * cfg.tokens_per_iter, "lr": lr, "train_loss": train_loss,
                             "grad_norm_total": grad_norm_total, "clipped": bool(grad_norm_total > self.max_norm),
                             "block1_input_norm": block1_input_norm,
                             # timings at their stated resolution (steplog.TIMING_DECIMALS): finer digits are noise
                             "step_ms": round((time.perf_counter() - t_step) * 1e3, TIMING_DECIMALS["step_ms"]),
                             "wall_s": round(self.elapsed(), TIMING_DECIMALS["wall_s"])})
        if not math.isfinite(train_loss) or (self.precision.name != "fp16" and not math.isfinite(grad_norm_total)):
            self.diverged_step = step
            return True
        if do_diag:
            logs.diagnostics.append({**diag_row, **diag.update_ratios(before, self.groups),
                                     **diag.adam_second_moments(state.optimizer, self.groups),
                                     **diag.probe(state.model, self.probe_x, self.chars)})
        return False

    def after_update(self, step: int) -> None:
        """Evaluation and checkpoint at their intervals (the last step's evaluation scores every window)."""
        cfg, logs = self.cfg, self.state.logs
        is_last = step == cfg.max_iters
        if ((cfg.eval_interval and step % cfg.eval_interval == 0) or is_last) and self.is_main:
            logs.evals.append(self.evaluator(step))
        if not is_last and cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0 and self.is_main:
            self.checkpoint()

    def checkpoint(self) -> None:
        self.state.logs.write(self.run)
        save_checkpoint(self.run, self.cfg, self.state, self.elapsed())

    def finish(self, corpus, device, world_size: int = 1, extra: dict | None = None) -> dict:
        """An unfinished run (stopped on request) is checkpointed and resumable; a finished one is written."""
        if not self.finished:
            if self.is_main:
                self.checkpoint()
            return {"finished": False, "step": self.state.step}
        if not self.is_main:
            return {"finished": True, "step": self.state.step}
        return _finish(self.cfg, self.run, self.state, self.evaluator, corpus, device, self.precision,
                       self.diverged_step, self.elapsed(), world_size,
                       {"git_commit": self.code_commit, "trained_on": self.state.trained_on,
                        "cpu_changed_on_resume": cpu_changed(self.state.trained_on), **(extra or {})})


def start_run(cfg: RunConfig, run: RunDir, corpus, device: torch.device, precision: Precision, on_eval=None,
              is_main: bool = True) -> ActiveRun:
    """A run's model, optimizer and batch stream from its seed, resumed from its checkpoint if there is one; its
    config written; the evaluation at initialisation done (once)."""
    model = GPT(cfg).to(device)
    optimizer = make_optimizer(model, cfg, device)
    state = TrainingState(model, optimizer, precision.grad_scaler(),
                          BatchSampler(corpus.train, cfg.block_size, cfg.batch_size, cfg.seed))
    val_x, val_y = validation_windows(corpus.val, cfg.block_size, cfg.eval_windows)
    resume(run, cfg, state, device)
    if is_main:  # every check has passed: only now does the directory say which run it holds
        note_machine(run, state, cpu_info()["cpu_model"])  # one rank says it; only the main rank's state is saved
        write_config(run, cfg)
    active = ActiveRun(cfg, run, state, Evaluator(cfg, model, val_x, val_y, precision, on_eval, corpus.char_lengths),
                       precision,
                       diag.parameter_groups(model), val_x[:8], corpus.chars, elapsed_clock(state), is_main,
                       code_commit=git_commit())  # read now, not at the end: the checkout may move while it trains
    if state.step == 0 and cfg.eval_at_init and not state.logs.evals and is_main:
        state.logs.evals.append(active.evaluator(0))
        state.logs.diagnostics.append({"step": 0, **diag.probe(model, active.probe_x, corpus.chars)})
    return active


def _train_locked(cfg: RunConfig, run: RunDir, corpus, device, ddp, *, until_step, progress, on_eval) -> dict:
    if ddp.active and device.type == "cuda":
        device = torch.device("cuda", ddp.local_rank)
        torch.cuda.set_device(device)
    micro = D.micro_batch_size(cfg.batch_size, ddp.world_size, cfg.grad_accum)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    precision = Precision(resolve_precision(cfg.precision, device), device)
    seed_global_generators(cfg.seed)
    active = start_run(cfg, run, corpus, device, precision, on_eval, ddp.is_main)
    model, state, scaler = active.state.model, active.state, active.state.scaler
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if ddp.active else model
    forward = torch.compile(wrapped) if resolve_compile(cfg.compile, device, model.num_params()) else wrapped

    bar = progress_bar(cfg, state.step, progress and ddp.is_main)
    last = min(until_step if until_step is not None else cfg.max_iters, cfg.max_iters)
    with stop_on_interrupt(not ddp.active) as stop_requested:
        summary = _loop(cfg, active, forward, wrapped, scaler, precision, ddp, micro, device, bar, last, stop_requested,
                        corpus)
        raise_if_stopped(stop_requested(), [active])
    return summary


def _loop(cfg, active, forward, wrapped, scaler, precision, ddp, micro, device, bar, last, stop_requested,
          corpus) -> dict:
    state = active.state
    while state.step < last and not stop_requested():
        state.step += 1
        step = state.step
        lr = active.set_lr(step)
        x, y = sampler_batch(state.sampler, ddp)
        t_step = time.perf_counter()
        readings = []  # per micro-batch: loss and block-1 input norm, read from the device once per step
        for i in range(cfg.grad_accum):
            xm = x[i * micro:(i + 1) * micro].to(device, non_blocking=True)
            ym = y[i * micro:(i + 1) * micro].to(device, non_blocking=True)
            # gradients are all-reduced once per step, on the last micro-batch
            sync = wrapped.no_sync() if ddp.active and i < cfg.grad_accum - 1 else contextlib.nullcontext()
            with sync:
                with precision.autocast():
                    _, loss, b1_norm = forward(xm, ym)
                scaler.scale(loss / cfg.grad_accum if cfg.grad_accum > 1 else loss).backward()
            readings += [loss.detach().float(), b1_norm.float()]
        *readings, grad_norm_total = torch.stack([*readings, active.clip_gradients().float()]).tolist()
        train_loss, block1_input_norm = 0.0, 0.0
        for loss_value, b1_value in zip(readings[::2], readings[1::2], strict=True):
            train_loss += loss_value / cfg.grad_accum
            block1_input_norm += b1_value / cfg.grad_accum
        train_loss, block1_input_norm = D.mean_across_ranks([train_loss, block1_input_norm], ddp)
        if active.update(step, lr, train_loss, grad_norm_total, block1_input_norm, t_step):
            break  # diverged: a result, not a crash
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{train_loss:.3f}", refresh=False)
        active.after_update(step)
    if bar is not None:
        bar.close()
    D.cleanup(ddp)
    return {**active.finish(corpus, device, ddp.world_size), **({} if ddp.is_main else {"rank": ddp.rank})}


def seed_global_generators(seed: int) -> None:
    """Dropout draws from torch's global generator; data order and init have generators of their own."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def sampler_batch(sampler: BatchSampler, ddp: D.DistContext) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch: every rank draws it (so the data order is the same at any world size), each keeps a slice."""
    x, y = sampler.next_batch()
    return D.rank_slice(x, ddp), D.rank_slice(y, ddp)


def _finish(cfg, run: RunDir, state: TrainingState, evaluator: Evaluator, corpus, device, precision,
            diverged_step, wall_s: float, world_size: int, extra: dict | None = None) -> dict:
    """Logs (metrics and diagnostics as Parquet: steplog), calibration, weights, summary.json (which marks the run
    finished) and, last, the seal of every file (manifest.json); the checkpoint goes."""
    logs = state.logs
    logs.write(run, final=True)
    summary = _summarize(cfg, logs.metrics, logs.evals, logs.diagnostics, diverged_step, state.model, corpus,
                         device, precision, wall_s, world_size)
    if corpus.tokenizer != "char":  # char runs keep the summary they always had
        final = logs.evals[-1] if logs.evals and diverged_step is None else {}
        summary.update({"tokenizer": corpus.tokenizer, "tokenizer_sha256": corpus.tokenizer_sha256,
                        "val_loss_per_char": final.get("val_loss_per_char", float("nan"))})
    summary.update(extra or {})
    if evaluator.final_logits is not None:
        calib = calibration(evaluator.final_logits, evaluator.val_y)  # in memory, or from the stream that saw them
        write_json(run.calibration, calib)
        write_json(run.positions, by_position(evaluator.final_logits, evaluator.val_y))
        summary.update({k: v for k, v in calib.items() if not isinstance(v, (list, dict))})
        run.final_logits.unlink(missing_ok=True)  # a file of them, as runs before the stream kept (evaluate.py)
    save_torch(state.model.state_dict(), run.final_model)
    write_json(run.summary, summary)
    run.checkpoint.unlink(missing_ok=True)
    seal_run(run)
    return summary


def progress_bar(cfg: RunConfig, start: int, enabled: bool):  # noqa: ANN201 (tqdm is imported only when shown)
    if not enabled:
        return None
    from tqdm import tqdm

    # the text bar, not tqdm.auto's widget: an executed notebook keeps a widget's first rendering ("0%") and its
    # state, a text bar its last line (kept: leave=True). Coarse refresh: under papermill every refresh becomes a
    # stored output (papermill #765)
    return tqdm(total=cfg.max_iters, initial=start, desc=f"{cfg.variant} seed{cfg.seed}", unit="it",
                mininterval=10.0, file=sys.stderr, leave=True)


def _summarize(cfg, rows, eval_rows, diag_rows, diverged_step, model, corpus, device, precision, wall_s,
               world_size: int = 1) -> dict:
    final_eval = eval_rows[-1] if eval_rows and diverged_step is None else {}
    final_tokens = max((r["val_tokens"] for r in eval_rows), default=0)
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
        # over the evaluations that scored the final pass's windows (interim ones on a subset are another estimate)
        "best_val_loss": min((r["val_loss"] for r in eval_rows if r["val_tokens"] == final_tokens),
                             default=float("nan")),
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
        "data_sha256": corpus.sha256,
        **environment_info(),
    }
    if cfg.eval_windows:  # a subset of the validation split (tests, smoke runs): a check that the run works
        summary["comparable"] = False
        summary["evaluated_on"] = (f"{cfg.eval_windows} evenly spaced validation windows, not the whole split: not "
                                   f"comparable with full-split results")
    return summary
