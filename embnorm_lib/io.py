"""Atomic file writes and provenance (where a result came from)."""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

PACKAGE_DIR = Path(__file__).resolve().parent


def repo_root() -> Path:
    """The checkout this package lives in (editable install), else the current directory."""
    candidate = PACKAGE_DIR.parent
    return candidate if (candidate / "pyproject.toml").is_file() else Path.cwd()


def default_runs_dir() -> Path:
    return repo_root() / "runs"


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> Path:
    from .distributed import current_rank

    if current_rank() != 0:  # under torchrun only rank 0 writes the run directory
        raise RuntimeError(f"rank {current_rank()} tried to write {path}; allowed: rank 0 only")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be read by others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_safe(obj: Any) -> Any:
    """Non-finite floats become null so files stay strict JSON (a diverged run is data, not NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(_json_safe(obj), indent=2, sort_keys=True) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(_json_safe(r), sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def git_commit(cwd: Path | None = None) -> str:
    """HEAD of the checkout, with '-dirty' when tracked files differ; 'unknown' outside git."""
    cwd = cwd or PACKAGE_DIR
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment_info() -> dict[str, str]:
    import numpy
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "argv0": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "",
    }
