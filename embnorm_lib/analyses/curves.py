"""Learning curves and the compute multiplier (issue 113 item 1; exploratory, computed from the committed per-step
logs): for each size of a study, each variant's training loss over its steps (a rolling mean over a hundredth of the
run), and, per seed pair, the share of its steps `none` needs to reach the norm's final training loss (below 1: the
norm costs steps; the reverse share says the same from the norm's side). The mean share over seeds carries a 95% t
interval. A share counts steps of a run whose learning-rate schedule ends at its last step, so it compares runs as
trained, not what a shorter schedule would reach.

    curves_record(study, runs, presets)   # JSON-safe: per size and variant, the curve and the shares"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.records.io import runs_root
from ..core.records.rundir import study_dir_for
from ..core.records.steplog import step_log_frame
from ..stats import mean_interval

WINDOW_SHARE = 0.01  # the rolling mean's window, as a share of the run's steps (at least 1 step)
POINTS = 60  # points kept per curve for the record and the figure


def smoothed(train_loss: np.ndarray) -> np.ndarray:
    """The rolling mean of the training loss over the last WINDOW_SHARE of the run's steps at each step."""
    window = max(1, int(len(train_loss) * WINDOW_SHARE))
    return pd.Series(train_loss).rolling(window, min_periods=1).mean().to_numpy()


def share_to_reach(curve: np.ndarray, target: float) -> float:
    """The share of the run's steps at which `curve` first reaches `target` (nan where it never does)."""
    hit = np.flatnonzero(curve <= target)
    return float((hit[0] + 1) / len(curve)) if len(hit) else math.nan


def _mean_ci(values: list[float]) -> dict:
    """The mean share over seed pairs with its t interval; `pairs` of `of` pairs reach the target."""
    found = mean_interval(values)
    return {"mean": found["mean"], "ci_low": found["ci_low"], "ci_high": found["ci_high"], "pairs": found["n"],
            "of": len(values)}


def size_curves(study: str, runs: pd.DataFrame, preset: str, variants=("ln", "rms"), out_dir=None) -> dict:
    """One size: each variant's mean smoothed curve over seeds (POINTS points), and per norm the shares."""
    root = study_dir_for(study, runs_root(out_dir)).root
    sub = runs[runs["cfg.preset"] == preset]
    curves = {}
    for run in sub.itertuples():
        loss = step_log_frame(root / run.run_dir, "metrics")["train_loss"].to_numpy(float)
        curves[(run.variant, int(run.seed))] = smoothed(loss)
    steps = len(next(iter(curves.values())))
    keep = np.unique(np.linspace(0, steps - 1, POINTS).round().astype(int))
    found = {"preset": preset, "steps": steps, "step": (keep + 1).tolist(), "curves": {}, "shares": {}}
    for variant in ("none", *variants):
        mine = [c for (v, _), c in curves.items() if v == variant]
        if mine:
            found["curves"][variant] = np.mean(mine, axis=0)[keep].round(5).tolist()
    seeds = sorted({s for (v, s) in curves if v == "none"})
    for variant in variants:
        pairs = [s for s in seeds if (variant, s) in curves]
        if not pairs:
            continue
        found["shares"][variant] = {
            # none's steps to reach the norm's final loss, and the norm's steps to reach none's
            "none_to_norm": _mean_ci([share_to_reach(curves[("none", s)], curves[(variant, s)][-1]) for s in pairs]),
            "norm_to_none": _mean_ci([share_to_reach(curves[(variant, s)], curves[("none", s)][-1]) for s in pairs])}
    return found


def curves_record(study: str, runs: pd.DataFrame, presets: list[str], out_dir=None) -> list[dict]:
    """Every size in `presets` (smallest first)."""
    return [size_curves(study, runs, preset, out_dir=out_dir) for preset in presets]


def curves_data(out) -> list[dict]:
    """The learning curves and compute multipliers of the adequate-data ladder's quoted sizes (analyses/curves.py;
    exploratory)."""
    from ..runner.results import has_index, load_runs
    from .answer_words import DATA_LADDER
    from .ladder_data import quoted_table

    confirm = DATA_LADDER[1]
    if not has_index(confirm, out):
        return []
    runs = load_runs(confirm, out)
    quoted = quoted_table(runs)
    presets = [f"{confirm}-{rung}" for rung in sorted(set(quoted["rung"]))] if len(quoted) else []
    return curves_record(confirm, runs, presets, out)
