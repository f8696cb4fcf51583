"""The errors a user can cause. Each message is one line naming the bad value and what is allowed;
notebooks show these without a traceback (see notebook.brief_errors), command lines too (`entry`)."""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from .training.interrupt import Interrupted, Terminated


class ConfigError(ValueError):
    """A bad parameter or config value."""


class RunDirError(RuntimeError):
    """A run directory is busy, holds another run, or its files are damaged."""


class DataError(RuntimeError):
    """The corpus is missing, corrupt or cannot be fetched."""


class DiskFullError(OSError):
    """No space left while writing a file; the partial file has been removed."""


BRIEF_ERRORS = (ConfigError, RunDirError, DataError, DiskFullError)


def entry(main: Callable[[list[str]], int], argv: Sequence[str] | None = None, trains: bool = False) -> int:
    """A command line's `main` as the shell sees it: any error becomes one line `error: ...` and exit code 2 (one the
    user can cause names the bad value and what is allowed; anything else says to rerun with --debug), Ctrl-C exit
    code 130 (SIGTERM, which a run and a sweep take as Ctrl-C: 143). `--debug`, anywhere in the arguments, shows the
    traceback instead. `trains`: the command trains runs, so an interrupt says they resume from their checkpoints (a
    run's own `Interrupted` names the step it checkpointed); other commands say only that they were stopped."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        return main(args)
    except KeyboardInterrupt as e:
        if debug:
            raise
        terminated = isinstance(e, Terminated)
        what = "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)"
        if isinstance(e, Interrupted) and str(e):  # "stopped by Ctrl-C at step N (checkpointed); run it again ..."
            what = str(e).splitlines()[0]
        elif trains:
            what += "; a run that was training resumes from its last checkpoint"
        print(f"error: {what}", file=sys.stderr)
        return 143 if terminated else 130
    except Exception as e:  # the point: no traceback unless asked for
        if debug:
            raise
        text = (str(e).splitlines() or [""])[0][:500]
        if isinstance(e, (*BRIEF_ERRORS, ValueError, OSError)):
            print(f"error: {text or type(e).__name__}", file=sys.stderr)
        else:
            print(f"error: {type(e).__name__}: {text} (unexpected; rerun with --debug for the traceback)",
                  file=sys.stderr)
        return 2

