"""The interactive explorer (JupyterLab: the last cell of notebooks/03_diagnostics).

Two views of any study with an index: the paired differences from `none` of one metric, per arm and regime, with 95%
paired t intervals (a forest: where the answer is), and any figure of the static set (figures.FIGURES). A grid study
opens on a readable subset of its arms (`default_arms`), not one legend entry per cell.

    from embnorm_lib.publishing.explore import explorer; explorer("<study>")      # in JupyterLab

`paired_view` and `default_arms` are plain functions of the committed runs (tested); `explorer` only wires widgets."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import stats
from ..core.variants import variant_rank
from ..runner.results import load_runs
from . import plots

if TYPE_CHECKING:
    import ipywidgets

# the metrics the paired view offers, in reading order (those a study's runs carry): the registered family first
METRICS = ("val_loss", "val_loss_per_char", "best_val_loss", "val_acc", "ece_equal_width", "brier", "lm2_macro_acc",
           "lm_macro_acc", "final_grad_norm", "peak_grad_norm_post_warmup", "spike_count_post_warmup",
           "final_block1_input_norm")
METRIC_WORDS = {**plots.METRIC_LABELS, "val_loss_per_char": "val loss per character",
                "best_val_loss": "best val loss (nats/char)", "lm2_macro_acc": "zero-shot macro acc (suite v2)",
                "final_block1_input_norm": "block-1 input norm at the end"}
MAX_DEFAULT_ARMS = 8  # a figure with more legend entries than this opens on one regime of the grid
BASELINE = "none"


def regime_of(runs: pd.DataFrame) -> pd.Series:
    """Each run's regime: its arm name without the variant (`ln_lr=0.01` -> `lr=0.01`; "" for a plain arm)."""
    return pd.Series([arm[len(v):].lstrip("_") for arm, v in zip(runs["arm"], runs["variant"], strict=True)],
                     index=runs.index, dtype=str)


def metrics_of(runs: pd.DataFrame) -> list[str]:
    return [m for m in METRICS if m in runs.columns and pd.to_numeric(runs[m], errors="coerce").notna().any()]


def paired_view(runs: pd.DataFrame, metric: str, baseline: str = BASELINE) -> pd.DataFrame:
    """Per regime and variant: the paired difference from the baseline's run of the same seed and regime (mean,
    95% paired t interval, seeds paired), beside both arms' means. A regime without the baseline pairs nothing."""
    if metric not in runs.columns:
        raise ValueError(f"metric {metric!r} is not in this study's runs.csv; allowed: {', '.join(metrics_of(runs))}")
    runs = runs.assign(regime=regime_of(runs), value=pd.to_numeric(runs[metric], errors="coerce"))
    rows = []
    for regime, sub in runs.groupby("regime", sort=False):
        if baseline not in set(sub["variant"]):
            continue
        for variant in sorted(set(sub["variant"]) - {baseline}, key=variant_rank):
            pairs = stats.paired_differences(sub, "value", variant, baseline)
            low, high = stats.t_interval(pairs["diff"].to_numpy()) if len(pairs) else (np.nan, np.nan)
            rows.append({"regime": regime, "variant": variant, "seeds": len(pairs),
                         f"{baseline}_mean": pairs["baseline"].mean(), "variant_mean": pairs["variant"].mean(),
                         "mean_diff": pairs["diff"].mean(), "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=["regime", "variant", "seeds", f"{baseline}_mean", "variant_mean", "mean_diff",
                                       "ci_low", "ci_high"])


def default_arms(runs: pd.DataFrame, limit: int = MAX_DEFAULT_ARMS) -> str:
    """The arm filter (a regex for figures.StudyData) a figure opens with: every arm when they fit one legend of
    `limit` entries, else the arms sharing one value of the grid (one axis, or a whole regime) that fit it, with the
    most variants, then the most arms, then the last such value in the study's order (the largest LR, budget or
    size, where the arms differ most). A 9-LR x 4-arm study opens on the 4 arms at its largest LR; the filter box
    shows the regex and takes any other."""
    arms = list(dict.fromkeys(runs["arm"]))
    if len(arms) <= limit:
        return ""
    variant_of = dict(zip(runs["arm"], runs["variant"], strict=True))
    candidates: dict[str, list[str]] = {}
    for arm in arms:
        tag = arm[len(variant_of[arm]):].lstrip("_")
        keys = [f"_{re.escape(tag)}$"] + [f"_{re.escape(k)}={re.escape(v)}(_|$)"
                                          for k, v in re.findall(r"([a-z][a-z0-9_]*)=([^_]*)", tag)]
        for key in keys:
            candidates.setdefault(key, []).append(arm)
    fitting = [(len({variant_of[a] for a in found}), len(found), order, key)
               for order, (key, found) in enumerate(candidates.items()) if len(found) <= limit]
    return max(fitting)[-1] if fitting else f"^{re.escape(arms[0])}$"


def regime_words(regime: str) -> str:
    """A regime as a reader reads it: `grad_clip=1.0_lr=0.003` -> `grad clip 1.0, lr 0.003`."""
    return plots.tag_words(regime) or "all runs"


def plot_paired_view(view: pd.DataFrame, title: str) -> plt.Figure:
    """The forest: one row per regime and variant, the mean paired difference with its 95% t interval; colour,
    marker and line style per variant (ln and rms stay apart), regimes labelled in words."""
    fig, ax = plt.subplots(figsize=(6.4, 1.2 + 0.28 * max(len(view), 1)))
    y = np.arange(len(view))[::-1]
    shown = set()
    for yi, r in zip(y, view.itertuples(), strict=True):
        ls, marker = plots.variant_style(r.variant)
        bar = ax.errorbar(r.mean_diff, yi, xerr=[[r.mean_diff - r.ci_low], [r.ci_high - r.mean_diff]], fmt=marker,
                          color=plots.arm_color(r.variant), capsize=3, mfc="white",
                          label=None if r.variant in shown else r.variant)
        bar[-1][0].set_linestyle(ls)
        shown.add(r.variant)
    ax.axvline(0, color="0.5", lw=0.8)
    ax.set_yticks(y, [f"{regime_words(r.regime)} ({r.seeds} seeds)" for r in view.itertuples()], fontsize=7)
    ax.set(xlabel="difference from none (variant − none, paired by seed; 95% t interval)", title=title)
    ax.title.set_fontsize(9)
    if shown:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def show_paired(study: str, metric: str, out_dir=None) -> pd.DataFrame:
    """Draw the forest of one study and metric, and return its table (shown under the figure in JupyterLab)."""
    view = paired_view(load_runs(study, out_dir), metric)
    plot_paired_view(view, f"{study}: {METRIC_WORDS.get(metric, plots.column_label(metric))}")
    plt.show()
    return view


def explorer(study: str = "", out_dir=None) -> ipywidgets.VBox:
    """The widgets: a study, a view (paired differences or a figure of the static set), a metric or a figure, and
    the arm filter (set to `default_arms` whenever the study changes). Returns the widget box."""
    import ipywidgets as widgets
    from IPython.display import display

    from ..core.io import runs_root
    from .figures import FIGURES, StudyData

    studies = sorted(p.parent.name for p in runs_root(out_dir).glob("*/runs.csv"))
    if not studies:
        raise ValueError(f"no study with a runs.csv under {runs_root(out_dir)}; allowed: a runs directory with an index")
    pick = widgets.Dropdown(options=studies, value=study if study in studies else studies[0], description="study")
    view = widgets.ToggleButtons(options=["paired differences", "figure"], description="view")
    metric = widgets.Dropdown(description="metric")
    figure = widgets.Dropdown(options=list(FIGURES), value="val_loss", description="figure")
    arms = widgets.Text(description="arms (regex)")
    out = widgets.Output()

    def on_study(_=None):
        runs = load_runs(pick.value, out_dir)
        metric.options = metrics_of(runs)
        metric.value = metric.options[0] if metric.options else None
        arms.value = default_arms(runs)

    def redraw(_=None):
        out.clear_output(wait=True)
        with out:
            if view.value == "paired differences":
                if metric.value:
                    display(show_paired(pick.value, metric.value, out_dir))
            else:
                FIGURES[figure.value](StudyData(pick.value, out_dir, arms.value))
                plt.show()

    on_study()
    pick.observe(lambda change: (on_study(), redraw()), names="value")
    for w in (view, metric, figure, arms):
        w.observe(redraw, names="value")
    box = widgets.VBox([widgets.HBox([pick, view]), widgets.HBox([metric, figure, arms]), out])
    redraw()
    return box
