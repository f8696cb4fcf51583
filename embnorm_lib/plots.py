"""Figures. Each function returns the matplotlib Figure; `save` writes PNG + PDF with a provenance footer."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from .io import git_commit


def save(fig, path_stem: str | Path, footer: str | None = None) -> list[Path]:
    """Write <stem>.png and <stem>.pdf, stamped with the git commit that produced them."""
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.text(0.99, 0.005, footer or f"embnorm {git_commit()[:12]}", ha="right", va="bottom", fontsize=6,
             color="0.5")
    paths = []
    for ext in ("png", "pdf"):
        tmp = stem.with_name(f".{stem.name}.tmp.{ext}")
        fig.savefig(tmp, dpi=130, bbox_inches="tight")
        final = stem.with_suffix(f".{ext}")
        tmp.replace(final)
        paths.append(final)
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
