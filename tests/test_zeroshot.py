"""Suite v2's item-level analysis on synthetic item answers whose truth is known."""
import numpy as np
import pytest

from embnorm_lib.analyses import zeroshot


def synthetic(effect=0.05, seeds=10, items=400, seed=0):
    """none answers each item correctly with an item-specific probability; ln's is higher by `effect`."""
    rng = np.random.default_rng(seed)
    matrix = {}
    for task in ("a", "b"):
        p_item = rng.uniform(0.2, 0.8, size=items)
        matrix[task] = {arm: {s: (rng.random(items) < np.clip(p_item + shift, 0, 1)).astype(np.int8)
                              for s in range(seeds)} for arm, shift in (("none", 0.0), ("ln", effect))}
    return matrix


def test_paired_differences_are_per_seed_and_item():
    diffs = zeroshot.paired_item_differences(synthetic(), "ln")
    assert set(diffs) == {"a", "b"} and diffs["a"].shape == (10, 400)
    assert set(np.unique(diffs["a"])) <= {-1.0, 0.0, 1.0}


def test_the_two_way_bootstrap_finds_a_real_effect_and_covers_no_effect():
    found = zeroshot.two_way_bootstrap(zeroshot.paired_item_differences(synthetic(effect=0.1), "ln"), n_boot=2000)
    assert found["mean_diff"] == pytest.approx(0.1, abs=0.03) and found["ci_low"] > 0
    covered = 0
    for s in range(20):
        r = zeroshot.two_way_bootstrap(zeroshot.paired_item_differences(synthetic(effect=0.0, seed=s), "ln"),
                                       n_boot=500, seed=s)
        covered += r["ci_low"] <= 0 <= r["ci_high"]
    assert covered >= 17  # nominal 95%: 16 or fewer of 20 has probability 0.016 at exact coverage


def test_tasks_must_share_their_seeds():
    diffs = {"a": np.zeros((3, 5)), "b": np.zeros((4, 5))}
    with pytest.raises(ValueError, match="different seed counts"):
        zeroshot.two_way_bootstrap(diffs)


def test_the_item_sampling_mde_shrinks_with_seeds_and_grows_with_tests():
    assert zeroshot.item_sampling_mde(0.01, 10) < zeroshot.item_sampling_mde(0.01, 5)
    assert zeroshot.item_sampling_mde(0.01, 10, tests=10) > zeroshot.item_sampling_mde(0.01, 10, tests=1)


def write_scored_study(root, effect=0.1, seeds=5, items=300):
    """A study directory whose none/ln runs carry suite v2 item answers (lm_eval_v2.json) and a runs.csv."""
    import json

    import pandas as pd

    rows = []
    for arm, answers in synthetic(effect=effect, seeds=seeds, items=items)["a"].items():
        for seed, bits in answers.items():
            run = root / "toy" / arm / f"seed{seed}"
            run.mkdir(parents=True)
            (run / "summary.json").write_text("{}")
            task_b = np.roll(bits, seed + 1)
            result = {"items": {"shakespeare2_a": {"0shot": "".join(map(str, bits))},
                                "shakespeare2_b": {"0shot": "".join(map(str, task_b))}}}
            (run / "lm_eval_v2.json").write_text(json.dumps(result))
            rows.append({"run_dir": f"{arm}/seed{seed}", "variant": arm, "seed": seed,
                         "lm2.a.0shot.acc": bits.mean(), "lm2.b.0shot.acc": task_b.mean(),
                         "lm2_macro_acc": (bits.mean() + task_b.mean()) / 2})
    pd.DataFrame(rows).to_csv(root / "toy" / "runs.csv", index=False)


def test_the_report_tests_macro_and_tasks_in_one_holm_family_and_measures_the_mde(tmp_path):
    write_scored_study(tmp_path)
    import pandas as pd

    runs = pd.read_csv(tmp_path / "toy" / "runs.csv")
    table = zeroshot.family_table(runs)
    assert list(table["task"]) == ["macro", "a", "b"] and (table["p_holm"] >= table["p_t"]).all()
    macro = table.set_index("task").loc["macro"]
    assert macro["mean_diff"] == pytest.approx(runs.groupby("variant")["lm2_macro_acc"].mean().diff().iloc[-1] * -1)
    mde = zeroshot.measured_mde(table).iloc[0]
    assert mde["mde_at_10_seeds"] < mde["mde_at_seeds_used"]
    text = zeroshot.write_report("toy", tmp_path).read_text()
    assert "10 runs scored with suite v2" in text and "Two-way bootstrap" in text
    assert "**Exploratory**" in text and "Difficulty for `none`" in text


def test_difficulty_flags_a_task_near_chance_and_the_registered_studies_are_confirmatory(tmp_path):
    import pandas as pd

    runs = pd.DataFrame({"variant": ["none", "none", "ln", "ln"], "seed": [0, 1, 0, 1],
                         "lm2.easy.0shot.acc": [0.97, 0.99, 0.9, 0.9], "lm2.fair.0shot.acc": [0.5, 0.6, 0.5, 0.5],
                         "lm2.hard.0shot.acc": [0.27, 0.29, 0.3, 0.3]})
    d = zeroshot.difficulty(runs).set_index("task")
    assert d.loc["fair", "well_inside"] and not d.loc["easy", "well_inside"] and not d.loc["hard", "well_inside"]
    assert d.loc["hard", "above_chance"] == pytest.approx(0.03)
    assert {"main", "seeds-final"} <= set(zeroshot.REGISTERED) and "stability-h1b-v2" not in zeroshot.REGISTERED


def test_the_findings_line_words_each_variant_by_its_holm_decision(tmp_path):
    write_scored_study(tmp_path, effect=0.2, seeds=6)
    (d,) = zeroshot.analyse("toy", tmp_path).values()
    line = zeroshot.findings_line(d)
    assert "6 seeds" in line and "`ln` +" in line and ", significant)" in line
    write_scored_study(tmp_path / "null", effect=0.0, seeds=3)
    (null,) = zeroshot.analyse("toy", tmp_path / "null").values()
    assert "direction not resolved" in zeroshot.findings_line(null)


def test_regimes_of_one_study_are_analysed_apart_never_paired_across(tmp_path):
    """main holds two regimes with the same seeds: seed 0 of one is not the pair of seed 0 of the other."""
    import pandas as pd

    write_scored_study(tmp_path / "short", effect=0.2, seeds=4)
    write_scored_study(tmp_path / "long", effect=0.0, seeds=4)
    study = tmp_path / "both" / "toy"
    rows = []
    for regime in ("short", "long"):
        runs = pd.read_csv(tmp_path / regime / "toy" / "runs.csv")
        for r in runs.itertuples():
            arm = f"{r.variant}_preset={regime}"
            src = tmp_path / regime / "toy" / r.run_dir
            dst = study / arm / f"seed{r.seed}"
            dst.mkdir(parents=True)
            for f in src.iterdir():
                (dst / f.name).write_bytes(f.read_bytes())
        rows.append(runs.assign(run_dir=[f"{v}_preset={regime}/seed{s}" for v, s in zip(runs.variant, runs.seed)],
                                arm=[f"{v}_preset={regime}" for v in runs.variant]))
    pd.concat(rows).to_csv(study / "runs.csv", index=False)
    found = zeroshot.analyse("toy", tmp_path / "both")
    assert list(found) == ["preset=short", "preset=long"]
    for regime in ("short", "long"):
        (alone,) = zeroshot.analyse("toy", tmp_path / regime).values()
        pd.testing.assert_frame_equal(found[f"preset={regime}"]["family"], alone["family"])
        assert found[f"preset={regime}"]["bootstrap"]["mean_diff"].iloc[0] == alone["bootstrap"]["mean_diff"].iloc[0]
    text = zeroshot.write_report("toy", tmp_path / "both").read_text()
    assert "in 2 regimes" in text and "## Regime `preset=short`" in text and "### Difficulty for `none`" in text
    assert "(preset=long)" in zeroshot.findings_line(found["preset=long"])


def test_an_axis_that_belongs_to_the_arm_does_not_split_the_regime():
    """H1b's tuned runs put each arm at its own best LR: none at 1e-2 pairs with ln at 3e-3 in one regime, while a
    regime axis (the preset, the clip) still keeps runs apart."""
    import pandas as pd

    runs = pd.DataFrame({"variant": ["none", "ln", "none", "ln"],
                         "arm": ["none_grad_clip=1.0_lr=0.01", "ln_grad_clip=1.0_lr=0.003",
                                 "none_grad_clip=0.0_lr=0.01", "ln_grad_clip=0.0_lr=0.003"]})
    assert list(zeroshot.regime_of(runs)) == ["grad_clip=1.0_lr=0.01", "grad_clip=1.0_lr=0.003",
                                              "grad_clip=0.0_lr=0.01", "grad_clip=0.0_lr=0.003"]
    assert list(zeroshot.regime_of(runs, ("lr",))) == ["grad_clip=1.0", "grad_clip=1.0", "grad_clip=0.0",
                                                       "grad_clip=0.0"]
    assert list(zeroshot.regime_of(runs.assign(arm=["none_lr=0.01", "ln_lr=0.003"] * 2), ("lr",))) == [""] * 4
    assert zeroshot.ARM_AXES["stability-h1b-v2"] == ("lr",)


@pytest.mark.committed
def test_the_h1b_tuned_runs_are_one_regime_with_every_arm_paired_to_none():
    from pathlib import Path

    (d,) = zeroshot.analyse("stability-h1b-v2", Path(__file__).resolve().parents[1] / "runs", bootstrap=False).values()
    assert len(d["runs"]) == 20 and d["seeds"] == [3, 4, 5, 6, 7]
    assert (d["family"]["n"] == 5).all() and d["family"]["p_holm"].notna().all()
