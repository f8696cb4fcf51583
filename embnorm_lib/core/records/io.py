"""Paths, locks, JSON files and provenance (where a result came from). How a file is written (atomically, journaled in
a transaction, only when changed) is writes.py; its names are importable from here too."""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RunDirError
from .writes import (  # noqa: F401 (how every file is written; importable from io as before)
    DRAWING_TOLERANCE_PT,
    JOURNAL_DIR,
    STAMP,
    TRANSACTION_ENV,
    RunLock,
    _make_dirs,
    _write_through_temp,
    atomic_write_bytes,
    atomic_write_text,
    is_disk_full,
    rollback_journal,
    same_pdf_drawing,
    save_torch,
    stable_svg,
    transaction,
    write_bytes_if_changed,
    write_figure_if_changed,
    write_text_stable,
)

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # embnorm_lib/ (this file is embnorm_lib/core/records/io.py)


def repo_root() -> Path:
    """The checkout this package lives in (editable install), else the current directory."""
    candidate = PACKAGE_DIR.parent
    return candidate if (candidate / "pyproject.toml").is_file() else Path.cwd()


def default_runs_dir() -> Path:
    return repo_root() / "runs"


def runs_root(out_dir: str | os.PathLike | None = None) -> Path:
    """The runs directory a command works in: `out_dir` when given, else the repository's runs/. Refused in one line
    where something other than a directory (or a path inside a file) is in its place."""
    return directory_option(out_dir, "out_dir") if out_dir else default_runs_dir()


def directory_option(path: str | os.PathLike, what: str) -> Path:
    """A directory a command writes under (--out-dir, --figures-dir), refused in one line where a file stands in its
    place or above it: `--figures-dir /etc/passwd` ran the whole analysis to fail without a word in its notebook."""
    root = Path(path)
    blocked = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise ConfigError(f"invalid {what} {str(path)!r}: {blocked} is a file; allowed: a directory (created "
                          "where missing)")
    return root


def check_out_dir(out_dir: Any) -> Path:
    """A runs directory given as a parameter, refused in one line unless it is text (papermill's `-p out_dir 5` passes
    a number) naming a directory this process can write or make (`/proc/nope` failed deep in training). A missing
    one is probed by making and removing a temporary directory in its nearest existing parent: nothing is left."""
    import tempfile

    if not isinstance(out_dir, (str, os.PathLike)):
        raise ConfigError(f"invalid out_dir={out_dir!r}; allowed: a directory path as text (\"\": the checkout's runs/)")
    root = runs_root(out_dir)
    parent = next(p for p in (root, *root.parents) if p.exists())
    try:
        if parent == root:
            if not os.access(root, os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable")
        else:
            os.rmdir(tempfile.mkdtemp(dir=parent, prefix=".out-dir-probe-"))
    except OSError as e:
        raise ConfigError(f"invalid out_dir {str(out_dir)!r}: cannot write in {parent} ({e.strerror or e}); allowed: "
                          "a directory this user can write (created where missing)") from None
    return root


def path_inside(root: str | os.PathLike, path: str | os.PathLike, what: str) -> Path:
    """`path` (relative to `root`) resolved, symlinks and '..' included; refused in one line when it is absolute or
    lands outside `root`. For every path a command takes from a file or an argument and then writes under."""
    base = Path(root).resolve()
    full = (base / path).resolve()
    if Path(path).is_absolute() or not full.is_relative_to(base) or full == base:
        raise ConfigError(f"invalid {what} {str(path)!r}: it leads outside {root}; allowed: a relative path inside it")
    return full


def default_figures_dir(out_dir: str | os.PathLike | None, name: str) -> Path:
    """Where a report's figures go unless told: the checkout's figures/<name> for the committed runs directory, and
    <out_dir>/figures/<name> for any other, so scratch studies never overwrite committed figures."""
    out = runs_root(out_dir)
    if out.resolve() == default_runs_dir().resolve():
        return repo_root() / "figures" / name
    return out / "figures" / name


def fingerprint(path: str | os.PathLike, length: int = 12) -> str:
    """The first hex digits of a file's sha256: what a figure or report was computed from."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:length]


def shown_path(path: str | os.PathLike) -> str:
    """A path as a reader should see it: relative to the checkout when inside it (no machine's layout leaks)."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(repo_root().resolve()))
    except ValueError:
        return str(path)


def _json_safe(obj: Any) -> Any:
    """Non-finite floats become null so files stay strict JSON (a diverged run is data, not NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


# Numbers that publication writes into committed JSON and CSV files are rounded to this many significant digits.
# numpy's vector kernels (AVX-512 vs AVX2 dispatch) and OpenBLAS's per-CPU kernels can move the 16th digit of a fit or
# a log, so full-precision floats differ between machines; ten digits keep every quoted figure (at most four) exact
# and the bytes the same on every CPU (a value flips only if it sits within ~1e-15 of a rounding boundary).
PUBLISHED_DIGITS = 10


def published_float(value: float, digits: int = PUBLISHED_DIGITS) -> float:
    """`value` rounded to `digits` significant digits (non-finite values pass through)."""
    value = float(value)
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


def published(obj: Any, digits: int = PUBLISHED_DIGITS) -> Any:
    """A JSON-like structure with every float (numpy's too) rounded to `digits` significant digits; what a
    committed JSON file or a report built from it is written from, so it is the same on every CPU."""
    import numpy as np

    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (float, np.floating)):
        return published_float(obj, digits)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, dict):
        return {k: published(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [published(v, digits) for v in obj]
    return obj


def published_csv(frame, digits: int = PUBLISHED_DIGITS) -> str:
    """A table as CSV text with its float columns rounded to `digits` significant digits (see PUBLISHED_DIGITS)."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype.kind == "f":
            frame[column] = frame[column].map(lambda v: published_float(v, digits))
    return frame.to_csv(index=False)


def write_published_json(path: str | os.PathLike, obj: Any) -> Path:
    """write_json of a publication's output: floats rounded to PUBLISHED_DIGITS (the same bytes on every CPU)."""
    return write_json(path, published(obj))


def json_text(obj: Any) -> str:
    """The text write_json writes (so a caller can hash it before writing)."""
    return json.dumps(_json_safe(obj), indent=2, sort_keys=True) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json_text(obj))


def jsonl_text(rows: Iterable[dict]) -> str:
    """Rows as the JSONL text the library writes: a step log converted to Parquet and written out again is its
    original file byte for byte."""
    return "".join(json.dumps(_json_safe(r), sort_keys=True) + "\n" for r in rows)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, jsonl_text(rows))


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """Whether two lists of rows are identical: keys and their order, value types and values (NaN equals NaN, 1 is
    not 1.0 nor True, None is not a missing key)."""
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def _same(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return list(x) == list(y) and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y))
    if isinstance(x, float):
        return x == y and math.copysign(1, x) == math.copysign(1, y) if not math.isnan(x) else math.isnan(y)
    return x == y


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RunDirError(f"malformed JSON in {path} line {number} ({e.msg}); allowed: one JSON object "
                                  f"per line (delete or repair the file)") from None
    return rows


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file, or one line naming the file when it is not valid JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RunDirError(f"malformed JSON in {path} (line {e.lineno}: {e.msg}); allowed: a valid JSON file "
                          f"(delete or repair it)") from None


def git_commit(cwd: Path | None = None) -> str:
    """HEAD of the checkout, with '-dirty' when tracked files other than results differ; outside git, the commit a
    copied tree names in $EMBNORM_SOURCE_COMMIT (a lent GPU gets the working tree without .git), else 'unknown'.
    Results under runs/ do not count: a sweep re-indexes its study's runs.csv after each run, and that made every
    later run of the sweep record '-dirty' although no code had changed."""
    cwd = cwd or PACKAGE_DIR
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                                ":(top,exclude)runs"], cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        named = os.environ.get("EMBNORM_SOURCE_COMMIT", "").strip()
        return f"{named} (copied tree)" if named else "unknown"


# What publication reads from a study besides its run dirs: the index and the sweep log.
INDEX_PATHSPECS = ("*/runs.csv", "*/sweeps.jsonl")


def uncommitted_indexes(runs_dir: Path) -> list[str]:
    """The studies' indexes under a git checkout's runs directory (runs/<study>/runs.csv, and sweeps.jsonl, whose
    sweep wall time runs/README.md reports) that are untracked or differ from HEAD; [] outside git. What is published
    from such an index disagrees with a clean clone."""
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *INDEX_PATHSPECS],
                                cwd=runs_dir, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(line[3:].strip().strip('"') for line in status.splitlines())


def cpu_info() -> dict[str, str]:
    """What decides the last bits of CPU results besides config, seed and threads: the CPU and its caches."""
    import torch

    info = {"cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        fields = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                key, value = line.split(":", 1)
                fields.setdefault(key.strip(), value.strip())
        model = " ".join(fields.get("model name", "").split())
        info["cpu_model"] = f"{model} (family {fields.get('cpu family', '?').strip()}, model "
        info["cpu_model"] += f"{fields.get('model', '?').strip()}, cache {fields.get('cache size', '?').strip()})"
    except OSError:
        info["cpu_model"] = platform.processor() or "unknown"
    return info


def environment_info() -> dict[str, str]:
    import numpy
    import torch

    return {
        **cpu_info(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "argv0": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "",
    }
