"""Figures. Each function returns the matplotlib Figure; `save` writes PNG + PDF with a provenance footer."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .io import write_figure_if_changed
from .variants import VARIANTS, variant_names

# No dates in the files: the same data drawn by the same matplotlib gives the same bytes, so re-publishing
# unchanged runs leaves committed figures untouched (a PDF also where another CPU moved a coordinate's last
# decimal: io.write_figure_if_changed).
_METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "Producer": None, "Creator": None}}


# What a reader should never see on a figure: a run directory's key=value spelling (`none_preset=nanogpt-cpu`), a
# config column (`cfg.lr`) or a snake_case column name (`val_loss`, `delta_final`); variant names are the arms' names
_INTERNAL = re.compile(r"\b\w+=\S+|\bcfg\.\w|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def internal_names(fig) -> list[str]:
    """The internal names (see _INTERNAL) shown in a figure's titles, axis labels, tick labels and legends."""
    texts = [t.get_text() for t in (getattr(fig, "_suptitle", None), getattr(fig, "_supxlabel", None),
                                    getattr(fig, "_supylabel", None)) if t is not None]
    for ax in fig.axes:
        texts += [ax.get_title(loc) for loc in ("left", "center", "right")]
        texts += [ax.get_xlabel(), ax.get_ylabel()]
        texts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        legend = ax.get_legend()
        texts += [t.get_text() for t in legend.get_texts()] if legend else []
    variants = set(VARIANTS)
    return sorted({m for text in texts for m in _INTERNAL.findall(text) if m not in variants})


def save(fig, path_stem: str | Path, footer: str = "embnorm") -> list[Path]:
    """Write <stem>.png and <stem>.pdf, footed with what they were drawn from (e.g. a study's runs.csv
    fingerprint); a file whose bytes would not change is not rewritten. A figure that shows an internal name (a
    column or key=value arm name; `internal_names`) is refused, before anything is written."""
    import io

    stem = Path(path_stem)
    shown = internal_names(fig)
    if shown:
        raise ValueError(f"figure {stem.name} shows internal name(s) {', '.join(shown)}; allowed: words for readers "
                         "(plots.column_label, arm_label, METRIC_LABELS)")
    fig.text(0.99, 0.005, footer, ha="right", va="bottom", fontsize=6, color="0.5")
    paths = []
    for ext in ("png", "pdf"):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, dpi=130, bbox_inches="tight", metadata=_METADATA[ext])
        paths.append(write_figure_if_changed(stem.with_suffix(f".{ext}"), buffer.getvalue()))
    return paths


def plot_run(metrics: pd.DataFrame, evals: pd.DataFrame, title: str = "") -> plt.Figure:
    """Train loss per step with the full-validation loss at each evaluation, and the grad norm."""
    fig, (ax_loss, ax_grad) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax_loss.plot(metrics["step"], metrics["train_loss"], lw=0.8, label="train loss (batch)")
    if len(evals):
        ax_loss.plot(evals["step"], evals["val_loss"], "o-", label="val loss (full split)")
    ax_loss.set(xlabel="step", ylabel="loss (nats/char)", title=title or "loss")
    ax_loss.legend()
    ax_grad.plot(metrics["step"], metrics["grad_norm_total"], lw=0.8)
    ax_grad.set(xlabel="step", ylabel="total grad norm (before clipping)", yscale="log", title="gradient norm")
    fig.tight_layout()
    return fig


def plot_char_classes(table: pd.DataFrame) -> plt.Figure:
    shares = table.pivot(index="class", columns="split", values="share").loc[table["class"].unique()]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    shares.plot.bar(ax=ax, rot=0)
    ax.set(ylabel="share of characters", title="tiny Shakespeare: character classes by split")
    fig.tight_layout()
    return fig


# -- study figures: one line per arm, mean with a 95% t-band over seeds ----------------------------

def arm_color(arm: str) -> str | None:
    """The colour of the arm's variant (variants.py); arms of one variant differ in line style instead."""
    variant = VARIANTS.get(arm.split("_")[0])
    return variant.color if variant else None


# Line style and marker per variant, so arms stay apart where colours are hard to tell or curves overlap (ln and
# rms often sit on top of each other)
VARIANT_STYLES = {"none": ("-", "o"), "ln": ("-", "s"), "rms": ("--", "^"), "scaled": (":", "D"),
                  "ln_matched": ("-.", "v"), "scaled_unit": (":", "P")}


def variant_style(arm: str) -> tuple[str, str]:
    """(line style, marker) of the arm's variant (an arm such as `ln_preset=nanogpt-cpu` takes `ln`'s)."""
    return VARIANT_STYLES.get(arm if arm in VARIANT_STYLES else arm.split("_")[0], ("-", "o"))


def interval_error(rows, center: str = "mean_diff") -> np.ndarray:
    """Matplotlib's asymmetric error bars (2 x n: below, above) from a frame's or a row's ci_low/ci_high."""
    mid = np.atleast_1d(np.asarray(rows[center], float))
    return np.vstack([mid - np.atleast_1d(np.asarray(rows["ci_low"], float)),
                      np.atleast_1d(np.asarray(rows["ci_high"], float)) - mid])


def _finish_delta_vs_log_x(fig: plt.Figure, ax, xlabel: str, ylabel: str, title: str,
                           zero_color: str = "0.5") -> plt.Figure:
    """A paired-difference figure over a log x axis (budget, model size): the zero line, labels, legend."""
    ax.axhline(0, color=zero_color, lw=0.8)
    ax.set(xscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def seed_band(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Mean over seeds at each x with a 95% Student-t half-width (0 with a single seed)."""
    from scipy import stats

    g = frame.dropna(subset=[y]).groupby(x)[y]
    out = g.agg(["mean", "std", "count"]).reset_index()
    t = stats.t.ppf(0.975, (out["count"] - 1).clip(lower=1))
    out["half_width"] = (t * out["std"] / out["count"].pow(0.5)).where(out["count"] > 1, 0.0)
    return out


LINESTYLES = ("-", "--", ":", "-.")


def arm_linestyle(arm: str, arms) -> str:
    """Colour says the variant; line style says the rest of the arm's name (e.g. the regime), in order seen."""
    tags = list(dict.fromkeys(a.partition("_")[2] for a in arms))
    return LINESTYLES[tags.index(arm.partition("_")[2]) % len(LINESTYLES)]


# how a run directory's grid axes read in a legend (a key not here reads with its underscores as spaces)
TAG_WORDS = {"lr": "peak LR", "grad_clip": "grad clip", "emb_init_std": "embedding init std",
             "max_iters": "iterations", "tokenizer": "tokens", "n_layer": "layers"}


def tag_words(tag: str) -> str:
    """A run directory's axes in words: `grad_clip=1.0_lr=0.003` -> `grad clip 1.0, peak LR 0.003` (keys may hold
    underscores, values do not)."""
    return ", ".join(("tied head" if value == "True" else "untied head") if key == "tie_embeddings" else
                     f"{TAG_WORDS.get(key, key.replace('_', ' '))} {value}"
                     for key, value in re.findall(r"([a-z][a-z0-9_]*)=([^_]*)", tag))


def arm_label(arm: str) -> str:
    """A legend entry for a run directory's arm name: `ln_preset=nanogpt-cpu` -> `ln (preset nanogpt-cpu)`, so no
    legend shows the internal key=value spelling."""
    variant = max((v for v in VARIANTS if arm == v or arm.startswith(v + "_")), key=len, default="")
    rest = arm[len(variant):].lstrip("_")
    if not variant or "=" not in rest:
        return arm
    return f"{variant} ({tag_words(rest)})"


# Axis and panel labels for the per-step log columns the study figures draw (figures.FIGURES): never the column name
COLUMN_LABELS = {"train_loss": "train loss (nats/char)", "val_loss": "validation loss (nats/char)",
                 "grad_norm_total": "gradient norm (before clipping)", "block1_input_norm": "L2 norm of block-1 input",
                 "nll": "validation NLL (nats/char)", "step": "training step", "temperature": "softmax temperature",
                 "capped": "final val loss (failed = loss at init)", "cfg.lr": "peak learning rate"}


def column_label(column: str) -> str:
    """A readable label for a log column; dotted diagnostics (`grad_norm.block1.attn`) become `grad norm: block1 attn`."""
    if column in COLUMN_LABELS:
        return COLUMN_LABELS[column]
    head, _, tail = column.partition(".")
    return f"{head.replace('_', ' ')}: {tail.replace('.', ' ').replace('_', ' ')}" if tail else column.replace("_", " ")


def plot_bands(ax, series: pd.DataFrame, x: str, y: str, label_prefix: str = "") -> None:
    arms = list(dict.fromkeys(series["arm"]))
    for arm, frame in series.groupby("arm", sort=False):
        band = seed_band(frame, x, y)
        color = arm_color(arm)
        # colour: the variant; line style: the regime; a marker per variant, so ln and rms stay apart when they overlap
        ax.plot(band[x], band["mean"], color=color, lw=1.2, ls=arm_linestyle(arm, arms), marker=variant_style(arm)[1],
                markevery=max(1, len(band) // 8), ms=4, mfc="white",
                label=f"{label_prefix}{arm_label(arm)} ({frame['seed'].nunique()} seeds)")
        ax.fill_between(band[x], band["mean"] - band["half_width"], band["mean"] + band["half_width"],
                        color=color, alpha=0.2, lw=0)


def plot_study_metric(series: pd.DataFrame, y: str, title: str = "", log: bool = False, x: str = "step") -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    plot_bands(ax, series, x, y)
    ax.set(xlabel=column_label(x), ylabel=column_label(y), title=title or column_label(y),
           yscale="log" if log else "linear")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_study_panels(series: pd.DataFrame, columns: list[str], title: str, log: bool = False, ncols: int = 3) -> plt.Figure:
    """One small panel per column (e.g. per parameter group), arms overlaid."""
    columns = [c for c in columns if c in series.columns]
    nrows = max(1, -(-len(columns) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.9 * nrows), squeeze=False)
    for ax, col in zip(axes.flat, columns):
        plot_bands(ax, series, "step", col)
        ax.set(title=column_label(col), xlabel=column_label("step"), yscale="log" if log else "linear")
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(columns):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_profile(final: pd.DataFrame, columns: list[str], labels: list[str], title: str, ylabel: str) -> plt.Figure:
    """Final-step value of several columns (e.g. residual norm per block) as a line per arm."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    long = final.melt(id_vars=["arm", "seed"], value_vars=columns, var_name="column", value_name="value")
    long["position"] = long["column"].map({c: i for i, c in enumerate(columns)})
    plot_bands(ax, long.rename(columns={"position": "pos"}), "pos", "value")
    ax.set_xticks(range(len(columns)), labels, rotation=45, fontsize=8)
    ax.set(title=title, ylabel=ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_reliability(calibration: pd.DataFrame, binning: str = "equal_width") -> plt.Figure:
    """Accuracy vs confidence per bin (pooled over seeds by counts), one line per arm, with the diagonal."""
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
    for arm, frame in calibration.groupby("arm", sort=False):
        tables = [t[f"reliability_{binning}"] for t in frame["calibration"]]
        count = sum(pd.Series(t["count"], dtype=float) for t in tables)
        conf = sum(pd.Series(t["confidence"]) * pd.Series(t["count"]) for t in tables) / count
        acc = sum(pd.Series(t["accuracy"]) * pd.Series(t["count"]) for t in tables) / count
        keep = count > 0
        ax.plot(conf[keep], acc[keep], ls=variant_style(arm)[0], marker=variant_style(arm)[1], ms=3,
                color=arm_color(arm), label=arm_label(arm))
    ax.set(xlabel="confidence (top-label)", ylabel="accuracy", title=f"reliability ({binning.replace('_', ' ')})",
           xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_temperature(calibration: pd.DataFrame) -> plt.Figure:
    rows = []
    for _, r in calibration.iterrows():
        curve = r["calibration"]["temperature_curve"]
        rows += [{"arm": r["arm"], "seed": r["seed"], "temperature": t, "nll": v}
                 for t, v in zip(curve["temperature"], curve["nll"])]
    fig = plot_study_metric(pd.DataFrame(rows), "nll", title="validation NLL vs softmax temperature",
                            x="temperature")
    fig.axes[0].set_xscale("log")
    return fig


# -- statistics figures (analysis.py) ----------------------------------------------------------

METRIC_LABELS = {"val_loss": "val loss (nats/char)", "val_acc": "next-char accuracy", "ece_equal_width": "ECE (15 bins)",
                 "brier": "Brier", "lm_macro_acc": "zero-shot macro acc (suite v1, superseded)", "final_grad_norm": "final grad norm",
                 "peak_grad_norm": "peak grad norm", "spike_count": "loss spikes",
                 "peak_grad_norm_post_warmup": "peak grad norm after warm-up",
                 "spike_count_post_warmup": "loss spikes after warm-up"}


def plot_forest(fam: pd.DataFrame, label: str, primary: str, mei: float) -> plt.Figure:
    """Paired Δ vs none with 95% CIs, one panel per metric; filled markers are Holm-significant, dotted lines
    on the primary metric's panel mark ± the minimum effect of interest."""
    metrics = list(dict.fromkeys(fam["metric"]))
    ncols = min(4, len(metrics))
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, nrows * (0.9 + 0.45 * fam["variant"].nunique())),
                             squeeze=False)
    for ax in axes.flat[len(metrics):]:
        ax.axis("off")
    for ax, metric in zip(axes.flat, metrics):
        sub = fam[fam["metric"] == metric].reset_index(drop=True)
        y = np.arange(len(sub))[::-1]
        for yi, (_, c) in zip(y, sub.iterrows()):
            color = arm_color(c.variant)
            ax.errorbar(c.mean_diff, yi, xerr=interval_error(c), fmt="o",
                        color=color, capsize=3, mfc=color if c.significant else "white")
        ax.axvline(0, color="0.5", lw=0.8)
        if metric == primary:
            for s in (-mei, mei):
                ax.axvline(s, color="0.7", lw=0.8, ls=":")
        ax.set_yticks(y, sub["variant"])
        ax.set_title(METRIC_LABELS.get(metric, metric), fontsize=9)
        ax.tick_params(labelsize=8)
    fig.suptitle(f"{label}: paired Δ vs none, 95% paired t CI (filled: Holm-significant)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_paired_lines(runs: pd.DataFrame, label: str,
                      metrics=("val_loss", "val_acc", "ece_equal_width", "final_grad_norm")) -> plt.Figure:
    """Each seed's value per arm, one grey line per seed and the mean in black."""
    metrics = [m for m in metrics if m in runs.columns and runs[m].notna().any()]
    order = [v for v in variant_names() if v in set(runs["variant"])]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        wide = runs.pivot_table(index="seed", columns="variant", values=metric)[order]
        for _, row in wide.iterrows():
            ax.plot(range(len(order)), row.values, color="0.6", lw=0.8, marker="o", ms=3)
        ax.plot(range(len(order)), wide.mean().values, color="k", lw=2, marker="s", label="mean")
        ax.set_xticks(range(len(order)), order)
        ax.set_title(METRIC_LABELS.get(metric, metric), fontsize=9)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{label}: each line is one seed", fontsize=10)
    fig.tight_layout()
    return fig


# -- stability figures (stability.py) ----------------------------------------------------------

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


def plot_lr_check(check: pd.DataFrame, best: pd.DataFrame, axes=None) -> plt.Figure:
    """An LR check (`ladder.lr_check`): per tokenizer and rung one panel of each arm's mean final validation loss
    (per token) against its LR factor relative to the width rule; the best factor of an arm whose grid is complete
    (`ladder.best_factors`) is filled, and a factor with a failed run is left out. Into `axes` if given (one per
    panel, in tokenizer then rung order)."""
    from fractions import Fraction

    from matplotlib.ticker import FuncFormatter, NullLocator

    from .results import arm_order

    panels = list(check.groupby(["tokenizer", "rung"], sort=True))
    if axes is None:
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
        ax.set_title(f"rung {rung}" + ("" if tokenizer == "char" else f", {tokenizer}"), fontsize=9)
        ax.set_xlabel("LR / width rule", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("final val loss (per token)", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))  # room for the footer under the axis labels
    return fig
