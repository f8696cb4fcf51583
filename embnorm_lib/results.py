"""Read a study's run directories into tidy pandas frames (one source: the files the runs wrote)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .io import default_runs_dir, read_jsonl


def study_dir(study: str, out_dir: str | Path | None = None) -> Path:
    path = Path(out_dir or default_runs_dir()) / study
    if not path.is_dir():
        raise FileNotFoundError(f"no study directory {path}; run `python -m embnorm_lib.sweep {study}` first")
    return path


def finished_runs(study: str, out_dir: str | Path | None = None) -> list[Path]:
    return sorted(p.parent for p in study_dir(study, out_dir).glob("**/summary.json"))


def load_series(study: str, filename: str, out_dir: str | Path | None = None, arm_filter=None) -> pd.DataFrame:
    """All rows of `filename` (metrics.jsonl, evals.jsonl, diagnostics.jsonl) across runs, with arm and seed."""
    frames = []
    for run in finished_runs(study, out_dir):
        arm = run.parent.name
        if arm_filter and not arm_filter(arm):
            continue
        rows = read_jsonl(run / filename)
        if rows:
            frame = pd.DataFrame(rows)
            frame.insert(0, "arm", arm)
            frame.insert(1, "seed", int(run.name.removeprefix("seed")))
            frames.append(frame)
    return pd.concat(sorted(frames, key=lambda f: arm_order(f["arm"].iat[0])), ignore_index=True) if frames \
        else pd.DataFrame(columns=["arm", "seed", "step"])


def arm_order(arm: str) -> tuple:
    """none, ln, rms first (the study's A, B, C), then the rest alphabetically."""
    return ({"none": 0, "ln": 1, "rms": 2}.get(arm.split("_")[0], 9), arm)


def load_calibration(study: str, out_dir: str | Path | None = None, arm_filter=None) -> pd.DataFrame:
    rows = []
    for run in finished_runs(study, out_dir):
        path = run / "calibration.json"
        if path.is_file() and (not arm_filter or arm_filter(run.parent.name)):
            rows.append({"arm": run.parent.name, "seed": int(run.name.removeprefix("seed")),
                         "calibration": json.loads(path.read_text())})
    return pd.DataFrame(sorted(rows, key=lambda r: (arm_order(r["arm"]), r["seed"])))


def arms(study: str, out_dir: str | Path | None = None) -> list[str]:
    return sorted({p.parent.name for p in finished_runs(study, out_dir)}, key=arm_order)
