"""The size ladder (issue 18): does the embedding norm's cost shrink, stay or flip as the model grows?

    python -m embnorm_lib.analyses.ladder [ladder|ladder-bpe]   # -> runs/<study>/LADDER.md, figures/ladder/
    python -m embnorm_lib.analyses.ladder ladder-lr|ladder-bpe-lr|ladder-bpe-lr2   # the LR checks -> runs/<study>/LADDER.md

Per rung (model size) the paired comparison of the registered protocol: each variant's final (and best) validation
loss minus none's, paired by seed, 95% t interval, Holm within the rung (docs/PROTOCOL.md amendment 1: "at each
model size the confirmatory family"). Across rungs the trend is exploratory: a weighted least-squares line of the
difference on log10(non-embedding parameters) (weights 1 / SE^2 of each rung's mean difference), with its 95%
interval, and what that line gives at Le Scao et al.'s 1.3B parameters — an extrapolation far outside the data,
labelled so. The analysis returns data; `write_report` renders it."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from .. import stats
from ..core.cli import report_main
from ..core.config import LADDER_EPOCH_CAP, LADDER_TOKENS_PER_PARAM, non_embedding_params
from ..core.errors import entry

# the exploratory subword LR checks, each with the amendment that registered it (rung 1; rung 2)
SUBWORD_LR_CHECKS = {"ladder-bpe-lr": 8, "ladder-bpe-lr2": 13}
LR_CHECKS = ("ladder-lr", *SUBWORD_LR_CHECKS)  # the studies that check the LR rule (on characters, on subwords)
LE_SCAO_PARAMS = 1.3e9  # the model size of Le Scao et al. 2022's embedding-norm ablation
METRICS = ("val_loss", "val_loss_per_char", "best_val_loss")  # per token, per character (BPE runs), best
# the studies whose gradient-norm peaks are a registered test (docs/PROTOCOL.md, by amendment); in every other
# ladder report the peak table is an exploratory reading beside the registered loss comparison
CONFIRMATORY_PEAKS = {"ladder-bpe-rep2": 11}
TREND_MIN_SIZES = 3  # the fewest sizes a trend line is fitted to: two leave no residual degree of freedom


def _tokenizers(runs: pd.DataFrame) -> pd.Series:
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
                        tokenizer=_tokenizers(runs))
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


def _rung(preset: str) -> int:
    return int(preset.rsplit("-", 1)[1])


def _with_factors(runs: pd.DataFrame) -> pd.DataFrame:
    """Check runs tagged with their tokenizer, rung and LR factor relative to the width rule."""
    return runs.assign(tokenizer=_tokenizers(runs), rung=[_rung(p) for p in runs["cfg.preset"]],
                       factor=[lr_factor(lr, v, int(w), _rung(p)) for lr, v, w, p in
                               zip(runs["cfg.lr"], runs["variant"], runs["cfg.n_embd"], runs["cfg.preset"],
                                   strict=True)])


def _loss_per_char(runs: pd.DataFrame) -> np.ndarray:
    """Each run's final validation loss per character: `val_loss` for char runs (a token is a character),
    `val_loss_per_char` for subword runs."""
    per_char = runs["val_loss_per_char"] if "val_loss_per_char" in runs else pd.Series(np.nan, index=runs.index)
    return np.where(_tokenizers(runs) == "char", runs["val_loss"], per_char)


def lr_check(runs: pd.DataFrame) -> pd.DataFrame:
    """An LR check (ladder-lr, ladder-bpe-lr): per tokenizer, rung, arm and LR factor, the final validation loss
    over the check's seeds (mean, SD, runs failed as docs/PROTOCOL.md amendment 1 defines it: a non-finite loss or a
    final loss above the loss at initialisation), with the factor relative to the width rule. The loss is per token;
    within one tokenizer per character is a fixed multiple of it (the same validation text), so the ranking of
    factors is the same on either scale."""
    frame = _with_factors(runs).assign(failed=stats.failed_runs(runs))
    rows = []
    for (tokenizer, preset, variant, factor), sub in frame.groupby(["tokenizer", "cfg.preset", "variant", "factor"],
                                                                   sort=True):
        ok = sub[~sub["failed"]]["val_loss"].astype(float)
        rows.append({"tokenizer": tokenizer, "preset": preset, "rung": _rung(preset), "variant": variant,
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
    """best_factors' rows with the factor the ladder runs each arm at (`ladder_factor`: ladder-lr's registered one,
    rms at ln's), so a subword check's best reads beside the character-checked factor it may differ from. Given the
    check itself, also the mean loss at that factor (`ladder_factor_val_loss`) and how much higher it is than the
    best (`gap_to_best`, zero where they agree), so a different best reads with its size."""
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
    frame = _with_factors(runs).assign(loss=_loss_per_char(runs))
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


def budget_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung and arm, what the note owes (issue 18): the shape, the training budget, the LR(s) run and
    the compute spent — finished runs, how many were trained for this study (the rest reused from another, e.g. the
    LR check's seeds 0-1), the median wall minutes per run and the summed run-hours of those trained here, with the
    device and threads per run. Wall time is per run: runs side by side overlap, so the sweep took less."""
    from ..runner.results import arm_order, reused_mask

    def column(name):
        return runs[name] if name in runs else pd.Series(np.nan, index=runs.index)

    frame = runs.assign(tokenizer=_tokenizers(runs), here=~reused_mask(runs), wall=column("wall_s"),
                        device_=column("device"), threads=column("torch_threads"), lr_=column("cfg.lr"))
    rows = []
    for (tokenizer, preset, variant), sub in frame.groupby(["tokenizer", "cfg.preset", "variant"]):
        first, here = sub.iloc[0], sub[sub["here"]]
        tokens, _ = train_compute(first, 0)
        layers, width, iters = (first.get(k, np.nan) for k in ("cfg.n_layer", "cfg.n_embd", "cfg.max_iters"))
        shaped = pd.notna(layers) and pd.notna(width)
        rows.append({"tokenizer": tokenizer, "preset": preset, "variant": variant,
                     "n_layer": int(layers) if shaped else "–", "n_embd": int(width) if shaped else "–",
                     "params": non_embedding_params(int(layers), int(width)) if shaped else "–",
                     "iters": int(iters) if pd.notna(iters) else "–", "train_tokens": tokens,
                     "tokens_per_param": tokens / non_embedding_params(int(layers), int(width)) if shaped else np.nan,
                     "lr": ", ".join(f"{v:.3g}" for v in sorted(sub["lr_"].dropna().unique())) or "–",
                     "runs": len(sub), "trained_here": len(here),
                     "min_per_run": sub["wall"].median() / 60, "run_hours_here": here["wall"].sum(min_count=1) / 3600,
                     "device": ", ".join(sorted(sub["device_"].dropna().astype(str).unique())) or "–",
                     "threads": ", ".join(f"{t:g}" for t in sorted(sub["threads"].dropna().unique())) or "–"})
    return pd.DataFrame(sorted(rows, key=lambda r: (r["tokenizer"], _rung(r["preset"]), arm_order(r["variant"]))))


def budget_section(runs: pd.DataFrame) -> list[str]:
    """The report's lines on sizes, budgets, LRs and compute (budget_table rendered, numbers rounded for reading)."""
    from ..publishing.render import compact_markdown

    table = budget_table(runs)
    if table.empty:
        return []
    def rounded(column, spec):
        return [format(v, spec) if pd.notna(v) else "–" for v in table[column]]

    shown = table.assign(train_tokens=rounded("train_tokens", ".0f"), tokens_per_param=rounded("tokens_per_param", ".1f"),
                         min_per_run=rounded("min_per_run", ".1f"), run_hours_here=rounded("run_hours_here", ".2f"))
    return ["## Sizes, budgets, LRs and compute", "",
            "Per rung and arm: the shape, iterations, training tokens and tokens per non-embedding parameter (the "
            f"rule asks {LADDER_TOKENS_PER_PARAM}; the {LADDER_EPOCH_CAP}-pass cap binds where it is lower), the LR(s) "
            "run, finished runs and those trained for this study (the rest reused bitwise from another study), median "
            "wall minutes per run and the summed run-hours of the runs trained here. Wall time is per run; runs side "
            "by side overlap. "
            + budget_words(table) + resume_words(runs), "", compact_markdown(shown), ""]


def resume_words(runs: pd.DataFrame) -> str:
    """A sentence where some runs were resumed on another CPU model than the one that began them: those agree with an
    uninterrupted run to float rounding, not bit for bit (each run's summary.json lists its CPUs, `trained_on`)."""
    moved = int(runs["cpu_changed_on_resume"].eq(True).sum()) if "cpu_changed_on_resume" in runs else 0
    return (f" {moved} run(s) were resumed on another CPU model than the one that began them, so they agree with an "
            "uninterrupted run to float rounding, not bit for bit (`trained_on` in each run's summary.json)."
            if moved else "")


def budget_words(table: pd.DataFrame) -> str:
    """One sentence of what a study's runs cost, from budget_table."""
    hours = table["run_hours_here"].sum(min_count=1)
    return (f"{int(table['runs'].sum())} runs finished, {int(table['trained_here'].sum())} of them trained for this "
            "study" + (f" ({hours:.1f} run-hours summed over runs)" if pd.notna(hours) else "") + ".")


def fit_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung, arm and LR, how closely the model fits its training split (a description): the mean
    over seeds of the training loss at the end (`final_train_loss`: the last ten training batches), the final and
    the best validation loss, the gap between final validation and training loss, and how far validation loss rose
    after its best. Per token, which for char runs is per character: both losses of a row share one unit. Where
    the index has it, also the mean norm of block 1's input at the end (`final_block1_input_norm`): the scale at
    which the embedding (normed, rescaled or neither) enters the first block."""
    from ..runner.results import arm_order

    frame = runs.assign(tokenizer=_tokenizers(runs), lr_=runs["cfg.lr"] if "cfg.lr" in runs else np.nan)
    with_norm = "final_block1_input_norm" in frame
    frame = frame.assign(gap=frame["val_loss"] - frame["final_train_loss"],
                         val_rise=frame["val_loss"] - frame["best_val_loss"])
    rows = []
    for (tokenizer, preset, variant, lr), sub in frame.groupby(["tokenizer", "cfg.preset", "variant", "lr_"],
                                                               dropna=False):
        rows.append({"tokenizer": tokenizer, "preset": preset, "variant": variant, "lr": lr, "seeds": len(sub),
                     "train_loss": sub["final_train_loss"].mean(), "val_loss": sub["val_loss"].mean(),
                     "gap": sub["gap"].mean(), "best_val_loss": sub["best_val_loss"].mean(),
                     "val_rise": sub["val_rise"].mean(),
                     **({"block1_input_norm": sub["final_block1_input_norm"].mean()} if with_norm else {})})
    key = lambda r: (r["tokenizer"], _rung(r["preset"]), arm_order(r["variant"]), r["lr"])  # noqa: E731
    return pd.DataFrame(sorted(rows, key=key))


def fit_words(table: pd.DataFrame) -> list[str]:
    """Per tokenizer, the gap between validation and training loss at each rung (mean over its rows), small first."""
    lines = []
    for tokenizer, sub in table.groupby("tokenizer"):
        by_rung = sub.assign(rung=sub["preset"].map(_rung)).groupby("rung")["gap"].mean()
        unit = "nats/char" if tokenizer == "char" else "nats/token"
        lines.append(f"- {tokenizer}: validation minus training loss, mean over the rung's arms and LRs: "
                     + ", ".join(f"rung {r} {g:+.3f}" for r, g in by_rung.items()) + f" {unit}.")
    return lines


def fit_section(runs: pd.DataFrame) -> list[str]:
    """The report's lines on the fit to the training split (fit_table rendered)."""
    from ..publishing.render import compact_markdown

    needed = {"final_train_loss", "val_loss", "best_val_loss"}
    if runs.empty or not needed <= set(runs):
        return []
    table = fit_table(runs)
    shown = table.assign(lr=[f"{v:.3g}" if pd.notna(v) else "–" for v in table["lr"]],
                         **{c: table[c].round(4) for c in ("train_loss", "val_loss", "gap", "best_val_loss",
                                                           "val_rise")},
                         **({"block1_input_norm": [f"{v:.2f}" for v in table["block1_input_norm"]]}
                            if "block1_input_norm" in table else {}))
    return ["## Fit to the training split (a description)", "",
            "Mean over seeds, per token (a character for char runs): `train_loss` is the mean of the last ten "
            "training batches, `val_loss` the final validation loss on the whole split, `gap` their difference and "
            "`val_rise` how far the final validation loss sits above the best one seen; `block1_input_norm` is the "
            "mean norm of block 1's input (the embedding after any norm or rescaling) at the end of training, where "
            "the index has it. The validation split is the "
            "corpus's last tenth (text the training split does not hold), so some gap is there at any size; a gap that "
            "grows with size while the budget is capped at ten passes says the larger models fit their training "
            "text in ways that do not carry over to unseen text.", "", *fit_words(table), "", compact_markdown(shown), ""]


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
            + f"; slope {row['slope_per_decade']:+.3f} [{row['slope_ci_low']:+.3f}, {row['slope_ci_high']:+.3f}] "
            f"nats/char per decade of parameters; the line at {row['at_params'] / 1e9:.1f}B parameters "
            f"{row['extrapolated_diff']:+.3f} [{row['extrapolated_ci_low']:+.3f}, {row['extrapolated_ci_high']:+.3f}] "
            "nats/char (an extrapolation).")


def unchecked_rungs(runs: pd.DataFrame) -> list[tuple[int, str]]:
    """(rung, arm) of each arm a study ran at the width rule's LR before its check completed, per arm: a rung's check
    completes arm by arm, and an arm without its own check (rms, ln_matched, scaled_unit) runs at its LR family's
    factor (studies.LADDER_LR_ARM)."""
    from ..runner.results import arm_order
    from ..studies import LADDER_LR_ARM, LADDER_LR_CHECKED

    return sorted({(_rung(p), v) for p, v in zip(runs.get("cfg.preset", []), runs.get("variant", []), strict=True)
                   if LADDER_LR_ARM.get(v, v) not in LADDER_LR_CHECKED.get(_rung(p), {})},
                  key=lambda rv: (rv[0], arm_order(rv[1])))


def write_report(study: str = "ladder", out_dir=None, figures_dir=None, answer: list[str] | None = None) -> Path:
    """LADDER.md; `answer`: the lines its header quotes (ladder_findings.ladder_answer, passed in by its publisher:
    ladder_findings imports this module, so this module does not import it)."""
    import matplotlib.pyplot as plt

    from ..core.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
    from ..core.rundir import study_dir_for
    from ..publishing import plots
    from ..publishing.render import compact_markdown
    from ..runner.results import load_runs
    from ..studies import STUDIES, registered_seeds
    from . import plots as analysis_plots

    out = runs_root(out_dir)
    runs = load_runs(study, out)
    figures = Path(figures_dir or default_figures_dir(out, "ladder"))
    footer = f"embnorm · {study} · runs.csv {fingerprint(study_dir_for(study, out).index)}"
    if study in LR_CHECKS:
        if len(runs):
            check = lr_check(runs)
            fig = analysis_plots.plot_lr_check(check, best_factors(check))
            plots.save(fig, figures / f"{study}_lr_curves", footer)
            plt.close(fig)
        return write_text_stable(study_dir_for(study, out).root / "LADDER.md", lr_check_report(runs, study))
    every_size = rung_table(runs)
    seeds = registered_seeds(study)
    # amendment 4: a size's comparison is quoted (table, figure, trend) only once every arm has its registered seeds
    table = finished(every_size, seeds)
    cells = STUDIES[study].cells()
    across_sizes = len({c.preset for c in cells}) > 1  # a one-size study has no trend or figure
    lines_trend = trend(table, seeds=seeds) if len(table) else pd.DataFrame()
    axes = {"params": "params", "train_flops": "compute"} if len(table) and across_sizes else {}
    for x, name in axes.items():
        if table[x].isna().any():  # compute is not drawn from a guess (train_compute's NaN)
            continue
        fig = analysis_plots.plot_ladder(primary(table), x)
        plots.save(fig, figures / f"{study}_delta_vs_{name}", footer)
        plt.close(fig)
    done, planned = len(runs), len(cells)
    from ..publishing.study_header import header_lines

    # per finished size each arm's difference (and, with the scale-vs-norm arms, the share each half carries), then
    # the trend across sizes and any registered gradient-norm peaks
    answer = list(answer or [])
    lines = [f"# {'The size ladder' if across_sizes else 'One size of the ladder'} (`{study}`)", "",
             *header_lines(study, answer, pending="no size has all its registered seeds yet (amendment 4)"),
             f"Written by `python -m embnorm_lib.analyses.ladder` at commit {git_commit()[:12]} from `runs/{study}/runs.csv` "
             f"({done} of {planned} registered runs finished" + ("; **partial**" if done < planned else "") + ")."
             + (f" Figures: `figures/ladder/{study}_delta_vs_params.png`, and against training compute "
                f"(`train_flops`: 6 x (non-embedding parameters + output head) x training tokens) "
                f"`figures/ladder/{study}_delta_vs_compute.png`." if across_sizes else ""), "",
             " ".join(filter(None, [STUDIES[study].description, STUDIES[study].note])), "",
             "## Per size (the registered paired comparison, Holm within each size)", "",
             compact_markdown(_display(table)) if len(table) else "No size has finished yet.", ""]
    lines += in_progress_lines(every_size, table, seeds, arms={c.variant for c in cells} - {"none"})
    if len(runs):
        lines += per_seed_section(runs)
    lines += budget_section(runs) + fit_section(runs) + peak_section(runs, study) + norm_loss_section(runs)
    unchecked = unchecked_rungs(runs)
    lines += [f"- **rung {r} ran `{v}` at the width rule's LR without a completed check** (amendment 5 asks for "
              f"`ladder-lr` at that rung first)." for r, v in unchecked] + ([""] if unchecked else [])
    if not across_sizes:
        return write_text_stable(study_dir_for(study, out).root / "LADDER.md", "\n".join(lines).rstrip("\n") + "\n")
    lines += ["## Trend across sizes (exploratory)", "",
             "Weighted least squares of each size's mean difference in final validation loss per character (for BPE "
             "runs `val_loss_per_char`, not the per-token loss) on log10(non-embedding parameters); the value at "
             f"{LE_SCAO_PARAMS:.2g} parameters is an **extrapolation** far beyond the largest rung, shown beside Le Scao "
             "et al.'s finding that an embedding LayerNorm hurts zero-shot accuracy at that size.", ""]
    if len(lines_trend):
        lines += [compact_markdown(lines_trend.assign(at_params=[f"{v:.2g}" for v in lines_trend["at_params"]])), ""]
        lines += [f"- `{r['variant']}` ({r['tokenizer']}): {trend_words(r)} (slope {r['slope_per_decade']:+.3f} "
                  f"[{r['slope_ci_low']:+.3f}, {r['slope_ci_high']:+.3f}] nats/char per decade)."
                  for _, r in lines_trend.iterrows()]
        lines += ["", "The intervals use the larger of the sizes' own standard errors and their scatter about the "
                  "line (`scale`, the residual variance in units of those errors, floored at 1; docs/PROTOCOL.md "
                  "amendment 12), so three sizes that happen to fall near a line do not make a narrow interval.", "",
                  "Does the difference shrink, grow or flip with size? `flips` needs finished sizes whose Holm "
                  "decisions resolve both signs; `shrinks` / `grows` a slope whose interval excludes zero; "
                  "`crosses zero` such a slope whose line changes sign within the sizes; otherwise no change is "
                  "resolved.", ""]
        lines += [f"- {scale_words(r)}" for r in scale_answer(table, lines_trend, seeds).to_dict("records")]
    else:
        lines += ["Fewer than three sizes have finished (all their registered seeds): no trend is fitted."]
    return write_text_stable(study_dir_for(study, out).root / "LADDER.md", "\n".join(lines) + "\n")


def in_progress_lines(every_size: pd.DataFrame, quoted: pd.DataFrame, seeds: int | None = None,
                      arms=()) -> list[str]:
    """The sizes with some finished runs that are not quoted yet (`finished`): per arm, how many of its registered
    seeds have finished, and no difference, interval or test, since a size is read only as a whole (amendment 4).
    A registered arm (`arms`, none aside) with no finished run at such a size is counted as 0, not left out."""
    from ..runner.results import arm_order
    from ..studies import LADDER_SEEDS

    wanted = len(LADDER_SEEDS) if seeds is None else seeds
    waiting = every_size.drop(index=quoted.index)  # `finished` keeps rung_table's row labels
    if waiting.empty:
        return []
    lines = [f"Not quoted yet (docs/PROTOCOL.md amendment 4: a size is compared once every arm has its {wanted} "
             "registered seeds; its finished runs are in the per-seed tables below):", ""]
    for (tokenizer, preset), sub in primary(waiting).groupby(["tokenizer", "preset"], sort=False):
        counts = {v: 0 for v in arms} | dict(zip(sub["variant"], sub["seeds"].astype(int), strict=True))
        counted = ", ".join(f"`{v}` {counts[v]}" for v in sorted(counts, key=arm_order))
        lines.append(f"- {preset} ({tokenizer}): seeds finished with a paired `none` run: {counted} of {wanted}.")
    return lines + [""]


def per_seed(runs: pd.DataFrame, column: str | None = None) -> pd.DataFrame:
    """Per tokenizer, rung and seed: each arm's final validation loss per character (`val_loss_per_char` for
    subword runs, `val_loss` for char runs), or the index's `column` where given, arms as columns in registry
    order."""
    from ..runner.results import arm_order

    frame = runs.assign(tokenizer=_tokenizers(runs), value=_loss_per_char(runs) if column is None else runs[column])
    wide = frame.pivot_table(index=["tokenizer", "cfg.preset", "seed"], columns="variant", values="value")
    wide = wide[sorted(wide.columns, key=arm_order)].reset_index().rename(columns={"cfg.preset": "preset"})
    wide.columns.name = None
    return wide


# The per-seed readings printed beside each run's loss, so a seed that ends apart from its arm can be read beside
# the scale at which its embedding entered the model and beside whether its training had a gradient spike: index
# column -> (the sentence above its table, the format of a value). A description, no test.
PER_SEED_READINGS = {
    "final_block1_input_norm": ("Each run's mean norm of block 1's input (the embedding after any norm or "
                                "rescaling) at the end of training.", "{:.2f}"),
    "peak_grad_norm_post_warmup": ("Each run's largest total gradient norm (before clipping) after the warm-up, the "
                                   "registered stability metric (docs/PROTOCOL.md amendment 1).", "{:.3g}"),
}


def per_seed_section(runs: pd.DataFrame) -> list[str]:
    """The report's per-seed lines: each run's final loss per character and, for each of `PER_SEED_READINGS` the
    index has, that reading per run (a description)."""
    from ..publishing.render import compact_markdown

    lines = ["## Per seed (a description)", "",
             "Each run's final validation loss per character: the spread behind each interval.", "",
             compact_markdown(per_seed(runs)), ""]
    for column, (sentence, fmt) in PER_SEED_READINGS.items():
        if column not in runs or not runs[column].notna().any():
            continue
        values = per_seed(runs, column)
        arms = [c for c in values.columns if c not in ("tokenizer", "preset", "seed")]
        lines += [sentence, "", compact_markdown(values.assign(**{a: [fmt.format(v) if pd.notna(v) else "–"
                                                                      for v in values[a]] for a in arms})), ""]
    return lines


def _in_ladder_order(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by tokenizer, then rung, then arm in registry order."""
    from ..runner.results import arm_order

    order = table.apply(lambda r: (r["tokenizer"], _rung(r["preset"]), arm_order(r["variant"])), axis=1)
    return table.iloc[sorted(range(len(table)), key=lambda i: order.iloc[i])].reset_index(drop=True)


def peak_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung and arm (every arm but none): how each arm's peak total gradient norm after the warm-up
    (amendment 1's registered stability metric) compares with none's on the same seed, an exploratory reading of
    the ladder. Paired on log10 of the peak (peaks span orders of magnitude, so a ratio is the natural scale), the
    mean difference and its 95% t interval given back as a geometric-mean ratio; Holm within each size over its
    arms. Beside it, the mean share of clipped steps per arm (a confound: an arm that clips more runs in effect
    another optimiser) and the loss spikes after the warm-up summed over seeds."""
    from ..runner.results import arm_order

    needed = {"peak_grad_norm_post_warmup", "clipped_frac", "spike_count_post_warmup"}
    if runs.empty or not needed <= set(runs) or not runs["peak_grad_norm_post_warmup"].notna().any():
        return pd.DataFrame()
    frame = runs.assign(tokenizer=_tokenizers(runs),
                        log10_peak_grad_norm=stats.log10(runs["peak_grad_norm_post_warmup"]))
    rows = []
    for (tokenizer, preset), sub in frame.groupby(["tokenizer", "cfg.preset"]):
        none = sub[sub["variant"] == "none"]
        block = []
        for variant in sorted(set(sub["variant"]) - {"none"}, key=arm_order):
            c = stats.compare(sub, "log10_peak_grad_norm", variant)
            arm = sub[sub["variant"] == variant]
            block.append({"tokenizer": tokenizer, "preset": preset, "variant": variant, "seeds": c.n,
                          "none_geomean": 10 ** c.baseline_mean, "variant_geomean": 10 ** c.variant_mean,
                          "ratio": 10 ** c.mean_diff, "ratio_ci_low": 10 ** c.ci_low, "ratio_ci_high": 10 ** c.ci_high,
                          "p_t": c.p_t, "clipped_none": none["clipped_frac"].mean(),
                          "clipped_variant": arm["clipped_frac"].mean(),
                          "spikes_none": int(none["spike_count_post_warmup"].sum()),
                          "spikes_variant": int(arm["spike_count_post_warmup"].sum())})
        if block:
            part = pd.DataFrame(block)
            reject, adjusted = stats.holm(part["p_t"].to_numpy(float))
            rows.append(part.assign(p_holm=adjusted, significant=reject))
    if not rows:
        return pd.DataFrame()
    table = pd.concat(rows, ignore_index=True)
    return _in_ladder_order(table)


def peak_section(runs: pd.DataFrame, study: str | None = None) -> list[str]:
    """The report's lines on gradient-norm peaks (peak_table rendered): an exploratory reading after the registered
    analysis, or, for a study that registered the peaks (CONFIRMATORY_PEAKS), its second confirmatory family."""
    from ..publishing.render import compact_markdown

    table = peak_table(runs)
    if table.empty:
        return []
    amendment = CONFIRMATORY_PEAKS.get(study)
    if amendment is None:
        heading, status = ("## Gradient-norm peaks per size (exploratory)",
                           "Not part of the ladder's registered analysis (the loss is): ")
    else:
        heading, status = (f"## Gradient-norm peaks (confirmatory, docs/PROTOCOL.md amendment {amendment})",
                           f"Registered by amendment {amendment} as this study's second family (Holm within it): ")
    shown = table.assign(**{c: [f"{v:.3g}" for v in table[c]] for c in ("none_geomean", "variant_geomean", "ratio",
                                                                          "ratio_ci_low", "ratio_ci_high")},
                         **{c: table[c].round(4) for c in ("p_t", "p_holm")},
                         **{c: table[c].round(3) for c in ("clipped_none", "clipped_variant")})
    return [heading, "",
            status + "each arm's peak total gradient norm after "
            "the warm-up (`peak_grad_norm_post_warmup`, before clipping; the stability metric amendment 1 registered "
            "for the stability studies) against `none`'s on the same seed, paired on log10 of the peak. `ratio` is "
            "the geometric mean of the seeds' ratios with its 95% t interval, the geometric means of each arm beside "
            "it; Holm within each size over its arms. `clipped_*` is the mean share of steps clipped (a confound), "
            "`spikes_*` the loss spikes after the warm-up summed over seeds.", "", compact_markdown(shown), ""]


def norm_loss_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung and arm: does a seed whose embedding entered block 1 at a larger scale end with a lower
    or a higher loss? Kendall's tau between each seed's final mean norm of block 1's input and its final validation
    loss per character, across the arm's seeds, with scipy's p (exact and two-sided at these n when no value ties).
    An exploratory reading of a lead seen in ladder-bpe-rep (the normed seeds that gained least on `none` ended
    with the lowest block-1 norms): no Holm family, no decision, and no direction of cause (a seed that trains
    worse may simply grow its norm's gain less)."""
    if runs.empty or "final_block1_input_norm" not in runs or not runs["final_block1_input_norm"].notna().any():
        return pd.DataFrame()
    frame = runs.assign(tokenizer=_tokenizers(runs), loss_per_char=_loss_per_char(runs))
    frame = frame.dropna(subset=["final_block1_input_norm", "loss_per_char"])
    rows = []
    for (tokenizer, preset, variant), sub in frame.groupby(["tokenizer", "cfg.preset", "variant"]):
        if len(sub) < 3:  # two points always rank perfectly
            continue
        tau = scipy_stats.kendalltau(sub["final_block1_input_norm"], sub["loss_per_char"])
        rows.append({"tokenizer": tokenizer, "preset": preset, "variant": variant, "seeds": len(sub),
                     "norm_min": sub["final_block1_input_norm"].min(), "norm_max": sub["final_block1_input_norm"].max(),
                     "kendall_tau": float(tau.statistic), "p": float(tau.pvalue)})
    return _in_ladder_order(pd.DataFrame(rows)) if rows else pd.DataFrame()


def norm_loss_section(runs: pd.DataFrame) -> list[str]:
    """The report's exploratory lines on block-1 norm vs loss across seeds (norm_loss_table rendered)."""
    from ..publishing.render import compact_markdown

    table = norm_loss_table(runs)
    if table.empty:
        return []
    shown = table.assign(**{c: [f"{v:.2f}" for v in table[c]] for c in ("norm_min", "norm_max", "kendall_tau")},
                         p=[f"{v:.2g}" for v in table["p"]])
    return ["## Block-1 norm against loss across seeds (exploratory)", "",
            "Not part of the registered analysis: within each arm, Kendall's tau between a seed's final mean norm of "
            "block 1's input and its final validation loss per character (negative: the seeds whose embedding entered "
            "at a larger scale ended lower), with its two-sided p; the norms' range beside it. A lead to register, "
            "not a finding: no multiplicity correction, and the direction of cause is open.", "",
            compact_markdown(shown), ""]


def _display(table: pd.DataFrame) -> pd.DataFrame:
    """Token counts as integers and FLOPs in scientific notation, for the markdown table; a row outside the Holm
    family (a subword run's per-token loss) has no decision of its own."""
    return table.assign(train_tokens=[f"{v:.0f}" if pd.notna(v) else "–" for v in table["train_tokens"]],
                        train_flops=[f"{v:.3g}" if pd.notna(v) else "–" for v in table["train_flops"]],
                        significant=[str(bool(s)) if pd.notna(p) else "–"
                                     for s, p in zip(table["significant"], table["p_holm"], strict=True)])


def _unfinished_rungs(study: str, runs: pd.DataFrame) -> str:
    """The registered runs a study still lacks, per preset ('ladder-4 (4 runs)'), from its cells and its index."""
    from collections import Counter

    from ..studies import STUDIES

    planned = Counter(c.preset for c in STUDIES[study].cells())
    done = runs["cfg.preset"].value_counts() if len(runs) else {}
    left = [(preset, n - int(done.get(preset, 0))) for preset, n in sorted(planned.items())]
    return ", ".join(f"{preset} ({n} run{'s' if n != 1 else ''})" for preset, n in left if n > 0) or "none"


def lr_check_report(runs: pd.DataFrame, study: str = "ladder-lr") -> str:
    """ladder-lr registers each arm's best factor for the ladder (amendment 5); the subword checks (ladder-bpe-lr,
    ladder-bpe-lr2) are exploratory and only say whether the subword ladder's factor, checked on characters, is also
    best on subwords."""
    from ..core.io import git_commit
    from ..publishing.render import compact_markdown
    from ..publishing.study_header import header_lines
    from ..studies import LADDER_LR_CHECKED, STUDIES

    check, best, at_best = check_summary(runs)
    done, planned = len(runs), len(STUDIES[study].cells())
    amendment = SUBWORD_LR_CHECKS.get(study)
    subword = amendment is not None
    title = ("The subword learning-rate check, exploratory" if subword else "The ladder's learning-rate check")
    use = (f"Amendment {amendment}: exploratory; the subword ladder keeps the factor checked on characters (amendment 7), and "
           "this check only says whether that factor is also best on subwords." if subword else
           "Amendment 5: the ladder runs each arm at its best factor (rms at ln's).")
    best_lines = []
    for r in best.itertuples():
        where = f"rung {r.rung}" + ("" if r.tokenizer == "char" else f", {r.tokenizer}")
        if subword:
            used = r.ladder_factor
            state = (f"the subword ladder's factor {used:g} (checked on characters) is also best here"
                     if used == r.best_factor else
                     f"**the subword ladder ran at {used:g}** (checked on characters), where the mean loss is "
                     f"{r.gap_to_best:.4f} higher ({r.ladder_factor_val_loss:.4f}; per token)")
        else:
            registered = LADDER_LR_CHECKED.get(r.rung, {}).get(r.variant)
            state = ("registered for the ladder" if registered == r.best_factor else
                     "**not yet registered** in studies.LADDER_LR_CHECKED" if registered is None else
                     f"**differs from the registered factor {registered:g}**")
        best_lines.append(f"- {where}, `{r.variant}`: best factor {r.best_factor:g} (LR {r.best_lr:.3g})"
                          + ("" if r.bracketed else ", at the grid's edge") + f"; {state}.")
    lines = [f"# {title} (`{study}`)", "", *header_lines(study, best_lines, pending="no rung has all its check runs yet"),
             f"Written by `python -m embnorm_lib.analyses.ladder {study}` at commit {git_commit()[:12]} from "
             f"`runs/{study}/runs.csv` ({done} of {planned} registered runs finished"
             + ("; **partial**" + ("" if subword else f": still to finish {_unfinished_rungs(study, runs)}; rungs 3 "
                                          "and 4 train on a CPU across sessions (amendments 14-15)")
                if done < planned else "")
             + f"). Figure: `figures/ladder/{study}_lr_curves.png` (each arm's loss against its LR factor, the best "
             "of a complete grid filled).", "",
             " ".join(filter(None, [STUDIES[study].description, STUDIES[study].note])), "",
             "## Final validation loss by LR factor (factor 1 = the width rule; per token for BPE)", "",
             compact_markdown(check), "",
             "## Best factor per rung and arm", "",
             "The factor with the lowest mean final validation loss over the check's seeds; `bracketed` is false "
             "where it is the grid's smallest or largest factor (the optimum may lie beyond). " + use, "",
             (compact_markdown(best.drop(columns=["ladder_factor", "ladder_factor_val_loss", "gap_to_best"]))
              if len(best) else "No rung has all its check runs yet."), ""]
    lines += best_lines
    if subword and len(best):
        lines += ["", "## Each arm at its own best factor (a description, not a test)", "",
                  "Final validation loss per character, mean over the check's seeds, each arm at the factor above; "
                  "`diff_vs_none` pairs the seeds with `none` at its own best factor. Two seeds give no interval: "
                  f"amendment {amendment} makes any comparison at subword-checked LRs exploratory.", "",
                  compact_markdown(at_best)]
    lines += [""] + budget_section(runs) + fit_section(runs)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
    from ..runner.registry import write_own_report
    from ..studies import studies_of

    # every study the registry analyses as a ladder, the size ladder itself the default
    return report_main(argv, __doc__, sorted(studies_of("ladder"), key=lambda s: s != "ladder"),
                       lambda study, a: write_own_report(study, a.out_dir, a.figures_dir))


if __name__ == "__main__":
    sys.exit(entry(main))
