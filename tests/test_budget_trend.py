"""The budget trend on a synthetic grid: a cost that shrinks with the budget, Holm per loss over the table."""
import numpy as np
import pandas as pd
import pytest

from embnorm_lib.analyses import budget as budget_trend
from embnorm_lib.analyses import plots as analysis_plots


def test_the_cost_per_budget_is_paired_by_seed_and_worded_only_where_holm_resolves_it():
    rng = np.random.default_rng(1)
    rows = []
    for budget, cost in ((300, 0.1), (2000, 0.05), (8000, 0.0)):
        for variant in ("none", "ln"):
            for seed in range(5):
                loss = 2.0 - 0.0001 * budget + 0.02 * seed + (cost if variant == "ln" else 0) + rng.normal(0, 0.002)
                rows.append({"variant": variant, "seed": seed, "arm": f"{variant}_{budget}", "cfg.max_iters": budget,
                             "tokens": budget * 768, "val_loss": loss, "best_val_loss": loss - 0.01})
    table = budget_trend.budget_table(pd.DataFrame(rows), train_chars=1_003_854).set_index("max_iters")
    assert table.loc[300, "delta_final"] == pytest.approx(0.1, abs=0.005)
    assert table.loc[8000, "epochs"] == pytest.approx(8000 * 768 / 1_003_854)
    assert table.loc[300, "significant_final"] and not table.loc[8000, "significant_final"]
    words = budget_trend.trend_words(table.reset_index())
    assert "300 iterations (0.23 epochs): +0.10" in words and "(costs)" in words and "not resolved" in words


def test_the_largest_budget_is_worded_for_final_and_best_loss_and_the_figure_draws(tmp_path):
    rng = np.random.default_rng(2)
    rows = [{"variant": v, "seed": s, "arm": f"{v}_{b}", "cfg.max_iters": b, "tokens": b * 768,
             "val_loss": 2.0 + (0.1 if v == "ln" and b == 300 else 0) + 0.02 * s + rng.normal(0, 0.002),
             "best_val_loss": 1.9 + 0.02 * s + rng.normal(0, 0.002)}
            for b in (300, 8000) for v in ("none", "ln", "rms") for s in range(4)]
    table = budget_trend.budget_table(pd.DataFrame(rows), train_chars=1_003_854)
    words = budget_trend.largest_budget_words(table)
    assert words.startswith("8000 iterations (6.12 epochs): `ln` final")
    assert "`rms` best" in words and "(costs)" not in words
    assert budget_trend.largest_budget_words(table.iloc[:0]) == "no budget has a paired comparison yet"
    from embnorm_lib.publishing import plots
    fig = analysis_plots.plot_budget_trend(table)
    assert [ax.get_title() for ax in fig.axes] == ["final validation loss", "best validation loss"]
    paths = plots.save(fig, tmp_path / "budget_trend")
    assert all(p.stat().st_size > 0 for p in paths)
