"""Engine v3 (issue 75): many whole runs trained as one batched fleet in one process.

A study's runs that share tensor shapes (layers, width, heads, block, batch, vocabulary, tying, bias and the
validation plan) form one group; everything else may differ per member and is held as a [K] tensor: seed, arm,
learning rate, warm-up, max_iters, betas, weight decay, clipping, init scales. Per group:

- the members' parameters live permanently in one flat [K, P] buffer (gradients in another), built from each
  member's own seeded init (bitwise its single run's initial values); each parameter is a leaf view of it, the
  tied head the same view as the token embedding;
- one explicit batched forward (baddbmm for the linears, attention with the members folded into its batch,
  gather for the embedding, the embedding norm per contiguous segment of members of one arm) gives every
  member's loss without a Python loop over members;
- clipping and AdamW run over the flat buffer with per-member hyperparameters (torch.optim takes one learning
  rate per parameter group); the learning-rate schedule and bias corrections are tables on the device;
- each member's batches come from a table of window starts replayed from its own generator (bitwise the
  batches of its single run), gathered on the device inside the step;
- the step makes no host sync: its readings go to a ring buffer on the device that the host copies at
  evaluation and diagnostics boundaries, so on CUDA the step is captured once as a CUDA graph and replayed.
  A member whose loss or gradient norm stops being finite is frozen (its updates masked to zero) and its run
  ends there; nothing reduces across members, so the others' numbers do not change.

Every member still writes its whole run directory as a single run does (config.json with `execution: fleet`,
metrics/evals/diagnostics, calibration, positions, model.pt, summary.json), so the index, the analysis and the
reports read it unchanged. Numbers follow the single runs to float rounding, not bit for bit (batched matmuls
sum in another order). A fleet is not checkpointed: it takes seconds on a GPU, and an interrupted fleet trains
its unfinished members again from step 0. Metrics rows' `step_ms` is the fleet's mean step time between two
host syncs (the members share it), `eval_s` the time of the batched evaluation pass the member was part of."""
from __future__ import annotations

import bisect
import concurrent.futures
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from ..config import RunConfig
from ..corpora.data import load_corpus
from ..device import Precision, resolve_precision, select_device
from ..errors import ConfigError
from ..records.io import cpu_info, git_commit
from ..records.rundir import RunDir
from ..records.steplog import round_timings
from .checkpoint import Logs, cpu_changed, holding_all, write_config
from .fleet_group import Fleet
from .fleet_ops import (  # noqa: F401 (the fleet's arithmetic, importable from here as before)
    ADAM_EPS,
    EVAL_ELEMENTS_GPU,
    FINISH_THREADS,
    GRAPH_WARMUP_STEPS,
    RING_STEPS,
    SHAPE_FIELDS,
    ArmNorm,
    Layout,
    Members,
    Slot,
    adamw_,
    batch_starts,
    check_fleet_configs,
    clip_,
    fleet_configs,
    fleet_forward,
    fleet_probe,
    groups_of,
    schedule_tables,
    shape_key,
)
from .train import _finish, check_fits_data, lr_at


def _due(interval: int, step: int) -> bool:
    return bool(interval) and step % interval == 0


@dataclass
class MemberRun:
    cfg: RunConfig
    run: RunDir
    logs: Logs
    diverged_step: int | None = None
    final_logits: torch.Tensor | None = None
    finished_at: float | None = None  # fleet seconds when the member's last step (and evaluation) was done

    def done(self, step: int) -> bool:
        return self.diverged_step is not None or step >= self.cfg.max_iters


def _train_group(fleet: Fleet, runs: list[RunDir], echo) -> list[dict]:
    """The host loop: chunks of graph-replayed steps between boundaries (evaluations, diagnostics, the ring's
    size), one read of the ring per chunk, then the boundary's batched work. Returns summaries in fleet order."""
    members = [MemberRun(cfg, run, Logs()) for cfg, run in zip(fleet.cfgs, runs, strict=True)]
    cpu_model, commit = cpu_info()["cpu_model"], git_commit()
    for m in members:  # every check has passed: only now does a directory say which run it holds
        write_config(m.run, m.cfg)
    t0 = time.perf_counter()
    elapsed = lambda: time.perf_counter() - t0  # noqa: E731
    at_init = [k for k, m in enumerate(members) if m.cfg.eval_at_init]
    _evaluate(fleet, members, at_init, 0)
    for k, probed in zip(at_init, fleet.probe(at_init) if at_init else [], strict=True):
        members[k].logs.diagnostics.append({"step": 0, **probed})
    timing = {"steps_s": 0.0, "eval_s": 0.0, "diag_s": 0.0}
    boundaries = sorted({s for m in members for s in range(1, m.cfg.max_iters + 1)
                         if s == m.cfg.max_iters or _due(m.cfg.eval_interval, s) or _due(m.cfg.diag_interval, s)})
    step = 0
    while step < fleet.steps and not all(m.done(step) for m in members):
        step = _chunk(fleet, members, step, boundaries, timing, elapsed)
    train_s = elapsed()
    t = time.perf_counter()
    extra = {"git_commit": commit, "trained_on": [{"from_step": 0, "cpu_model": cpu_model}],
             "execution": "fleet", "fleet_members": fleet.K, "fleet_cuda_graph": fleet.graph is not None}
    extra["cpu_changed_on_resume"] = cpu_changed(extra["trained_on"])
    summaries = _finish_members(fleet, members, train_s, extra)
    timing.update(train_loop_s=train_s, finish_s=time.perf_counter() - t, cuda_graph=fleet.graph is not None,
                  graph_error=fleet.graph_error)
    if echo:
        echo(f"fleet of {fleet.K} ({fleet.cfg.n_layer} x {fleet.cfg.n_embd}, {fleet.steps} steps) on {fleet.device}: "
             + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in timing.items()))
    fleet.timing = timing
    return summaries


def _chunk(fleet: Fleet, members: list[MemberRun], step: int, boundaries: list[int], timing: dict, elapsed) -> int:
    """Steps up to the next boundary (or a ring's worth), their readings logged per member, then the boundary's
    diagnostics and evaluations. Returns the step reached."""
    running = [k for k, m in enumerate(members) if not m.done(step)]
    stop = min(boundaries[bisect.bisect_right(boundaries, step)], step + RING_STEPS)
    diag_due = [k for k in running if _due(members[k].cfg.diag_interval, stop) and stop <= members[k].cfg.max_iters]
    t = time.perf_counter()
    for _ in range(stop - step - (1 if diag_due else 0)):
        fleet.step()
    before = fleet.flat.clone() if diag_due else None
    if diag_due:
        fleet.step()
    readings = fleet.readings(step + 1, stop).tolist()  # the chunk's one host sync
    chunk_s = time.perf_counter() - t
    timing["steps_s"] += chunk_s
    step_ms, wall = chunk_s / (stop - step) * 1e3, elapsed()
    for k in running:
        _log_steps(members[k], readings, k, step, stop, step_ms, wall)
    step = stop
    t = time.perf_counter()
    diag_now = [k for k in diag_due if members[k].diverged_step is None]
    if diag_now:
        for k, row in zip(diag_now, fleet.diagnostics_rows(diag_now, step, before), strict=True):
            members[k].logs.diagnostics.append(row)
    timing["diag_s"] += time.perf_counter() - t
    t = time.perf_counter()
    due = [k for k in running if members[k].diverged_step is None and step <= members[k].cfg.max_iters
           and (_due(members[k].cfg.eval_interval, step) or step == members[k].cfg.max_iters)]
    _evaluate(fleet, members, due, step)
    timing["eval_s"] += time.perf_counter() - t
    for k in due:
        if step == members[k].cfg.max_iters:
            members[k].finished_at = elapsed()
    return step


def _log_steps(m: MemberRun, readings: list, k: int, step: int, stop: int, step_ms: float, wall: float) -> None:
    """A member's metrics rows for steps step+1..stop (its own last step at most); a non-finite loss or gradient
    norm ends its run there (diverged)."""
    for j, s in enumerate(range(step + 1, min(stop, m.cfg.max_iters) + 1)):
        loss, norm, b1 = readings[j][k]
        lr = lr_at(m.cfg, s)
        max_norm = m.cfg.grad_clip if m.cfg.grad_clip > 0 else float("inf")
        m.logs.metrics += round_timings([{"step": s, "tokens": s * m.cfg.tokens_per_iter, "lr": lr, "train_loss": loss,
                                          "grad_norm_total": norm, "clipped": bool(norm > max_norm),
                                          "block1_input_norm": b1, "step_ms": step_ms,
                                          "wall_s": wall - (stop - s) * step_ms / 1e3}])
        if not (math.isfinite(loss) and math.isfinite(norm)):
            m.diverged_step, m.finished_at = s, wall
            break


def _finish_members(fleet: Fleet, members: list[MemberRun], train_s: float, extra: dict) -> list[dict]:
    """Each member's run finished as a single run's is (calibration, weights, logs, summary), in threads."""
    val_y = fleet.val_y.to(fleet.device)
    threads = torch.get_num_threads()

    def finish(k: int) -> dict:
        torch.set_num_threads(threads)  # a new thread starts with the library's default, not this process's
        m = members[k]
        state = SimpleNamespace(logs=m.logs, model=fleet.member_weights(k))
        wall = m.finished_at if m.finished_at is not None else train_s
        try:
            summary = _finish(m.cfg, m.run, state, SimpleNamespace(final_logits=m.final_logits, val_y=val_y),
                              fleet.corpus, fleet.device, fleet.precision, m.diverged_step, wall, 1, extra)
        except RuntimeError:  # calibration on the device failed: the host computes it as a single run does
            if m.final_logits is None or m.final_logits.device.type == "cpu":
                raise
            host = SimpleNamespace(final_logits=m.final_logits.cpu(), val_y=fleet.val_y)
            summary = _finish(m.cfg, m.run, state, host, fleet.corpus, fleet.device, fleet.precision,
                              m.diverged_step, wall, 1, extra)
        m.final_logits = None
        return summary

    # calibration and the files are per member: threads overlap their host work (numpy, scipy, writes)
    workers = min(FINISH_THREADS, os.cpu_count() or 1, fleet.K)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(finish, range(fleet.K)))


def _evaluate(fleet: Fleet, members: list[MemberRun], due: list[int], step: int) -> None:
    """One batched pass per kind over the due members: final (a member's last step: every window, logits kept
    for calibration) and interim (the subset)."""
    for final in (False, True):
        index = [k for k in due if (step == members[k].cfg.max_iters) == final]
        if not index:
            continue
        rows, logits, seconds = fleet.evaluate(index, final)
        for k, row, kept in zip(index, rows, logits, strict=True):
            m = members[k]
            m.logs.evals.append({"step": step, "tokens": step * m.cfg.tokens_per_iter, **row, "eval_s": seconds})
            if final:
                m.final_logits = kept


def train_fleet(cfgs: Sequence[RunConfig], run_dirs: Sequence[str | os.PathLike], data_path=None, *,
                echo=None, cuda_graph: bool = True, timings: list | None = None, out_dir=None) -> list[dict]:
    """Train runs as fleets (one per shape group), each into its own run directory; return their summaries in
    order. Finished members are not retrained; a member with a checkpoint (a partial single or packed run) is
    refused, naming what to do. Every check happens before any directory is written; the job holds every
    member's lock. `timings` (a list) receives each group's split of its wall time."""
    cfgs = list(cfgs)
    if len(run_dirs) != len(cfgs):
        raise ValueError(f"got {len(run_dirs)} run directories for {len(cfgs)} members")
    check_fleet_configs(cfgs)
    runs = [RunDir(Path(d)) for d in run_dirs]
    if len({r.root.resolve() for r in runs}) != len(runs):
        raise ConfigError("invalid fleet: two members share a run directory; allowed: one directory per run")
    partial = [r.root for r in runs if r.checkpoint.is_file() and not r.summary.is_file()]
    if partial:
        raise ConfigError(f"invalid fleet member {partial[0]}: it holds a checkpoint of a partial run; allowed: runs "
                          f"without one (resume that run in its own mode, without --fleet)")
    groups = groups_of(cfgs)
    corpora = {}
    for group in groups:
        cfg = cfgs[group[0]]
        key = (cfg.tokenizer, cfg.corpus_sha256, cfg.train_chars)  # the split point is part of the data (issue 76)
        corpora.setdefault(key, load_corpus(data_path, cfg.tokenizer, cfg.corpus_sha256, cfg.train_chars, out_dir))
        check_fits_data(cfg, corpora[key])
        if corpora[key].tokenizer == "shards":
            raise ConfigError("invalid tokenizer='shards' here; allowed: one run at a time (`run`, the notebook, a "
                              "sweep without --fleet): a fleet holds the ids in memory")
    threads_before = torch.get_num_threads()
    try:
        with holding_all(runs, cfgs) as done:  # a finished member's summary as its seal vouches for it
            for group in groups:
                todo = [i for i in group if i not in done]
                if not todo:
                    continue
                cfg = cfgs[todo[0]]
                if cfg.torch_threads:
                    torch.set_num_threads(cfg.torch_threads)
                device = select_device(cfg.device)
                precision = Precision(resolve_precision(cfg.precision, device), device)
                t = time.perf_counter()
                fleet = Fleet([cfgs[i] for i in todo], corpora[(cfg.tokenizer, cfg.corpus_sha256, cfg.train_chars)], device, precision,
                              cuda_graph)
                setup_s = time.perf_counter() - t
                summaries = _train_group(fleet, [runs[todo[p]] for p in fleet.positions], echo)
                for position, summary in zip(fleet.positions, summaries, strict=True):
                    done[todo[position]] = summary
                if timings is not None:
                    timings.append({"members": fleet.K, "steps": fleet.steps, "shape": f"{cfg.n_layer}x{cfg.n_embd}",
                                    "setup_s": setup_s, **fleet.timing})
            return [done[i] for i in range(len(cfgs))]
    finally:
        torch.set_num_threads(threads_before)
