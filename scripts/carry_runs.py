"""Carry unfinished runs from one checkout to the next (a CPU session ends; the next one gets a fresh work tree).

    python scripts/carry_runs.py save /work/carry      # near a session's end: copy every unfinished run directory
    python scripts/carry_runs.py restore /work/carry   # in the next checkout, before any sweep: put them back
    python scripts/carry_runs.py list /work/carry      # what a carry folder holds, touches nothing
    python scripts/carry_runs.py land /work/wt-ladder17 --study ladder-data   # a worktree's finished runs, into here

A run directory with a checkpoint (`ckpt.pt`) and no `summary.json` is unfinished. Checkpoints are never committed,
so in a fresh clone such a run starts over; on this project's CPU a rung-4 run of the ladder takes about 2.6 hours
on one thread, which leaves little of a 3-hour session for anything else. The folder given must lie outside the work
tree (a machine may be handed on with its work tree laid anew and the rest kept; nothing says it will be).

`save` copies each unfinished run's files, checkpoint first (so the logs copied after it cover its step even while
the run goes on training), into FOLDER/<path in the repository>/, and writes FOLDER/carry.json: the commit, and per
run its checkpoint's step and sha256. A new save replaces the whole folder, never half of it. `restore` puts a carried
run back only where this checkout has not finished it, holds no checkpoint at or past the carried step, and holds no
config.json that differs from the carried one; the checkpoint's sha256 must match, and the run's own lock is held
while its files are written. A restored run resumes bit for bit (`checkpoint.resume` checks its config, threads and
logs), so carrying it changes no result. Exit code 1 when any carried run could not be put back.

`land SOURCE` brings the finished runs that another checkout of this repository trained (a worktree at a fixed commit,
as the ladders run) into this one: each finished run under SOURCE/runs that this checkout lacks, when its seal verifies,
a sweep no longer owns its cell, and its recorded commit is clean and in this checkout's history. It copies the sealed
files, the manifest and the executed notebook (never a checkpoint, weights or a lock), with papermill's input and output
paths written relative to SOURCE (the sweep of an older commit wrote them absolute: a machine's path in a committed
record), into a staging folder, verifies the copy against its seal and only then moves it into place. Exit code 1 when
any run was refused; then `compact-logs`, `sweep STUDY --index-only` and `publish STUDY` as printed.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from embnorm_lib.core.corpora.data import sha256_of  # noqa: E402
from embnorm_lib.core.errors import ConfigError, RunDirError  # noqa: E402
from embnorm_lib.core.records.io import RunLock, git_commit, path_inside  # noqa: E402
from embnorm_lib.core.records.rundir import LOCK_FILES, RunDir  # noqa: E402
from embnorm_lib.core.records.seal import NOT_SEALED, SealError, verify_run  # noqa: E402
from embnorm_lib.core.training.checkpoint import load_checkpoint  # noqa: E402  (weights_only=True; an unreadable file says so)
from embnorm_lib.runner.notebook_archive import papermill_paths_relative  # noqa: E402

MANIFEST = "carry.json"
CHECKPOINT = RunDir(Path()).checkpoint.name


def checkpoint_step(path: Path) -> int:
    return int(load_checkpoint(path)["step"])


def unfinished_runs(repo: Path) -> list[RunDir]:
    """Run directories under repo/runs holding a checkpoint but no summary, in path order."""
    runs = repo / "runs"
    found = sorted(ckpt.parent for ckpt in runs.rglob(CHECKPOINT)) if runs.is_dir() else []
    return [run for run in map(RunDir, found) if not run.summary.is_file()]


def check_outside(repo: Path, folder: Path) -> None:
    if folder.resolve().is_relative_to(repo.resolve()):
        raise SystemExit(f"carry folder {folder} lies inside the checkout {repo}; allowed: a folder outside it "
                         f"(the work tree is what a new session does not keep)")


def check_replaceable(folder: Path) -> None:
    """save replaces the whole folder: only an empty folder or an earlier carry (its carry.json) may be replaced."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise SystemExit(f"carry folder {folder} is not a folder; allowed: a new or empty folder, or one an earlier "
                         f"`carry_runs.py save` wrote")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MANIFEST).is_file():
        raise SystemExit(f"carry folder {folder} holds files but no {MANIFEST}; allowed: a new or empty folder, or "
                         f"one an earlier `carry_runs.py save` wrote (save replaces it whole)")


def save(repo: Path, folder: Path, echo=print) -> list[dict]:
    check_outside(repo, folder)
    check_replaceable(folder)
    staging = folder.with_name(folder.name + ".saving")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    entries = []
    for run in unfinished_runs(repo):
        rel = run.root.relative_to(repo)
        target = RunDir(staging / rel)
        target.root.mkdir(parents=True)
        shutil.copy2(run.checkpoint, target.checkpoint)  # first: every log copied after it reaches its step
        for item in sorted(run.root.iterdir()):  # flock files belong to the process holding them: never copied
            if item.is_file() and item.name not in {*LOCK_FILES, CHECKPOINT}:
                shutil.copy2(item, target.root / item.name)
        step = checkpoint_step(target.checkpoint)
        entries.append({"run": rel.as_posix(), "step": step, "ckpt_sha256": sha256_of(target.checkpoint)})
        echo(f"carried {rel} (checkpoint at step {step})")
    manifest = {"commit": git_commit(repo), "repo": str(repo), "runs": entries}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    staging.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    echo(f"{len(entries)} unfinished run(s) carried to {folder}")
    return entries


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise SystemExit(f"no {MANIFEST} in {folder}; allowed: a folder written by `carry_runs.py save`")
    try:
        manifest = json.loads(path.read_text())
        if not isinstance(manifest.get("runs"), list) or not isinstance(manifest.get("commit"), str):
            raise ValueError
    except (ValueError, AttributeError):
        raise SystemExit(f"{path} is not a carry manifest; allowed: a file written by `carry_runs.py save`") from None
    for entry in manifest["runs"]:
        if not (isinstance(entry, dict) and isinstance(entry.get("run"), str) and isinstance(entry.get("step"), int)
                and isinstance(entry.get("ckpt_sha256"), str)):
            raise SystemExit(f"invalid entry {entry!r} in {path}; allowed: run (a path), step (an integer), "
                             f"ckpt_sha256 (a string), as `carry_runs.py save` writes them")
    return manifest


def carried_paths(repo: Path, folder: Path, entry: dict) -> tuple[RunDir, RunDir]:
    """Where a carried run lies and goes back to: under the carry folder and this checkout's runs/ (carry.json is
    a file anyone could have edited: '..', absolute paths or a symlink out are refused, naming the entry)."""
    rel = entry["run"]  # its fields' types were checked by read_manifest
    if not Path(rel).parts or Path(rel).parts[0] != "runs":
        raise ConfigError(f"invalid run {rel!r} in {MANIFEST}; allowed: a run directory under runs/")
    return RunDir(path_inside(folder, rel, "run")), RunDir(path_inside(repo / "runs", Path(*Path(rel).parts[1:]),
                                                                       "run"))


def restore_one(repo: Path, folder: Path, entry: dict) -> tuple[bool, str]:
    """Put one carried run back; (ok, what happened). Not restoring a run this checkout has got further with is ok."""
    try:
        source, target = carried_paths(repo, folder, entry)
    except ConfigError as e:
        return False, f"refused: {e}"
    rel, step = entry["run"], entry["step"]
    if not source.checkpoint.is_file() or source.checkpoint.is_symlink():
        return False, f"refused {rel}: the carry folder holds no checkpoint for it"
    if target.summary.is_file():
        return True, f"kept {rel}: finished in this checkout"
    if target.checkpoint.is_file() and checkpoint_step(target.checkpoint) >= step:
        return True, f"kept {rel}: this checkout's checkpoint is at or past step {step}"
    if target.config.is_file() and target.config.read_bytes() != source.config.read_bytes():
        return False, f"refused {rel}: this checkout's config.json differs from the carried one"
    if sha256_of(source.checkpoint) != entry["ckpt_sha256"]:
        return False, f"refused {rel}: the carried checkpoint's sha256 is not the one saved"
    try:  # a torch checkpoint of this step, loaded as the run will load it (weights only), or nothing is written
        carried_step = checkpoint_step(source.checkpoint)
    except (RunDirError, KeyError, TypeError, ValueError) as e:
        return False, f"refused {rel}: the carried checkpoint is not a training checkpoint ({str(e)[:160]})"
    if carried_step != step:
        return False, f"refused {rel}: the carried checkpoint is at step {carried_step}, {MANIFEST} says {step}"
    with RunLock(target.lock):
        for item in sorted(source.root.iterdir()):
            if item.is_file() and not item.is_symlink() and item.name != CHECKPOINT and item.name not in LOCK_FILES:
                shutil.copy2(item, target.root / item.name)
        partial = target.root / (CHECKPOINT + ".tmp")
        shutil.copy2(source.checkpoint, partial)
        os.replace(partial, target.checkpoint)  # last, whole: a checkpoint only ever appears beside its logs
    return True, f"restored {rel} (resumes from step {step})"


def restore(repo: Path, folder: Path, echo=print, any_commit: bool = False) -> int:
    check_outside(repo, folder)
    manifest = read_manifest(folder)
    here, there = git_commit(repo).removesuffix("-dirty"), manifest["commit"].removesuffix("-dirty")
    if here != there and not any_commit:  # a run resumed at another commit would mix two codes in one run
        echo(f"refused: the carried runs were trained at commit {there[:12]} (in {manifest.get('repo', '?')}), this "
             f"checkout is at {here[:12]}; allowed: restore in a checkout at {there[:12]} (cd there first), or "
             "--any-commit on purpose")
        return 1
    failed = 0
    for entry in manifest["runs"]:
        ok, line = restore_one(repo, folder, entry)
        failed += not ok
        echo(line)
    echo(f"{len(manifest['runs'])} carried run(s) from commit {manifest['commit'][:12]}; {failed} refused")
    return 1 if failed else 0


def finished_runs(repo: Path, study: str = "*") -> list[RunDir]:
    """Run directories (runs/<study>/<arm>/seed<k>/) under repo/runs holding a summary (finished), in path order; a
    run directory that is a link is listed too (land refuses it by name)."""
    runs = repo / "runs"
    found = sorted(runs.glob(f"{glob.escape(study) if study != '*' else '*'}/*/seed*")) if runs.is_dir() else []
    return [RunDir(d) for d in found if d.name.removeprefix("seed").isdigit() and RunDir(d).summary.is_file()]


def commit_problem(repo: Path, commit: object) -> str | None:
    """Why a run trained at `commit` cannot land in `repo` (None when it can): its code must be a clean commit of this
    checkout's history, or no reader could rebuild what trained it."""
    if not isinstance(commit, str) or not commit or commit.endswith("-dirty") or " " in commit:
        return f"it was trained at {commit!r}; allowed: a clean commit of this repository"
    known = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=repo, capture_output=True)
    if known.returncode != 0:
        return f"its commit {commit[:12]} is not in this checkout's history; allowed: an ancestor of HEAD"
    return None


def json_object(path: Path) -> dict:
    """A JSON object read from `path`; ValueError, naming the file, for anything else."""
    try:
        value = json.loads(path.read_bytes())
    except ValueError:
        raise ValueError(f"{path.name} is not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return value


def checkout_relative_notebook(path: Path, source: Path) -> bytes:
    """The executed notebook with papermill's absolute input/output paths inside `source` written relative to it."""
    data = path.read_bytes()
    nb = json_object(path)
    record = nb.get("metadata", {}).get("papermill", {}) if isinstance(nb.get("metadata"), dict) else {}
    changed = isinstance(record, dict) and papermill_paths_relative(record, source)
    if not changed:
        return data
    return (json.dumps(nb, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def land_one(repo: Path, source: Path, run: RunDir) -> tuple[bool, str]:
    """Copy one finished run of `source` into `repo`; (ok, what happened). One already landed is ok."""
    rel = run.root.relative_to(source)
    target = RunDir(repo / rel)
    if run.root.is_symlink():
        return False, f"refused {rel}: it is a link; allowed: a run directory in the source checkout itself"
    if target.summary.is_file():  # landed before (and maybe resealed here since, its logs compacted): left as it is
        return True, f"kept {rel}: finished in this checkout"
    if target.root.exists():
        return False, f"refused {rel}: this checkout holds an unfinished run there; allowed: no run directory there"
    try:
        verify_run(run)
    except SealError as e:
        return False, f"refused {rel}: {e}"
    try:
        problem = commit_problem(repo, json_object(run.summary).get("git_commit"))
        notebook = checkout_relative_notebook(run.notebook, source) if run.notebook.is_file() else None
    except ValueError as e:
        return False, f"refused {rel}: {e}; allowed: the files the run wrote"
    if problem:
        return False, f"refused {rel}: {problem}"
    if notebook is not None and str(source).encode() in notebook:
        return False, (f"refused {rel}: its notebook names {source} beyond papermill's paths (a parameter given as "
                       f"an absolute path); allowed: paths relative to the checkout")
    cell = run.cell_lock(leave_no_file=True)
    if not cell.acquire():
        return False, f"refused {rel}: a sweep still owns its cell (it may rewrite the notebook); land it afterwards"
    created = [d for d in target.root.parents if not d.exists()]  # removed again if the copy fails
    staging = RunDir(target.root.with_name(target.root.name + ".landing"))
    try:
        shutil.rmtree(staging.root, ignore_errors=True)
        staging.root.mkdir(parents=True)
        for item in sorted(run.root.iterdir()):
            wanted = item.name not in NOT_SEALED or item.name == run.manifest.name
            if item.is_file() and not item.is_symlink() and wanted and not item.name.startswith("."):
                shutil.copy2(item, staging.root / item.name)
        if notebook is not None:  # read before the cell was held: read again, now that no sweep can rewrite it
            staging.notebook.write_bytes(checkout_relative_notebook(run.notebook, source))
        verify_run(staging)  # the copy, as it will lie in this checkout
        staging.root.rename(target.root)
    except (OSError, ValueError, SealError) as e:
        shutil.rmtree(staging.root, ignore_errors=True)
        for folder in created:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        return False, f"refused {rel}: its copy failed ({str(e)[:200]}); nothing was left here"
    finally:
        cell.release()
    return True, f"landed {rel}"


def land(repo: Path, source: Path, study: str | None = None, echo=print) -> int:
    """Land the finished runs of `source` (of one study, or of all: a run this checkout has since removed would come
    back, so name the study where you can)."""
    source = source.resolve()
    if source == repo.resolve() or not (source / "runs").is_dir():
        raise SystemExit(f"cannot land from {source}; allowed: another checkout of this repository, with a runs/ "
                         f"folder")
    if study is not None and (study in ("", ".", "..") or "/" in study or study != study.strip()
                              or not (source / "runs" / study).is_dir()):
        raise SystemExit(f"invalid --study {study!r}: no runs/{study} in {source}; allowed: a study folder there")
    runs = finished_runs(source, study or "*")
    landed, kept, failed, studies = 0, 0, 0, set()
    for run in runs:
        ok, line = land_one(repo, source, run)
        failed += not ok
        kept += ok and line.startswith("kept")
        if line.startswith("landed"):
            landed += 1
            studies.add(run.root.relative_to(source / "runs").parts[0])
        if not line.startswith("kept"):
            echo(line)
    echo(f"{len(runs)} finished run(s) in {source}: {landed} landed, {kept} already here, {failed} refused")
    for study in sorted(studies):
        echo(f"next: python -m embnorm_lib compact-logs --study {study}; python -m embnorm_lib sweep <its sweep> "
             f"--index-only; python -m embnorm_lib publish {study}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("save", "restore", "list", "land"))
    p.add_argument("folder", type=Path, help="the carry folder (save, restore, list) or the source checkout (land)")
    p.add_argument("--study", default=None, help="land: only this study's runs")
    p.add_argument("--any-commit", action="store_true", help="restore: into a checkout at another commit")
    args = p.parse_args(argv)
    if args.study is not None and args.action != "land":
        p.error(f"--study {args.study!r} is read by land only; allowed: save, restore and list take every carried run")
    if args.any_commit and args.action != "restore":
        p.error("--any-commit is read by restore only")
    if args.action == "land":
        return land(REPO, args.folder, args.study)
    if args.action == "save":
        save(REPO, args.folder)
        return 0
    if args.action == "restore":
        return restore(REPO, args.folder, any_commit=args.any_commit)
    for entry in read_manifest(args.folder)["runs"]:
        print(f"{entry['run']}  step {entry['step']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
