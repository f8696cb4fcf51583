"""Amendment 21's exploratory record (analyses/prose_embdecay.py) on planted runs: a norm effect that changes when the
embedding tables are not decayed shows as a difference whose interval excludes 0; an unchanged effect's interval
covers 0; an arm's own change is read by seed; a recipe missing seeds is partial; and the report renders the record."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from embnorm_lib.analyses.prose_embdecay import embdecay_record
from embnorm_lib.studies import prose

LN2 = math.log(2)


def planted(shift: dict, seeds=prose.CONFIRMATORY_SEEDS, recipe="gpt2", offset=0.0, noise=0.002) -> pd.DataFrame:
    """Size-1 runs: per arm and seed, bits per byte `1.75 + seed noise + shift[arm] + offset`, and accuracy the mirror."""
    rng = np.random.default_rng(len(shift) + int(offset * 1000))
    rows = []
    for seed in seeds:
        base = 1.75 + 0.01 * math.sin(seed)  # shared by both studies' runs of a seed, as pairing by seed expects
        for arm in ("none", "ln", "rms"):
            bpb = base + shift.get(arm, 0.0) + offset + rng.normal(0, noise)
            rows.append({"variant": arm, "seed": seed, "cfg.preset": prose.preset_name(recipe, "1"),
                         "val_loss_per_char": bpb * LN2, "lm3_macro_acc": 0.5 - (bpb - 1.75)})
    return pd.DataFrame(rows)


def effect(record, variant, metric="val_bits_per_byte", recipe="gpt2"):
    (found,) = [r for r in record["recipes"] if r["recipe"] == recipe]
    (row,) = [e for e in found["effects"] if e["variant"] == variant and e["metric"] == metric]
    return row, found


def test_a_changed_effect_shows_in_the_difference_and_an_unchanged_one_does_not():
    record = embdecay_record(planted({"ln": 0.03, "rms": 0.01}), planted({"ln": 0.0, "rms": 0.01}, offset=0.02))
    ln, found = effect(record, "ln")
    assert found["complete"] and record["role"] == "exploratory"
    assert ln["decayed"]["mean"] == pytest.approx(0.03, abs=0.005)
    assert ln["undecayed"]["mean"] == pytest.approx(0.0, abs=0.005)
    assert ln["difference"]["mean"] == pytest.approx(-0.03, abs=0.005) and ln["difference"]["ci_high"] < 0
    assert ln["difference"]["n"] == 6 and ln["difference"]["seeds"] == list(prose.CONFIRMATORY_SEEDS)
    rms, _ = effect(record, "rms")
    assert rms["difference"]["ci_low"] < 0 < rms["difference"]["ci_high"]
    acc, _ = effect(record, "ln", "lm3_macro_acc")  # planted as the mirror of bits per byte
    assert acc["difference"]["mean"] == pytest.approx(0.03, abs=0.005)
    # every arm got 0.02 bits worse without decay: its own change says so
    none_change = [c for c in found["arm_changes"] if c["arm"] == "none" and c["metric"] == "val_bits_per_byte"]
    assert none_change[0]["change"]["mean"] == pytest.approx(0.02, abs=0.005)


def test_missing_seeds_make_a_recipe_partial_and_pairing_uses_seeds_both_have():
    record = embdecay_record(planted({}), planted({}, seeds=(0, 1, 2)))
    ln, found = effect(record, "ln")
    assert not found["complete"] and ln["difference"]["n"] == 3
    assert record["finished"] == 9 and record["decayed_runs"] == 18


def test_only_recipes_with_undecayed_runs_are_read_and_confirmatory_extras_are_left_out():
    decayed = pd.concat([planted({}, seeds=range(10)), planted({}, recipe="speedrun")])
    record = embdecay_record(decayed, planted({}))
    assert [r["recipe"] for r in record["recipes"]] == ["gpt2"]
    ln, _ = effect(record, "ln")
    assert ln["decayed"]["n"] == 6  # seeds 6-9 of `prose` have no undecayed partner


def test_before_the_confirmatory_runs_exist_nothing_is_paired():
    empty = planted({}).iloc[:0]
    record = embdecay_record(empty, planted({}))
    (found,) = record["recipes"]
    assert found["effects"] == [] and found["arm_changes"] == [] and not found["complete"]


def test_the_report_renders_every_row_from_the_record():
    from embnorm_lib.publishing.templating import render

    record = embdecay_record(planted({"ln": 0.03}), planted({}))
    text = render("prose_embdecay.md.j2", {**record, "study": "prose-embdecay", "commit": "abc", "planned": 36,
                                           "runs_sha256": "x", "description": "d", "note": "n", "question": "q"})
    ln, _ = effect(record, "ln")
    assert f"{ln['difference']['mean']:+.4f}" in text and "exploratory" in text
    assert text.count("| gpt2 | ln |") == 4 and "partial" not in text  # 2 effects, 2 own changes


def test_the_publisher_reads_these_runs_beside_the_confirmatory_study(monkeypatch, tmp_path):
    """write_report's embedding-decay branch: the `prose` runs are the decayed side, and an absent `prose` index
    leaves nothing paired rather than failing."""
    from embnorm_lib.analyses import prose as prose_analysis
    from embnorm_lib.runner import results

    decayed, undecayed = planted({"ln": 0.03}), planted({})
    monkeypatch.setattr(results, "load_runs", lambda study, out: {"prose": decayed}[study])
    monkeypatch.setattr(results, "has_index", lambda study, out: True)
    ln, _ = effect(prose_analysis._embdecay(undecayed, tmp_path), "ln")
    assert ln["difference"]["mean"] == pytest.approx(-0.03, abs=0.005)
    monkeypatch.setattr(results, "has_index", lambda study, out: False)
    (found,) = prose_analysis._embdecay(undecayed, tmp_path)["recipes"]
    assert found["effects"] == []
