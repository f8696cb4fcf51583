"""A study's executed run notebooks, packed into one archive: `runs/<study>/notebooks.tar.xz`.

Each finished run's executed 02_train.ipynb (the sweep's record of how the run went; not sealed, not read by any
analysis) is ~9 KB, nine tenths of it the training notebook's own source, the same in every run. Packed per study and
xz-compressed they take ~3% of that (1,175 notebooks: 10.6 MB loose, 0.34 MB packed), which keeps runs/ light enough
to clone (issue 73). Nothing is lost: the archive holds each notebook's bytes at its path under the study, and

    tar -xJf runs/<study>/notebooks.tar.xz -C runs/<study>     # puts every notebook back beside its run

(`read_archived_notebook` reads one from Python). `pack_notebooks` (run by `python -m embnorm_lib.compact_logs`)
moves a study's loose notebooks of finished runs into its archive: a loose notebook replaces its archived copy; the
archive is written atomically and read back before any loose file is deleted, so a kill leaves every notebook in one
place or both. The archive's bytes are a function of the notebooks alone (members sorted, owner, mode and times
fixed), so packing the same notebooks again writes the same file."""
from __future__ import annotations

import io
import json
import lzma
import re
import tarfile
from pathlib import Path

from ..core.errors import RunDirError
from ..core.io import repo_root, write_bytes_if_changed
from ..core.rundir import RunDir, StudyDir, finished_run_dirs
from ..core.writes import atomic_write_bytes

ARCHIVE = "notebooks.tar.xz"
# what an archive may hold: a run's notebook at its path under the study, never a path that leaves it
MEMBER = re.compile(r"(?!\.)[^/\\]+/seed\d+/02_train\.ipynb")


def archive_path(study_root: Path) -> Path:
    return StudyDir(study_root).root / ARCHIVE


def archived_notebooks(study_root: Path) -> dict[str, bytes]:
    """The archive's notebooks: path under the study (`<arm>/seed<k>/02_train.ipynb`) -> bytes ({} without one)."""
    path = archive_path(study_root)
    if not path.is_file():
        return {}
    try:
        with tarfile.open(path, "r:xz") as tar:
            members = tar.getmembers()
            odd = next((m.name for m in members if not (m.isfile() and MEMBER.fullmatch(m.name))), None)
            if odd is None:
                return {m.name: tar.extractfile(m).read() for m in members}
    except (OSError, tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise RunDirError(f"unreadable notebook archive {path} ({type(e).__name__}); allowed: a tar.xz written by "
                          f"compact_logs (restore it from git)") from None
    raise RunDirError(f"notebook archive {path} holds {odd!r}; allowed: only files <arm>/seed<k>/"
                      f"{RunDir(Path()).notebook.name} (restore the archive from git)")


def read_archived_notebook(run_dir: Path) -> bytes | None:
    """A run's executed notebook: the loose file when there is one, else its copy in the study's archive, else None."""
    run = RunDir(Path(run_dir))
    if run.notebook.is_file():
        return run.notebook.read_bytes()
    study_root = run.root.parent.parent
    return archived_notebooks(study_root).get(run.notebook.relative_to(study_root).as_posix())


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
        if not run.notebook.is_file() or run.root in skip:
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
