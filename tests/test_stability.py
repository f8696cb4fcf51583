import json

import numpy as np
import pandas as pd
import pytest

from embnorm_lib.analyses import stability, stability_words
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.records.seal import seal_run


def lr_runs():
    rows = []
    curves = {"none": [2.0, 1.5, 3.0], "ln": [1.8, 1.6, 1.7]}
    for variant, losses in curves.items():
        for seed in range(2):
            for lr, loss in zip([1e-3, 3e-3, 1e-2], losses):
                rows.append({"variant": variant, "seed": seed, "cfg.lr": lr, "val_loss": loss + 0.01 * seed,
                             "init_val_loss": 4.0, "diverged": False, "spike_count": 0, "peak_grad_norm": 1.0,
                             "diverged_step": np.nan})
    return pd.DataFrame(rows)


def test_lr_sensitivity_of_known_curves():
    table = stability.lr_sensitivity(lr_runs()).set_index("variant")
    assert table.loc["none", "lr_sensitivity"] == pytest.approx((2.0 + 1.5 + 3.0) / 3 - 1.5)
    assert table.loc["ln", "lr_sensitivity"] == pytest.approx((1.8 + 1.6 + 1.7) / 3 - 1.6)
    assert table.loc["none", "best_lr"] == 3e-3 and table.loc["ln", "best_lr"] == 3e-3


def test_diverged_and_worse_than_init_runs_count_at_the_init_loss():
    runs = lr_runs()
    runs.loc[(runs.variant == "none") & (runs["cfg.lr"] == 1e-2), ["diverged", "val_loss"]] = [True, np.nan]
    runs.loc[(runs.variant == "ln") & (runs["cfg.lr"] == 1e-2), "val_loss"] = 9.0  # worse than at init
    table = stability.lr_sensitivity(runs).set_index("variant")
    assert table.loc["none", "lr_sensitivity"] == pytest.approx((2.005 + 1.505 + 4.0) / 3 - 1.505)
    assert table.loc["ln", "lr_sensitivity"] == pytest.approx((1.805 + 1.605 + 4.0) / 3 - 1.605)
    assert table.loc["none", "diverged_runs"] == 2


def test_init_scale_sign_flip_is_detected():
    rows = []
    for std, shift in ((0.02, +0.2), (1.0, -0.1)):
        for seed in range(3):
            base = 2.5 + 0.01 * seed
            for variant, value in (("none", base), ("ln", base + shift + 0.001 * seed)):
                rows.append({"variant": variant, "seed": seed, "cfg.emb_init_std": std, "val_loss": value,
                             "diverged": False, "spike_count": 0})
    table = stability.axis_table(pd.DataFrame(rows), "cfg.emb_init_std")
    flip = stability.sign_flips(table)
    assert flip["flips"] and flip["by_init"] == {0.02: "hurts", 1.0: "helps"}


def test_divergence_table_counts_and_times():
    runs = pd.DataFrame([
        {"variant": "none", "seed": 0, "diverged": True, "diverged_step": 40, "spike_count": 3, "peak_grad_norm": 50.0, "val_loss": np.nan},
        {"variant": "none", "seed": 1, "diverged": True, "diverged_step": 60, "spike_count": 5, "peak_grad_norm": 70.0, "val_loss": np.nan},
        {"variant": "ln", "seed": 0, "diverged": False, "diverged_step": np.nan, "spike_count": 0, "peak_grad_norm": 2.0, "val_loss": 2.0},
        {"variant": "ln", "seed": 1, "diverged": False, "diverged_step": np.nan, "spike_count": 1, "peak_grad_norm": 3.0, "val_loss": 2.2},
    ])
    table = stability.divergence_table(runs).set_index("variant")
    assert table.loc["none", "diverged"] == 2 and table.loc["none", "median_step_to_divergence"] == 50
    assert table.loc["ln", "diverged"] == 0 and table.loc["ln", "spikes_per_run"] == 0.5
    assert table.loc["ln", "val_loss_mean_finished"] == pytest.approx(2.1)


def test_report_from_an_lr_study_on_disk(tmp_path):
    study = tmp_path / "stability-lr"
    study.mkdir()
    lr_runs().assign(arm=lambda d: d["variant"]).to_csv(study / "runs.csv", index=False)
    path = stability.write_report(tmp_path, tmp_path / "fig")
    text = path.read_text()
    _, sections = stability.analyse(tmp_path)
    assert stability_words.lowest_sensitivity(sections["lr_paired"]) == {
        "means": pytest.approx({"none": (2.0 + 1.5 + 3.0) / 3 - 1.5, "ln": (1.8 + 1.6 + 1.7) / 3 - 1.6}),
        "lowest": "ln", "resolved": True}
    assert "**Exploratory**" in text
    assert "Not run yet" in text and "`stability-stress`" in text
    assert (tmp_path / "fig" / "lr_sensitivity.png").stat().st_size > 1000


def test_a_ranking_the_paired_tests_do_not_resolve_is_not_stated_as_one():
    # the committed stability-lr numbers: none 0.2160, ln 0.2183 per seed; ln - none +0.002, t CI spans 0
    paired = pd.DataFrame({"variant": ["ln"], "sensitivity_none": [0.2160], "sensitivity_variant": [0.2183],
                           "delta_vs_none": [0.0023], "ci_low": [-0.086], "ci_high": [0.091], "p_t": [0.9]})
    paired = stability.with_holm(paired)
    assert stability_words.lowest_sensitivity(paired) == {"means": {"none": 0.2160, "ln": 0.2183}, "lowest": "none",
                                                    "resolved": False}
    assert stability_words.effect_words(paired.iloc[0], ("higher", "lower", "not resolved"), verb_last=True).endswith(
        "(not resolved)")


def test_paired_sensitivity_and_grid_divergence():
    runs = lr_runs()
    assert "Loss spikes on the LR grid" not in stability_words.verdict({"lr_grid": stability.lr_divergence(runs)})
    runs.loc[(runs.variant == "none") & (runs["cfg.lr"] == 1e-2), ["diverged", "val_loss", "spike_count"]] = [True, np.nan, 2]
    paired = stability.paired_sensitivity(runs).set_index("variant")
    # none per seed: (2+s, 1.5+s, 4.0 capped) -> mean - min; ln: (1.8+s, 1.6+s, 1.7+s) -> 0.1
    none_sens = np.mean([(2.0 + 1.5 + 4.0 + 0.02 * s) / 3 - (1.5 + 0.01 * s) for s in range(2)])
    assert paired.loc["ln", "delta_vs_none"] == pytest.approx(0.1 - none_sens)
    grid = stability.lr_divergence(runs).set_index(["variant", "cfg.lr"])
    assert grid.loc[("none", 1e-2), "diverged"] == 2 and grid.loc[("none", 1e-2), "spikes_per_run"] == 2
    assert stability_words.grid_spikes(stability.lr_divergence(runs)) == {"spiky": {"none": [1e-2]}, "quiet": ["ln"]}
    assert "`none` at lr 0.01" in stability_words.verdict({"lr_grid": stability.lr_divergence(runs)})
    assert grid.loc[("ln", 1e-2), "diverged"] == 0 and grid.loc[("none", 1e-3), "capped_loss_mean"] == pytest.approx(2.005)


def stress_runs(none_diverged=3, ln_diverged=0, n=3):
    rows = []
    for variant, k in (("none", none_diverged), ("ln", ln_diverged)):
        for seed in range(n):
            div = seed < k
            rows.append({"variant": variant, "seed": seed, "diverged": div, "diverged_step": 30 + seed if div else np.nan,
                         "spike_count": 4 if div else 0, "peak_grad_norm": 9.0, "val_loss": np.nan if div else 2.0})
    return pd.DataFrame(rows)


def test_fisher_test_of_divergence_rates_and_the_verdict():
    table = stability.divergence_vs_none(stress_runs(3, 0, n=6)).set_index("variant")
    from scipy.stats import fisher_exact
    assert table.loc["ln", "p_fisher_vs_none"] == pytest.approx(fisher_exact([[0, 6], [3, 3]]).pvalue)
    assert np.isnan(table.loc["none", "p_fisher_vs_none"])
    def decision(none_diverged, ln_diverged):
        return stability_words.stress_decision(stability.divergence_vs_none(stress_runs(none_diverged, ln_diverged)))

    assert decision(3, 0) == {"unstable": True, "fixers": ["ln"]}
    assert decision(3, 1) == {"unstable": True, "fixers": []}
    assert decision(0, 0) == {"unstable": False, "fixers": []}
    assert "`ln` fixes it" in stability_words.verdict({"stress": stability.divergence_vs_none(stress_runs(3, 0))})


def test_budget_verdict_tells_early_speed_from_final_quality():
    def table(deltas, p=0.001):
        return stability.with_holm(pd.DataFrame([{"cfg.max_iters": it, "variant": "ln", "delta_vs_none": d,
                                                  "ci_low": d - 0.01, "ci_high": d + 0.01, "p_t": p}
                                                 for it, d in deltas.items()]))
    assert stability_words.budget_decision(table({150: -0.1, 2000: 0.05})) == {"costs": [2000], "gains": [150]}
    assert "early-speed effect" in stability_words.verdict({"budget": table({150: -0.1, 2000: 0.05})})
    assert stability_words.budget_decision(table({150: 0.1, 2000: 0.05})) == {"costs": [150, 2000], "gains": []}
    # decisions follow Holm, not the raw interval: an interval off 0 with p above its Holm level resolves nothing
    assert not table({300: 0.05, 150: 0.04}, p=0.04)["significant"].any()
    assert "does not resolve" in stability_words.effect_words(table({300: 0.05, 150: 0.04}, p=0.04).iloc[0])
    assert stability_words.budget_decision(table({150: 0.1, 2000: 0.05}, p=0.2)) == {"costs": [], "gains": []}


def write_run(root, study, arm, seed, summary, config, steps=()):
    run = root / study / arm / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"git_commit": "abc123", "steps": steps[-1]["step"] if steps else 0,
                                                  **summary}))
    (run / "config.json").write_text(json.dumps({"variant": summary["variant"], "seed": seed, **config}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    seal_run(RunDir(run))  # as a finished run is


def four_studies(root):
    """stability-lr, -init, -stress and -budget on disk, indexed: 42 runs whose numbers are planted."""
    from embnorm_lib.runner.results import build_index

    for variant in ("none", "ln"):
        for seed in range(3):
            for lr in (1e-3, 1e-2):
                loss = 2.0 + (0.5 if lr == 1e-2 and variant == "none" else 0) + 0.01 * seed
                write_run(root, "stability-lr", f"{variant}_lr={lr}", seed,
                          {"variant": variant, "seed": seed, "val_loss": loss, "init_val_loss": 4.2, "diverged": False,
                           "spike_count": 0, "peak_grad_norm": 1.0, "wall_s": 60.0}, {"lr": lr, "max_iters": 300})
            for std, shift in ((0.02, 0.1), (1.0, -0.1)):
                write_run(root, "stability-init", f"{variant}_emb_init_std={std}", seed,
                          {"variant": variant, "seed": seed, "diverged": False, "spike_count": 0, "wall_s": 30.0,
                           "val_loss": 2.5 + 0.01 * seed + (shift + 0.001 * seed if variant == "ln" else 0),
                           "final_block1_input_norm": 11.3 if variant == "ln" else 0.4},
                          {"emb_init_std": std})
            div = variant == "none"
            write_run(root, "stability-stress", variant, seed,
                      {"variant": variant, "seed": seed, "diverged": div, "diverged_step": 40 if div else None,
                       "val_loss": None if div else 2.4, "spike_count": 3 if div else 0, "peak_grad_norm": 5.0,
                       "wall_s": 100.0}, {"n_layer": 16, "warmup_frac": 0.0},
                      [{"step": i, "train_loss": 9.0 if div and i in (20, 25, 30) else 4.0 - 0.01 * i,
                        "grad_norm_total": 1.0} for i in range(1, 40)])  # none: 3 loss spikes after the warm-up
            for iters in (150, 2000):
                write_run(root, "stability-budget", f"{variant}_max_iters={iters}", seed,
                          {"variant": variant, "seed": seed, "diverged": False, "spike_count": 0, "wall_s": 10.0,
                           "val_loss": 2.0 + 0.01 * seed + (0.1 + 0.001 * seed if variant == "ln" else 0)},
                          {"max_iters": iters})
    for study in stability.STUDIES:
        build_index(study, root)


def test_full_report_from_all_four_studies_on_disk(tmp_path):
    """The decisions and numbers of the four planted studies (the report's wording: tests/golden/stability_STABILITY.md)."""
    four_studies(tmp_path)
    stability.write_report(tmp_path, tmp_path / "fig")
    available, sections = stability.analyse(tmp_path)
    assert sorted(available) == sorted(stability.STUDIES)
    assert sections["flip"]["flips"] and sections["flip"]["by_init"] == {0.02: "hurts", 1.0: "helps"}
    stress = sections["stress"].set_index("variant")
    assert (stress.loc["none", "failed"], stress.loc["none", "runs"]) == (3, 3)
    assert stability_words.stress_decision(sections["stress"]) == {"unstable": True, "fixers": ["ln"]}
    # the init grid's lowest cell: ln at std 1, 2.5 + mean 0.01·seed - 0.1 + mean 0.001·seed
    cell = stability_words.lowest_init_cell(sections["init"])
    assert (cell["variant"], cell["cfg.emb_init_std"]) == ("ln", 1.0)
    assert cell["val_loss_mean"] == pytest.approx(2.5 + 0.01 - 0.1 + 0.001)
    # tuned: both arms best at lr 1e-3 with the same mean loss, so no ranking is resolved
    best = sections["lr"].set_index("variant")
    assert list(best["best_lr"]) == [1e-3, 1e-3] and best["best_loss"].to_numpy() == pytest.approx([2.01, 2.01])
    assert stability_words.tuned_winner(sections["lr"], sections["lr_best"])["resolved"] is False
    # LR sensitivity: none's 0.5 above its best at half the grid, ln's 0; paired, resolved lower
    paired = sections["lr_paired"].set_index("variant")
    assert paired.loc["ln", ["delta_vs_none", "ci_low", "ci_high"]].to_numpy() == pytest.approx([-0.25] * 3)
    assert paired.loc["ln", "significant"]
    # budget: ln costs 0.1 + mean 0.001·seed at both budgets, resolved
    ln = sections["budget"][sections["budget"]["variant"] == "ln"]
    assert ln["delta_vs_none"].to_numpy() == pytest.approx([0.101, 0.101]) and ln["significant"].all()
    assert stability_words.budget_decision(sections["budget"]) == {"costs": [150, 2000], "gains": []}
    cost = pd.DataFrame([stability.study_cost(s, r, tmp_path) for s, r in available.items()])
    assert (cost["runs"].sum(), cost["trained"].sum(), cost["sweep_wall_min"].notna().any()) == (42, 42, False)
    for name in ("lr_sensitivity", "stress_loss_traces", "budget_deltas"):
        assert (tmp_path / "fig" / f"{name}.png").stat().st_size > 1000
    quoted = stability.recommendation_for(tmp_path)
    assert quoted == stability_words.recommendation(sections) and "## Grid" not in quoted
    from embnorm_lib.publishing.report import reused_data, runs_readme

    stress_entry = reused_data("stability-stress", tmp_path)
    assert {k: stress_entry[k] for k in ("finished", "planned", "reused", "diverged")} == \
        {"finished": 6, "planned": 12, "reused": 0, "diverged": 3}
    readme = runs_readme(tmp_path).splitlines()
    assert any(line.startswith("- `stability-stress`: ") for line in readme)
    section = readme[readme.index("## seeds-final") + 1:]
    section = section[:next(k for k, line in enumerate(section) if line.startswith("## "))]
    assert any(line.startswith("Not run yet") for line in section)  # a registered study not run here
