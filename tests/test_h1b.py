"""H1b's confirmatory analysis (amendment 2) on synthetic runs of the registered grid whose answers are known."""
import numpy as np
import pandas as pd
import pytest

from embnorm_lib.analyses import h1b
from embnorm_lib.studies import H1B_BEST_LR, STUDIES


def synthetic(tuned_cost=0.002, none_fails_clipped=(3, 4, 5, 6, 7), seeds=None):
    """The registered cells of stability-h1b-v2: at LR 1 none fails on `none_fails_clipped` seeds with clipping
    and on every seed without; ln never fails; rms fails without clipping; scaled never fails. At the best LRs
    ln costs `tuned_cost`, rms 0.1 and scaled 0.2 nats over none (plus seed noise)."""
    extra = {"none": 0.0, "ln": tuned_cost, "rms": 0.1, "scaled": 0.2}
    rows = []
    for cell in STUDIES[h1b.STUDY].cells():
        if seeds is not None and cell.seed not in seeds:
            continue
        cfg = dict(cell.overrides)
        lr, clip = cfg["lr"], cfg["grad_clip"]
        failed = lr == 1.0 and ((cell.variant == "none" and (clip == 0.0 or cell.seed in none_fails_clipped))
                                or (cell.variant == "rms" and clip == 0.0))
        noise = 0.001 * ((cell.seed * 7) % 5)
        jitter = 0.0005 * (cell.seed % 2) if cell.variant != "none" else 0.0  # a non-constant paired difference
        loss = 2.0 + noise + (extra[cell.variant] + jitter if lr == H1B_BEST_LR[cell.variant] else 0.5 + lr)
        rows.append({"variant": cell.variant, "seed": cell.seed, "cfg.lr": lr, "cfg.grad_clip": clip,
                     "failed": failed, "diverged": failed, "val_loss": np.nan if failed else loss,
                     "spike_count_post_warmup": 2 if failed else 0, "max_attn_logit": 1e6 * lr,
                     "clipped_frac": 0.5 if clip else 0.0, "run_dir": f"{cell.variant}{cell.tag}/seed{cell.seed}",
                     "git_commit": "0" * 40})
    return pd.DataFrame(rows)


def test_the_tuned_cells_are_each_arm_at_its_own_best_lr_with_clipping():
    tuned = h1b.tuned_runs(synthetic())
    assert len(tuned) == 4 * 5
    assert dict(zip(tuned["variant"], tuned["cfg.lr"], strict=False)) == H1B_BEST_LR
    assert (tuned["cfg.grad_clip"] == 1.0).all()


def test_each_regime_is_one_holm_family_of_four_endpoints_and_rule_3_judges_the_tuned_cost():
    results = h1b.confirmatory(synthetic())
    assert set(results) == {1.0, 0.0}
    family, decision = results[1.0]
    assert len(family) == 3 * 4 and set(family["endpoint"]) == {"failures", "spike_count_post_warmup",
                                                               "val_loss_not_failed", "tuned_cost"}
    rows = family.set_index(["variant", "endpoint"])
    assert (rows.loc[("ln", "failures"), "variant_value"], rows.loc[("ln", "failures"), "none_value"]) == (0, 5)
    assert rows.loc[("ln", "failures"), "p"] == pytest.approx(0.0079, abs=1e-4)  # 0/5 vs 5/5, Fisher two-sided
    assert np.isnan(rows.loc[("ln", "val_loss_not_failed"), "p"])  # no pair of non-failed runs: not tested
    assert rows.loc[("ln", "tuned_cost"), "mean_diff"] == pytest.approx(0.002 + 0.0005 * 3 / 5)  # seeds 3, 5, 7 odd
    tested = family["p"].notna()
    assert family.loc[tested, "p_holm"].ge(family.loc[tested, "p"]).all()
    assert decision["baseline_unstable"]
    assert decision["variants"]["ln"]["verdict"] == "adopt ln"  # fixes it; tuned cost within the MEI
    assert decision["variants"]["ln"]["cost_endpoint"] == "tuned_cost"
    assert decision["variants"]["scaled"]["verdict"] == "keep baseline"  # fixes it, but costs 0.2 nats
    _, no_clip = results[0.0]
    assert not no_clip["variants"]["rms"]["fixes"]  # rms fails without clipping too


def test_an_expensive_fix_or_a_stable_baseline_keeps_the_baseline():
    _, costly = h1b.confirmatory(synthetic(tuned_cost=0.05))[1.0]
    assert costly["variants"]["ln"]["verdict"] == "keep baseline"
    _, stable = h1b.confirmatory(synthetic(none_fails_clipped=()))[1.0]
    assert not stable["baseline_unstable"]
    assert all(v["verdict"] == "keep baseline" for v in stable["variants"].values())


def test_the_bracket_table_pools_the_search_seeds_with_the_fresh_ones():
    fresh = synthetic()
    search = synthetic(seeds=range(3, 6)).assign(seed=lambda f: f["seed"] - 3)  # three seeds standing for 0-2
    table = h1b.bracket_table(fresh, {1.0: search, 0.0: search})
    row = table[(table["regime"] == "no clipping") & (table["cfg.lr"] == 1.0)].set_index("variant")
    assert row.loc["none", "failed_search"] == "3/3" and row.loc["none", "failed_fresh"] == "5/5"
    assert row.loc["ln", "failed_pooled"] == "0/8"
    assert row.loc["ln", "p_fisher_pooled"] < 0.001 and row.loc["ln", "significant"]


def test_only_seeds_with_every_cell_finished_enter_the_family():
    runs = synthetic()
    partial = runs.drop(runs.index[(runs["seed"] == 7) & (runs["variant"] == "scaled")])
    assert h1b.complete_seeds(partial) == [3, 4, 5, 6]


def test_the_report_renders_from_a_runs_index(tmp_path):
    study_dir = tmp_path / h1b.STUDY
    study_dir.mkdir()
    synthetic().to_csv(study_dir / "runs.csv", index=False)
    text = h1b.write_report(tmp_path, tmp_path / "figures").read_text()
    assert "100 of 100 registered runs finished" in text and "partial" not in text
    assert "Decision rule 3: the baseline is **unstable**" in text and "`ln`: adopt ln" in text
    assert (tmp_path / "figures" / "h1b_stability_vs_cost.png").is_file()


def test_publish_knows_the_plugin_of_every_registered_study():
    from embnorm_lib.runner.registry import ANALYSES, analysis_of
    from embnorm_lib.studies import STUDIES

    for study in STUDIES:
        plugin = analysis_of(study)
        assert plugin.kind == STUDIES[study].analysis and callable(plugin.publish), study
    assert analysis_of("an-adhoc-grid").kind == "paired"  # a study outside the registry is a paired one
    assert ANALYSES["h1b"].partial and not ANALYSES["paired"].partial


def test_publishing_the_h1b_study_writes_its_report_and_the_runs_readme(tmp_path):
    from embnorm_lib.publishing.publish import publish

    (tmp_path / h1b.STUDY).mkdir()
    synthetic().to_csv(tmp_path / h1b.STUDY / "runs.csv", index=False)
    written = publish(h1b.STUDY, tmp_path, tmp_path / "figures")
    assert set(written) == {"H1B.md", "runs/README.md", "runs/RECIPES.md"}  # not the committed directory: no paper, no findings
    assert "H1b, confirmatory" in (tmp_path / "README.md").read_text()


def test_the_length_summary_averages_the_early_and_late_positions():
    from embnorm_lib.analyses import length

    deltas = pd.DataFrame({"variant": ["ln"] * 64, "position": range(1, 65),
                           "delta_vs_none": [0.0] * 8 + [0.05] * 24 + [0.1] * 32})
    row = length.band_summary(deltas).set_index("variant").loc["ln"]
    assert row["delta_positions_1_8"] == 0.0 and row["delta_positions_33_64"] == pytest.approx(0.1)


def test_the_readme_findings_quote_rule_3_only_when_every_seed_has_finished(tmp_path):
    from embnorm_lib.analyses.findings import h1b_findings

    (tmp_path / h1b.STUDY).mkdir()
    runs = synthetic()
    runs.to_csv(tmp_path / h1b.STUDY / "runs.csv", index=False)
    lines = h1b_findings(tmp_path)
    assert len(lines) == 3 and "`ln`: adopt ln" in lines[0] and "failed 5 of 5" in lines[0]
    assert lines[2].startswith("- The tuned cost is the same in both regimes")  # one set of tuned runs, clipped
    runs[runs["seed"] != 7].to_csv(tmp_path / h1b.STUDY / "runs.csv", index=False)
    assert h1b_findings(tmp_path) == []
