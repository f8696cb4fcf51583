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
