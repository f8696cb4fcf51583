"""Learning curves and the compute multiplier (issue 113 item 1): the shares re-derive from the committed per-step
logs with this file's own pandas code, and planted curves give the shares they were built to give."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import REPO


def test_a_curve_reaches_a_target_at_the_first_step_at_or_below_it():
    from embnorm_lib.analyses.curves import share_to_reach, smoothed

    assert share_to_reach(np.array([3.0, 2.0, 1.0, 1.0]), 2.0) == 0.5
    assert math.isnan(share_to_reach(np.array([3.0, 2.5]), 2.0))
    loss = np.arange(1000, dtype=float)
    assert smoothed(loss)[-1] == pytest.approx(np.mean(loss[-10:]))  # a hundredth of the run


def test_a_planted_slower_variant_costs_the_share_it_was_built_to_cost():
    """A norm whose curve is no norm's stretched over 1/0.8 of the steps: no norm reaches the norm's final loss at
    about 80% of its steps, and the norm never reaches no norm's final loss."""
    from embnorm_lib.analyses.curves import share_to_reach, smoothed

    steps = np.arange(1, 1001)
    none = smoothed(3.0 - np.log(steps) / 4)
    norm = smoothed(3.0 - np.log(steps * 0.8) / 4)
    assert share_to_reach(none, norm[-1]) == pytest.approx(0.8, abs=0.01)
    assert math.isnan(share_to_reach(norm, none[-1]))


@pytest.mark.committed
def test_the_answers_shares_re_derive_from_the_committed_logs():
    record = json.loads((REPO / "runs" / "answer.json").read_text())
    size = next(c for c in record["d"]["curves"] if c["preset"] == "ladder-data-1")
    runs = pd.read_csv(REPO / "runs" / "ladder-data" / "runs.csv")
    runs = runs[runs["cfg.preset"] == "ladder-data-1"]

    def curve(variant: str, seed: int) -> pd.Series:
        run = runs[(runs["variant"] == variant) & (runs["seed"] == seed)]["run_dir"].iloc[0]
        loss = pd.read_parquet(REPO / "runs" / "ladder-data" / run / "metrics.parquet")["train_loss"]
        return loss.rolling(max(1, len(loss) // 100), min_periods=1).mean().reset_index(drop=True)

    shares = []
    for seed in sorted(set(runs["seed"])):
        none, ln = curve("none", seed), curve("ln", seed)
        hit = none[none <= ln.iloc[-1]]
        if len(hit):
            shares.append((hit.index[0] + 1) / len(none))
    assert size["shares"]["ln"]["none_to_norm"]["pairs"] == len(shares)
    assert size["shares"]["ln"]["none_to_norm"]["mean"] == pytest.approx(np.mean(shares), abs=1e-9)
