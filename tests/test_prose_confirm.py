"""The prose ladder's confirmatory record (analyses/prose_confirm.py) on planted runs: the registered words follow the
data (a planted cost, a planted gain in accuracy, a tie inside the margin), Holm covers the family of 4, the trained
check reads `none`'s level, and a recipe and size missing a seed is partial."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from embnorm_lib.analyses.prose_confirm import confirmatory_record, word
from embnorm_lib.studies import prose

LN2 = math.log(2)


def planted(bpb_shift: dict, acc_shift: dict, none_bpb: float = 1.70, seeds=None, noise: float = 0.002) -> pd.DataFrame:
    """Runs of gpt2 size 1: per arm and seed, final bits per byte and macro accuracy with a planted shift."""
    rng = np.random.default_rng(0)
    seeds = prose.confirmatory_seeds("gpt2", "1") if seeds is None else seeds
    rows = []
    for seed in seeds:
        base_bpb, base_acc = none_bpb + rng.normal(0, 0.01), 0.55 + rng.normal(0, 0.01)
        for arm in ("none", "ln", "rms"):
            bpb = base_bpb + bpb_shift.get(arm, 0.0) + rng.normal(0, noise)
            rows.append({"variant": arm, "seed": seed, "cfg.preset": "prose-gpt2-1", "val_loss_per_char": bpb * LN2,
                         "lm3_macro_acc": base_acc + acc_shift.get(arm, 0.0) + rng.normal(0, noise),
                         "ece_equal_width": 0.02 + rng.normal(0, 0.001), "brier": 0.8 + rng.normal(0, 0.001)})
    return pd.DataFrame(rows)


def rows_of(record: dict) -> dict:
    (cell,) = record["cells"]
    return {(r["variant"], r["metric"]): r for r in cell["family"]}, cell


def test_planted_differences_get_the_registered_words():
    record = confirmatory_record(planted({"ln": 0.05, "rms": 0.0}, {"ln": 0.0, "rms": 0.05}), 2.0, 0.10)
    rows, cell = rows_of(record)
    assert cell["complete"] and cell["trained"] and cell["none_bits_per_byte"] == pytest.approx(1.70, abs=0.02)
    assert rows[("ln", "val_bits_per_byte")]["word"] == "costs"
    assert rows[("rms", "lm3_macro_acc")]["word"] == "helps"
    assert rows[("rms", "val_bits_per_byte")]["word"] == "equivalent within ±0.01"  # a tie inside the margin
    assert len(rows) == 4 and all(r["n"] == 10 for r in rows.values())
    # the planted cost moved: the word flips
    flipped, _ = rows_of(confirmatory_record(planted({"ln": -0.05}, {}), 2.0, 0.10))
    assert flipped[("ln", "val_bits_per_byte")]["word"] == "helps"
    assert {r["metric"] for r in cell["secondary"]} == {"ece_equal_width", "brier"}


def test_holm_is_over_the_family_of_four_and_noise_is_not_resolved():
    rows, _ = rows_of(confirmatory_record(planted({"ln": 0.004}, {}, noise=0.02), 2.0, 0.10))
    ln = rows[("ln", "val_bits_per_byte")]
    assert ln["word"] == "not resolved" and ln["p_holm"] >= 0.05
    p = [r["p_holm"] for r in rows.values()]
    assert all(0 <= x <= 1 for x in p)


def test_untrained_and_partial_cells_say_so():
    record = confirmatory_record(planted({}, {}, none_bpb=1.95, seeds=(0, 1, 2, 3, 4, 5)), 2.0, 0.10)
    _, cell = rows_of(record)
    assert not cell["trained"] and cell["trained_below"] == pytest.approx(1.8)
    assert not cell["complete"]  # gpt2 size 1 registers seeds 0-9 (amendment 20)


def test_words_read_equivalence_before_direction():
    row = {"equivalent": True, "significant": True, "mean_diff": -0.004, "metric": "val_bits_per_byte"}
    assert word(row) == "equivalent within ±0.01"
    assert word({**row, "equivalent": False}) == "helps"
    assert word({**row, "equivalent": False, "metric": "lm3_macro_acc"}) == "costs"


def test_the_report_renders_every_row_from_the_record():
    from embnorm_lib.publishing.templating import render

    record = confirmatory_record(planted({"ln": 0.05}, {}), 2.0, 0.10)
    text = render("prose_confirm.md.j2", {**record, "study": "prose", "commit": "abc", "planned": 180,
                                          "runs_sha256": "x", "description": "d", "note": "n", "question": "q"})
    rows, _ = rows_of(record)
    ln = rows[("ln", "val_bits_per_byte")]
    assert "| gpt2 | 1 | 10 of 10 | 1.69" in text and "| ln | bits per byte | " in text
    assert f"{ln['mean_diff']:+.4f} [{ln['ci_low']:+.4f}, {ln['ci_high']:+.4f}]" in text and "| costs |" in text
    assert text.count("| gpt2 | 1 |") == 4 + 2  # the family's 4 rows and the secondary table's 2
    # the TOST margin and the trained margin are two numbers (0.01 and 10%), each where it belongs
    assert "inside ±0.01;" in text and "10% below a count bigram's 2.000" in text


def test_share_to_reach_interpolates_between_evaluations():
    from embnorm_lib.analyses.prose_confirm import interpolated_share_to_reach

    steps, loss = np.array([0.0, 10.0, 20.0]), np.array([3.0, 2.0, 1.0])
    assert interpolated_share_to_reach(steps, loss, 1.5) == pytest.approx(0.75)
    assert interpolated_share_to_reach(steps, loss, 3.5) == 0.0  # reached at the first evaluation
    assert math.isnan(interpolated_share_to_reach(steps, loss, 0.5))  # never reached


def planted_curves(slow: float, seeds=(0, 1, 2)) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Interim evaluations of gpt2 size 1: `none`'s loss falls as 1/(1 + step/100); `ln` follows the same curve
    `slow` times slower (it needs `slow` times the steps for the same loss); the final pass is on more tokens."""
    runs, evals = [], []
    for seed in seeds:
        for arm, stretch in (("none", 1.0), ("ln", slow)):
            runs.append({"arm": f"{arm}_x", "variant": arm, "seed": seed, "cfg.preset": "prose-gpt2-1"})
            for step in range(0, 1001, 40):
                evals.append({"arm": f"{arm}_x", "seed": seed, "step": step, "val_tokens": 100,
                              "val_loss": 1 + 3 / (1 + step / (100 * stretch)) + 0.001 * seed})
            evals.append({"arm": f"{arm}_x", "seed": seed, "step": 1000, "val_tokens": 5000, "val_loss": 0.0})
    return pd.DataFrame(runs), pd.DataFrame(evals)


def test_compute_multiplier_reads_a_planted_slowdown():
    from embnorm_lib.analyses.prose_confirm import compute_multiplier

    found = compute_multiplier(*planted_curves(1.25))
    ln = found["ln"]
    # none reaches ln's final loss at 1000 / 1.25 = 800 steps: 0.8 of its run, on every seed; the final pass (loss 0
    # on the whole split) is not part of the curve
    assert ln["none_to_norm"]["mean"] == pytest.approx(0.8, abs=0.01) and ln["none_to_norm"]["reached"] == 3
    assert ln["norm_to_none"]["reached"] == 0 and ln["norm_to_none"]["mean"] is None  # ln never gets there
    assert compute_multiplier(*planted_curves(0.8))["ln"]["norm_to_none"]["mean"] == pytest.approx(0.8, abs=0.01)


def test_size_or_budget_pairs_the_two_budgets_by_seed():
    from embnorm_lib.analyses.prose_confirm import confirmatory_record

    main = planted({"ln": 0.01}, {}, seeds=(0, 1, 2, 3, 4, 5)).assign(**{"cfg.preset": "prose-gpt2-0-x4"})
    budget = planted({"ln": 0.05}, {}, seeds=(0, 1, 2, 3, 4, 5)).assign(**{"cfg.preset": "prose-gpt2-0"})
    record = confirmatory_record(main, 2.0, 0.10, budget=budget)
    rows = {(r["variant"], r["metric"]): r for r in record["size_or_budget"]}
    ln = rows[("ln", "val_bits_per_byte")]
    assert ln["n"] == 6 and ln["change"] == pytest.approx(-0.04, abs=0.005)
    assert ln["change_ci_low"] <= ln["change"] <= ln["change_ci_high"] < 0  # same planted noise: a narrow interval
    assert rows[("rms", "val_bits_per_byte")]["change"] == pytest.approx(0.0, abs=0.005)
    from embnorm_lib.publishing.templating import render

    text = render("prose_confirm.md.j2", {**record, "study": "prose", "commit": "abc", "planned": 180,
                                          "runs_sha256": "x", "description": "d", "note": "n",
                                          "question": "q"})
    assert f"| gpt2 | ln | bits per byte | 6 | {ln['diff_budget']:+.4f} | {ln['diff_main']:+.4f} | {ln['change']:+.4f} [" \
        in text


def test_the_budget_control_reads_its_own_size_as_exploratory():
    from embnorm_lib.analyses.prose_confirm import confirmatory_record

    runs, evals = planted_curves(1.25, seeds=prose.CONFIRMATORY_SEEDS)
    runs = runs.assign(**{"cfg.preset": "prose-gpt2-0", "val_loss_per_char": 1.9 * LN2, "lm3_macro_acc": 0.5})
    record = confirmatory_record(runs, 2.0, 0.10, evals, levels=(prose.BUDGET_LEVEL,))
    (cell,) = record["cells"]
    assert cell["level"] == "0" and cell["multiplier"]["ln"]["none_to_norm"]["reached"] == 6
    assert record["role"] == "exploratory" and confirmatory_record(runs, 2.0, 0.10)["role"] == "confirmatory"


def test_the_effects_figure_draws_the_record(tmp_path):
    from embnorm_lib.analyses.plots import plot_prose_effects, save

    record = confirmatory_record(planted({"ln": 0.05}, {"rms": 0.02}), 2.0, 0.10)
    fig = plot_prose_effects(record)
    ax_bits = fig.axes[0]
    # one error bar per norm at gpt2 size 1, ln's centred on its planted cost
    (ln_row,) = [r for r in record["cells"][0]["family"] if (r["variant"], r["metric"]) == ("ln", "val_bits_per_byte")]
    ys = [line.get_ydata()[0] for line in ax_bits.lines if len(line.get_ydata()) == 1]
    assert any(abs(y - ln_row["mean_diff"]) < 1e-9 for y in ys)
    paths = save(fig, tmp_path / "effects")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 0 for p in paths)
    # the figure index knows it: the first real publish of `prose` failed on it (2026-12-07)
    from embnorm_lib.analyses.site import describe_figure

    what, study, group = describe_figure("prose/effects.png")
    assert "bits per byte" in what and study == "prose" and "zero-shot" in group


def test_findings_carry_the_ladder_as_far_as_it_has_come(tmp_path):
    """FINDINGS.md's prose paragraph reads the two records: tuning progress always, a size's registered words once it
    is complete and trained, and nothing before the tuning study has a record."""
    import json

    from embnorm_lib.analyses.prose import findings_paragraphs

    assert findings_paragraphs(tmp_path) == []
    tuning = {"study": "prose-lr", "finished": 10, "planned": 20,
              "cells": [{"bracketed": True}, {"bracketed": False}, {"bracketed": None}]}
    (tmp_path / "prose-lr").mkdir()
    (tmp_path / "prose-lr" / "result.json").write_text(json.dumps(tuning))
    (text,) = findings_paragraphs(tmp_path)
    assert "10 of 20 registered runs finished; 1 of the 3 learning-rate grids" in text
    assert "answers nothing so far" in text
    record = json.loads(json.dumps(confirmatory_record(planted({"ln": 0.05}, {}), 2.0, 0.10)))
    (tmp_path / "prose").mkdir()
    (tmp_path / "prose" / "result.json").write_text(json.dumps(record))
    (text,) = findings_paragraphs(tmp_path)
    assert "gpt2 at size 1 (10 seeds): ln costs in bits per byte (+0.05" in text and "answers nothing" not in text
