"""How a file is written: through a temp file and an atomic rename (a failed write leaves nothing behind, a full
disk says so in one line), journaled while a publication's transaction is open (so a failed publication puts every
file back), and, for what publication writes, only when its bytes (or a figure's drawing) changed. Every write of
the library goes through `_write_through_temp`; io.py re-exports these names."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DiskFullError, RunDirError


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> Path:
    from ..training.distributed import (
        current_rank,  # here, not at the top: it loads torch.distributed, which readers skip
    )

    if current_rank() != 0:  # under torchrun only rank 0 writes the run directory
        raise RuntimeError(f"rank {current_rank()} tried to write {path}; allowed: rank 0 only")
    path = Path(path)
    _journal_new_dirs(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be read by others

    return _write_through_temp(path, write)


def _write_through_temp(path: Path, write) -> Path:
    """`write(tmp)` into a uniquely named hidden temp file beside `path`, then an atomic rename. A failed
    write leaves nothing behind; a full disk says so in one line naming the file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        _journal_file(path)
        os.replace(tmp, path)
    except BaseException as e:
        full = is_disk_full(e) or _stream_failed_on_full_disk(e, path.parent)  # while the partial file holds its space
        Path(tmp).unlink(missing_ok=True)
        if full:
            raise DiskFullError(errno.ENOSPC, f"no space left while writing {path}") from None
        raise
    return path


FULL_DISK_BYTES = 16 * 2**20  # free space under which a failed write is taken to have met a full disk


def _stream_failed_on_full_disk(exc: BaseException, directory: Path) -> bool:
    """torch.save's C++ stream reports any failed write as 'basic_ios::clear: iostream error', a full disk, a quota
    or an I/O error alike; it is called a full disk only where the filesystem then has (next to) no space left.
    Otherwise the original error stands: nothing here can tell which of the others it was."""
    if not (isinstance(exc, RuntimeError) and "iostream error" in str(exc)):
        return False
    try:
        return shutil.disk_usage(directory).free < FULL_DISK_BYTES
    except OSError:
        return False


# -- transactions: a publication writes all of its outputs or none ------------------------------------------------
# While a transaction is open, every write through this module first keeps what it replaces (the original file, or
# that there was none, or that its directory did not exist) in the transaction's journal; the journal's directory is
# named in the environment, so notebook kernels and worker processes started inside it journal their writes too. On
# failure every journaled path is put back as it was; a journal left by a killed process is rolled back by the next
# transaction in the same runs directory.
TRANSACTION_ENV = "EMBNORM_TRANSACTION"
JOURNAL_DIR = ".publish.journal"  # under the runs directory (runs/**/.publish.*/ is git-ignored)


def _journal() -> Path | None:
    named = os.environ.get(TRANSACTION_ENV)
    return Path(named) if named else None


def _journal_entry(journal: Path, entry: dict) -> None:
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(journal / "entries.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one short O_APPEND write: lines from concurrent processes do not interleave
        os.fsync(fd)
    finally:
        os.close(fd)


def _journal_new_dirs(directory: Path) -> None:
    journal = _journal()
    if journal is None:
        return
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for d in reversed(missing):  # outermost first: rolled back innermost first
        _journal_entry(journal, {"dir": str(d.resolve())})


def _journal_file(path: Path) -> None:
    """Keep the file `path` holds now (or that it holds none) before it is replaced, once per transaction."""
    import hashlib
    import shutil

    journal = _journal()
    if journal is None:
        return
    target = str(path.resolve())
    backup = journal / hashlib.sha256(target.encode()).hexdigest()
    try:
        fd = os.open(backup.with_suffix(".claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return  # already journaled in this transaction: its original is kept
    os.close(fd)
    existed = path.is_file()
    if existed:
        shutil.copy2(path, backup)
    _journal_entry(journal, {"path": target, "existed": existed, "backup": backup.name})


def rollback_journal(journal: Path) -> int:
    """Put every path a transaction wrote back as it was; returns how many were restored or removed."""
    entries_file = journal / "entries.jsonl"
    entries = [json.loads(line) for line in entries_file.read_text().splitlines() if line.strip()] \
        if entries_file.is_file() else []
    undone = 0
    for entry in reversed(entries):
        if "path" in entry:
            path = Path(entry["path"])
            if entry["existed"]:
                os.replace(_copy_beside(journal / entry["backup"], path), path)
            else:
                path.unlink(missing_ok=True)
            undone += 1
        else:
            try:
                Path(entry["dir"]).rmdir()  # only if empty: nothing else was put there meanwhile
            except OSError:
                pass
    return undone


def _copy_beside(source: Path, path: Path) -> Path:
    import shutil

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    shutil.copy2(source, tmp)
    return Path(tmp)


def _clear_journal(journal: Path) -> None:
    for item in journal.iterdir():
        if item.name != "lock":
            item.unlink()


@contextlib.contextmanager
def transaction(runs_dir: str | os.PathLike, echo=None) -> Iterator[None]:
    """All or nothing for the outputs written inside (by this process and those it starts): on an exception every
    file written is put back as it was and every directory created is removed, then the exception goes on. One
    transaction per runs directory at a time (a second is refused in one line); inside one, a nested call joins it."""
    if _journal() is not None:
        yield
        return
    if not Path(runs_dir).is_dir():
        raise RunDirError(f"no runs directory {runs_dir}; allowed: an existing directory of studies")
    journal = Path(runs_dir) / JOURNAL_DIR
    journal.mkdir(exist_ok=True)
    with RunLock(journal / "lock", what="publication journal"):
        if any(p.name != "lock" for p in journal.iterdir()):  # a publication killed part-way: undo it first
            undone = rollback_journal(journal)
            (echo or (lambda text: print(text, file=sys.stderr)))(
                f"note: rolled back {undone} file(s) a publication left half-written in {Path(runs_dir)}")
            _clear_journal(journal)
        os.environ[TRANSACTION_ENV] = str(journal.resolve())
        try:
            yield
        except BaseException:
            rollback_journal(journal)  # should this fail, the journal stays for the next transaction to finish
            _clear_journal(journal)
            raise
        else:
            _clear_journal(journal)
        finally:
            del os.environ[TRANSACTION_ENV]


def write_bytes_if_changed(path: str | os.PathLike, payload: bytes) -> Path:
    """Atomic write, skipped when the file already holds exactly these bytes (no churn, same mtime)."""
    path = Path(path)
    if path.is_file() and path.read_bytes() == payload:
        return path
    return atomic_write_bytes(path, payload)


# A PDF's streams and the numbers in them. numpy's vector code differs between CPUs (AVX-512 vs AVX2), which can move
# the sixth decimal of a coordinate that matplotlib writes into a figure's PDF; the drawing is the same.
_PDF_STREAM = re.compile(rb"stream\r?\n(.*?)\r?\nendstream", re.S)
_PDF_NUMBER = re.compile(rb"[-+]?(?:\d+\.\d*|\.\d+|\d+)")
DRAWING_TOLERANCE_PT = 1e-3  # a thousandth of a point: far below what any viewer or printer can show


def _pdf_parts(payload: bytes) -> tuple[bytes, list[bytes]]:
    """A PDF as its skeleton with every number masked (object numbers, stream lengths and byte offsets shift when a
    stream's size does) and its streams, inflated where compressed."""
    streams = []

    def take(match):
        data = match.group(1)
        try:
            data = zlib.decompress(data)
        except zlib.error:
            pass  # not Flate-compressed: compared as it is
        streams.append(data)
        return b"stream endstream"

    skeleton = _PDF_STREAM.sub(take, payload)
    return _PDF_NUMBER.sub(b"#", skeleton), streams


def same_pdf_drawing(old: bytes, new: bytes, tolerance: float = DRAWING_TOLERANCE_PT) -> bool:
    """Whether two PDFs draw the same thing: the same objects and streams, every number in a stream within
    `tolerance` of the other's and everything else identical."""
    (skeleton_old, streams_old), (skeleton_new, streams_new) = _pdf_parts(old), _pdf_parts(new)
    if skeleton_old != skeleton_new or len(streams_old) != len(streams_new):
        return False
    for a, b in zip(streams_old, streams_new, strict=True):
        if a == b:
            continue
        if _PDF_NUMBER.sub(b"#", a) != _PDF_NUMBER.sub(b"#", b):
            return False
        if any(abs(float(x) - float(y)) > tolerance
               for x, y in zip(_PDF_NUMBER.findall(a), _PDF_NUMBER.findall(b), strict=True)):
            return False
    return True


def write_figure_if_changed(path: str | os.PathLike, payload: bytes) -> Path:
    """write_bytes_if_changed for a figure file: a PDF that draws the same as the file already there (numbers within
    a thousandth of a point) keeps the old bytes, so re-publishing unchanged runs on another CPU changes no
    committed figure. Other formats compare bytes."""
    path = Path(path)
    if path.suffix == ".pdf" and path.is_file() and same_pdf_drawing(path.read_bytes(), payload):
        return path
    return write_bytes_if_changed(path, payload)


# matplotlib names an SVG's clip paths and markers by a hash of their full-precision coordinates ("p9532a65a20"),
# and those coordinates move in the last bit between CPUs even where every drawn number is the same.
_SVG_HASHED_ID = re.compile(rb'id="([a-z])([0-9a-f]{10})"')


def stable_svg(payload: bytes) -> bytes:
    """An SVG from matplotlib with its hashed ids renamed in order of appearance (p_0, m_1, ...), so the file depends
    on what is drawn, not on the last bits of a clip rectangle."""
    names: dict[bytes, bytes] = {}
    for match in _SVG_HASHED_ID.finditer(payload):
        names.setdefault(match.group(1) + match.group(2), match.group(1) + b"_%d" % len(names))
    if not names:
        return payload
    pattern = re.compile(b"|".join(re.escape(old) for old in names))
    return pattern.sub(lambda m: names[m.group(0)], payload)


# "at commit 0123456789ab" names the code that produced an output. When nothing else in the output
# changed, the file keeps the commit that first produced it (still true: that commit produces it too).
# the commit a page or a record was written at: a report's "at commit …" line, a JSON record's "commit" key
# one pattern, valid both as a Python regex and as the POSIX extended one `git diff -I` takes (check_reports)
STAMP_PATTERN = r'(at commit |"commit": ")[0-9a-f]{7,40}(-dirty)?'
STAMP = re.compile(STAMP_PATTERN)


def write_text_stable(path: str | os.PathLike, text: str) -> Path:
    """Write text unless the file differs from it only in its commit stamps (STAMP)."""
    path = Path(path)
    if path.is_file():
        old = path.read_text()
        if STAMP.sub(r"\1", old) == STAMP.sub(r"\1", text):
            return path
    return atomic_write_text(path, text)


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC, or torch.save's wording of it ('enforce fail at inline_container.cc ... file write failed')."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("inline_container" in text or "file write failed" in text
                                              or "No space left" in text)


def save_torch(obj: Any, path: str | os.PathLike) -> Path:
    """torch.save through a uniquely named temp file in the same directory, then an atomic rename.
    A failed write leaves nothing behind; a full disk says so in one line."""
    import torch

    return _write_through_temp(Path(path), lambda tmp: torch.save(obj, tmp))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _make_dirs(directory: Path) -> list[Path]:
    """mkdir -p that returns the directories this call made itself (another process may make some at the same time:
    only an os.mkdir that succeeded counts)."""
    made = []
    for d in reversed([d for d in (directory, *directory.parents) if not d.is_dir()]):
        try:
            os.mkdir(d)
            made.append(d)
        except FileExistsError:
            pass
    return made


class RunLock:
    """An exclusive flock on one lock file; released when the process dies, so it never goes stale.

    `with RunLock(path):` refuses at once if another process holds it (one line, naming the file);
    `acquire()` returns False instead. With `leave_no_file`, a lock file this lock made is removed again on release:
    for a process that only looks at, or briefly holds, a run another process owns. `held_elsewhere()` asks."""

    def __init__(self, path: str | os.PathLike, what: str = "run directory", leave_no_file: bool = False):
        self.path, self.what, self.fd, self.leave_no_file = Path(path), what, None, leave_no_file
        self.created: list[Path] = []  # the directories this call's own mkdir made, outermost first
        self._made_file = False

    def held_elsewhere(self) -> bool:
        """Whether another process holds this lock now; asking leaves no lock file or directory behind."""
        if not self.path.parent.is_dir():
            return False
        probe = RunLock(self.path, self.what, leave_no_file=True)
        if not probe.acquire():
            return True
        probe.release()
        return False

    def acquire(self) -> bool:
        self._made_file = self.leave_no_file and not self.path.exists()
        for attempt in range(3):
            self.created = _make_dirs(self.path.parent)
            try:
                self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
                break
            except FileNotFoundError:  # a directory was removed (left empty by another attempt) in between: again
                if attempt == 2:
                    raise
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            return False

    def release(self) -> None:
        if self.fd is not None:
            if self._made_file:  # removed while still held, so no other process locks a file on its way out
                self.path.unlink(missing_ok=True)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunLock:
        if not self.acquire():
            raise RunDirError(f"{self.what} {self.path.parent} is in use by another process (lock {self.path.name} "
                              f"held); allowed: wait for it to finish, or use another study/out_dir")
        return self

    def __exit__(self, *exc) -> None:
        self.release()
