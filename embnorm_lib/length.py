"""Length brittleness (issue 17, item 4): validation loss by position in the window, per arm, and each arm's paired
difference from `none` at every position (exploratory, descriptive: one interval per position, no test).

Reads positions.json (the final pass's loss at each position 1..T; runs trained since it exists)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats


def position_deltas(positions: pd.DataFrame, variant_of=lambda arm: arm.split("_")[0]) -> pd.DataFrame:
    """Per arm and position: mean loss over seeds; for arms other than none, the mean paired difference from none
    (same seed, same position) with its 95% t interval. Positions of seeds without a none run are left out."""
    frame = positions.assign(variant=positions["arm"].map(variant_of))
    base = frame[frame["variant"] == "none"][["seed", "position", "val_loss"]].rename(columns={"val_loss": "none"})
    rows = []
    for variant, sub in frame.groupby("variant", sort=False):
        paired = sub.merge(base, on=["seed", "position"])
        for position, at in paired.groupby("position"):
            row = {"variant": variant, "position": int(position), "seeds": len(at), "val_loss": at["val_loss"].mean()}
            if variant != "none" and len(at) > 1:
                diff = (at["val_loss"] - at["none"]).to_numpy()
                half = scipy_stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
                row.update({"delta_vs_none": diff.mean(), "ci_low": diff.mean() - half, "ci_high": diff.mean() + half})
            rows.append(row)
    return pd.DataFrame(rows)
