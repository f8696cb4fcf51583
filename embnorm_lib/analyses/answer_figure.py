"""The README's answer figure (figures/answer.png and .pdf): four panels drawn from `answer.answer_data` (the training
budget, the embedding's init scale, failures against peak LR, the size ladders), each titled with the decision words
of the rows it draws; its footer names every quoted study's runs.csv by sha256."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..core.io import fingerprint, repo_root, runs_root
from ..core.rundir import study_dir_for
from ..publishing.templating import effect, millions, model, pick
from .answer_words import (
    NORMS,
    REGIMES,
    STUDIES_QUOTED,
    budget_words,
    data_ladder_rungs,
    failure_words,
    headline_words,
    init_words,
    size_words,
)

FIGURE = Path("figures") / "answer"  # .png (embedded in the README) and .pdf
ARM_NAMES = {"none": "no norm", "ln": "LayerNorm", "rms": "RMSNorm", "scaled": "scaled (tok·√d)"}



def _errorbars(ax, x, rows: list[dict], variant: str, y: str = "mean_diff", joined: bool = True):
    from ..publishing.plots import arm_color, variant_style

    color, (ls, marker) = arm_color(variant), variant_style(variant)
    ls = ls if joined else "none"  # categories on the x axis: a line between them would suggest an order
    ys = np.array([r[y] for r in rows], float)
    err = np.vstack([ys - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ys])
    ax.errorbar(x, ys, yerr=err, fmt=marker, ls=ls, color=color, capsize=2, mfc="white", label=ARM_NAMES[variant])
    sig = [k for k, r in enumerate(rows) if r.get("significant")]
    ax.plot(np.asarray(x, float)[sig], ys[sig], marker, color=color, zorder=3)


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
                 f"{bw['first']['mean_diff']:+.3f} ({effect(bw['first'])}) at {bw['first']['max_iters']} it, "
                 f"{bw['last']['mean_diff']:+.3f} ({effect(bw['last'])}) at {bw['last']['max_iters']} it "
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
    ax.set_title(f"Init grid (exploratory; {model(i)}, {i['iters']} it, {i['seeds']} seeds): in this grid the init\n"
                 f"scale may set the sign, untied head {effect(iw['small'])} at std {iw['small']['emb_init_std']:g}, "
                 f"{effect(iw['large'])} at {iw['large']['emb_init_std']:g}", fontsize=9)


def _failure_panel(ax, d: dict):
    from ..publishing.plots import arm_color, variant_style

    f, fw = d["failures"], failure_words(d["failures"])
    h1b = f["h1b"]
    arms = list(dict.fromkeys(r["variant"] for r in f["rows"]))
    failing = {r["lr"] for r in f["rows"] if r["failed"]}
    zero = next(r for r in f["rows"] if not r["failed"])
    for k, variant in enumerate(arms):
        rows = sorted(pick(f["rows"], variant=variant), key=lambda r: r["lr"])
        x = np.array([r["lr"] for r in rows]) * (1 + 0.08 * (k - (len(arms) - 1) / 2))
        ls, marker = variant_style(variant)
        share = np.array([r["share"] for r in rows])
        # intervals where some arm failed: at the LRs where none did, every arm's 0 of n shares one interval
        shown = np.array([r["lr"] in failing for r in rows])
        err = np.vstack([share - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - share])
        ax.plot(x, share, marker=marker, ls=ls, color=arm_color(variant), ms=4, lw=1,
                label=ARM_NAMES.get(variant, variant))
        ax.errorbar(x[shown], share[shown], yerr=err[:, shown], fmt="none", ecolor=arm_color(variant), capsize=2,
                    elinewidth=0.7)
    ax.set(xscale="log", ylim=(-0.05, 1.05), xlabel=f"peak learning rate ({model(f)} model, clipping at "
           f"{f['grad_clip']:g})", ylabel=f"share of {f['seeds']} runs failed")
    failed = {"none": fw["none"], **{v: x["failures"] for v, x in fw["variants"].items()}}
    short = {**ARM_NAMES, "scaled": "scaled"}
    costs = [f"{short[v]} {x['mean_diff']:+.3f}" for v, x in fw["variants"].items()]
    note = (f"Registered H1b at LR {h1b['lr']:g} ({h1b['seeds']} fresh seeds), runs failed:\n"
            + ", ".join(f"{short[v]} {n}" for v, n in failed.items()) + f" of {h1b['seeds']}; "
            + ("no arm removed the failures." if not fw["fixed"] else f"{', '.join(fw['fixed'])} removed them.")
            + "\nCost at each arm's own best LR (nats/char):\n" + ", ".join(costs)
            + f"\n95% exact intervals where any arm failed;\n0 of {zero['runs']} failed: [0, {zero['ci_high']:.2f}]")
    ax.text(0.02, 0.97, note, transform=ax.transAxes, fontsize=8, color="0.25", va="top")
    at = f["lowest_failing_lr"]
    failing_there = [ARM_NAMES.get(v, v) for v in arms if any(r["failed"] for r in pick(f["rows"], variant=v, lr=at))]
    ax.set_title(f"LR search {f['study']} (exploratory, {f['seeds']} seeds): "
                 f"{'no stability benefit detected' if not fw['fixed'] else 'a stability benefit'};\n"
                 f"no arm fails below LR {at:g}; there {', '.join(failing_there)} fail", fontsize=9)
    ax.legend(fontsize=8, loc="center left")


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


def _size_panel(ax, d: dict):
    from ..publishing.plots import arm_color

    s, sw = d["size"], size_words(d["size"])
    if s["plateau_from"] is not None:
        # from just left of the first data-bound size: an open-English size below it (not data-bound) stays outside
        ax.axvspan(sw["plateau_params"] / 1.1, sw["high"] * 1.6, color="0.92", lw=0)
        ax.text(sw["plateau_params"] / 1.05, 0.3, "1 MB ladder data-bound:\nthe baseline's loss\nstops falling with size",
                transform=ax.get_xaxis_transform(), va="bottom", fontsize=8, color="0.35")
    for k, variant in enumerate(NORMS):
        rows = sorted(pick(s["rows"], variant=variant), key=lambda r: r["params"])
        _errorbars(ax, np.array([r["params"] for r in rows], float) * (1 + 0.08 * k), rows, variant)
    open_rungs = data_ladder_rungs(s["data_ladder"])
    joined = bool(s["data_ladder"].get("trend"))  # no line between sizes before the exploratory trend is quoted
    for k, variant in enumerate(NORMS):  # just left of the true size, the 1 MB ladder's points just right
        rows = [r[variant] for r in open_rungs]
        if not rows:
            continue
        x = np.array([r["params"] for r in rows], float) * (0.86 + 0.06 * k)
        ys = np.array([r["mean_diff"] for r in rows])
        err = np.vstack([ys - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ys])
        marker, color = OPEN_ENGLISH_MARKERS[variant], arm_color(variant)
        ax.errorbar(x, ys, yerr=err, fmt=marker, ls=":" if joined else "none", color=color, capsize=2, mfc="white",
                    label=f"{ARM_NAMES[variant]}, open English")
        sig = [j for j, r in enumerate(rows) if r["significant"]]
        ax.plot(x[sig], ys[sig], marker, color=color, zorder=3)
    ax.axhline(0, color="0.5", lw=0.8)
    # the 1 MB ladder's budget rule is capped in passes, so its large sizes get fewer tokens per parameter: say how few
    largest = max(s["rungs"], key=lambda r: r["params"])
    one_mb = (f"{s['tokens_per_param']} tokens/param, capped at {s['passes_cap']} passes "
              f"({largest['tokens_per_param']:.1f} tokens/param at {millions(largest['params'])})")
    ax.set(xscale="log", xlabel="non-embedding parameters\n" + (
        f"1 MB: {one_mb}\nopen English: {s['data_ladder']['tokens_per_param']} tokens/param, < 1 pass"
        if open_rungs else one_mb),
           ylabel="Δ final val loss vs no norm (nats/char)")
    title = (f"Size ladder on 1 MB ({s['seeds']} seeds per size, {sw['passes_low']:.1f}–{sw['passes_high']:.0f} "
             f"passes): no size effect\nresolved at {sw['sizes']} sizes ({millions(sw['low'])}–{millions(sw['high'])})")
    if open_rungs:
        title = (f"Size, 1 MB ({s['seeds']} seeds, {sw['passes_low']:.1f}–{sw['passes_high']:.0f} passes): no effect "
                 f"resolved at {sw['sizes']} sizes;\nopen English (circles, diamonds; {len(open_rungs)} of "
                 f"{s['data_ladder']['sizes']} sizes, {min(r['seeds'] for r in open_rungs)} seeds): "
                 f"{open_english_said(open_rungs)}")
    ax.set_title(title, fontsize=9)


def answer_figure(d: dict) -> plt.Figure:
    """Four panels, each titled with its study and what it shows: Δ val loss against training budget, against the
    embedding's init scale, failures against peak LR, Δ against model size. Open markers: not resolved after Holm;
    filled: resolved."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.6))
    _budget_panel(axes[0][0], d)
    _init_panel(axes[0][1], d)
    _failure_panel(axes[1][0], d)
    _size_panel(axes[1][1], d)
    for a in axes.flat:
        if a is not axes[1][0]:
            a.legend(fontsize=8, loc="best")
        a.tick_params(labelsize=9)
    reg, hw = d["registered"][REGIMES[0]], headline_words(d)
    also = " (size panel: also open English)" if data_ladder_rungs(d["size"]["data_ladder"]) else ""
    fig.suptitle(f"Embedding norm in a Pre-LN GPT on tiny Shakespeare{also}: {reg['verdict']} at GPT-2 init and "
                 f"≤ {hw['max_epochs']:.2f} epochs\n(95% t intervals; filled marker = resolved after Holm's "
                 "correction, open = not resolved)", fontsize=11)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def write_figure(d: dict, out_dir=None, figures_dir=None) -> Path:
    from ..publishing.plots import save

    out = runs_root(out_dir)
    stamp = ("embnorm · answer · sha256 of each study's runs.csv: "
             + ", ".join(f"{s} {fingerprint(study_dir_for(s, out).index)}" for s in STUDIES_QUOTED))
    fig = answer_figure(d)
    stem = Path(figures_dir) / "answer" if figures_dir else repo_root() / FIGURE
    png, _ = save(fig, stem, stamp)
    plt.close(fig)
    return png


def curves_figure(w: dict) -> plt.Figure:
    """The adequate-data ladder's learning curves: per quoted size, each variant's mean training loss (a rolling
    mean over a hundredth of the run) against the share of its steps, with none's share to reach the norm's final
    loss in the title."""
    from ..publishing.plots import arm_color, variant_style

    fig, axes = plt.subplots(1, len(w["curves"]), figsize=(3.0 * len(w["curves"]), 3.0), squeeze=False)
    for ax, c in zip(axes[0], w["curves"], strict=True):
        steps = np.array(c["step"]) / c["steps"]
        for variant, ys in c["curves"].items():
            ls, _ = variant_style(variant)
            ax.plot(steps, ys, ls=ls, color=arm_color(variant), lw=1, label=ARM_NAMES[variant])
        tail = np.array([ys[len(ys) // 3:] for ys in c["curves"].values()])
        ax.set_ylim(tail.min() - 0.02, tail.max() + 0.05)
        share = c["shares"]["ln"]["none_to_norm"]
        reach = (f"no norm reaches LayerNorm's\nfinal loss at {share['mean']:.0%} of its steps" if share["mean"] is not
                 None else "no norm never reaches\nLayerNorm's final loss")
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
    png, _ = save(fig, stem, f"embnorm · learning curves · ladder-data runs.csv "
                             f"{fingerprint(study_dir_for('ladder-data', out).index)}")
    plt.close(fig)
    return png
