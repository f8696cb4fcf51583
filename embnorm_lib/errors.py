"""The errors a user can cause. Each message is one line naming the bad value and what is allowed;
notebooks show these without a traceback (see notebook.brief_errors)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A bad parameter or config value."""


class RunDirError(RuntimeError):
    """A run directory is busy, holds another run, or its files are damaged."""


class DataError(RuntimeError):
    """The corpus is missing, corrupt or cannot be fetched."""


class DiskFullError(OSError):
    """No space left while writing a file; the partial file has been removed."""


BRIEF_ERRORS = (ConfigError, RunDirError, DataError, DiskFullError)
