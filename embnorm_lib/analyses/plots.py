"""The analyses' own figures: LR curves and growth, budget deltas and trend, loss traces, H1b, per-position deltas,
the ladder's size trend and LR check. Built from the engine's figure helpers (publishing/plots.py), whose names are
importable from here too: this module is also the old `embnorm_lib.analyses.plots` (every figure, generic and per analysis)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..core.nets.variants import variant_names
from ..publishing.plots import *  # noqa: F403 (the old embnorm_lib.analyses.plots held these too)
from ..publishing.plots import (
    _finish_delta_vs_log_x,
    arm_color,
    arm_label,
    column_label,
    interval_error,
    plot_bands,
    variant_style,
)


def plot_lr_curves(frame: pd.DataFrame) -> plt.Figure:
    """Final loss (column `capped`: a diverged run counts at its loss at init) against the peak LR, per arm."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    plot_bands(ax, frame, "cfg.lr", "capped")
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="final val loss (diverged = loss at init)",
           title="LR sensitivity (mean, 95% band over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_lr_growth(phase: pd.DataFrame) -> plt.Figure:
    """Along the LR grid, per arm: the share of runs that failed, the largest attention logit and the last probe's
    largest output logit (means over seeds)."""
    columns = [c for c in ("failed_share", "max_attn_logit", "final_out_logit_max")
               if c in phase or c == "failed_share"]
    frame = phase.assign(failed_share=phase["failed"] / phase["runs"])
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.6))
    labels = {"failed_share": "share of runs failed", "max_attn_logit": "max attention logit",
              "final_out_logit_max": "max output logit (last probe)"}
    for ax, column in zip(np.atleast_1d(axes), columns, strict=True):
        for variant, sub in frame.groupby("variant", sort=False):
            ls, marker = variant_style(variant)
            ax.plot(sub["cfg.lr"], sub[column], ls=ls, marker=marker, label=variant, color=arm_color(variant))
        ax.set(xscale="log", xlabel="peak learning rate", ylabel=labels[column])
        if column == "failed_share":
            ax.set_ylim(-0.05, 1.05)
        else:
            ax.set_yscale("log")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_budget_deltas(table: pd.DataFrame) -> plt.Figure:
    """Paired Δ val loss vs none (95% CI) at each budget, one line per variant."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    sub = table[table["variant"] != "none"]
    for k, (variant, rows) in enumerate(sub.groupby("variant", sort=False)):
        rows = rows.sort_values("cfg.max_iters")
        x = rows["cfg.max_iters"].to_numpy(float) * (1 + 0.04 * k)  # each arm beside the last, not under it
        y = rows["delta_vs_none"].to_numpy(float)
        ls, marker = variant_style(variant)
        ax.errorbar(x, y, yerr=interval_error(rows, "delta_vs_none"), marker=marker, ls=ls, capsize=3, label=variant,
                    color=arm_color(variant), mfc="white")
        if "significant" in rows:  # filled where Holm resolves the difference, open where it does not
            sig = rows["significant"].astype(bool).to_numpy()
            ax.plot(x[sig], y[sig], marker, color=arm_color(variant), zorder=3)
    return _finish_delta_vs_log_x(fig, ax, "training budget (iterations)", "Δ val loss vs none (nats/char)",
                                  "Embedding-norm effect by budget (paired, 95% CI; filled: significant after Holm)",
                                  zero_color="0.4")


def plot_budget_trend(table: pd.DataFrame) -> plt.Figure:
    """The budget trend (budget_trend.budget_table): each arm's paired difference from none in final and in best
    validation loss (95% t interval) against the budget on a log axis, with the epochs each budget sees; filled
    markers are significant after Holm (one family per loss)."""
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), sharey=True)
    budgets = table.drop_duplicates("max_iters").sort_values("max_iters")
    for ax, label in zip(axes, ("final", "best"), strict=True):
        for variant, rows in table.groupby("variant", sort=False):
            rows = rows.sort_values("max_iters")
            color = arm_color(variant)
            x = rows["max_iters"].to_numpy(float) * (1.04 if variant == "rms" else 1.0)  # rms beside ln, not under it
            y = rows[f"delta_{label}"].to_numpy(float)
            ls, marker = variant_style(variant)
            ax.errorbar(x, y, yerr=[y - rows[f"ci_low_{label}"], rows[f"ci_high_{label}"] - y], ls=ls,
                        color=color, capsize=3, label=variant)
            filled = rows[f"significant_{label}"].astype(bool).to_numpy()
            ax.scatter(x, y, color=color, marker=marker, zorder=3,
                       facecolors=[color if f else "white" for f in filled])
        ax.axhline(0, color="0.4", lw=0.8)
        ax.set(xscale="log", title=f"{label} validation loss")
        ax.set_xticks(budgets["max_iters"], [f"{b}\n{e:.2g} ep" for b, e in zip(budgets["max_iters"],
                                                                                budgets["epochs"])], fontsize=7)
        ax.xaxis.set_minor_locator(plt.NullLocator())
    axes[0].set_ylabel("Δ vs none (nats/char)")
    axes[0].legend(fontsize=8)
    fig.supxlabel("training budget (iterations; epochs of the training split); filled: significant after Holm",
                  fontsize=8, x=0.01, ha="left")  # left, clear of the footer plots.save writes on the right
    fig.tight_layout()
    return fig


def plot_loss_traces(series: pd.DataFrame, title: str) -> plt.Figure:
    """Training loss per step, one thin line per run and a panel per arm: spikes and divergences stay visible."""
    arms = list(dict.fromkeys(series["arm"]))
    fig, axes = plt.subplots(1, len(arms), figsize=(3.4 * len(arms), 3.2), sharey=True, squeeze=False)
    for ax, arm in zip(axes.flat, arms):
        for _, run in series[series["arm"] == arm].groupby("seed"):
            ax.plot(run["step"], run["train_loss"], lw=0.8, color=arm_color(arm), alpha=0.8)
        ax.set(title=arm_label(arm), xlabel=column_label("step"), yscale="log")
    axes.flat[0].set_ylabel(column_label("train_loss"))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_h1b(families: dict[str, pd.DataFrame], bracket: pd.DataFrame) -> plt.Figure:
    """H1b's trade: per regime, the share of runs that failed at the confirmatory LR (fresh seeds; hollow marks:
    search and fresh seeds pooled), and each variant's tuned cost vs none with its 95% t interval."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    arms = [v for v in variant_names() if v in set(bracket["variant"])]
    width = 0.8 / max(len(families), 1)
    for i, regime in enumerate(families):
        sub = bracket[bracket["regime"] == regime].set_index("variant")
        x = np.arange(len(arms)) + (i - (len(families) - 1) / 2) * width
        shares = [failed_share(sub.loc[a, "failed_fresh"]) if a in sub.index else np.nan for a in arms]
        pooled = [failed_share(sub.loc[a, "failed_pooled"]) if a in sub.index else np.nan for a in arms]
        left.bar(x, shares, width=width * 0.9, label=f"{regime} (fresh seeds)", alpha=0.8)
        left.scatter(x, pooled, marker="o", facecolors="none", edgecolors="k", zorder=3,
                     label="search + fresh seeds" if i == 0 else None)
    left.set(xticks=np.arange(len(arms)), xticklabels=arms, ylim=(-0.05, 1.05), ylabel="share of runs failed",
             title="failures at the confirmatory LR")
    left.legend(fontsize=7)
    cost = next(iter(families.values()))
    cost = cost[cost["endpoint"] == "tuned_cost"]
    y = np.arange(len(cost))
    right.errorbar(cost["mean_diff"], y, xerr=interval_error(cost), fmt="o", color="k", capsize=3)
    right.axvline(0, color="0.5", lw=0.8)
    right.set(yticks=y, yticklabels=cost["variant"], xlabel="loss at own best LR minus none's (nats/char)",
              title="tuned cost (95% t interval)")
    fig.tight_layout()
    return fig


def failed_share(count: str) -> float:
    """'k/n' (failures out of runs) as a share; NaN for no runs."""
    failed, runs = (int(v) for v in count.split("/"))
    return failed / runs if runs else np.nan


def plot_position_deltas(deltas: pd.DataFrame) -> plt.Figure:
    """Per variant, the paired difference from none in validation loss at each position of the window (mean and
    95% t band over seeds)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for variant, sub in deltas.dropna(subset=["delta_vs_none"]).groupby("variant", sort=False):
        color = arm_color(variant)
        ls, marker = variant_style(variant)
        ax.plot(sub["position"], sub["delta_vs_none"], label=variant, color=color, ls=ls, marker=marker, ms=3,
                mfc="white", markevery=max(1, len(sub) // 10))
        ax.fill_between(sub["position"], sub["ci_low"], sub["ci_high"], color=color, alpha=0.2, lw=0)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set(xscale="log", xlabel="position in the window (context length + 1)",
           ylabel="Δ val loss vs none (nats/char)", title="each arm at its own tuned LR (exploratory)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


LADDER_X = {"params": "non-embedding parameters", "train_flops": "training compute (FLOPs, 6ND estimate)"}


TOKENIZER_STYLES = {"char": "-", "bpe-512": "--", "bpe-4096": "-."}  # one line style per tokenizer in the ladder figures


def plot_ladder(frame: pd.DataFrame, x: str = "params", ax=None) -> plt.Figure:
    """The size ladder: each variant's paired difference from none in final validation loss per character
    (`ladder.primary`'s rows: one metric per tokenizer) against the non-embedding parameter count or the training
    compute (95% t intervals; filled where significant after Holm), one line per tokenizer. Into `ax` if given."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8)) if ax is None else (ax.figure, ax)
    tokenizers = list(dict.fromkeys(frame["tokenizer"]))
    for (variant, tokenizer), sub in frame.groupby(["variant", "tokenizer"], sort=False):
        color = arm_color(variant)
        # rms beside ln and each tokenizer beside the others at one size, not hidden under them
        offset = (1.04 if variant == "rms" else 1.0) * (1.0 + 0.1 * tokenizers.index(tokenizer))
        marker = variant_style(variant)[1]  # the arm's marker; the line style says the tokenizer
        style = TOKENIZER_STYLES.get(tokenizer, ":")
        ax.errorbar(sub[x] * offset, sub["mean_diff"], yerr=interval_error(sub), fmt=marker + style, color=color,
                    capsize=2, label=f"{variant} ({tokenizer})", mfc="white")
        sig = sub[sub["significant"]]
        ax.plot(sig[x] * offset, sig["mean_diff"], marker, color=color, zorder=3)  # over the open markers (2.1)
    from matplotlib.ticker import NullFormatter

    values = frame[x].astype(float)
    title = "embedding norm cost by " + ("model size" if x == "params" else "training compute")
    fig = _finish_delta_vs_log_x(fig, ax, LADDER_X[x], "Δ final val loss vs none (nats/char)", title)
    ax.set_xlim(values.min() / 2, values.max() * 2)  # at least a decade, so one finished size reads as a point
    ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels run together
    return fig


def plot_lr_check(check: pd.DataFrame, best: pd.DataFrame, axes=None, title=None, title_size: float = 9,
                  ylabel: str = "final val loss (per token)") -> plt.Figure:
    """An LR check (`ladder.lr_check`): per tokenizer and rung one panel of each arm's mean final validation loss
    (per token) against its LR factor relative to the width rule; the best factor of an arm whose grid is complete
    (`ladder.best_factors`) is filled, and a factor with a failed run is left out. Into `axes` if given (one per
    panel, in tokenizer then rung order); `title(tokenizer, rung)` names a panel where the caller knows more (the
    paper names each rung's shape)."""
    from fractions import Fraction

    from matplotlib.ticker import FuncFormatter, NullLocator

    from ..runner.results import arm_order

    panels = list(check.groupby(["tokenizer", "rung"], sort=True))
    own_figure = axes is None  # a caller's figure is the caller's to lay out
    if own_figure:
        fig, grid = plt.subplots(1, max(len(panels), 1), figsize=(2.4 * max(len(panels), 1), 2.6), squeeze=False)
        axes = list(grid.flat)
    fig = axes[0].figure
    chosen = {(r.tokenizer, r.rung, r.variant): r.best_factor for r in best.itertuples()} if len(best) else {}
    for ax, ((tokenizer, rung), sub) in zip(axes, panels, strict=False):
        for variant in sorted(set(sub["variant"]), key=arm_order):
            arm = sub[sub["variant"] == variant].dropna(subset=["val_loss_mean"]).sort_values("factor")
            color = arm_color(variant)
            ls, marker = variant_style(variant)
            ax.plot(arm["factor"], arm["val_loss_mean"], marker=marker, ls=ls, color=color, mfc="white", label=variant,
                    ms=4)
            picked = arm[arm["factor"] == chosen.get((tokenizer, rung, variant))]
            ax.plot(picked["factor"], picked["val_loss_mean"], marker, color=color, ms=5, zorder=3)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: str(Fraction(v).limit_denominator(64))))
        ax.xaxis.set_minor_locator(NullLocator())
        name = title(tokenizer, rung) if title else f"rung {rung}" + ("" if tokenizer == "char" else f", {tokenizer}")
        ax.set_title(name, fontsize=title_size)
        ax.set_xlabel("LR / width rule", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel(ylabel, fontsize=8)
    axes[0].legend(fontsize=7)
    if own_figure:
        fig.tight_layout(rect=(0, 0.04, 1, 1))  # room for the footer under the axis labels
    return fig


def plot_prose_effects(record: dict) -> plt.Figure:
    """The prose ladder's confirmatory record: per recipe and size, each norm's difference from no norm in bits per
    byte (left, lower is better) and zero-shot macro accuracy (right, higher is better), mean and 95% paired interval,
    the ±margin band shaded; a hollow marker where no norm does not end trained or a size is partial."""
    metrics = (("val_bits_per_byte", "Δ bits per byte vs no norm (lower: better)"),
               ("lm3_macro_acc", "Δ zero-shot macro accuracy vs no norm (higher: better)"))
    cells = record["cells"]
    labels = [f"{c['recipe']}\nsize {c['level']}" for c in cells]
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.2), sharex=True)
    for ax, (metric, ylabel) in zip(axes, metrics):
        margin = record["equivalence_margin"]
        ax.axhspan(-margin, margin, color="0.9", zorder=0, label=f"±{margin:g}: equivalent")
        ax.axhline(0, color="0.4", lw=0.8)
        for k, variant in enumerate(("ln", "rms")):
            for i, cell in enumerate(cells):
                rows = [r for r in cell["family"] if r["variant"] == variant and r["metric"] == metric]
                if not rows or rows[0]["mean_diff"] is None:
                    continue
                row, solid = rows[0], cell["trained"] and cell["complete"]
                color = arm_color(variant)
                low, high = (np.nan if row[k] is None else row[k] for k in ("ci_low", "ci_high"))
                yerr = [[row["mean_diff"] - low], [high - row["mean_diff"]]]
                ax.errorbar(i + (k - 0.5) * 0.25, row["mean_diff"], yerr=yerr, fmt=variant_style(variant)[1],
                            color=color, mfc=color if solid else "white", ms=5, capsize=2,
                            label=arm_label(variant) if i == 0 else None)
        ax.set_xticks(range(len(cells)), labels, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle("Prose ladder: a norm after the embedding against none (hollow: not trained or partial)", fontsize=9)
    fig.tight_layout()
    return fig
