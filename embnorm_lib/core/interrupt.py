"""Ctrl-C while runs train (issue 70): the loop stops at the next step boundary, checkpoints the last whole step and
raises `Interrupted`, so a run resumes from exactly there (train.py and packed.py train under it). A sweep also takes
SIGTERM as Ctrl-C (`stop_on_terminate`): a background job ignores Ctrl-C, and `kill` or a scheduler sends SIGTERM."""
from __future__ import annotations

import contextlib
import signal
import threading


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run between two steps; its last whole step is checkpointed and it resumes from there."""


class Terminated(KeyboardInterrupt):
    """SIGTERM stopped a sweep, which then stops as on Ctrl-C: its running runs checkpoint, no queued one starts."""


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
    """While a loop trains: Ctrl-C (SIGINT) asks it to stop at the next step boundary instead of raising mid-step.
    A step cut short would leave the optimizer and the logs out of step, so the loop finishes the step, checkpoints
    it and then raises `Interrupted` (`raise_if_stopped`). A second Ctrl-C while the checkpoint is written changes
    nothing. Python delivers signals to the main thread only: elsewhere, under DDP (whose ranks must stop at the same
    step) and where Ctrl-C is ignored, nothing changes."""
    requested: list[int] = []
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if not enabled or previous in (None, signal.SIG_IGN):  # not the main thread, or Ctrl-C ignored (nohup, background)
        yield lambda: False
        return
    signal.signal(signal.SIGINT, lambda signum, frame: requested.append(signum))
    try:
        yield lambda: bool(requested)
    finally:
        signal.signal(signal.SIGINT, previous)


def raise_if_stopped(requested: bool, runs: list) -> None:
    """After a loop that Ctrl-C stopped: `Interrupted`, naming the step checkpointed, unless every run finished."""
    if requested and not all(r.finished for r in runs):
        raise Interrupted(f"stopped by Ctrl-C at step {min(r.state.step for r in runs)} (checkpointed); run it again "
                          f"to resume")
