"""Carry unfinished runs from one checkout to the next (a CPU session ends; the next one gets a fresh work tree).

    python scripts/carry_runs.py save /work/carry      # near a session's end: copy every unfinished run directory
    python scripts/carry_runs.py restore /work/carry   # in the next checkout, before any sweep: put them back
    python scripts/carry_runs.py list /work/carry      # what a carry folder holds, touches nothing

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
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from embnorm_lib.core.checkpoint import load_checkpoint  # noqa: E402  (weights_only=True; an unreadable file says so)
from embnorm_lib.core.data import sha256_of  # noqa: E402
from embnorm_lib.core.errors import ConfigError, RunDirError  # noqa: E402
from embnorm_lib.core.io import RunLock, git_commit, path_inside  # noqa: E402
from embnorm_lib.core.rundir import LOCK_FILES, RunDir  # noqa: E402

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


def save(repo: Path, folder: Path, echo=print) -> list[dict]:
    check_outside(repo, folder)
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
    return manifest


def carried_paths(repo: Path, folder: Path, entry: dict) -> tuple[RunDir, RunDir]:
    """Where a carried run lies and goes back to: under the carry folder and this checkout's runs/ (carry.json is
    a file anyone could have edited: '..', absolute paths or a symlink out are refused, naming the entry)."""
    rel = entry.get("run")
    if not (isinstance(rel, str) and isinstance(entry.get("step"), int) and isinstance(entry.get("ckpt_sha256"), str)):
        raise ConfigError(f"invalid {MANIFEST} entry {entry!r}; allowed: run (a path), step (an integer), ckpt_sha256")
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


def restore(repo: Path, folder: Path, echo=print) -> int:
    check_outside(repo, folder)
    manifest = read_manifest(folder)
    failed = 0
    for entry in manifest["runs"]:
        ok, line = restore_one(repo, folder, entry)
        failed += not ok
        echo(line)
    echo(f"{len(manifest['runs'])} carried run(s) from commit {manifest['commit'][:12]}; {failed} refused")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("save", "restore", "list"))
    p.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    if args.action == "save":
        save(REPO, args.folder)
        return 0
    if args.action == "restore":
        return restore(REPO, args.folder)
    for entry in read_manifest(args.folder)["runs"]:
        print(f"{entry['run']}  step {entry['step']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
