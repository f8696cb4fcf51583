"""Stability v2's LR-boundary analysis on a synthetic grid whose answers are known."""
import numpy as np
import pandas as pd
import pytest

from embnorm_lib.analyses import boundary

LRS = [1e-3, 1e-2, 1e-1, 1.0]


def synthetic_runs(none_breaks_at=1e-1, ln_breaks_at=1.0, seeds=(0, 1, 2)):
    """none fails from `none_breaks_at` up (seed 2 one step later), ln from `ln_breaks_at`; ln costs 0.1 nats."""
    rows = []
    for variant, breaks in (("none", none_breaks_at), ("ln", ln_breaks_at)):
        for seed in seeds:
            for lr in LRS:
                limit = breaks * (10 if variant == "none" and seed == 2 else 1)
                failed = lr >= limit
                loss = 2.0 + 0.1 * (variant == "ln") - 0.1 * np.log10(lr) * 0.1 + 0.01 * seed
                rows.append({"variant": variant, "seed": seed, "cfg.lr": lr, "failed": failed,
                             "diverged": failed and lr == 1.0, "val_loss": np.nan if failed and lr == 1.0 else
                             (5.0 if failed else loss), "init_val_loss": 4.2, "max_attn_logit": 10 * lr,
                             "clipped_frac": 0.5, "spike_count": 0, "run_dir": f"{variant}_lr={lr}/seed{seed}"})
    return pd.DataFrame(rows)


def test_the_max_stable_lr_is_the_largest_lr_that_did_not_fail_per_seed():
    per_seed = boundary.max_stable_lr_per_seed(synthetic_runs()).set_index(["variant", "seed"])
    assert per_seed.loc[("none", 0), "max_stable_lr"] == pytest.approx(1e-2)
    assert per_seed.loc[("none", 2), "max_stable_lr"] == pytest.approx(1e-1)
    assert per_seed.loc[("ln", 1), "max_stable_lr"] == pytest.approx(1e-1)
    assert per_seed.loc[("none", 0), "first_failed_lr"] == pytest.approx(1e-1)
    table = boundary.boundary_table(synthetic_runs()).set_index("variant")
    assert table.loc["none", "max_stable_lr_geo_mean"] == pytest.approx(10 ** np.mean([-2, -2, -1]))
    assert table.loc["ln", "delta_log10_vs_none"] == pytest.approx(1 - 1 / 3)
    assert table.loc["ln", "seeds_with_a_failure"] == 3


def test_the_phase_diagram_counts_failures_and_keeps_losses_of_runs_that_did_not_fail():
    phase = boundary.phase_table(synthetic_runs()).set_index(["variant", "cfg.lr"])
    assert phase.loc[("none", 1e-1), "failed"] == 2 and phase.loc[("none", 1e-1), "runs"] == 3
    assert phase.loc[("none", 1.0), "diverged"] == 3
    assert np.isnan(phase.loc[("none", 1.0), "val_loss_not_failed"])
    assert phase.loc[("ln", 1e-3), "val_loss_not_failed"] < 3


def test_h1b_candidates_are_the_lrs_where_none_fails_with_fisher_and_holm():
    runs = synthetic_runs()
    phase = boundary.phase_table(runs)
    assert boundary.unstable_baseline_lrs(phase) == [0.1, 1.0]
    h1b = boundary.h1b_candidates(runs, phase).set_index("cfg.lr")
    assert h1b.loc[0.1, "failed"] == 0 and h1b.loc[0.1, "none_failed"] == 2
    assert h1b.loc[0.1, "p_fisher"] == pytest.approx(0.4)  # 0/3 vs 2/3: not resolvable at 3 seeds
    assert not h1b["significant"].any()
    stable = synthetic_runs(none_breaks_at=10.0)
    assert boundary.h1b_candidates(stable, boundary.phase_table(stable)).empty


def h1b_runs(none_fails=(0, 1, 2), ln_cost=0.005, seeds=range(8)):
    rows = []
    for variant in ("none", "ln"):
        for seed in seeds:
            failed = variant == "none" and seed in none_fails
            rows.append({"variant": variant, "seed": seed, "cfg.lr": 0.3, "failed": failed, "diverged": failed,
                         "val_loss": np.nan if failed else 2.0 + 0.01 * seed + (ln_cost if variant == "ln" else 0)
                         + 0.0005 * (seed % 3),
                         "spike_count_post_warmup": (3 + seed % 2) if variant == "none" else seed % 2})
    return pd.DataFrame(rows)


def test_h1b_is_one_holm_family_of_three_endpoints_and_decision_rule_3():
    family, decision = boundary.h1b_family(h1b_runs())
    assert list(family["endpoint"]) == ["failures", "spike_count_post_warmup", "val_loss_not_failed"]
    rows = family.set_index("endpoint")
    assert (rows.loc["failures", "variant_value"], rows.loc["failures", "none_value"]) == (0, 3)
    assert rows.loc["spike_count_post_warmup", "mean_diff"] == pytest.approx(-3.0)
    assert rows.loc["val_loss_not_failed", "n"] == 5  # seeds where neither run failed
    assert rows.loc["val_loss_not_failed", "mean_diff"] == pytest.approx(0.005)
    assert decision["baseline_unstable"] and decision["variants"]["ln"]["fixes"]
    assert decision["variants"]["ln"]["verdict"] == "adopt ln"  # cost CI upper end within the MEI of 0.01
    _, costly = boundary.h1b_family(h1b_runs(ln_cost=0.05))
    assert costly["variants"]["ln"]["verdict"] == "keep baseline"
    _, stable = boundary.h1b_family(h1b_runs(none_fails=()).assign(
        spike_count_post_warmup=lambda f: f["seed"] % 2))
    assert not stable["baseline_unstable"] and stable["variants"]["ln"]["verdict"] == "keep baseline"


def test_a_seed_whose_grid_is_not_complete_yet_is_left_out_of_the_max_stable_lr():
    runs = synthetic_runs()
    partial = runs[~((runs["seed"] == 2) & (runs["cfg.lr"] > 1e-2))]  # seed 2 has reached 1e-2 only
    table = boundary.boundary_table(partial).set_index("variant")
    assert table.loc["none", "seeds"] == 2 and table.loc["none", "max_stable_lr_geo_mean"] == pytest.approx(1e-2)


def test_an_arm_whose_best_lr_is_at_the_edge_of_the_grid_is_named_with_it():
    from embnorm_lib.analyses.stability import lr_sensitivity

    inside = synthetic_runs()  # none is best at 1e-2, ln at 1e-1: both inside [1e-3, 1]
    assert boundary.best_lr_at_grid_edge(inside, lr_sensitivity(inside)) == {}
    assert boundary._edge_words({}) == "Every arm's best LR lies inside the grid."
    edge = synthetic_runs(ln_breaks_at=10.0)  # ln never fails, and its loss falls with the LR: best at the top
    assert boundary.best_lr_at_grid_edge(edge, lr_sensitivity(edge)) == {"ln": 1.0}
    assert "`ln` (1)" in boundary._edge_words({"ln": 1.0})


def test_a_searchs_readme_line_names_each_arms_failures_and_the_lowest_failing_lr():
    runs = synthetic_runs().assign(**{"cfg.grad_clip": 0.0, "cfg.n_layer": 16})
    line = boundary.search_words("a-search", runs)
    assert line.startswith("- 16 layers, no gradient clipping (`a-search`, peak LR 0.001 to 1, 3 seeds): ")
    assert "`none` failed 2 of 3 at LR 0.1, 3 of 3 at LR 1; `ln` failed 3 of 3 at LR 1" in line
    assert line.endswith("; no run failed below LR 0.1.")
    stable = synthetic_runs(none_breaks_at=10.0, ln_breaks_at=10.0).assign(**{"cfg.grad_clip": 1.0, "cfg.n_layer": 4})
    assert boundary.search_words("s", stable).endswith("`none` did not fail; `ln` did not fail.")


def test_lr_curves_use_only_seeds_that_finished_every_cell_of_the_grid():
    runs = synthetic_runs()
    partial = runs[~((runs["seed"] == 2) & (runs["variant"] == "ln") & (runs["cfg.lr"] == 1.0))]
    assert sorted(boundary.complete_seed_runs(partial)["seed"].unique()) == [0, 1]
    assert sorted(boundary.complete_seed_runs(runs)["seed"].unique()) == [0, 1, 2]
    assert boundary.complete_seed_runs(runs[runs["seed"] == 0].iloc[1:]).empty
    assert boundary._curve_table(pd.DataFrame()) == "_No seed has finished the whole grid yet._"


def test_a_search_in_bf16_says_so_and_an_unset_precision_reads_as_fp32():
    runs = synthetic_runs().assign(**{"cfg.grad_clip": 1.0, "cfg.n_layer": 4})
    assert boundary.search_precision(runs) == "fp32"
    assert boundary.search_precision(runs.assign(**{"cfg.precision": "auto"})) == "fp32"
    bf16 = runs.assign(**{"cfg.precision": "bf16"})
    assert boundary.search_precision(bf16) == "bf16"
    assert boundary.search_words("s", bf16).startswith("- 4 layers, gradient clipping at 1, bf16 (`s`,")


def test_the_report_says_which_cpus_trained_a_study_and_how_many_runs_each():
    runs = synthetic_runs()
    assert boundary.cpu_words(runs) == "CPU: not recorded."
    assert boundary.cpu_words(runs.assign(cpu_model="A")) == "CPU: every run trained on A."
    mixed = runs.assign(cpu_model=["A"] * (len(runs) - 3) + ["B"] * 3)
    assert boundary.cpu_words(mixed).endswith(f"A: {len(runs) - 3} runs; B: 3 runs.")


def test_an_escape_is_an_lr_where_none_failed_and_the_arm_never_did():
    phase = boundary.phase_table(synthetic_runs())  # none fails from 0.1 (2 of 3) and at 1; ln only at 1
    escapes = boundary.failure_escapes(phase)
    assert escapes.to_dict("records") == [{"variant": "ln", "cfg.lr": 0.1}]
    assert boundary.failure_escapes(boundary.phase_table(synthetic_runs(ln_breaks_at=1e-1))).empty


def test_a_studys_compute_is_the_runs_wall_time_summed_and_the_logged_sweep_time():
    from embnorm_lib.publishing.report import compute_words

    runs = pd.DataFrame({"wall_s": [1800.0, 1800.0, 3600.0]})
    prov = {"sweep_wall_s": 2400.0, "layouts": [(2, 1)]}
    words = compute_words(runs, prov)
    assert words.startswith("compute 2.0 h of run time summed over runs, 40 min of logged sweep wall time (")
    assert compute_words(pd.DataFrame({"x": [1]}), {"sweep_wall_s": 0.0, "layouts": []}).startswith("compute 0.0 h")
