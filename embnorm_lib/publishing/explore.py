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
from ..core.nets.variants import variant_rank
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
    `limit` entries, else the arms sharing one value of the grid (one axis, or a whole regime) that fit it: those with
    the most variants (every registered arm side by side), then with no diverged run (a diverged run's loss bands once
    reached -40 nats/char), then the most arms, then the one holding the study's best arm by mean val_loss (where the
    answer is read: a 9-LR study opens at its best LR, not at LR 1 where runs fail), then the last in the study's
    order. The filter box shows the regex and takes any other."""
    arms = list(dict.fromkeys(runs["arm"]))
    if len(arms) <= limit:
        return ""
    variant_of = dict(zip(runs["arm"], runs["variant"], strict=True))
    candidates: dict[str, list[str]] = {}
    for arm in arms:
        tag = arm[len(variant_of[arm]):].lstrip("_")
        keys = [f"_{re.escape(tag)}$"] + [f"_{re.escape(k)}={re.escape(v)}(?:_|$)"
                                          for k, v in re.findall(r"([a-z][a-z0-9_]*)=([^_]*)", tag)]
        for key in keys:
            candidates.setdefault(key, []).append(arm)
    diverged = (runs.groupby("arm")["diverged"].apply(lambda d: d.fillna(False).astype(bool).any())
                if "diverged" in runs.columns else pd.Series(False, index=arms))
    loss = (runs.groupby("arm")["val_loss"].apply(lambda v: pd.to_numeric(v, errors="coerce").mean())
            if "val_loss" in runs.columns else pd.Series(np.nan, index=arms))
    best = loss.idxmin() if loss.notna().any() else None
    fitting = [(len({variant_of[a] for a in found}), not any(diverged.get(a, False) for a in found), len(found),
                best in found, order, key)
               for order, (key, found) in enumerate(candidates.items()) if len(found) <= limit]
    return max(fitting)[-1] if fitting else f"^{re.escape(arms[0])}$"


def arm_filter_error(pattern: str, arms: list[str]) -> str:
    """"" for a usable arm filter, else the one line the explorer shows instead of a figure (a half-typed regex
    printed a 100-line re.error traceback into the widget)."""
    try:
        matcher = re.compile(pattern)
    except re.error as e:
        return f"arms filter {pattern!r} is not a regular expression ({e}); allowed: a Python regex such as ^ln or lr=0.01"
    if not any(matcher.search(a) for a in arms):
        return f"arms filter {pattern!r} matches none of this study's {len(arms)} arms; allowed: a regex matching one of {', '.join(arms[:4])}{', ...' if len(arms) > 4 else ''}"
    return ""


def regime_words(regime: str) -> str:
    """A regime as a reader reads it: `grad_clip=1.0_lr=0.003` -> `grad clip 1.0, lr 0.003`."""
    return plots.tag_words(regime) or "all runs"


def row_label(variant: str, regime: str, seeds: int, baseline: str = BASELINE) -> str:
    """A forest row names its comparison: `ln − none, lr 0.01 (3 seeds)`."""
    where = f", {regime_words(regime)}" if regime else ""
    return f"{variant} − {baseline}{where} ({seeds} seeds)"


def plot_paired_view(view: pd.DataFrame, title: str) -> plt.Figure:
    """The forest: one row per regime and variant, the mean paired difference with its 95% t interval; colour,
    marker and line style per variant (ln and rms stay apart), each row labelled with its comparison, the legend
    outside the data and half a row of space above and below the markers."""
    fig, ax = plt.subplots(figsize=(7.2, 1.4 + 0.3 * max(len(view), 1)))
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
    ax.set_yticks(y, [row_label(r.variant, r.regime, r.seeds) for r in view.itertuples()], fontsize=7)
    ax.set_ylim(-0.6, max(len(view), 1) - 0.4)
    ax.margins(x=0.15)
    ax.set(xlabel="difference from none (variant − none, paired by seed; 95% t interval)", title=title)
    ax.title.set_fontsize(9)
    if shown:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.tight_layout()
    return fig


def legends_outside(fig: plt.Figure) -> None:
    """Gather a figure's legends into one, right of the figure (the notebook shows a figure with what lies outside
    it), in columns of at most 18 entries: the axes keep their size and no entry covers data (a study with every arm
    shown has a legend of 36)."""
    entries: dict[str, object] = {}
    for ax in fig.axes:
        if ax.get_legend() is None:
            continue
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
        ax.get_legend().remove()
    if entries:
        fig.legend(list(entries.values()), list(entries), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                   ncol=1 + (len(entries) - 1) // 18)


def show_paired(study: str, metric: str, out_dir=None) -> pd.DataFrame:
    """Draw the forest of one study and metric, and return its table (shown under the figure in JupyterLab)."""
    view = paired_view(load_runs(study, out_dir), metric)
    plot_paired_view(view, f"{study}: {METRIC_WORDS.get(metric, plots.column_label(metric))}")
    plt.show()
    return view


def explorer(study: str = "", out_dir=None) -> ipywidgets.VBox:
    """The widgets: a study, a view (paired differences or a figure of the static set), and the controls of that view
    only (a metric; or a figure and the arm filter, set to `default_arms` whenever the study changes and applied on
    Enter). Returns the widget box."""
    import warnings

    import ipywidgets as widgets
    from IPython.display import display

    from ..core.records.io import runs_root
    from .figures import FIGURES, StudyData

    studies = sorted(p.parent.name for p in runs_root(out_dir).glob("*/runs.csv"))
    if not studies:
        raise ValueError(f"no study with a runs.csv under {runs_root(out_dir)}; allowed: a runs directory with an index")
    pick = widgets.Dropdown(options=studies, value=study if study in studies else studies[0], description="study")
    view = widgets.ToggleButtons(options=["paired differences", "figure"], description="view")
    metric = widgets.Dropdown(description="metric")
    figure = widgets.Dropdown(options=list(FIGURES), value="val_loss", description="figure")
    arms = widgets.Text(description="arms (regex)", continuous_update=False)  # a half-typed regex is not drawn
    out = widgets.Output()
    state = {"arms": []}

    def on_study(_=None):
        runs = load_runs(pick.value, out_dir)
        state["arms"] = list(dict.fromkeys(runs["arm"]))
        metric.options = metrics_of(runs)
        metric.value = metric.options[0] if metric.options else None
        arms.value = default_arms(runs)

    def redraw(_=None):
        paired = view.value == "paired differences"
        metric.layout.display = None if paired else "none"
        figure.layout.display = arms.layout.display = "none" if paired else None
        out.clear_output(wait=True)
        with out, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a slow-legend warning printed this machine's paths into the widget
            if paired:
                if metric.value:
                    display(show_paired(pick.value, metric.value, out_dir))
            elif problem := arm_filter_error(arms.value, state["arms"]) if arms.value else "":
                print(problem)
            else:
                legends_outside(FIGURES[figure.value](StudyData(pick.value, out_dir, arms.value)))
                plt.show()

    on_study()
    pick.observe(lambda change: (on_study(), redraw()), names="value")
    for w in (view, metric, figure, arms):
        w.observe(redraw, names="value")
    box = widgets.VBox([widgets.HBox([pick, view]), widgets.HBox([metric, figure, arms]), out])
    redraw()
    return box
