"""Finished runs a sweep can use instead of training: a bitwise-identical run of another study is copied
(`reused_from.json` names it), and a finished cell that lacks a result its study asks for (lm_eval.json) is
completed from such a run or from its own weights, never silently left with the gap.

Identity: the config's training identity plus the torch thread count (CPU results are bitwise equal only
for one thread count)."""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from ..core.config import RunConfig
from ..core.errors import BRIEF_ERRORS
from ..core.records.io import read_json, write_json
from ..core.records.rundir import LOCK_FILES, RunDir
from ..core.records.seal import reseal, verify_run
from ..core.scoring.lm_eval_adapter import copy_result, score_if_asked
from ..core.training.checkpoint import write_config
from .registry import Cell


def missing_results(cfg: RunConfig, run_dir: Path, summary: dict) -> list[str]:
    """Per-run result files the config asks for and the finished run lacks (a diverged run has none to give)."""
    if cfg.lm_eval and not summary.get("diverged") and not RunDir(run_dir).lm_eval.is_file():
        return [RunDir(run_dir).lm_eval.name]
    return []


NOT_COPIED = (RunDir(Path()).checkpoint.name, *LOCK_FILES, "*.tmp")


def finished_runs_by_identity(out: Path) -> dict[str, list[Path]]:
    """Every readable finished run under `out` (any study), keyed by its training identity and thread count."""
    found: dict[str, list[Path]] = {}
    for summary in sorted(out.glob("*/*/*/summary.json")):
        try:
            cfg = RunConfig.load(RunDir(summary.parent).config)
            read_json(summary)
        except (OSError, TypeError, *BRIEF_ERRORS):
            continue
        found.setdefault(_identity_key(cfg), []).append(summary.parent)
    return found


def _identity_key(cfg: RunConfig) -> str:
    # thread count is part of the key: results are bitwise equal only for the same torch thread count
    return json.dumps({**cfg.training_identity(), "torch_threads": cfg.torch_threads, "execution": cfg.execution},
                      sort_keys=True)


def _identical_source(cfg: RunConfig, target: Path, finished: dict[str, list[Path]], needs: list[str]) -> Path | None:
    for source in finished.get(_identity_key(cfg), []):
        if source.resolve() != target.resolve() and all((source / name).is_file() for name in needs):
            return source
    return None


def _origin(source: Path, out: Path) -> Path:
    """A copy of a copy names the run that was trained."""
    if RunDir(source).reused_from.is_file():
        return out / read_json(RunDir(source).reused_from)["run_dir"]
    return source


def _cell_config(cell: Cell, threads: int) -> RunConfig:
    cfg = cell.config()
    return replace(cfg, torch_threads=threads) if threads else cfg


def reuse_identical_run(cell: Cell, out: Path, threads: int, finished: dict[str, list[Path]]) -> dict | None:
    """Copy a finished run of another study with the same training identity into this cell's run directory
    (its own files, not re-trained) and record where it came from. None if there is no such run."""
    cfg = _cell_config(cell, threads)
    target = cell.run_dir(out)
    source = _identical_source(cfg, target, finished, [RunDir(target).lm_eval.name] if cfg.lm_eval else [])
    if source is None:
        return None
    lock = RunDir(target).training_lock()
    if not lock.acquire():
        return None  # another sweep or run is on this cell
    try:
        if any(p.name not in LOCK_FILES for p in target.iterdir()):
            return None  # something of this cell is already there: leave it to training (resume or conflict)
        if RunDir(source).manifest.is_file():
            verify_run(RunDir(source))  # a damaged source is named, never copied
        tmp = target.with_name(f".{target.name}.reuse.tmp")  # hidden: never indexed or committed
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(*NOT_COPIED))
        origin = _origin(source, out)
        write_json(RunDir(tmp).reused_from, {"run_dir": str(origin.relative_to(out)),
                                       "reused_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                       "why": "same training identity and torch thread count: training again "
                                              "would reproduce these numbers bit for bit"})
        write_config(RunDir(tmp), replace(RunConfig.load(RunDir(tmp).config), lm_eval=cfg.lm_eval))
        reseal(RunDir(tmp), RunDir(tmp).reused_from.name, RunDir(tmp).config.name)  # the copy is the source as sealed
        # summary.json marks a run finished and manifest.json seals it, so they move in last
        last = (RunDir(tmp).summary.name, RunDir(tmp).manifest.name)
        for path in sorted(tmp.iterdir(), key=lambda p: last.index(p.name) + 1 if p.name in last else 0):
            os.replace(path, target / path.name)
        tmp.rmdir()
    finally:
        lock.release()
    summary = read_json(RunDir(target).summary)
    return {"cell": cell.label(), "status": "reused", "run_dir": str(target), "reused_from": str(origin),
            "seconds": 0.0, "train_wall_s": 0.0, "val_loss": summary.get("val_loss")}


def complete_cell(cell: Cell, out: Path, threads: int, finished: dict[str, list[Path]],
                  data_path: str | None) -> dict:
    """A finished cell lacks a result its study asks for (lm_eval.json): copy it from a bitwise-identical run
    (same training identity and thread count, so same weights), else score this run's own weights, else fail
    with what to do. Never silently leaves the gap."""
    cfg = _cell_config(cell, threads)
    run = RunDir(cell.run_dir(out))
    record = {"cell": cell.label(), "run_dir": str(run.root), "seconds": 0.0, "train_wall_s": 0.0}
    with run.training_lock():
        summary = read_json(run.summary)
        needs = missing_results(cfg, run.root, summary)
        source = _identical_source(cfg, run.root, finished, needs)
        if source is not None:
            copy_result(source, run.root, str(_origin(source, out).relative_to(out)))
            status, detail = "completed", f"lm_eval.json copied from {_origin(source, out).relative_to(out)}"
        elif run.final_model.is_file():
            score_if_asked(replace(cfg, lm_eval=True), run.root, data_path)
            status, detail = "completed", "lm_eval.json scored from this run's weights"
        else:
            return {**record, "status": "failed",
                    "error": f"{run.root} lacks {', '.join(needs)} and has no model.pt to score, and no identical "
                             f"finished run holds it; allowed: retrain the study into a fresh runs directory"}
        write_config(run, replace(RunConfig.load(run.config), lm_eval=True))
        reseal(run, run.config.name)
    return {**record, "status": status, "detail": detail, "val_loss": summary.get("val_loss")}
