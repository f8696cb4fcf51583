"""The paper's figures (issue 19), each drawn from paper/data.json's data alone: the budget grid, the size ladders and the LR boundary. PAPER_FIGURES names them for the build
(publishing.paper.write_paper_inputs writes SVG for typst and PDF for the LaTeX export)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats.metrics import labels
from ..studies.paper_sources import LADDER

# the registered family's metrics (paper.py reads them for data.json), with their axis labels
FAMILY_METRICS = ("val_loss", "val_acc", "ece_equal_width", "brier", "lm_macro_acc")
METRIC_LABELS = labels("paper_label")


def budget_figure(data: dict) -> plt.Figure:
    """The budget series: each norm's paired difference from none in final validation loss against the training
    budget (exploratory, on the nanoGPT CPU model), with the registered comparison on the same model (main, 2000
    iterations) as diamonds; a marker is filled where Holm resolves it, as in every other figure; passes over the
    training split on the top axis."""
    from ..publishing.plots import arm_color, interval_error

    frame = pd.DataFrame(data["budget"])
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    for variant, sub in frame.groupby("variant"):
        color = arm_color(variant)
        offset = 1.06 if variant == "rms" else 1 / 1.06  # the two arms side by side at each budget
        ax.errorbar(sub["max_iters"] * offset, sub["delta_final"],
                    yerr=[sub["delta_final"] - sub["ci_low_final"], sub["ci_high_final"] - sub["delta_final"]],
                    fmt="-", color=color, capsize=2, label=f"{variant} (budget series, {int(sub['seeds'].max())} "
                                                           "seeds)")
        ax.scatter(sub["max_iters"] * offset, sub["delta_final"], s=18, zorder=3, edgecolors=color,
                   facecolors=[color if resolved else "white" for resolved in sub["significant_final"]])
    registered = data["regimes"]["nanogpt_cpu"]
    for row in (r for r in registered["family"] if r["metric"] == "val_loss"):
        # left of the series' own points at the same budget, where the axis is empty, so no marker hides another
        offset = 1 / 1.15 if row["variant"] == "rms" else 1 / 1.32
        color = arm_color(row["variant"])
        ax.errorbar(registered["iters"] * offset, row["mean_diff"], yerr=interval_error(row), fmt="D",
                    mfc=color if row["significant"] else "white", color=color, capsize=2, ms=5,
                    label=f"{row['variant']} (registered, {registered['seeds']} seeds)")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set(xscale="log", xlabel="training iterations (4 × 128 model)", ylabel="Δ final val. loss (nats/char)")
    budgets = sorted(frame["max_iters"].unique())
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlim(budgets[0] / 1.6, budgets[-1] * 1.6)
    per_iter = frame["epochs"].iloc[0] / frame["max_iters"].iloc[0]  # passes per iteration, from the series
    top = ax.secondary_xaxis("top", functions=(lambda x: x * per_iter, lambda e: e / per_iter))
    top.set_xticks([b * per_iter for b in budgets], [f"{b * per_iter:.2g}" for b in budgets], fontsize=7)
    top.xaxis.set_minor_locator(plt.NullLocator())
    top.set_xlabel("passes over the training split", fontsize=8)
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    return fig



def ladder_figure(data: dict) -> plt.Figure:
    """The size ladder: on top the character ladder's LR check, one panel per rung (each arm's mean final loss
    against its LR factor, the registered best filled); below, one panel per tokenizer of each norm's difference
    from none against model size (95% t intervals, filled where significant after Holm), the two arms side by side,
    and the sizes trained at the 10-pass cap shaded."""
    from ..publishing.plots import arm_color, interval_error
    from .plots import plot_lr_check

    found = data.get(LADDER, {})
    check = pd.DataFrame(found.get("check", []))
    check = check[check["tokenizer"] == "char"] if len(check) else check
    panels = check.groupby(["tokenizer", "rung"]).ngroups if len(check) else 0
    family = pd.DataFrame(found.get("family", []))
    tokenizers = list(dict.fromkeys(family["tokenizer"])) if len(family) else []
    fig = plt.figure(figsize=(7.6, 5.6))
    # explicit margins and gaps (tight_layout cannot lay out nested grids) keep each panel's ticks clear of the next
    outer = fig.add_gridspec(2, 1, height_ratios=(1, 1.1), hspace=0.45, left=0.1, right=0.985, top=0.91, bottom=0.13)
    top = outer[0].subgridspec(1, max(panels, 1), wspace=0.5)
    # each tokenizer's panel as wide as the decades of size it spans (plus a margin), so ticks sit apart unrotated
    spans = [np.log10(family.loc[family["tokenizer"] == t, "params"].agg(lambda p: p.max() / p.min())) + 0.5
             for t in tokenizers]
    bottom = outer[1].subgridspec(1, max(len(tokenizers), 1), wspace=0.12, width_ratios=spans or None)
    if panels:
        lr_axes = [fig.add_subplot(top[0, i]) for i in range(panels)]
        shapes = found.get("shape", {})
        plot_lr_check(check, pd.DataFrame(found.get("best", [])), axes=lr_axes, title_size=8,
                      title=lambda _, rung: f"rung {rung}: {shapes.get(str(rung), '?')}",  # the size each rung names
                      ylabel="final val loss (nats/char)")  # character rungs only: a token is a character
        handles, labels = lr_axes[0].get_legend_handles_labels()
        lr_axes[0].get_legend().remove()  # a row of arms above the panels, clear of every rung's points
        fig.legend(handles, labels, fontsize=8, loc="upper center", ncol=len(labels), frameon=False)
    capped = found.get("budget", {}).get("first_capped")
    capped_params = [p for r, p in found.get("params", {}).items() if capped is not None and int(r) >= capped]
    plateau = found.get("plateau_from")  # the first data-bound rung, by the answer's rule (README says the same)
    bound_params = [p for r, p in found.get("params", {}).items() if plateau is not None and int(r) >= plateau]
    first = None
    for i, tokenizer in enumerate(tokenizers):
        ax = fig.add_subplot(bottom[0, i], sharey=first)
        first = first or ax
        sub = family[family["tokenizer"] == tokenizer]
        for variant, rows in sub.groupby("variant", sort=False):
            color = arm_color(variant)
            offset = 1.08 if variant == "rms" else 1 / 1.08
            ax.errorbar(rows["params"] * offset, rows["mean_diff"], yerr=interval_error(rows), fmt="o-", ms=4,
                        color=color, mfc="white", capsize=2, label=variant)
            sig = rows[rows["significant"]]
            ax.plot(sig["params"] * offset, sig["mean_diff"], "o", ms=4, color=color, zorder=3)
        if tokenizer == "char" and capped_params:  # the cap binds from one rung, the baseline plateaus from a later
            cap = found["budget"]["epoch_cap"]
            ax.axvspan(min(capped_params) / 1.4, max(capped_params) * 1.4, color="0.94", zorder=0,
                       label=f"{cap} passes (capped)")
            if bound_params:
                ax.axvspan(min(bound_params) / 1.4, max(bound_params) * 1.4, color="0.84", zorder=0,
                           label=f"{cap} passes, data-bound")
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(f"{tokenizer} tokens", fontsize=9)
        ax.tick_params(labelsize=8)
        # a tick at each size, written as the tables write it: a subword panel spans less than a decade
        sizes = sorted(sub["params"].unique())
        ax.set_xticks(sizes, [f"{p / 1e6:.2f}M" for p in sizes], fontsize=7.5)
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlabel("non-embedding parameters", fontsize=8)
        if i == 0:
            ax.set_ylabel("Δ final val. loss\nvs none (nats/char)", fontsize=8)
            ax.legend(fontsize=7, loc="lower left")
        else:
            ax.tick_params(labelleft=False)  # shared with the first panel
    return fig



def boundary_figure(data: dict) -> plt.Figure:
    """Share of runs failed against the peak LR per arm, one panel per exploratory search (clipping, depth,
    precision). Ticks at the grid's decades only, or at its rates when it spans less than two decades (the
    32-layer search has two rates), so that no tick labels run together."""
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    from ..publishing.plots import arm_color

    searches = data.get("lr_boundary", {})
    cols = min(max(len(searches), 1), 3)
    rows = max(-(-len(searches) // cols), 1)
    fig, axes = plt.subplots(rows, cols, figsize=(7.6, 2.6 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[len(searches):]:
        ax.set_visible(False)
    markers = {"none": "o", "ln": "s", "rms": "^", "scaled": "v"}
    for ax, search in zip(axes.flat, searches.values(), strict=False):
        frame = pd.DataFrame(search["phase"])
        arms = list(dict.fromkeys(frame["variant"]))
        for k, (variant, sub) in enumerate(frame.groupby("variant", sort=False)):
            color = arm_color(variant)
            # each arm a few percent sideways on the log axis: curves that coincide (every arm at 0 or 1) stay
            # visible while every share is drawn at its true height
            dodge = 10 ** (0.035 * (k - (len(arms) - 1) / 2))
            ax.plot(sub["cfg.lr"] * dodge, sub["failed"] / sub["runs"], "-", marker=markers.get(variant, "o"),
                    color=color, label=variant, ms=3.5, mfc="white" if k % 2 else color)
        clipping = f"clipping at {search['grad_clip']}" if search["grad_clip"] else "no clipping"
        precision = "" if search.get("precision", "fp32") == "fp32" else f", {search['precision']} autocast"
        ax.set(xscale="log", ylim=(-0.1, 1.1))
        ax.set_xlabel("peak learning rate", fontsize=8)
        ax.set_title(f"{search['layers']} layers, {clipping}{precision}", fontsize=8)
        lrs = sorted(frame["cfg.lr"].unique())
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        if np.log10(lrs[-1] / lrs[0]) < 2:
            ax.set_xticks(lrs)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_xlim(lrs[0] / 2, lrs[-1] * 2)
        ax.tick_params(labelsize=8)
    for row in axes:
        row[0].set_ylabel("share of runs failed", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))  # the row of arms above the panels, clear of every curve
    return fig



def data_ladder_figure(data: dict) -> plt.Figure:
    """The open-English ladder (registered): each norm's paired difference from none in final validation loss against
    non-embedding parameters, 95% t intervals, filled where Holm resolves it, over the +-MEI band inside which the
    equivalence test can call the variants the same."""
    from ..publishing.plots import arm_color, interval_error

    rows = pd.DataFrame(data.get(LADDER, {}).get("data_ladder", {}).get("rungs", []))
    mei = data["protocol"]["mei"]
    fig, ax = plt.subplots(figsize=(5.2, 2.6))
    ax.axhspan(-mei, mei, color="0.9", lw=0, label=f"±{mei} (the smallest difference that counts)")
    ax.axhline(0, color="0.6", lw=0.8)
    for variant, sub in (rows.groupby("variant") if len(rows) else []):
        color = arm_color(variant)
        offset = 1.06 if variant == "rms" else 1 / 1.06  # the two norms side by side at each size
        ax.errorbar(sub["params"] * offset, sub["mean_diff"], yerr=interval_error(sub), fmt="none", color=color,
                    capsize=2)
        ax.scatter(sub["params"] * offset, sub["mean_diff"], s=20, zorder=3, edgecolors=color,
                   facecolors=[color if resolved else "white" for resolved in sub["significant"]],
                   label=f"{variant} − none ({int(sub['seeds'].max())} seeds)")
    if len(rows):
        sizes = sorted(rows["params"].unique())
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{p / 1e6:.2f}M" for p in sizes])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlim(sizes[0] / 1.5, sizes[-1] * 1.5)
    ax.set(xlabel="non-embedding parameters", ylabel="Δ final val. loss (nats/char)")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


PAPER_FIGURES = {"budget": budget_figure, "boundary": boundary_figure,
                 LADDER: ladder_figure, "data_ladder": data_ladder_figure}
