"""The README's answer figure (figures/answer.png and .pdf): four panels, each titled with the decision words of the rows
it draws. Top, the advice's evidence from the answer's record (the open-English ladder against size, the largest
size's learning curves); bottom, where the answer changes, from `answer.answer_data` (the training budget, the
embedding's init scale). Its footer names every quoted study's runs.csv by sha256."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..core.records.io import fingerprint, repo_root, runs_root
from ..core.records.rundir import study_dir_for
from ..publishing.templating import effect, millions, model, pick
from ..stats import signed
from ..studies.paper_sources import LADDER_DATA
from .answer_words import (
    NORMS,
    STUDIES_QUOTED,
    budget_words,
    init_words,
)

FIGURE = Path("figures") / "answer"  # .png (embedded in the README) and .pdf
ARM_NAMES = {"none": "no norm", "ln": "LayerNorm", "rms": "RMSNorm", "scaled": "scaled (tok·√d)"}



def _errorbars(ax, x, rows: list[dict], variant: str, y: str = "mean_diff", joined: bool = True):
    """An exploratory grid's points: open markers throughout (a description, no registered decision to fill them)."""
    from ..publishing.plots import arm_color, variant_style

    color, (ls, marker) = arm_color(variant), variant_style(variant)
    ls = ls if joined else "none"  # categories on the x axis: a line between them would suggest an order
    ys = np.array([r[y] for r in rows], float)
    err = np.vstack([ys - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ys])
    ax.errorbar(x, ys, yerr=err, fmt=marker, ls=ls, color=color, capsize=2, mfc="white", label=ARM_NAMES[variant])


def _budget_panel(ax, d: dict):
    b, bw = d["budget"], budget_words(d["budget"])
    for k, variant in enumerate(NORMS):
        rows = sorted(pick(b["rows"], variant=variant), key=lambda r: r["max_iters"])
        _errorbars(ax, np.array([r["max_iters"] for r in rows], float) * (1 + 0.06 * k), rows, variant)
    ax.axhline(0, color="0.5", lw=0.8)
    ends = sorted({(r["max_iters"], r["epochs"]) for r in b["rows"]})
    ax.set_xscale("log")
    ax.set_xticks([i for i, _ in ends], [f"{i}\n{e:.2f} ep" for i, e in ends])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel=f"training iterations and epochs ({model(b)} model, GPT-2 init)",
           ylabel="Δ final val loss vs no norm (nats/char)")
    ax.set_title(f"Budget grid (exploratory, {b['seeds']} seeds; no trend tested):\n"
                 f"{signed(bw['first']['mean_diff'])} ({effect(bw['first'])}) at {bw['first']['max_iters']} it, "
                 f"{signed(bw['last']['mean_diff'])} ({effect(bw['last'])}) at {bw['last']['max_iters']} it "
                 f"({bw['last']['epochs']:.2f} epochs)", fontsize=9)


def _init_panel(ax, d: dict):
    i, iw = d["init"], init_words(d["init"])
    cats = [(std, head) for std in sorted({r["emb_init_std"] for r in i["rows"]}) for head in ("untied", "tied")]
    for k, variant in enumerate(NORMS):
        rows = [pick(i["rows"], variant=variant, emb_init_std=s, head=h)[0] for s, h in cats]
        _errorbars(ax, np.arange(len(cats)) + 0.12 * (k - 0.5), rows, variant, joined=False)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xticks(range(len(cats)), [f"N(0, {s:g})\n{h} head" for s, h in cats], fontsize=9)
    ax.set(xlabel="embedding init and output head", ylabel="Δ final val loss vs no norm (nats/char)")
    ax.set_title(f"Init grid (exploratory; {model(i)}, {i['iters']} it, {i['seeds']} seeds): the init scale\n"
                 f"may set the sign; with an untied head LayerNorm {effect(iw['small'])} at std "
                 f"{iw['small']['emb_init_std']:g}, {effect(iw['large'])} at {iw['large']['emb_init_std']:g}",
                 fontsize=9)


OPEN_ENGLISH_MARKERS = {"ln": "o", "rms": "D"}  # the adequate-data ladder's points, apart from the 1 MB ladder's


def open_english_said(rungs: list[dict]) -> str:
    """Per decision word (costs, helps, equivalent within ±0.01: the TOST first, as on the pages), which norms and at
    which sizes of the adequate-data ladder (the panel's title)."""
    said = []
    for word in ("costs", "helps", "equivalent within ±0.01"):
        at = {}
        for r in rungs:
            arms = [v for v in NORMS if effect(r[v]) == word]
            if arms:
                at.setdefault(ARM_NAMES[arms[0]] if len(arms) == 1 else "both norms", []).append(millions(r["params"]))
        said += [f"{who} {word if who != 'both norms' or ' ' in word else word.removesuffix('s')} at "
                 f"{', '.join(sizes)}" for who, sizes in at.items()]
    return "; ".join(said) or "no effect resolved"


def _advice_panel(ax, w: dict, tokens_per_param: int):
    """The advice's evidence: the open-English ladder (none and ln at their tuned LRs, rms at ln's) against size, inside the ±MEI band
    the protocol counts; a size where `none` is not well past the count bigram is marked not trained."""
    from ..publishing.plots import arm_color
    from ..stats import MEI

    rungs = w["dl"]["rungs"]
    ax.axhspan(-MEI, MEI, color="0.9", lw=0, label=f"±{MEI:g}: smaller differences do not count")
    for k, variant in enumerate(NORMS):
        rows = [r[variant] for r in rungs]
        x = np.array([r["params"] for r in rows], float) * (0.94 + 0.12 * k)
        ys = np.array([r["mean_diff"] for r in rows])
        err = np.vstack([ys - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ys])
        marker, color = OPEN_ENGLISH_MARKERS[variant], arm_color(variant)
        ax.errorbar(x, ys, yerr=err, fmt=marker, ls=":", color=color, capsize=2, mfc="white", label=ARM_NAMES[variant])
        # the registered decision: filled where a difference is resolved (Holm), grey where the TOST puts it inside
        # ±MEI (equivalent: the opposite reading, so not drawn like a cost), open where neither
        differ = [j for j, r in enumerate(rows) if r["significant"] and not r.get("equivalent")]
        same = [j for j, r in enumerate(rows) if r.get("equivalent")]
        ax.plot(x[differ], ys[differ], marker, color=color, zorder=3)
        ax.plot(x[same], ys[same], marker, color=color, mfc="0.6", zorder=3)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xscale("log")
    ax.set_xticks([r["params"] for r in rungs], [f"{millions(r['params'])}\n{r['shape']}"
                                                  + ("" if r["trained"] else "\nnot trained") for r in rungs], fontsize=8)
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel=f"non-embedding parameters, layers × width (open English, {tokens_per_param} tokens/param, "
                  "< 1 pass)", ylabel="Δ final val loss vs no norm (nats/char)")
    trained = [r for r in rungs if r["trained"]]
    ax.set_title(f"Trained; no norm and LayerNorm at their tuned LRs, RMSNorm at LayerNorm's (GPT-2 init, "
                 f"{min(r['seeds'] for r in rungs)} seeds):\n"
                 f"{open_english_said(trained)}", fontsize=9)


def _curves_panel(ax, w: dict):
    """The largest trained open-English size's learning curves (each variant at its LR of the ladder): how far apart the
    arms train, with the share of its steps no norm needs to reach LayerNorm's final loss."""
    from ..publishing.plots import arm_color, variant_style

    c = max((c for c in w["curves"] if c["trained"]), key=lambda c: c["params"])
    steps = np.array(c["step"]) / c["steps"]
    for variant, ys in c["curves"].items():
        ls, _ = variant_style(variant)
        ax.plot(steps, ys, ls=ls, color=arm_color(variant), lw=2.2 if variant == "ln" else 1,  # rms lies on top of ln
                label=ARM_NAMES[variant])
    tail = np.array([ys[len(ys) // 3:] for ys in c["curves"].values()])
    ax.set_ylim(tail.min() - 0.02, tail.max() + 0.05)
    ax.set(xlabel="share of the run's steps", ylabel="training loss (nats/char, rolling mean)")
    ax.set_title(f"Learning curves at {millions(c['params'])} params, {c['steps']:,} steps (open English):\n"
                 f"{reach_words(c['shares']['ln'])}", fontsize=9)


def reach_words(shares: dict) -> str:
    """Both directions of the compute comparison, each over the seeds where it happens: the mean share of its steps
    one arm needs to reach the other's final training loss (a mean over the seeds that reach it alone would read as
    a speed-up where most seeds never get there)."""
    parts = []
    for key, who, whom in (("norm_to_none", "LayerNorm", "no norm's"), ("none_to_norm", "no norm", "LayerNorm's")):
        s = shares[key]
        parts.append(f"{who} reaches {whom} final loss at {s['mean']:.0%} of its steps ({s['pairs']} of {s['of']} seeds)"
                     if s["mean"] is not None else f"{who} never reaches {whom} final loss")
    return ";\n".join(parts)


def answer_figure(d: dict, w: dict) -> plt.Figure:
    """Four panels. Top, the advice's evidence: Δ val loss against size for trained, tuned models on open English
    inside the ±MEI band, and the largest size's learning curves. Bottom, where the answer changes: Δ against the
    training budget and against the embedding's init scale on tiny Shakespeare. Top left, the registered decision:
    filled, a difference resolved after Holm; grey, equivalent within ±MEI; open, not resolved. The bottom panels are
    exploratory: open markers throughout."""
    from ..stats import MEI

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.6))
    _advice_panel(axes[0][0], w, d["size"]["data_ladder"]["tokens_per_param"])
    _curves_panel(axes[0][1], w)
    _budget_panel(axes[1][0], d)
    _init_panel(axes[1][1], d)
    for a in axes.flat:
        a.legend(fontsize=8, loc="best")
        a.tick_params(labelsize=9)
    fig.suptitle("Δ final validation loss, embedding norm minus no norm (nats/char; lower is better; 95% t intervals)\n"
                 "Top: open English, ~20 tokens per parameter, each arm tuned (filled: a difference resolved after "
                 f"Holm; grey: equivalent within ±{MEI:g}; open: not resolved).\nBottom: exploratory tiny Shakespeare "
                 "grids at one shared LR, where the answer changes (open markers: a description)", fontsize=10.5)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def write_figure(d: dict, w: dict, out_dir=None, figures_dir=None) -> Path:
    from ..publishing.plots import save

    out = runs_root(out_dir)
    stamp = ("embnorm · answer · sha256 of each study's runs.csv: "
             + ", ".join(f"{s} {fingerprint(study_dir_for(s, out).index)}" for s in STUDIES_QUOTED))
    fig = answer_figure(d, w)
    stem = Path(figures_dir) / "answer" if figures_dir else repo_root() / FIGURE
    png, _ = save(fig, stem, stamp)
    plt.close(fig)
    return png


def curves_figure(w: dict) -> plt.Figure:
    """The adequate-data ladder's learning curves: per quoted size, each variant's mean training loss (a rolling
    mean over a hundredth of the run) against the share of its steps, with the share of its steps each of none and
    LayerNorm takes to reach the other's final loss (over the seeds where it does) in the title."""
    from ..publishing.plots import arm_color, variant_style

    fig, axes = plt.subplots(1, len(w["curves"]), figsize=(3.0 * len(w["curves"]), 3.4), squeeze=False)
    for ax, c in zip(axes[0], w["curves"], strict=True):
        steps = np.array(c["step"]) / c["steps"]
        for variant, ys in c["curves"].items():
            ls, _ = variant_style(variant)
            ax.plot(steps, ys, ls=ls, color=arm_color(variant), lw=1, label=ARM_NAMES[variant])
        tail = np.array([ys[len(ys) // 3:] for ys in c["curves"].values()])
        ax.set_ylim(tail.min() - 0.02, tail.max() + 0.05)
        # both directions, each over the seeds where it happens: on a training loss this noisy, one alone misleads
        reach = "share of steps to reach the other's final loss:\n" + "\n".join(
            f"{who}: {'never' if s['mean'] is None else format(s['mean'], '.0%')} ({s['pairs']}/{s['of']} seeds)"
            for who, s in (("no norm", c["shares"]["ln"]["none_to_norm"]),
                           ("LayerNorm", c["shares"]["ln"]["norm_to_none"])))
        ax.set_title(f"{millions(c['params'])} params, {c['steps']:,} steps"
                     + ("" if c["trained"] else " (not trained)") + f"\n{reach}", fontsize=8)
        ax.set_xlabel("share of the run's steps", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("training loss (nats/char, rolling mean)", fontsize=8)
    axes[0][0].legend(fontsize=7, frameon=False)
    fig.suptitle("Learning curves on open English, each variant at its tuned learning rate (exploratory)", fontsize=9)
    fig.tight_layout()
    return fig


def write_curves_figure(w: dict, out_dir=None, figures_dir=None) -> Path | None:
    """figures/learning_curves.png and .pdf ('' quoted sizes: nothing drawn)."""
    from ..publishing.plots import save

    if not w["curves"]:
        return None
    out = runs_root(out_dir)
    fig = curves_figure(w)
    stem = Path(figures_dir) / "learning_curves" if figures_dir else repo_root() / "figures" / "learning_curves"
    png, _ = save(fig, stem, f"embnorm · learning curves · {LADDER_DATA} runs.csv "
                             f"{fingerprint(study_dir_for(LADDER_DATA, out).index)}")
    plt.close(fig)
    return png
