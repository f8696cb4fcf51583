"""Resume state of a training run: what a checkpoint holds, when it may be resumed, and the logs it needs.

A checkpoint is resumed only by the run that wrote it (same training identity, same torch thread count on
CPU) and only when metrics/evals/diagnostics hold every row up to it; anything else is refused in one line."""
from __future__ import annotations

import contextlib
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config import RunConfig
from ..errors import RunDirError
from ..records.io import RunLock, save_torch, write_json, write_jsonl
from ..records.rundir import RunDir, holds_a_run
from ..records.steplog import COMPACTED, parquet_path, read_step_log, write_parquet_log


class ResumeError(RunDirError):
    """A run directory holds state that does not belong to the requested run."""


@dataclass
class Logs:
    """The per-step rows a run writes: metrics (every step), evals and diagnostics; JSONL while the run trains, and
    metrics and diagnostics as Parquet once it has finished (steplog)."""

    metrics: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    diagnostics: list[dict] = field(default_factory=list)

    def write(self, run: RunDir, final: bool = False) -> None:
        """Every log as JSONL (a checkpoint), or the finished run's logs (`final`). Each file is replaced atomically
        and the other form of a log goes only once the new one is in place, so a kill leaves every log whole."""
        write_jsonl(run.evals, self.evals)
        for name in COMPACTED:
            rows = getattr(self, name)
            if final:
                write_parquet_log(parquet_path(run, name), rows)
                getattr(run, name).unlink(missing_ok=True)
            else:
                write_jsonl(getattr(run, name), rows)
                parquet_path(run, name).unlink(missing_ok=True)  # a finish killed before summary.json, then resumed


@dataclass
class TrainingState:
    """Everything that moves during training; what a checkpoint saves and restores."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: object
    sampler: object
    step: int = 0
    elapsed_before_s: float = 0.0  # train-loop time spent before this process resumed the run
    logs: Logs = field(default_factory=Logs)
    # the CPUs that trained it, each with the step it took over at: a run resumed on another CPU model agrees with
    # an uninterrupted one to float rounding only, so the run says so
    trained_on: list[dict] = field(default_factory=list)


def write_config(run: RunDir, cfg: RunConfig) -> None:
    """config.json: which run the directory holds (written once every check has passed)."""
    write_json(run.config, cfg.to_dict())


def rng_state() -> dict:
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": random.getstate(),
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    random.setstate(tuple(tuple(x) if isinstance(x, list) else x for x in state["python"]))


def load_checkpoint(path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or foreign file: say which and what to do
        raise ResumeError(f"checkpoint {path} is unreadable ({type(e).__name__}); "
                          f"delete it to restart the run from scratch") from None


def save_checkpoint(run: RunDir, cfg: RunConfig, state: TrainingState, elapsed_s: float) -> None:
    save_torch({"config": cfg.to_dict(), "step": state.step, "elapsed_s": elapsed_s,
                "torch_threads": torch.get_num_threads(), "trained_on": state.trained_on,
                "model": state.model.state_dict(), "optimizer": state.optimizer.state_dict(),
                "scaler": state.scaler.state_dict(), "sampler": state.sampler.state_dict(), "rng": rng_state()},
               run.checkpoint)


def check_same_run(run: RunDir, cfg: RunConfig) -> None:
    """Refuse to mix two different runs in one directory."""
    if not run.config.is_file() or not holds_a_run(run):
        return
    old = RunConfig.load(run.config).training_identity()
    new = cfg.training_identity()
    changed = {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
    if changed:
        detail = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
        raise ResumeError(f"run dir {run.root} holds a run with a different config ({detail}); allowed: the same "
                          f"parameters (it resumes, or shows the finished run), another study (-p study NAME, or "
                          f"--study NAME), or delete that directory")


def expected_log_steps(cfg: RunConfig, step: int) -> dict[str, list[int]]:
    """The steps each log holds after a checkpoint at `step` (the final step is never checkpointed)."""
    head = [0] if cfg.eval_at_init else []
    every = lambda k: [s for s in range(1, step + 1) if k and s % k == 0]
    return {"metrics": list(range(1, step + 1)), "evals": head + every(cfg.eval_interval),
            "diagnostics": head + every(cfg.diag_interval)}


def _ranges(steps: list[int]) -> str:
    return f"{steps[0]}..{steps[-1]} ({len(steps)} rows)" if len(steps) > 3 else ", ".join(map(str, steps)) or "none"


def _check_logs_cover(run: RunDir, cfg: RunConfig, step: int, logs: Logs) -> None:
    """A checkpoint is only resumed when the logs hold every row up to it, so the summary is complete."""
    for name, expected in expected_log_steps(cfg, step).items():
        found = [r["step"] for r in getattr(logs, name)]
        if found != expected:
            missing = sorted(set(expected) - set(found))
            detail = f"missing steps {_ranges(missing)}" if missing else f"steps {_ranges(found)} out of order"
            raise ResumeError(f"{name}.jsonl in {run.root} does not cover the checkpoint at step {step} ({detail}); "
                              f"allowed: logs complete up to the checkpoint (delete the run directory to retrain)")


def resume(run: RunDir, cfg: RunConfig, state: TrainingState, device: torch.device) -> None:
    """Restore `state` from the run's checkpoint, if there is one, after checking it belongs to this run."""
    if not run.checkpoint.is_file():
        return
    ckpt = load_checkpoint(run.checkpoint)
    if RunConfig.from_dict(ckpt["config"]).training_identity() != cfg.training_identity():
        raise ResumeError(f"checkpoint {run.checkpoint} was written by a different config; "
                          f"delete it or use another run dir")
    saved_execution = ckpt["config"].get("execution", "single")
    if saved_execution != cfg.execution:
        raise ResumeError(f"checkpoint {run.checkpoint} was written by a {saved_execution} job, this is a "
                          f"{cfg.execution} one; allowed: execution={saved_execution!r} (the modes agree to float "
                          f"rounding, not bit for bit)")
    saved_threads = ckpt.get("torch_threads")
    if device.type == "cpu" and saved_threads is not None and saved_threads != torch.get_num_threads():
        raise ResumeError(f"checkpoint {run.checkpoint} was written with {saved_threads} torch thread(s), this "
                          f"process has {torch.get_num_threads()}; allowed: torch_threads={saved_threads} "
                          f"(CPU results are bitwise reproducible for one thread count only)")
    step = ckpt["step"]
    logs = Logs(*([r for r in read_step_log(run, name) if r["step"] <= step] for name in ("metrics", "evals",
                                                                                          "diagnostics")))
    _check_logs_cover(run, cfg, step, logs)
    state.step, state.elapsed_before_s, state.logs = step, ckpt["elapsed_s"], logs
    state.trained_on = ckpt.get("trained_on") or [{"from_step": 0, "cpu_model": "not recorded"}]
    state.model.load_state_dict(ckpt["model"])
    state.optimizer.load_state_dict(ckpt["optimizer"])
    state.scaler.load_state_dict(ckpt["scaler"])
    state.sampler.load_state_dict(ckpt["sampler"])
    set_rng_state(ckpt["rng"])


def note_machine(run: RunDir, state: TrainingState, cpu_model: str) -> None:
    """Add this process's CPU to the run's record when it differs from the last one (a fresh run: the first), and
    say in one line when a resumed run moves to another CPU model."""
    if state.trained_on and state.trained_on[-1]["cpu_model"] == cpu_model:
        return
    if state.trained_on:
        print(f"note: {run.root} resumes at step {state.step} on another CPU ({cpu_model}; before: "
              f"{state.trained_on[-1]['cpu_model']}): it agrees with an uninterrupted run to float rounding, not bit "
              f"for bit, and its summary.json records both (trained_on)", file=sys.stderr)
    state.trained_on.append({"from_step": state.step, "cpu_model": cpu_model})


def cpu_changed(trained_on: list[dict]) -> bool | None:
    """Whether more than one CPU model trained the run; None where a part of it was trained before CPUs were
    recorded in checkpoints and another CPU took over (unknown)."""
    models = [m["cpu_model"] for m in trained_on]
    if "not recorded" in models and len(models) > 1:
        return None
    return len(set(models)) > 1


@contextlib.contextmanager
def holding(run: RunDir, is_main: bool) -> Iterator[None]:
    """The run directory's lock for the main rank, taken before anything in the directory is looked at or written.
    A refused process removes nothing; the holder, when it leaves the directory holding nothing but its lock (nothing
    was written: an attempt that failed its checks), removes the lock and the directories its own lock call made
    while it still holds the lock, so it never deletes another process's lock or run."""
    if not is_main:
        yield
        return
    lock = RunLock(run.lock)
    if not lock.acquire():
        for d in reversed(lock.created):  # empty directories this refused attempt made (rmdir removes nothing else)
            with contextlib.suppress(OSError):
                d.rmdir()
        raise RunDirError(f"run directory {run.root} is in use by another process (lock {run.lock.name} held); "
                          f"allowed: wait for it to finish, or use another study/out_dir")
    try:
        yield
    finally:
        try:
            if [p.name for p in run.root.iterdir()] == [run.lock.name]:  # leave no trace of an attempt that wrote nothing
                run.lock.unlink()
                for d in (run.root, *reversed(lock.created)):
                    with contextlib.suppress(OSError):
                        d.rmdir()
        finally:
            lock.release()


@contextlib.contextmanager
def holding_all(runs: Sequence[RunDir], cfgs: Sequence[RunConfig]) -> Iterator[dict[int, dict]]:
    """The locks of a job that trains several runs at once (fleet.py): each member's lock taken before its
    directory is judged, and each directory checked to hold the same run; yields the summaries of the members that
    have finished, by position, each verified against its seal (seal.finished_summary: a damaged run is named, never
    passed on as done)."""
    from ..records.seal import finished_summary

    with contextlib.ExitStack() as locks:
        for run, cfg in zip(runs, cfgs, strict=True):
            locks.enter_context(holding(run, True))
            check_same_run(run, cfg)
        yield {i: finished_summary(r) for i, r in enumerate(runs) if r.summary.is_file()}


def elapsed_clock(state: TrainingState) -> Callable[[], float]:
    """Seconds of train loop so far, across resumes."""
    t0 = time.perf_counter()
    return lambda: state.elapsed_before_s + time.perf_counter() - t0
