"""Figures. Each function returns the matplotlib Figure; `save` writes PNG + PDF with a provenance footer."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from .io import write_bytes_if_changed

# No dates in the files: the same data drawn by the same matplotlib gives the same bytes, so re-publishing
# unchanged runs leaves committed figures untouched.
_METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "Producer": None, "Creator": None}}


def save(fig, path_stem: str | Path, footer: str = "embnorm") -> list[Path]:
    """Write <stem>.png and <stem>.pdf, footed with what they were drawn from (e.g. a study's runs.csv
    fingerprint); a file whose bytes would not change is not rewritten."""
    import io

    stem = Path(path_stem)
    fig.text(0.99, 0.005, footer, ha="right", va="bottom", fontsize=6, color="0.5")
    paths = []
    for ext in ("png", "pdf"):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, dpi=130, bbox_inches="tight", metadata=_METADATA[ext])
        paths.append(write_bytes_if_changed(stem.with_suffix(f".{ext}"), buffer.getvalue()))
    return paths


def plot_run(metrics: pd.DataFrame, evals: pd.DataFrame, title: str = ""):
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


def plot_char_classes(table: pd.DataFrame):
    shares = table.pivot(index="class", columns="split", values="share").loc[table["class"].unique()]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    shares.plot.bar(ax=ax, rot=0)
    ax.set(ylabel="share of characters", title="tiny Shakespeare: character classes by split")
    fig.tight_layout()
    return fig


# -- study figures: one line per arm, mean with a 95% t-band over seeds ----------------------------

ARM_COLORS = {"none": "tab:blue", "ln": "tab:orange", "rms": "tab:green", "scaled": "tab:red"}


def _arm_color(arm: str):
    return ARM_COLORS.get(arm.split("_")[0])


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


def plot_bands(ax, series: pd.DataFrame, x: str, y: str, label_prefix: str = ""):
    arms = list(dict.fromkeys(series["arm"]))
    for arm, frame in series.groupby("arm", sort=False):
        band = seed_band(frame, x, y)
        color = _arm_color(arm)
        ax.plot(band[x], band["mean"], color=color, lw=1.2, ls=arm_linestyle(arm, arms),
                label=f"{label_prefix}{arm} (n={frame['seed'].nunique()})")
        ax.fill_between(band[x], band["mean"] - band["half_width"], band["mean"] + band["half_width"],
                        color=color, alpha=0.2, lw=0)


def plot_study_metric(series: pd.DataFrame, y: str, title: str = "", log: bool = False, x: str = "step"):
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    plot_bands(ax, series, x, y)
    ax.set(xlabel=x, ylabel=y, title=title or y, yscale="log" if log else "linear")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_study_panels(series: pd.DataFrame, columns: list[str], title: str, log: bool = False, ncols: int = 3):
    """One small panel per column (e.g. per parameter group), arms overlaid."""
    columns = [c for c in columns if c in series.columns]
    nrows = max(1, -(-len(columns) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.9 * nrows), squeeze=False)
    for ax, col in zip(axes.flat, columns):
        plot_bands(ax, series, "step", col)
        ax.set(title=col, xlabel="step", yscale="log" if log else "linear")
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(columns):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_profile(final: pd.DataFrame, columns: list[str], labels: list[str], title: str, ylabel: str):
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


def plot_reliability(calibration: pd.DataFrame, binning: str = "equal_width"):
    """Accuracy vs confidence per bin (pooled over seeds by counts), one line per arm, with the diagonal."""
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
    for arm, frame in calibration.groupby("arm", sort=False):
        tables = [t[f"reliability_{binning}"] for t in frame["calibration"]]
        count = sum(pd.Series(t["count"], dtype=float) for t in tables)
        conf = sum(pd.Series(t["confidence"]) * pd.Series(t["count"]) for t in tables) / count
        acc = sum(pd.Series(t["accuracy"]) * pd.Series(t["count"]) for t in tables) / count
        keep = count > 0
        ax.plot(conf[keep], acc[keep], "o-", ms=3, color=_arm_color(arm), label=arm)
    ax.set(xlabel="confidence (top-label)", ylabel="accuracy", title=f"reliability ({binning.replace('_', ' ')})",
           xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_temperature(calibration: pd.DataFrame):
    rows = []
    for _, r in calibration.iterrows():
        curve = r["calibration"]["temperature_curve"]
        rows += [{"arm": r["arm"], "seed": r["seed"], "temperature": t, "nll": v}
                 for t, v in zip(curve["temperature"], curve["nll"])]
    fig = plot_study_metric(pd.DataFrame(rows), "nll", title="validation NLL vs softmax temperature",
                            x="temperature")
    fig.axes[0].set_xscale("log")
    return fig
