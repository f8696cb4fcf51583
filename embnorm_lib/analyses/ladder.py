"""The size ladder (issue 18): does the embedding norm's cost shrink, stay or flip as the model grows?

Per rung (model size) the paired comparison of the registered protocol: each variant's final (and best) validation
loss minus none's, paired by seed, 95% t interval, Holm within the rung (docs/PROTOCOL.md amendment 1: "at each
model size the confirmatory family"). Across rungs the trend is exploratory: a weighted least-squares line of the
difference on log10(non-embedding parameters) (weights 1 / SE^2 of each rung's mean difference), with its 95%
interval, and what that line gives at Le Scao et al.'s 1.3B parameters — an extrapolation far outside the data,
labelled so. The analysis returns data (this module: the tables, the LR checks, the trend); ladder_sections.py adds
the exploratory sections and ladder_report.py renders LADDER.md (`python -m embnorm_lib publish ladder`)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from .. import stats
from ..core.config import non_embedding_params
from ..stats import signed
from ..studies.ladder import CONFIRMATORY_PEAKS, LR_CHECKS, SUBWORD_LR_CHECKS  # noqa: F401 (read through here too)

LE_SCAO_PARAMS = 1.3e9  # the model size of Le Scao et al. 2022's embedding-norm ablation
METRICS = ("val_loss", "val_loss_per_char", "best_val_loss")  # per token, per character (BPE runs), best
TREND_MIN_SIZES = 3  # the fewest sizes a trend line is fitted to: two leave no residual degree of freedom


def tokenizers_of(runs: pd.DataFrame) -> pd.Series:
    """Each run's tokenizer; an index written before the tokenizer field existed holds char runs only."""
    return runs.get("cfg.tokenizer", pd.Series("char", index=runs.index)).fillna("char")


def rung_table(runs: pd.DataFrame, variants=None) -> pd.DataFrame:
    """Per rung (and tokenizer), variant (every arm but none in the runs, unless given) and metric: the paired
    difference from none with its 95% t interval, Holm within each rung over the final loss per character and the
    best loss of each arm."""
    from ..runner.results import arm_order

    if variants is None:
        variants = sorted(set(runs["variant"]) - {"none"}, key=arm_order)
    frame = runs.assign(params=[non_embedding_params(int(a), int(b))
                                for a, b in zip(runs["cfg.n_layer"], runs["cfg.n_embd"], strict=True)],
                        tokenizer=tokenizers_of(runs))
    rows = []
    for (tokenizer, params), sub in frame.groupby(["tokenizer", "params"]):
        tokens, flops = train_compute(sub.iloc[0], int(params))
        block = []
        for variant in [v for v in variants if v in set(sub["variant"])]:
            for metric in [m for m in METRICS if m in sub and sub[m].notna().any()]:
                c = stats.compare(sub, metric, variant)
                block.append({"tokenizer": tokenizer, "params": int(params), "preset": sub["cfg.preset"].iloc[0],
                              "train_tokens": tokens, "train_flops": flops,
                              "variant": variant, "metric": metric, "seeds": c.n, "none": c.baseline_mean,
                              "variant_mean": c.variant_mean, "mean_diff": c.mean_diff, "ci_low": c.ci_low,
                              "ci_high": c.ci_high, "p_t": c.p_t})
        if block:
            part = pd.DataFrame(block)
            # the family (amendments 4, 7): final loss per character and best loss, per arm; a subword run's
            # per-token loss is the same test (a fixed multiple on the same text), shown beside it, not counted
            in_family = part["metric"] != ("val_loss" if tokenizer != "char" else "val_loss_per_char")
            reject, adjusted = stats.holm(part["p_t"].where(in_family).to_numpy(float))
            rows.append(part.assign(p_holm=adjusted, significant=reject))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def train_compute(run: pd.Series, params: int) -> tuple[float, float]:
    """Tokens a run trained on and its training compute, 6 x (non-embedding parameters + output head) x tokens:
    the usual estimate (forward and backward matmuls; attention's context term and the norms left out), with the
    head counted because a 4096-token vocabulary makes it a large share at these widths. NaN where the index lacks
    the config columns."""
    need = ("cfg.max_iters", "cfg.batch_size", "cfg.block_size", "cfg.n_embd", "cfg.vocab_size")
    if any(pd.isna(run.get(k)) for k in need):
        return float("nan"), float("nan")
    tokens = float(run["cfg.max_iters"] * run["cfg.batch_size"] * run["cfg.block_size"] * run.get("cfg.grad_accum", 1))
    return tokens, 6.0 * (params + run["cfg.n_embd"] * run["cfg.vocab_size"]) * tokens


def lr_factor(lr: float, variant: str, n_embd: int, rung: int) -> float:
    """Which of the rung's check factors a run's LR is (LRs are rounded to 3 digits, so the ratio is not exact)."""
    from ..studies import ladder_check_factors, ladder_lr

    return min(ladder_check_factors(rung, variant), key=lambda f: abs(ladder_lr(variant, n_embd, f) - lr))


def rung_of(preset: str) -> int:
    return int(preset.rsplit("-", 1)[1])


def _with_factors(runs: pd.DataFrame) -> pd.DataFrame:
    """Check runs tagged with their tokenizer, rung and LR factor relative to the width rule."""
    return runs.assign(tokenizer=tokenizers_of(runs), rung=[rung_of(p) for p in runs["cfg.preset"]],
                       factor=[lr_factor(lr, v, int(w), rung_of(p)) for lr, v, w, p in
                               zip(runs["cfg.lr"], runs["variant"], runs["cfg.n_embd"], runs["cfg.preset"],
                                   strict=True)])


def loss_per_char(runs: pd.DataFrame) -> np.ndarray:
    """Each run's final validation loss per character: `val_loss` for char runs (a token is a character),
    `val_loss_per_char` for subword runs."""
    per_char = runs["val_loss_per_char"] if "val_loss_per_char" in runs else pd.Series(np.nan, index=runs.index)
    return np.where(tokenizers_of(runs) == "char", runs["val_loss"], per_char)


def lr_check(runs: pd.DataFrame) -> pd.DataFrame:
    """An LR check (the character ladder's or a subword one): per tokenizer, rung, arm and LR factor, the final
    validation loss over the check's seeds (mean, SD, runs failed as docs/PROTOCOL.md amendment 1 defines it: a
    non-finite loss or a final loss above the loss at initialisation), with the factor relative to the width rule.
    The loss is per token; within one tokenizer per character is a fixed multiple of it (the same validation text),
    so the ranking of factors is the same on either scale."""
    frame = _with_factors(runs).assign(failed=stats.failed_runs(runs))
    rows = []
    for (tokenizer, preset, variant, factor), sub in frame.groupby(["tokenizer", "cfg.preset", "variant", "factor"],
                                                                   sort=True):
        ok = sub[~sub["failed"]]["val_loss"].astype(float)
        rows.append({"tokenizer": tokenizer, "preset": preset, "rung": rung_of(preset), "variant": variant,
                     "factor": factor,
                     "lr": float(sub["cfg.lr"].iloc[0]), "seeds": len(sub), "failed": int(sub["failed"].sum()),
                     "val_loss_mean": float(ok.mean()) if len(ok) == len(sub) else float("nan"),
                     "val_loss_sd": float(ok.std(ddof=1)) if len(ok) > 1 else float("nan")})
    return pd.DataFrame(rows)


def best_factors(check: pd.DataFrame, seeds: int = 2) -> pd.DataFrame:
    """Per rung and arm with every registered factor's seeds finished (the grid and any extension, amendment 6):
    the factor with the lowest mean final loss (a factor with a failed run never wins), and whether the grid
    brackets it (not its smallest or largest)."""
    from ..studies import ladder_check_factors

    rows = []
    for (tokenizer, rung, variant), sub in check.groupby(["tokenizer", "rung", "variant"], sort=True):
        if (sub["seeds"] < seeds).any() or not set(ladder_check_factors(int(rung), variant)) <= set(sub["factor"]):
            continue
        best = sub.loc[sub["val_loss_mean"].idxmin()]
        rows.append({"tokenizer": tokenizer, "rung": int(rung), "variant": variant,
                     "best_factor": float(best["factor"]),
                     "best_lr": float(best["lr"]), "val_loss_mean": float(best["val_loss_mean"]),
                     "bracketed": bool(sub["factor"].min() < best["factor"] < sub["factor"].max())})
    return pd.DataFrame(rows)


def beside_ladder_factor(best: pd.DataFrame, check: pd.DataFrame | None = None) -> pd.DataFrame:
    """best_factors' rows with the factor the ladder runs each arm at (`ladder_factor`: the character LR check's
    registered one, rms at ln's), so a subword check's best reads beside the character-checked factor it may differ
    from. Given the check itself, also the mean loss at that factor (`ladder_factor_val_loss`) and how much higher it
    is than the best (`gap_to_best`, zero where they agree), so a different best reads with its size."""
    from ..studies import ladder_factor

    if not len(best):
        return best
    out = best.assign(ladder_factor=[ladder_factor(int(r), v) for r, v in zip(best["rung"], best["variant"],
                                                                               strict=True)])
    if check is None:
        return out
    keyed = check.set_index(["tokenizer", "rung", "variant", "factor"])["val_loss_mean"]
    at = [float(keyed.get((t, r, v, f), np.nan)) for t, r, v, f in
          zip(out["tokenizer"], out["rung"], out["variant"], out["ladder_factor"], strict=True)]
    return out.assign(ladder_factor_val_loss=at, gap_to_best=np.asarray(at) - out["val_loss_mean"].to_numpy(float))


def at_best_factors(runs: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """A description, not a test (amendment 8, item 3): per tokenizer and rung, each arm's final validation loss per
    character at its own best factor (mean over the check's seeds) and, paired by seed, its mean difference from
    `none` at none's best factor. With two seeds no interval is given."""
    from ..runner.results import arm_order

    if not len(best):
        return pd.DataFrame()
    frame = _with_factors(runs).assign(loss=loss_per_char(runs))
    rows = []
    for (tokenizer, rung), arms in best.groupby(["tokenizer", "rung"], sort=True):
        chosen = {r.variant: r.best_factor for r in arms.itertuples()}
        per_seed = {v: frame[(frame["tokenizer"] == tokenizer) & (frame["rung"] == rung) & (frame["variant"] == v)
                             & (frame["factor"] == f)].set_index("seed")["loss"].astype(float)
                    for v, f in chosen.items()}
        for variant in sorted(chosen, key=arm_order):
            diff = (per_seed[variant] - per_seed["none"]).dropna() if "none" in per_seed else pd.Series(dtype=float)
            rows.append({"tokenizer": tokenizer, "rung": int(rung), "variant": variant, "factor": chosen[variant],
                         "seeds": len(per_seed[variant]), "val_loss_per_char": float(per_seed[variant].mean()),
                         "diff_vs_none": float(diff.mean()) if variant != "none" and len(diff) else float("nan")})
    return pd.DataFrame(rows)


def check_summary(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """An LR check's three tables, as its report, the README findings and the paper read them: the per-factor
    check (lr_check), each complete arm's best beside the ladder's factor (beside_ladder_factor) and each arm at its
    own best factor (at_best_factors)."""
    check = lr_check(runs)
    best = beside_ladder_factor(best_factors(check), check)
    return check, best, at_best_factors(runs, best)


def primary(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of each tokenizer's primary metric (amendment 4): final validation loss per character, which is
    `val_loss` for char runs (a token is a character) and `val_loss_per_char` for subword runs, so tokenizations
    compare on one scale."""
    if table.empty:
        return table
    return table[table["metric"] == np.where(table["tokenizer"] == "char", "val_loss", "val_loss_per_char")]


def finished(table: pd.DataFrame, seeds: int | None = None) -> pd.DataFrame:
    """The rows of the sizes (rung and tokenizer) where every arm has all the registered seeds (`seeds`; the
    ladders' five by default) and every arm of the table has run: a size is quoted and enters the trend only then,
    not on the seeds that a check's reused runs give it early, nor before its last arm starts."""
    from ..studies import LADDER_SEEDS

    if table.empty:
        return table
    wanted = len(LADDER_SEEDS) if seeds is None else seeds
    size = table.groupby(["tokenizer", "params"])
    # every arm of the table at the size: an arm not yet run would leave the size's Holm family short
    every_arm = size["variant"].transform("nunique") == table["variant"].nunique()
    return table[(size["seeds"].transform("min") >= wanted) & every_arm]


def trend(table: pd.DataFrame, at_params: float = LE_SCAO_PARAMS, seeds: int | None = None) -> pd.DataFrame:
    """Per tokenizer and variant, over the finished sizes: WLS of the size's mean difference in the primary metric
    (per character) on log10(params), weights from each size's standard error; the slope per decade of parameters
    with its 95% interval, and the line's value at `at_params` with the 95% interval of that mean (an
    extrapolation).

    The intervals take the larger of two scales: the sizes' own standard errors (scale 1, as in a fixed-effect
    meta-regression) and the scatter of the sizes about the line (the residual variance). WLS alone uses the
    residual scatter, and with three sizes that is one degree of freedom: three points that happen to fall near a
    line give an interval far narrower than the sizes' own errors allow (Knapp and Hartung's truncation at 1, docs/
    PROTOCOL.md amendment 12). t on sizes - 2 degrees of freedom either way."""
    import statsmodels.api as sm

    rows = []
    for (tokenizer, variant), sub in primary(finished(table, seeds)).groupby(["tokenizer", "variant"], sort=False):
        sub = sub.dropna(subset=["mean_diff", "ci_low"])
        if len(sub) < TREND_MIN_SIZES:
            continue
        t_crit = scipy_stats.t.ppf(0.975, sub["seeds"] - 1)
        se = (sub["ci_high"] - sub["ci_low"]) / (2 * t_crit)
        x = sm.add_constant(stats.log10(sub["params"]))
        model = sm.WLS(sub["mean_diff"].to_numpy(float), x, weights=1 / np.maximum(se.to_numpy(float), 1e-12) ** 2)
        scale = max(1.0, model.fit().scale)
        fit = model.fit(cov_type="fixed scale", cov_kwds={"scale": scale}, use_t=True)
        slope_low, slope_high = fit.conf_int(0.05)[1]
        at = fit.get_prediction(np.array([[1.0, stats.log10(at_params)]])).summary_frame(alpha=0.05).iloc[0]
        ends = fit.params[0] + fit.params[1] * stats.log10([sub["params"].min(), sub["params"].max()])
        rows.append({"tokenizer": tokenizer, "variant": variant, "rungs": len(sub),
                     "slope_per_decade": fit.params[1], "slope_ci_low": slope_low, "slope_ci_high": slope_high,
                     "scale": scale, "line_at_smallest": ends[0], "line_at_largest": ends[1],
                     "at_params": at_params, "extrapolated_diff": at["mean"], "extrapolated_ci_low": at["mean_ci_lower"],
                     "extrapolated_ci_high": at["mean_ci_upper"]})
    return pd.DataFrame(rows)


def trend_direction(row) -> str:
    """`falls` / `rises` where the slope's interval excludes zero, else `not resolved` (a cost is a positive
    difference)."""
    return "falls" if row["slope_ci_high"] < 0 else "rises" if row["slope_ci_low"] > 0 else "not resolved"


def trend_words(row) -> str:
    direction = trend_direction(row)
    return ("no trend resolved across sizes" if direction == "not resolved" else
            f"the difference {direction} as the model grows")


def scale_answer(table: pd.DataFrame, fits: pd.DataFrame | None = None, seeds: int | None = None) -> pd.DataFrame:
    """Issue 18's question per tokenizer and arm with a fitted trend: does the difference from none shrink, grow or
    flip as the model grows? Exploratory, and worded only as far as the tests resolve it: `flips` needs finished
    sizes whose Holm decisions resolve both signs; `shrinks` / `grows` a slope whose interval excludes zero,
    towards / away from zero given the sign of the mean difference over the sizes, and `crosses zero` such a slope
    whose line changes sign between the smallest and the largest size (no longer a difference that shrinks, and not
    a flip the per-size tests resolve); otherwise `no change resolved`.
    Beside it, the sizes where a cost or a gain is resolved, and the line's value at 1.3B (an extrapolation)."""
    fits = trend(table, seeds=seeds) if fits is None else fits
    sizes = primary(finished(table, seeds))
    rows = []
    for fit in fits.to_dict("records"):
        sub = sizes[(sizes["tokenizer"] == fit["tokenizer"]) & (sizes["variant"] == fit["variant"])]
        costs = sorted(sub[sub["significant"] & (sub["mean_diff"] > 0)]["params"])
        gains = sorted(sub[sub["significant"] & (sub["mean_diff"] < 0)]["params"])
        towards_zero = np.sign(fit["slope_per_decade"]) != np.sign(sub["mean_diff"].mean())
        slope_resolved = fit["slope_ci_high"] < 0 or fit["slope_ci_low"] > 0
        crosses = np.sign(fit["line_at_smallest"]) != np.sign(fit["line_at_largest"])
        answer = ("flips" if costs and gains else
                  ("crosses zero" if crosses else "shrinks" if towards_zero else "grows") if slope_resolved
                  else "no change resolved")
        rows.append({**fit, "sizes": len(sub), "params_min": int(sub["params"].min()),
                     "params_max": int(sub["params"].max()), "cost_at": costs, "gain_at": gains, "answer": answer})
    return pd.DataFrame(rows)


def _millions(params) -> str:
    return ", ".join(f"{p / 1e6:.2f}M" for p in params)


def scale_words(row) -> str:
    """One sentence for a row of scale_answer (exploratory): the answer, what resolves it and the extrapolation."""
    resolved = ([f"a cost resolved at {_millions(row['cost_at'])}"] if row["cost_at"] else []) + \
        ([f"a gain resolved at {_millions(row['gain_at'])}"] if row["gain_at"] else [])
    return (f"`{row['variant']}` ({row['tokenizer']}, {row['sizes']} sizes, {row['params_min'] / 1e6:.2f}M to "
            f"{row['params_max'] / 1e6:.2f}M non-embedding parameters): **{row['answer']}** — "
            + ("; ".join(resolved) if resolved else "no size resolves a difference after Holm")
            + f"; slope {signed(row['slope_per_decade'])} [{signed(row['slope_ci_low'])}, {signed(row['slope_ci_high'])}] "
            f"nats/char per decade of parameters; the line at {row['at_params'] / 1e9:.1f}B parameters "
            f"{signed(row['extrapolated_diff'])} [{signed(row['extrapolated_ci_low'])}, {signed(row['extrapolated_ci_high'])}] "
            "nats/char (an extrapolation).")
