"""A study's executed run notebooks, packed into one archive: `runs/<study>/notebooks.tar.xz`.

Each finished run's executed 02_train.ipynb (the sweep's record of how the run went; not sealed, not read by any
analysis) is ~9 KB, nine tenths of it the training notebook's own source, the same in every run. Packed per study and
xz-compressed they take ~3% of that (1,175 notebooks: 10.6 MB loose, 0.34 MB packed), which keeps runs/ light enough
to clone (issue 73). Nothing is lost: the archive holds each notebook's bytes at its path under the study, and

    python -m embnorm_lib extract-notebooks <study>     # puts every notebook back beside its run

(`read_archived_notebook` reads one from Python). Read or extracted, an archive is held to the rules it was written
by: regular files at `<arm>/seed<k>/02_train.ipynb` only (no link, no absolute or '..' path), each name once, at most
MAX_NOTEBOOK_BYTES a notebook and MAX_ARCHIVE_BYTES in all; extraction writes no file through a symbolic link and
keeps a loose notebook (newer than its archived copy) as it is. `tar -x` would follow none of these rules: a crafted
archive's link let a later run write its whole run directory outside the tree (issue 117). `pack_notebooks` (run by `python -m embnorm_lib compact-logs`)
moves a study's loose notebooks of finished runs into its archive: a loose notebook replaces its archived copy; the
archive is written atomically and read back before any loose file is deleted, so a kill leaves every notebook in one
place or both. The archive's bytes are a function of the notebooks alone (members sorted, owner, mode and times
fixed), so packing the same notebooks again writes the same file."""
from __future__ import annotations

import argparse
import io
import json
import lzma
import os
import re
import stat
import sys
import tarfile
from pathlib import Path

from ..core.errors import ConfigError, RunDirError, entry
from ..core.records.io import repo_root, runs_root, shown_path, write_bytes_if_changed
from ..core.records.rundir import RunDir, StudyDir, existing_study, finished_run_dirs
from ..core.records.writes import atomic_write_bytes

ARCHIVE = "notebooks.tar.xz"
# what an archive may hold: a run's notebook at its path under the study, never a path that leaves it
MEMBER = re.compile(r"(?!\.)[^/\\\s]+/seed\d+/02_train\.ipynb")
# An executed notebook is ~9 KB, a committed archive's notebooks ~11 MB in all; a crafted archive of 156 KB held
# 1 GiB, which the reader loaded into memory. The caps bound what reading or extracting one can cost.
MAX_NOTEBOOK_BYTES = 16 * 10**6
MAX_ARCHIVE_BYTES = 256 * 10**6
MAX_NOTEBOOKS = 100_000  # a study's runs (the largest committed archive holds 120); bounds the headers kept in memory


def archive_path(study_root: Path) -> Path:
    return StudyDir(study_root).root / ARCHIVE


def archived_notebooks(study_root: Path) -> dict[str, bytes]:
    """The archive's notebooks: path under the study (`<arm>/seed<k>/02_train.ipynb`) -> bytes ({} without one)."""
    path = archive_path(study_root)
    if not path.is_file():
        return {}
    try:
        with tarfile.open(path, "r:xz") as tar:
            members = _checked_members(tar, path)
            return {m.name: tar.extractfile(m).read() for m in members}
    except (OSError, tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise RunDirError(f"unreadable notebook archive {path} ({type(e).__name__}); allowed: a tar.xz written by "
                          f"compact_logs (restore it from git)") from None


def _checked_members(tar: tarfile.TarFile, path: Path) -> list[tarfile.TarInfo]:
    """The archive's members, each checked as its header is read (before any data is): a regular file at a run's
    notebook path, a name not seen before, within the caps. A duplicate name was read as its last copy."""
    members: list[tarfile.TarInfo] = []
    names: set[str] = set()
    for m in tar:
        total = m.offset_data + m.size  # the uncompressed bytes read so far, headers included
        if not (m.isfile() and MEMBER.fullmatch(m.name) and m.name.isprintable()):
            why = f"holds {m.name!r}; allowed: only files <arm>/seed<k>/{RunDir(Path()).notebook.name}"
        elif m.name in names:
            why = f"holds {m.name!r} twice; allowed: each notebook once"
        elif m.size > MAX_NOTEBOOK_BYTES or total > MAX_ARCHIVE_BYTES:
            why = (f"holds {m.name!r} of {m.size:,} bytes ({total:,} uncompressed so far); allowed: at most "
                   f"{MAX_NOTEBOOK_BYTES:,} bytes a notebook and {MAX_ARCHIVE_BYTES:,} in all")
        elif len(members) >= MAX_NOTEBOOKS:
            why = f"holds more than {MAX_NOTEBOOKS:,} notebooks; allowed: at most {MAX_NOTEBOOKS:,}"
        else:
            members.append(m)
            names.add(m.name)
            continue
        raise RunDirError(f"notebook archive {path} {why} (restore the archive from git)")
    return members


def read_archived_notebook(run_dir: Path) -> bytes | None:
    """A run's executed notebook: the loose file when there is one, else its copy in the study's archive, else None."""
    run = RunDir(Path(run_dir))
    if run.notebook.is_file():
        return run.notebook.read_bytes()
    study_root = run.root.parent.parent
    return archived_notebooks(study_root).get(run.notebook.relative_to(study_root).as_posix())


def _open_dir(name: str | Path, shown: Path, dir_fd: int | None = None) -> int | None:
    """A directory opened without following a symbolic link (None where it is missing): what is written inside it
    through its descriptor can land nowhere else, whatever is swapped in on the way."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a link; ENOTDIR: a file
        raise RunDirError(f"{shown} is a symbolic link or not a directory ({e.strerror}); allowed: the study's own "
                          "directories (nothing is written through a link)") from None


def _put_back(seed_fd: int, name: str, payload: bytes, shown: Path, write: bool) -> bool:
    """One notebook written into its run directory (False: a notebook is there already, kept as the newer copy;
    `write` False: only checked). The bytes go to a new hidden file, then are linked in under their name, which fails
    rather than replace anything."""
    try:
        st = os.stat(name, dir_fd=seed_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise RunDirError(f"{shown} is a symbolic link or not a file; allowed: a regular file or none (nothing is "
                              "written through a link)")
        return False
    if not write:
        return True
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=seed_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, name, src_dir_fd=seed_fd, dst_dir_fd=seed_fd, follow_symlinks=False)
    finally:
        os.unlink(tmp, dir_fd=seed_fd)
    return True


def extract_notebooks(study_root: Path) -> tuple[int, int, int]:
    """Put the archive's notebooks back beside their runs, as `tar -x` did but by the archive's rules (see the module
    docstring): the archive and every target checked before anything is written; no file written through a link; a
    loose notebook kept. Returns (notebooks written, already there, without a run directory: not written)."""
    study_root = Path(study_root)
    notebooks = archived_notebooks(study_root)
    root_fd = _open_dir(study_root, study_root)
    if root_fd is None:
        raise RunDirError(f"no study directory {study_root}; allowed: a study with run directories")
    try:
        _extract_into(root_fd, study_root, notebooks, write=False)  # a link anywhere refuses the whole extraction
        return _extract_into(root_fd, study_root, notebooks, write=True)
    finally:
        os.close(root_fd)


def _extract_into(root_fd: int, study_root: Path, notebooks: dict[str, bytes], write: bool) -> tuple[int, int, int]:
    counts = [0, 0, 0]
    for member, payload in sorted(notebooks.items()):
        arm, seed, name = member.split("/")
        arm_fd = _open_dir(arm, study_root / arm, root_fd)
        seed_fd = _open_dir(seed, study_root / arm / seed, arm_fd) if arm_fd is not None else None
        try:
            if seed_fd is None:
                counts[2] += 1  # its run is gone: a notebook alone would not make one
            else:
                counts[0 if _put_back(seed_fd, name, payload, study_root / member, write) else 1] += 1
        finally:
            for fd in (seed_fd, arm_fd):
                if fd is not None:
                    os.close(fd)
    return counts[0], counts[1], counts[2]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Put a study's archived executed notebooks (notebooks.tar.xz) back "
                                            "beside their runs; a notebook already there is kept.")
    p.add_argument("study")
    p.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    study_root = existing_study(runs_root(args.out_dir), args.study, "extract-notebooks")
    if not archive_path(study_root).is_file():
        raise ConfigError(f"invalid study {args.study!r} for extract-notebooks: no {shown_path(archive_path(study_root))}"
                          "; allowed: a study whose notebooks compact-logs packed")
    written, kept, orphans = extract_notebooks(study_root)
    print(f"{written} notebook(s) put back beside their runs in {shown_path(study_root)}; {kept} already there (kept)"
          + (f"; {orphans} without a run directory (not written)" if orphans else ""))
    return 0


def archive_bytes(notebooks: dict[str, bytes]) -> bytes:
    """The archive of `notebooks` (path -> bytes): the same bytes for the same notebooks."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(notebooks):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode, info.uid, info.gid = len(notebooks[name]), 0, 0o644, 0, 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(notebooks[name]))
    return lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, preset=9)


def pack_notebooks(study_root: Path, skip: set[Path] = frozenset()) -> tuple[int, int, int]:
    """Move the loose executed notebooks of a study's finished runs into its archive (see the module docstring); a
    run whose cell a sweep holds, or one in `skip` (refused as damaged), is left as it is. Returns (notebooks packed,
    their loose bytes, archive bytes)."""
    study_root = Path(study_root)
    loose: dict[str, Path] = {}
    for run in finished_run_dirs(study_root):
        if run.root in skip:
            continue
        if run.notebook.is_symlink():  # packing it would read whatever the link points at into the archive
            raise RunDirError(f"run {run.root}: {run.notebook.name} is a symbolic link; allowed: the executed notebook "
                              "a sweep wrote, as a regular file (remove the link)")
        if not run.notebook.is_file():
            continue
        if run.cell_lock().held_elsewhere():
            continue  # a sweep still owns the cell: it may rewrite the notebook
        loose[run.notebook.relative_to(study_root).as_posix()] = run.notebook
    if not loose:
        return 0, 0, archive_path(study_root).stat().st_size if archive_path(study_root).is_file() else 0
    notebooks = {**archived_notebooks(study_root), **{name: path.read_bytes() for name, path in loose.items()}}
    payload = archive_bytes(notebooks)
    atomic_write_bytes(archive_path(study_root), payload)
    back = archived_notebooks(study_root)
    if back != notebooks:
        raise RunDirError(f"the notebook archive {archive_path(study_root)} does not read back as the notebooks "
                          f"packed into it; no loose notebook was deleted (report this with the file)")
    loose_bytes = sum(path.stat().st_size for path in loose.values())
    for path in loose.values():
        path.unlink()
    return len(loose), loose_bytes, len(payload)


FIGURE_NOT_KEPT = ("[figure not kept with the run: redraw it from its step logs with "
                   "plots.plot_run(notebook.run_table(run_dir), notebook.eval_table(run_dir))]")


def papermill_paths_relative(record: dict, checkout: Path) -> bool:
    """Papermill's record of a notebook (`metadata.papermill`) with its absolute input and output paths inside
    `checkout` written relative to it, in place: where the checkout sits is the machine's, not the run's. True if
    any changed."""
    changed = False
    for key in ("input_path", "output_path"):
        where = record.get(key)
        if isinstance(where, str) and Path(where).is_absolute() and Path(where).resolve().is_relative_to(
                Path(checkout).resolve()):
            record[key] = Path(where).resolve().relative_to(Path(checkout).resolve()).as_posix()
            changed = True
    return changed


def slim_notebook(path: Path) -> bool:
    """Keep an executed run notebook small and readable as saved: its figures (most of its bytes) are redrawn from the
    run's logs at will, so each becomes one line saying how; a table shown both as HTML and as text keeps the text
    (the same rows); consecutive prints to one stream become one output with carriage returns applied as a terminal
    shows them (a progress bar keeps its last state, not "0%"); the kernel client's per-cell iopub timestamps go, and
    of papermill's per-cell record the duration stays (with the exception and status where a cell failed). Text
    outputs and errors stay; papermill's input and output paths are written relative to the checkout. Saved as compact JSON (a valid notebook: Jupyter and nbformat read it; it is a record, not
    edited by hand), a third of nbformat's indented form. True if the file changed."""
    import nbformat
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    before = path.read_bytes()
    nb = nbformat.reads(before.decode(), as_version=4)
    coalesce = CoalesceStreamsPreprocessor()
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        record = cell.metadata.get("papermill")
        if record:
            failed = record.get("exception") or record.get("status") not in (None, "completed")
            keep = ("duration", "exception", "status") if failed else ("duration",)
            cell.metadata["papermill"] = {k: record[k] for k in keep if k in record}
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if any(k.startswith("image/") for k in data):
                out["data"] = {"text/plain": FIGURE_NOT_KEPT}
            elif "text/html" in data and "text/plain" in data:
                del data["text/html"]
        coalesce.preprocess_cell(cell, {}, index)
    nb.metadata.pop("widgets", None)  # a widget's saved state: stale as soon as the kernel is gone
    papermill_paths_relative(nb.metadata.get("papermill", {}), repo_root())
    after = (json.dumps(nbformat.v4.nbjson.strip_transient(nb), sort_keys=True, separators=(",", ":"),
                        ensure_ascii=False) + "\n").encode()
    if after != before:
        write_bytes_if_changed(path, after)
    return after != before


if __name__ == "__main__":
    sys.exit(entry(main))
