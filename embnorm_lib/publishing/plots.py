"""Figures. Each function returns the matplotlib Figure; `save` writes PNG + PDF with a provenance footer."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..core.nets.variants import VARIANTS, arm_variant, variant_names
from ..core.records.io import write_figure_if_changed
from ..stats.metrics import labels

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
    variant = arm_variant(arm)
    return VARIANTS[variant].color if variant else None


# Line style and marker per variant, so arms stay apart where colours are hard to tell or curves overlap (ln and
# rms often sit on top of each other)
VARIANT_STYLES = {"none": ("-", "o"), "ln": ("-", "s"), "rms": ("--", "^"), "scaled": (":", "D"),
                  "ln_matched": ("-.", "v"), "scaled_unit": (":", "P")}


def variant_style(arm: str) -> tuple[str, str]:
    """(line style, marker) of the arm's variant (an arm such as `ln_preset=nanogpt-cpu` takes `ln`'s)."""
    return VARIANT_STYLES.get(arm_variant(arm), ("-", "o"))


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
    variant = arm_variant(arm)
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

METRIC_LABELS = labels("plot_label")


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
