import warnings

import numpy as np
import pandas as pd
import pytest

from embnorm_lib import stats


def make_runs(baseline, variants, metric="val_loss", **extra):
    rows = []
    for seed, value in enumerate(baseline):
        rows.append({"variant": "none", "seed": seed, metric: value, "diverged": False, "spike_count": 0, **extra})
    for name, values in variants.items():
        for seed, value in enumerate(values):
            rows.append({"variant": name, "seed": seed, metric: value, "diverged": False, "spike_count": 0, **extra})
    return pd.DataFrame(rows)


def test_constant_shift_gives_exact_mean_and_a_degenerate_ci():
    base = [2.60, 2.70, 2.65, 2.58, 2.66]
    runs = make_runs(base, {"ln": [b + 0.05 for b in base]})
    c = stats.compare(runs, "val_loss", "ln")
    assert c.n == 5 and c.mean_diff == pytest.approx(0.05)
    assert c.ci_low == pytest.approx(0.05) and c.ci_high == pytest.approx(0.05)
    assert c.prob_improvement == 0.0 and c.p_t == 0.0


def test_a_shift_blurred_only_by_float_rounding_is_a_constant_shift_not_a_t_test_on_rounding_noise():
    base = 2 + np.random.default_rng(0).normal(0, 0.01, 5)
    shifted = base + 0.1
    diffs = shifted - base
    assert np.ptp(diffs) > 0  # the case itself: rounding leaves the differences unequal in their last bits
    runs = make_runs(list(base), {"ln": list(shifted)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy warns "catastrophic cancellation" when a t-test gets such data
        c = stats.compare(runs, "val_loss", "ln")
    assert c.ci_low == c.ci_high == pytest.approx(0.1) and c.p_t == 0.0 and c.sd_diff == 0.0
    assert stats.noiseless(diffs) and not stats.noiseless(diffs + [0, 1e-9, 0, 0, 0])  # real spread stays a t-test


def test_pairing_is_by_seed_not_by_row_order():
    runs = make_runs([1.0, 2.0, 3.0], {"ln": [1.1, 2.1, 3.1]}).sample(frac=1.0, random_state=0)
    pairs = stats.paired_differences(runs, "val_loss", "ln")
    assert list(pairs.index) == [0, 1, 2] and np.allclose(pairs["diff"], 0.1)


def test_holm_on_a_textbook_family():
    reject, adjusted = stats.holm([0.01, 0.04, 0.03, 0.005])
    # sorted p x (m, m-1, ...): 0.005*4, 0.01*3, 0.03*2, 0.04*1 -> made monotone
    assert np.allclose(adjusted, [0.03, 0.06, 0.06, 0.02])
    assert list(reject) == [True, False, False, True]


def test_holm_leaves_the_garbage_collector_as_it_found_it():
    import gc

    # Frozen objects still die by reference counting, so a caller's frozen count may shrink by itself between two
    # reads (CI saw 805058 -> 805056); what holm must not do is thaw it (count -> 0) or freeze anew (count grows).
    gc.unfreeze()
    stats.holm([0.01, 0.04, float("nan")])
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    gc.freeze()  # a caller that froze its own objects finds them still frozen
    try:
        frozen_by_caller = gc.get_freeze_count()
        made_after_the_freeze = [[i] for i in range(10_000)]  # tracked and live: a fresh freeze would take them
        stats.holm([0.01, 0.04])
        frozen_after = gc.get_freeze_count()
        assert len(made_after_the_freeze) == 10_000 and 0 < frozen_after <= frozen_by_caller
    finally:
        gc.unfreeze()


def test_effect_size_on_a_hand_computed_example():
    d_z, g_z = stats.effect_sizes(np.array([1.0, 2.0, 3.0]))  # mean 2, SD 1
    assert d_z == pytest.approx(2.0)
    assert g_z == pytest.approx(2.0 * (1 - 3 / 7))


def test_t_and_wilcoxon_agree_with_scipy_directly():
    from scipy import stats as sps

    d = np.array([0.02, -0.01, 0.03, 0.015, 0.04, 0.0, 0.025])
    assert stats.paired_t_p(d) == pytest.approx(sps.ttest_rel(d + 1.0, np.ones_like(d)).pvalue)
    assert stats.wilcoxon_p(d) == pytest.approx(sps.wilcoxon(d).pvalue)


def test_the_signed_rank_p_is_scipys_bit_for_bit_with_ties_and_zeros():
    """stats.wilcoxon_p enumerates the sign flips at once where scipy's default permutation test loops over them
    (zeros or ties, n <= 13): the p-values must be scipy's exactly, not approximately, or republished pages change."""
    from scipy import stats as sps

    from embnorm_lib.stats import signed_rank

    rng = np.random.default_rng(11)
    cases = [np.array([0.5, 0.5, -0.25, 0.0]), np.array([1.0, -1.0, 1.0, -1.0, 2.0]), np.array([0.0, 0.0, 3.0]),
             np.array([0.02, -0.01, 0.03, 0.015, 0.04, 0.0, 0.025]), np.array([3.0, -3.0] * 6 + [1.0])]  # 13 with ties
    # scipy's own time doubles with each difference: many short cases, two at the largest n
    cases += [rng.integers(-3, 4, int(n)) / 64.0 for n in rng.integers(2, 9, 60)]
    cases += [np.round(rng.normal(0, 1, int(n)), 1) for n in rng.integers(5, 9, 15)] + [np.round(rng.normal(0, 1, 11), 1)]
    cases += [rng.normal(0, 1, 8), rng.normal(0, 1, 20)]  # no ties: scipy's own exact path, passed through
    used = 0
    for d in cases:
        if np.all(d == 0):
            continue
        ours, theirs = stats.wilcoxon_p(d), float(sps.wilcoxon(d).pvalue)
        assert ours == theirs or (np.isnan(ours) and np.isnan(theirs)), (d.tolist(), ours, theirs)
        used += 1
    assert used > 70 and signed_rank.PERMUTATION_MAX_N == 13


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible():
    rng = np.random.default_rng(5)
    d = rng.normal(0.03, 0.01, size=10)
    lo, hi = stats.bootstrap_ci(d)
    assert lo < d.mean() < hi and hi - lo < 0.03
    assert stats.bootstrap_ci(d) == (lo, hi)


def test_power_figures_match_the_known_paired_t_sample_size():
    # effect size 0.5 (MEI 0.01 with SD 0.02) needs 34 pairs for 80% power at alpha 0.05
    mde, needed = stats.power_figures(sd_diff=0.02, n=34)
    assert needed == 34
    assert mde == pytest.approx(0.01, rel=0.03)


def test_family_is_holm_adjusted_across_variants_and_metrics():
    base = [2.6, 2.7, 2.65, 2.58, 2.66, 2.61]
    noise = [0.001, -0.002, 0.0015, 0.0, -0.001, 0.002]
    runs = make_runs(base, {"ln": [b + 0.05 + e for b, e in zip(base, noise)],
                            "rms": [b + e for b, e in zip(base, noise)]})
    runs["val_acc"] = 1 - runs["val_loss"] / 10
    fam = stats.comparison_family(runs, ["val_loss", "val_acc"])
    assert len(fam) == 4
    assert (fam["p_holm"] >= fam["p_t"]).all()
    ln = fam[(fam.variant == "ln") & (fam.metric == "val_loss")].iloc[0]
    rms = fam[(fam.variant == "rms") & (fam.metric == "val_loss")].iloc[0]
    assert ln.significant and not rms.significant


def test_decision_keeps_the_baseline_when_a_norm_regresses_a_stable_baseline():
    base = [2.6, 2.7, 2.65, 2.58, 2.66, 2.61]
    noise = [0.001, -0.002, 0.0015, 0.0, -0.001, 0.002]
    runs = make_runs(base, {"ln": [b + 0.05 + e for b, e in zip(base, noise)]})
    decision = stats.decide(stats.comparison_family(runs, ["val_loss"]), runs)
    assert decision["overall"] == "keep baseline" and decision["variants"]["ln"]["rule"] == 1


def test_decision_adopts_a_norm_that_fixes_an_unstable_baseline_cheaply():
    base = [2.6, 2.7, 2.65, 2.58, 2.66, 2.61]
    noise = [0.001, -0.002, 0.0015, 0.0, -0.001, 0.002]
    runs = make_runs(base, {"ln": [b + 0.002 + e for b, e in zip(base, noise)]})
    runs.loc[runs.variant == "none", "spike_count"] = 3
    decision = stats.decide(stats.comparison_family(runs, ["val_loss"]), runs)
    assert decision["baseline_unstable"] and decision["overall"] == "adopt ln"
    assert decision["variants"]["ln"]["rule"] == 3


def test_rule_3_names_failures_as_the_failure_definition_does():
    """A run that ended worse than at init is a failure, not a divergence (amendment 1): the reason says 'failed'."""
    base = [2.6, 2.7, 2.65, 2.58, 2.66, 2.61]
    runs = make_runs(base, {"ln": [b + 0.002 for b in base]}, failed=False)
    runs.loc[(runs.variant == "none") & (runs.seed == 0), "failed"] = True  # finite loss, above the loss at init
    decision = stats.decide(stats.comparison_family(runs, ["val_loss"]), runs)
    reason = decision["variants"]["ln"]["reason"]
    assert "baseline unstable (1 failed," in reason and "diverged" not in reason


def _t_coverage(draw, n: int, reps: int, rng) -> float:
    """Share of simulated paired designs whose 95% paired t interval covers the true mean difference (0); the
    intervals are computed for all designs at once, after checking the formula against stats.t_interval."""
    from scipy.stats import t as student_t

    diffs = draw(rng, (reps, n))
    half = student_t.ppf(0.975, n - 1) * diffs.std(axis=1, ddof=1) / np.sqrt(n)
    lo, hi = diffs.mean(axis=1) - half, diffs.mean(axis=1) + half
    for i in range(3):
        assert (lo[i], hi[i]) == pytest.approx(stats.t_interval(diffs[i]))
    return float(((lo <= 0.0) & (0.0 <= hi)).mean())


GAUSSIAN = lambda rng, n: rng.normal(0.0, 1.0, n)
SKEWED = lambda rng, n: rng.exponential(1.0, n) - 1.0  # centred exponential: strongly right-skewed


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_primary_interval_covers_at_the_seed_counts_the_studies_use(n):
    """docs/PROTOCOL.md amendment 1 claims: the paired t interval covers >= 0.93 for Gaussian differences at every
    n used (3, 5, 10), and >= 0.85 for strongly skewed ones."""
    rng = np.random.default_rng(n)
    assert _t_coverage(GAUSSIAN, n, 20_000, rng) >= 0.93
    assert _t_coverage(SKEWED, n, 20_000, rng) >= 0.85


def test_bca_undercovers_at_three_seeds_which_is_why_it_is_not_reported_there():
    rng = np.random.default_rng(3)
    hits = sum(lo <= 0.0 <= hi for lo, hi in (stats.bootstrap_ci(GAUSSIAN(rng, 3), n_resamples=2000, seed=i)
                                              for i in range(300)))
    assert hits / 300 < 0.85 and stats.BCA_MIN_N > 10


def test_smallest_wilcoxon_p_and_holm_levels():
    assert stats.wilcoxon_min_p(3) == 0.25 and stats.wilcoxon_min_p(5) == 0.0625
    from scipy.stats import wilcoxon

    assert wilcoxon([1.0, 2.0, 3.0, 4.0, 5.0]).pvalue == pytest.approx(stats.wilcoxon_min_p(5))
    levels = stats.holm_alphas([0.01, 0.04, np.nan, 0.03])
    assert levels[0] == pytest.approx(0.05 / 3) and levels[3] == pytest.approx(0.05 / 2) and levels[1] == 0.05
    assert np.isnan(levels[2])


def test_the_reason_a_test_missed_holm_follows_the_step_down():
    """Holm stops at the first p above its level: the family (0.023, 0.023, 0.033, 0.033) rejects nothing, though the
    last p is below its own level 0.05. The stated reason must say so, in the ladder's and the paired reports."""
    from types import SimpleNamespace

    from embnorm_lib.analyses import paired

    p = [0.023, 0.023, 0.033, 0.033]
    reject, _ = stats.holm(p)
    levels = stats.holm_alphas(p)
    assert not reject.any() and p[3] < levels[3]
    assert stats.holm_miss_reason(p[0], levels[0]) == "p = 0.023 is above its Holm level 0.0125"
    assert "below its Holm level 0.05, but Holm's step-down stopped earlier" in stats.holm_miss_reason(p[3], levels[3])
    row = SimpleNamespace(significant=False, ci_low=0.001, ci_high=0.03, p_t=p[3], alpha_holm=levels[3],
                          interval_method="paired t", p_holm=0.093)
    said = paired._evidence(row)
    assert f"not significant after Holm: {stats.holm_miss_reason(p[3], levels[3])}, Holm p = 0.093" in said
    first = SimpleNamespace(**{**vars(row), "p_t": p[0], "alpha_holm": levels[0]})
    assert "not significant after Holm: p = 0.023 is above its Holm level 0.0125, Holm p" in paired._evidence(first)


def test_family_rows_carry_their_interval_method_and_the_primary_is_the_paired_t_interval():
    base = [2.6, 2.7, 2.65, 2.58, 2.66]
    runs = make_runs(base, {"ln": [b + 0.05 + 0.01 * i for i, b in enumerate(base)]})
    fam = stats.comparison_family(runs, ["val_loss"])
    row = fam.iloc[0]
    diffs = stats.paired_differences(runs, "val_loss", "ln")["diff"].to_numpy()
    assert row["interval_method"] == "paired t"
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(stats.t_interval(diffs))
    assert np.isnan(row["bca_low"])  # 5 seeds: below BCA_MIN_N
    assert row["p_wilcoxon_min"] == 0.0625 and row["alpha_holm"] == 0.05


def test_seeds_needed_is_two_when_the_effect_dwarfs_the_noise_not_nan():
    """statsmodels' solver searches above 2 observations and returns nan when 2 already give 80% power."""
    from statsmodels.stats.power import TTestPower

    from embnorm_lib import stats

    mde, needed = stats.power_figures(0.0005, 10)
    assert needed == 2.0 and 0 < mde < 0.001
    assert stats.power_figures(0.05, 10)[1] > 100
    for effect, n in ((0.5, 20), (5.0, 2), (1.0, 5)):
        assert stats._paired_t_power(effect, n, 0.05) == pytest.approx(TTestPower().power(effect, n, 0.05), abs=1e-6)


@pytest.mark.parametrize("p, digits, text", [(0.0503, 2, "0.0503"), (0.0496, 2, "0.0496"), (0.04996, 3, "0.04996"),
                                             (0.05, 2, "0.05"), (0.0085, 2, "0.0085"), (0.6, 2, "0.6"),
                                             (3.4e-07, 2, "3.4e-07"), (0.0503, 3, "0.0503")])
def test_p_text_never_rounds_a_p_onto_alpha(p, digits, text):
    assert stats.p_text(p, digits) == text


@pytest.mark.parametrize("x, digits, text", [(0.1234, 3, "+0.123"), (-0.0049, 2, "-0.005"), (-0.00021, 3, "-0.0002"),
                                             (-0.00004, 3, "-0.00004"), (2.3e-8, 3, "0.000"), (-2.3e-8, 3, "0.000"),
                                             (0.0, 3, "0.000"), (-0.0005, 3, "-0.001")])
def test_signed_never_writes_a_negative_zero(x, digits, text):
    assert stats.signed(x, digits) == text


def test_the_pages_fmt_filter_and_intervals_use_signed():
    from embnorm_lib.publishing.templating import fmt, interval

    assert fmt(-0.00021, "+.3f") == "-0.0002" and fmt(0.5, ".2f") == "0.50" and fmt(12, "d") == "12"
    assert interval({"mean_diff": -0.004, "ci_low": -0.0071, "ci_high": -0.0002}) == "-0.004 [-0.007, -0.0002]"


def test_the_mde_has_80_percent_power_by_monte_carlo_at_few_seeds_and_a_holm_level():
    """The zero-shot family's case (n = 5, alpha = 0.05 / 10): statsmodels' solve_power stops at an effect whose
    power is about 0.78; the exact noncentral-t root is checked here against simulated paired t-tests."""
    from scipy import stats as sps

    from embnorm_lib import stats

    n, alpha, sd = 5, 0.05 / 10, 0.004
    mde = stats.power_figures(sd, n, alpha=alpha)[0]
    rng = np.random.default_rng(20261126)
    diffs = rng.normal(mde, sd, size=(100_000, n))
    t = diffs.mean(1) / (diffs.std(1, ddof=1) / np.sqrt(n))
    simulated = float((np.abs(t) > sps.t.ppf(1 - alpha / 2, n - 1)).mean())
    assert simulated == pytest.approx(0.80, abs=0.006)  # Monte Carlo SE about 0.0013
    assert stats._paired_t_power(mde / sd, n, alpha) == pytest.approx(0.80, abs=1e-6)
    # seeds needed: the smallest n whose exact power reaches 80%
    assert stats.power_figures(sd, n, mei=mde * 1.001, alpha=alpha)[1] == n
    assert stats.power_figures(sd, n, mei=mde * 0.999, alpha=alpha)[1] == n + 1


def test_tost_words_follow_the_interval_and_a_planted_difference_flips_them():
    """Amendment 18: 'equivalent within ±0.01' only where both one-sided tests put the mean paired difference inside
    the margin (Holm over the family's TOSTs); a planted shift beyond the margin turns it into 'costs'."""
    import pandas as pd

    from embnorm_lib.publishing.templating import effect as effect_word
    from embnorm_lib.stats import comparison_family
    from embnorm_lib.stats.equivalence import tost_p

    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.002, 10)
    assert tost_p(-0.004 + noise, 0.01) < 0.001  # well inside
    assert tost_p(0.05 + noise, 0.01) > 0.99  # well outside
    assert tost_p([0.009, 0.011], 0.01) > 0.4  # straddling the margin: not shown
    assert np.isnan(tost_p([0.01], 0.01))

    def family(shift: float) -> dict:
        base = 2.0 + rng.normal(0, 0.05, 10)
        runs = pd.DataFrame([{"variant": "none", "seed": s, "val_loss": b} for s, b in enumerate(base)]
                            + [{"variant": "ln", "seed": s, "val_loss": b + shift + n}
                               for s, (b, n) in enumerate(zip(base, noise))])
        return comparison_family(runs, ["val_loss"]).iloc[0].to_dict()

    small, planted = family(-0.004), family(0.05)
    assert small["significant"] and small["equivalent"] and effect_word(small) == "equivalent within ±0.01"
    assert planted["significant"] and not planted["equivalent"] and effect_word(planted) == "costs"


def test_every_accuracy_metric_counts_higher_as_better():
    """prob_improvement reads METRIC_DIRECTION: an accuracy missing from it was scored as if lower were better (suite
    v2's macro accuracy was); every *_acc metric a family can hold is listed, higher-is-better."""
    import pandas as pd

    from embnorm_lib import stats

    for metric in ("val_acc", "lm_macro_acc", "lm2_macro_acc", "lm3_macro_acc"):
        assert stats.METRIC_DIRECTION[metric] is False, metric
        runs = pd.DataFrame([{"variant": v, "seed": s, metric: 0.5 + (0.01 * (s + 1) if v == "ln" else 0.0)}
                             for v in ("none", "ln") for s in range(5)])
        assert stats.compare(runs, metric, "ln").prob_improvement == 1.0  # every seed higher: every seed better


def test_mean_interval_is_the_t_interval_of_the_finite_values():
    from scipy import stats as sps

    from embnorm_lib.stats import mean_interval

    values = [0.61, 0.72, float("nan"), 0.55, 0.8]
    found = mean_interval(values)
    v = np.array([0.61, 0.72, 0.55, 0.8])
    half = sps.t.ppf(0.975, 3) * v.std(ddof=1) / np.sqrt(4)
    assert found["n"] == 4 and found["mean"] == pytest.approx(v.mean())
    assert (found["ci_low"], found["ci_high"]) == pytest.approx((v.mean() - half, v.mean() + half), rel=1e-12)
    assert mean_interval([0.5]) == {"mean": 0.5, "ci_low": None, "ci_high": None, "n": 1}
    assert mean_interval([]) == {"mean": None, "ci_low": None, "ci_high": None, "n": 0}


def test_every_compared_metric_is_registered_once_with_its_direction_and_labels():
    """Issue 114 item 5: one metric registry; the directions, labels and words the pages use are read from it."""
    from embnorm_lib.analyses import answer_words, findings, paired, paper_figures, prose_confirm
    from embnorm_lib.core.scoring.calibration import N_BINS
    from embnorm_lib.publishing import plots
    from embnorm_lib.stats.metrics import ECE_BINS, METRICS

    compared = {*paired.DEFAULT_METRICS, *paper_figures.FAMILY_METRICS, *prose_confirm.PRIMARY, *prose_confirm.SECONDARY}
    assert compared <= set(METRICS), compared - set(METRICS)
    assert stats.METRIC_DIRECTION == {name: m.lower_is_better for name, m in METRICS.items()}
    assert not METRICS["lm3_macro_acc"].lower_is_better and METRICS["val_bits_per_byte"].lower_is_better
    assert set(plots.METRIC_LABELS) | set(paper_figures.METRIC_LABELS) | set(findings.SECONDARY_WORDS) <= set(METRICS)
    assert set(answer_words.CALIBRATION) == {"brier", "ece_equal_width"} and ECE_BINS == N_BINS
    # the prose family's words follow the registry: a higher accuracy helps, a higher bits per byte costs
    row = {"equivalent": False, "significant": True, "mean_diff": 0.02}
    assert prose_confirm.word({**row, "metric": "lm3_macro_acc"}) == "helps"
    assert prose_confirm.word({**row, "metric": "val_bits_per_byte"}) == "costs"


def test_a_pages_seed_count_is_the_count_every_row_rests_on_or_a_refusal():
    """A heading's seed count comes from the family's rows, not the index: an arm that lost a seed would otherwise sit
    under a heading naming the full count."""
    from embnorm_lib.stats import seeds_behind

    rows = [{"variant": "ln", "metric": "val_loss", "n": 10}, {"variant": "rms", "metric": "val_loss", "n": 10}]
    assert seeds_behind(rows, "main seeds-final") == 10
    assert seeds_behind(pd.DataFrame(rows), "main seeds-final") == 10
    rows[1]["n"] = 9  # rms lost a seed
    with pytest.raises(ValueError, match=r"main seeds-final: .*ln val_loss: 10, rms val_loss: 9"):
        seeds_behind(rows, "main seeds-final")
    with pytest.raises(ValueError, match="no rows"):
        seeds_behind([], "main seeds-final")


@pytest.mark.parametrize("n", [2, 5])
def test_the_detectable_effect_does_not_move_with_the_power_functions_last_bits(monkeypatch, n):
    """The quadrature at n = 2 gave a root differing in its 13th digit on an AVX-512 CPU against an AVX2 one, so the
    committed records did too; the root is returned at the digits it is known to. Here a power function off by a few
    units in its last place (as another CPU's libm is) gives the same figure."""
    exact = stats._paired_t_power
    solved = stats.detectable_effect_size.__wrapped__
    reference = solved(n, 0.05 / 4)
    for ulps in (-3, 3):
        monkeypatch.setattr(stats, "_paired_t_power", lambda e, k, a, u=ulps: exact(e, k, a) * (1 + u * 2.0 ** -52))
        assert solved(n, 0.05 / 4) == reference
    assert reference == float(f"{reference:.{stats.ROOT_DIGITS}g}")
