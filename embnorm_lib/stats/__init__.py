"""Paired inference for variant-vs-baseline comparisons, as docs/PROTOCOL.md registers it.

The numbers come from scipy (bootstrap, t-test, Wilcoxon, the noncentral t for power) and statsmodels (Holm);
this module pairs the runs, wires the calls, and applies the decision rule."""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from .equivalence import MEI, NOISELESS_SPREAD, equivalence_columns, noiseless  # noqa: F401 (re-exported)
from .metrics import METRICS
from .multiple import ALPHA, holm, holm_alphas  # noqa: F401 (re-exported)
from .signed_rank import wilcoxon_p  # noqa: F401 (re-exported)

N_RESAMPLES = 10_000
INTERVAL_METHOD = "paired t"  # the primary 95% interval (docs/PROTOCOL.md, amendment 1)
BCA_MIN_N = 20  # below this many seeds a BCa interval covers far less than 95% (tests/test_stats.py): not reported
PRIMARY = "val_loss"
MDE_POWER = 0.8  # the power at which minimum detectable effects and seeds needed are computed

# metric -> True when lower is better (the metric registry's directions)
METRIC_DIRECTION: dict[str, bool] = {name: m.lower_is_better for name, m in METRICS.items()}


@dataclass
class PairedComparison:
    variant: str
    baseline: str
    metric: str
    n: int
    baseline_mean: float
    variant_mean: float
    mean_diff: float
    sd_diff: float
    ci_low: float  # the primary interval: 95% paired t
    ci_high: float
    p_t: float
    p_wilcoxon: float
    d_z: float
    g_z: float
    prob_improvement: float
    mde_80: float  # at unadjusted α (for comparison with the Holm-adjusted figures below)
    seeds_for_80_at_mei: float
    p_holm: float = float("nan")
    significant: bool = False
    interval_method: str = INTERVAL_METHOD
    bca_low: float = float("nan")  # secondary, only at n >= BCA_MIN_N
    bca_high: float = float("nan")
    p_wilcoxon_min: float = float("nan")  # the smallest two-sided p the signed-rank test can give at this n
    alpha_holm: float = float("nan")  # the α Holm applies to this test at its rank in the family
    mde_80_holm: float = float("nan")  # minimum detectable effect at 80% power and alpha_holm
    seeds_for_80_at_mei_holm: float = float("nan")
    p_tost: float = float("nan")  # equivalence within the metric's margin (stats.equivalence; NaN: no margin)
    p_tost_holm: float = float("nan")
    equivalent: bool = False


def log10(values) -> np.ndarray:
    """Base-10 logarithm through the C library, one value at a time (-inf at 0, NaN below). numpy's vectorised
    log10 runs a different kernel on AVX-512 CPUs than on AVX2 ones and can differ in the last bit; the fits and
    ratios built on it should not depend on which CPU published them."""
    flat = np.asarray(values, dtype=float)
    out = [math.log10(v) if v > 0 else (-math.inf if v == 0 else math.nan) for v in flat.ravel().tolist()]
    return np.array(out, dtype=float).reshape(flat.shape)


def failed_runs(runs: pd.DataFrame) -> pd.Series:
    """Per run, whether it failed as docs/PROTOCOL.md amendment 1 defines it: a non-finite loss, or a final loss above
    the loss at initialisation (the index's `failed` column; tables made before it have `diverged` alone)."""
    failed = ~np.isfinite(runs["val_loss"].astype(float)) | runs.get("diverged", False)
    if "failed" in runs:
        failed = failed | runs["failed"].astype(bool)
    return failed


def paired_differences(runs: pd.DataFrame, metric: str, variant: str, baseline: str = "none") -> pd.DataFrame:
    """Per seed: baseline value, variant value, difference (variant - baseline); seeds missing in either dropped."""
    # one column filtered per side, not the whole table: a runs table has ~100 columns, mostly text
    arms, seeds, values = runs["variant"].to_numpy(dtype=object), runs["seed"].to_numpy(), runs[metric]

    def side(arm: str) -> pd.Series:
        mask = arms == arm
        return values[mask].set_axis(pd.Index(seeds[mask], name="seed"))

    a, b = side(baseline), side(variant)
    joined = pd.concat({"baseline": a, "variant": b}, axis=1, join="inner").dropna().sort_index()
    joined["diff"] = joined["variant"] - joined["baseline"]
    return joined


def bootstrap_ci(diffs: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% BCa bootstrap CI of the mean paired difference; a constant difference gives a zero-width CI."""
    diffs = np.asarray(diffs, dtype=float)
    if len(diffs) < 2 or noiseless(diffs):
        return float(diffs.mean()), float(diffs.mean())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa warns on tiny n; the interval is still reported
        res = sps.bootstrap((diffs,), np.mean, n_resamples=n_resamples, method="BCa",
                            confidence_level=0.95, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def t_interval(diffs: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The paired t interval of the mean difference: exact under normality at any n (a constant difference gives
    a zero-width interval)."""
    diffs = np.asarray(diffs, dtype=float)
    if len(diffs) < 2:
        return float("nan"), float("nan")
    if noiseless(diffs):
        return float(diffs.mean()), float(diffs.mean())
    ci = sps.ttest_1samp(diffs, 0.0).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def seeds_behind(rows, where: str) -> int:
    """The one seed count a page may print over a family's rows (dicts or a DataFrame with `variant`, `metric` and
    `n`): the count every row rests on. Rows resting on different counts (a seed one arm lost) are refused in one line
    naming them, so no heading states a count some row does not rest on (counting the index's seeds would)."""
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    counts = {f"{r['variant']} {r['metric']}": int(r["n"]) for r in records}
    if len(set(counts.values())) != 1:
        raise ValueError(f"{where}: the family's rows rest on different seed counts "
                         f"({', '.join(f'{k}: {v}' for k, v in counts.items()) or 'no rows'}); allowed: one count, "
                         "or a page that prints each row's n")
    return next(iter(counts.values()))


def mean_interval(values) -> dict:
    """The mean of the finite values and its 95% t interval (None where fewer than 2 values give no interval; a
    mean of None where there are none), with `n`, how many values it rests on: the one helper for a mean over seeds
    that is not a paired difference (a share of steps, a change between two differences)."""
    v = np.array([x for x in values if np.isfinite(x)], dtype=float)
    low, high = t_interval(v)
    return {"mean": float(v.mean()) if len(v) else None, "ci_low": None if math.isnan(low) else low,
            "ci_high": None if math.isnan(high) else high, "n": len(v)}

def wilcoxon_min_p(n: int) -> float:
    """Smallest two-sided p of the exact signed-rank test with n untied pairs: every sign agreeing, 2 / 2^n
    (0.25 at n = 3, 0.0625 at n = 5): below n = 6 it can never reach 0.05."""
    return 2.0 / 2.0 ** n if n >= 1 else float("nan")


def paired_t_p(diffs: np.ndarray) -> float:
    diffs = np.asarray(diffs, dtype=float)
    if len(diffs) < 2:
        return float("nan")
    if noiseless(diffs):
        return 1.0 if diffs[0] == 0 else 0.0  # an exact, noiseless shift
    return float(sps.ttest_1samp(diffs, 0.0).pvalue)


def hedges_correction(n: int) -> float:
    return 1.0 - 3.0 / (4.0 * (n - 1) - 1.0) if n > 1 else float("nan")


def effect_sizes(diffs: np.ndarray) -> tuple[float, float]:
    """(d_z, g_z): mean/SD of the paired differences, and with Hedges' small-sample correction."""
    diffs = np.asarray(diffs, dtype=float)
    if len(diffs) < 2:
        return float("nan"), float("nan")
    sd = 0.0 if noiseless(diffs) else diffs.std(ddof=1)
    if sd == 0:
        d = math.copysign(math.inf, diffs.mean()) if diffs.mean() != 0 else 0.0
    else:
        d = diffs.mean() / sd
    return float(d), float(d * hedges_correction(len(diffs)))


def prob_improvement(diffs: np.ndarray, lower_is_better: bool) -> float:
    diffs = np.asarray(diffs, dtype=float)
    better = (diffs < 0) if lower_is_better else (diffs > 0)
    return float((better.sum() + 0.5 * (diffs == 0).sum()) / len(diffs)) if len(diffs) else float("nan")


@functools.lru_cache(maxsize=65536)  # a pure function of three numbers, asked again for every page that quotes a row
def _paired_t_power(effect_size: float, n: int, alpha: float) -> float:
    """Exact power of the two-sided one-sample t-test on n paired differences (the noncentral t). scipy's noncentral
    t returns nan at 1 degree of freedom and a large noncentrality; there the same power is integrated over the
    chi-square variance."""
    from scipy import integrate
    from scipy import stats as scipy_stats

    df, nc = n - 1, effect_size * np.sqrt(n)
    crit = scipy_stats.t.ppf(1 - alpha / 2, df)
    power = scipy_stats.nct.sf(crit, df, nc) + scipy_stats.nct.cdf(-crit, df, nc)
    if np.isfinite(power):
        return float(power)

    def reject_given_variance(v: float) -> float:
        bound = crit * np.sqrt(v / df)
        return (scipy_stats.norm.sf(bound - nc) + scipy_stats.norm.cdf(-bound - nc)) * scipy_stats.chi2.pdf(v, df)

    return float(integrate.quad(reject_given_variance, 0, np.inf, limit=200)[0])


ROOT_DIGITS = 9  # well inside the root's accuracy (xtol 1e-10 on effects of 0.5-40), well past any printed figure


# Cached: a function of (n, alpha, power) alone, and at n = 2 each evaluation integrates numerically (~1 s per
# root); a study's families repeat a few (n, Holm level) pairs hundreds of times (the ladder's findings: 140 calls).
@functools.lru_cache(maxsize=4096)
def detectable_effect_size(n: int, alpha: float, power: float = MDE_POWER) -> float:
    """The standardized effect (mean / SD of the paired differences) the two-sided paired t-test detects with
    `power` at n seeds, solved on the exact power function. statsmodels' solve_power can stop short at tiny n and a
    Holm-level alpha (an effect whose power is 0.78, not 0.80); this root is checked against a Monte Carlo estimate in
    tests/test_stats.py. The root is known to xtol (1e-10) and is returned at ROOT_DIGITS significant digits: the power
    function's last bits can differ between CPUs (seen at n = 2, where it is a quadrature, on AVX-512 against AVX2),
    which moved the unrounded root, and with it the committed records, in its 13th digit."""
    from scipy.optimize import brentq

    high = 1.0
    while _paired_t_power(high, n, alpha) < power:
        high *= 2
    root = float(brentq(lambda e: _paired_t_power(e, n, alpha) - power, 0.0, high, xtol=1e-10))
    return float(f"{root:.{ROOT_DIGITS}g}")


@functools.lru_cache(maxsize=65536)
def seeds_needed(effect_size: float, alpha: float, power: float = MDE_POWER) -> int:
    """The smallest number of seeds (at least 2) at which the exact power reaches `power` (it grows with n)."""
    if _paired_t_power(effect_size, 2, alpha) >= power:
        return 2
    low, high = 2, 4
    while _paired_t_power(effect_size, high, alpha) < power:
        low, high = high, high * 2
    while high - low > 1:  # power(low) < target <= power(high)
        mid = (low + high) // 2
        low, high = (low, mid) if _paired_t_power(effect_size, mid, alpha) >= power else (mid, high)
    return high


def power_figures(sd_diff: float, n: int, mei: float = MEI, alpha: float = ALPHA) -> tuple[float, float]:
    """(minimum detectable effect at 80% power with n seeds, seeds needed for 80% power at the MEI), both from the
    exact noncentral-t power of the paired t-test."""
    if n < 2 or not np.isfinite(sd_diff):
        return float("nan"), float("nan")
    if sd_diff == 0:
        return 0.0, 2.0
    return detectable_effect_size(n, alpha) * sd_diff, float(seeds_needed(mei / sd_diff, alpha))


def compare(runs: pd.DataFrame, metric: str, variant: str, baseline: str = "none") -> PairedComparison:
    pairs = paired_differences(runs, metric, variant, baseline)
    d = pairs["diff"].to_numpy()
    n = len(d)
    sd = (0.0 if noiseless(d) else float(d.std(ddof=1))) if n > 1 else float("nan")
    lo, hi = t_interval(d)
    bca = bootstrap_ci(d) if n >= BCA_MIN_N else (float("nan"), float("nan"))
    d_z, g_z = effect_sizes(d)
    mde, needed = power_figures(sd, n)
    return PairedComparison(
        variant=variant, baseline=baseline, metric=metric, n=n,
        baseline_mean=float(pairs["baseline"].mean()), variant_mean=float(pairs["variant"].mean()),
        mean_diff=float(d.mean()) if n else float("nan"), sd_diff=sd, ci_low=lo, ci_high=hi,
        p_t=paired_t_p(d), p_wilcoxon=wilcoxon_p(d), d_z=d_z, g_z=g_z,
        prob_improvement=prob_improvement(d, METRIC_DIRECTION.get(metric, True)),
        mde_80=mde, seeds_for_80_at_mei=needed, bca_low=bca[0], bca_high=bca[1], p_wilcoxon_min=wilcoxon_min_p(n))


def p_text(p: float, digits: int = 2, alpha: float = ALPHA) -> str:
    """A p-value to `digits` significant digits, with more where rounding would land on α or cross it: a Holm p of
    0.0503 (not significant) is written 0.0503, not 0.05, and 0.0496 (significant) 0.0496."""
    text = f"{p:.{digits}g}"
    while digits < 6 and p != alpha and (float(text) == alpha or (float(text) < alpha) != (p < alpha)):
        digits += 1
        text = f"{p:.{digits}g}"
    return text


def signed(x: float, digits: int = 3) -> str:
    """A difference with its sign, never '-0.000': a nonzero value that rounds to zero gets up to two more places
    ('-0.0002', '-0.00004'); one that still rounds to zero is written unsigned ('0.000'), as is zero itself."""
    places = digits
    while x != 0 and round(abs(x), places) == 0 and places < digits + 2:
        places += 1
    if round(abs(x), places) == 0:
        return f"{0:.{digits}f}"
    return f"{x:+.{places}f}"


def comparison_family(runs: pd.DataFrame, metrics: list[str], variants: list[str] | None = None,
                      baseline: str = "none") -> pd.DataFrame:
    """Every (variant vs baseline) x metric comparison, Holm-adjusted across the whole family."""
    variants = variants or [v for v in runs["variant"].unique() if v != baseline]
    rows = [compare(runs, m, v, baseline) for v in variants for m in metrics if m in runs.columns
            and runs[m].notna().any()]
    reject, adjusted = holm([r.p_t for r in rows])
    for r, rej, adj, a in zip(rows, reject, adjusted, holm_alphas([r.p_t for r in rows])):
        r.p_holm, r.significant, r.alpha_holm = float(adj), bool(rej), float(a)
        r.mde_80_holm, r.seeds_for_80_at_mei_holm = power_figures(r.sd_diff, r.n, alpha=a)
    diffs = [paired_differences(runs, r.metric, r.variant, baseline)["diff"].to_numpy() for r in rows]
    for r, *tost in zip(rows, *equivalence_columns([r.metric for r in rows], diffs)):
        r.p_tost, r.p_tost_holm, r.equivalent = float(tost[0]), float(tost[1]), bool(tost[2])
    return pd.DataFrame([asdict(r) for r in rows])


def holm_miss_reason(p: float, level: float) -> str:
    """Why a test whose interval excludes 0 is not significant after Holm (amendment 1 item 2: p against its Holm
    level). Either its p is above the level of its rank, or Holm's step-down stopped at a smaller p above that p's
    own level before reaching it: then its own p can be below its level, and saying "above" would be false."""
    if p > level:
        return f"p = {p_text(p, 2, level)} is above its Holm level {level:.4g}"
    return (f"p = {p_text(p, 2, level)} is below its Holm level {level:.4g}, but Holm's step-down stopped earlier, "
            "at a smaller p above its own level")


def registered_stability(runs: pd.DataFrame) -> tuple[pd.Series, pd.Series | None]:
    """Per run, the protocol's stability inputs (amendment 1): failed (non-finite loss, or a final loss above the
    loss at initialisation) and loss spikes after the warm-up; tables without those columns (made before them)
    fall back to divergences and all-steps spikes."""
    failed = runs["failed"] if "failed" in runs else runs["diverged"]
    spikes = runs["spike_count_post_warmup"] if "spike_count_post_warmup" in runs else runs.get("spike_count")
    return failed.astype(bool), spikes


def stability(runs: pd.DataFrame, variant: str) -> dict:
    """One arm's stability as the decision rule reads it (`diverged` counts failures)."""
    failed, spikes = registered_stability(runs[runs["variant"] == variant])
    return {"runs": int(len(failed)), "diverged": int(failed.sum()),
            "mean_spikes": float(spikes.mean()) if spikes is not None else float("nan")}


def decide(family: pd.DataFrame, runs: pd.DataFrame, baseline: str = "none", mei: float = MEI) -> dict:
    """Apply the registered decision rule; returns the verdict per variant and overall, as data."""
    base = stability(runs, baseline)
    baseline_unstable = base["diverged"] > 0 or base["mean_spikes"] >= 1
    verdicts = {}
    for variant in [v for v in family["variant"].unique()]:
        prim = family[(family["variant"] == variant) & (family["metric"] == PRIMARY)].iloc[0]
        var = stability(runs, variant)
        fixes = var["diverged"] == 0 and var["mean_spikes"] < base["mean_spikes"]
        regress = bool(prim.significant and prim.mean_diff > 0)
        improve = bool(prim.significant and prim.mean_diff < 0 and abs(prim.mean_diff) >= mei)
        if not baseline_unstable and regress:
            verdict, rule = "keep baseline", 1
            why = f"{variant} raises {PRIMARY} by {prim.mean_diff:+.4f} (Holm p={prim.p_holm:.3g}) with a stable baseline"
        elif not baseline_unstable and improve:
            verdict, rule = f"adopt {variant}", 2
            why = f"{variant} lowers {PRIMARY} by {-prim.mean_diff:.4f} >= MEI {mei} (Holm p={prim.p_holm:.3g})"
        elif baseline_unstable:
            ok = fixes and prim.ci_high <= mei
            verdict, rule = (f"adopt {variant}" if ok else "keep baseline"), 3
            # the count is of failures (amendment 1: non-finite loss or a final loss above init) where runs.csv
            # has them, and says so; only tables made before `failed` count divergences alone
            failed = "failed" if "failed" in runs else "diverged"
            why = (f"baseline unstable ({base['diverged']} {failed}, {base['mean_spikes']:.2f} spikes/run); {variant} "
                   f"{'fixes' if fixes else 'does not fix'} it ({var['diverged']} {failed}, {var['mean_spikes']:.2f} "
                   f"spikes/run) at a cost CI upper {prim.ci_high:+.4f} vs MEI {mei}")
        else:
            verdict, rule, why = _tie_break(family, runs, variant, baseline, prim)
        verdicts[variant] = {"verdict": verdict, "rule": rule, "reason": why, "stability": var}
    adopted = [v for v, d in verdicts.items() if d["verdict"].startswith("adopt")]
    if adopted:
        best = min(adopted, key=lambda v: family[(family.variant == v) & (family.metric == PRIMARY)].mean_diff.iloc[0])
        overall = f"adopt {best}"
    else:
        overall = "keep baseline"
    return {"baseline": baseline, "baseline_stability": base, "baseline_unstable": bool(baseline_unstable),
            "mei": mei, "variants": verdicts, "overall": overall}


def _tie_break(family, runs, variant, baseline, prim):
    ece = family[(family["variant"] == variant) & (family["metric"] == "ece_equal_width")]
    if len(ece) and ece.iloc[0].significant:
        better = ece.iloc[0].mean_diff < 0
        return ((f"adopt {variant}" if better else "keep baseline"), 4,
                f"no {PRIMARY} difference beyond the MEI (diff {prim.mean_diff:+.4f}, CI [{prim.ci_low:+.4f}, "
                f"{prim.ci_high:+.4f}]); calibration decides: ECE diff {ece.iloc[0].mean_diff:+.4f} "
                f"(Holm p={ece.iloc[0].p_holm:.3g})")
    speed = runs.groupby("variant")["train_ms_per_iter"].mean() if "train_ms_per_iter" in runs else None
    note = ""
    if speed is not None and variant in speed and baseline in speed:
        note = f"; throughput {speed[variant]:.0f} vs {speed[baseline]:.0f} ms/iter"
    return ("keep baseline", 4,
            f"no {PRIMARY} difference beyond the MEI (diff {prim.mean_diff:+.4f}, CI [{prim.ci_low:+.4f}, "
            f"{prim.ci_high:+.4f}]) and no significant calibration difference{note}: the baseline is simpler")
