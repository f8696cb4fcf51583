"""Ctrl-C while runs train (issue 70): the loop stops at the next step boundary, checkpoints the last whole step and
raises `Interrupted`, so a run resumes from exactly there (train.py and fleet.py train under it); SIGTERM does the
same where nobody else handles it. A sweep also takes SIGTERM as Ctrl-C (`stop_on_terminate`): a background job
ignores Ctrl-C, and `kill` or a scheduler (Slurm) sends SIGTERM."""
from __future__ import annotations

import contextlib
import signal
import threading


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run between two steps; its last whole step is checkpointed and it resumes from there."""


class Terminated(KeyboardInterrupt):
    """SIGTERM stopped a sweep, which then stops as on Ctrl-C: its running runs checkpoint, no queued one starts."""


class TerminatedRun(Interrupted, Terminated):
    """SIGTERM stopped a run between two steps, as Ctrl-C would have; the shell sees SIGTERM's exit code (143)."""


@contextlib.contextmanager
def stop_on_terminate():  # noqa: ANN201 (a context without a value)
    """While a sweep runs: SIGTERM raises `Terminated` in the main thread, which takes Ctrl-C's path. A sweep started
    in the background (`nohup ... &`) has Ctrl-C ignored, so `kill PID` is how it is stopped, and a scheduler (Slurm)
    sends SIGTERM before it kills; without this, both would lose every running run's steps since its last periodic
    checkpoint. Later SIGTERMs are ignored while the runs checkpoint. Left alone where SIGTERM is not the default
    (ignored or handled by whoever started this process) or off the main thread."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not \
            signal.SIG_DFL:
        yield
        return

    def terminated(signum, frame) -> None:  # noqa: ANN001 (a signal handler's frame)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated("terminated (SIGTERM)")

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def stop_on_interrupt(enabled: bool = True):  # noqa: ANN201 (yields the predicate `requested`)
    """While a loop trains: Ctrl-C (SIGINT) or SIGTERM asks it to stop at the next step boundary instead of raising
    mid-step. A step cut short would leave the optimizer and the logs out of step, so the loop finishes the step,
    checkpoints it and then raises `Interrupted` (`raise_if_stopped`); the predicate returns the signal's number, 0
    until one comes. A second signal while the checkpoint is written changes nothing. SIGINT is taken unless it is
    ignored (a background job); SIGTERM only where it is the default, so a sweep's own handler or a caller's choice
    stands. Python delivers signals to the main thread only: elsewhere and under DDP (whose ranks must stop at the
    same step; torchrun terminates them together) nothing changes."""
    requested: list[int] = []
    taken = []
    if enabled and threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) not in (None, signal.SIG_IGN):
            taken.append(signal.SIGINT)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            taken.append(signal.SIGTERM)
    previous = {signum: signal.getsignal(signum) for signum in taken}
    for signum in taken:
        signal.signal(signum, lambda signum, frame: requested.append(signum))
    try:
        yield lambda: requested[0] if requested else 0
    finally:
        for signum in taken:
            signal.signal(signum, previous[signum])


def raise_if_stopped(requested: int, runs: list) -> None:
    """After a loop that a signal stopped: `Interrupted` (`TerminatedRun` for SIGTERM), naming the step checkpointed,
    unless every run finished."""
    if requested and not all(r.finished for r in runs):
        step = min(r.state.step for r in runs)
        if requested == signal.SIGTERM:
            raise TerminatedRun(f"stopped by SIGTERM at step {step} (checkpointed); run it again to resume")
        raise Interrupted(f"stopped by Ctrl-C at step {step} (checkpointed); run it again to resume")
