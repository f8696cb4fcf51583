"""The stability half of the question: LR sensitivity, init scale, stress, budgets.

    python -m embnorm_lib.stability          # tables + figures from whichever stability studies exist
                                             # -> runs/STABILITY.md, figures/stability/

Reads the runs.csv of the studies `stability-lr`, `stability-init`, `stability-stress` and
`stability-budget` (see embnorm_lib/sweep.py), each produced by `python -m embnorm_lib.sweep <study>`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import plots, stats
from .io import atomic_write_text, default_runs_dir, git_commit, repo_root
from .report import load_runs

STUDIES = ("stability-lr", "stability-init", "stability-stress", "stability-budget")
VARIANT_ORDER = ("none", "ln", "rms", "scaled")


def capped_loss(runs: pd.DataFrame) -> pd.Series:
    """Final val loss, with a diverged (or worse-than-init) run counted at the loss at initialisation."""
    loss = runs["val_loss"].where(~runs["diverged"].astype(bool), np.nan)
    return np.fmin(loss.fillna(runs["init_val_loss"]), runs["init_val_loss"])


def lr_sensitivity(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant (Wortsman et al. 2023): mean over the LR grid of min(loss(lr), loss at init) minus the
    best loss over the grid, from seed-mean losses; with the best LR and its loss."""
    frame = runs.assign(capped=capped_loss(runs))
    curve = frame.groupby(["variant", "cfg.lr"])["capped"].mean().reset_index()
    rows = []
    for variant, sub in curve.groupby("variant"):
        best = sub.loc[sub["capped"].idxmin()]
        rows.append({"variant": variant, "lr_points": len(sub), "lr_sensitivity": sub["capped"].mean() - best["capped"],
                     "best_lr": best["cfg.lr"], "best_loss": best["capped"],
                     "diverged_runs": int(frame[frame["variant"] == variant]["diverged"].astype(bool).sum())})
    return _order(pd.DataFrame(rows))


def per_seed_sensitivity(runs: pd.DataFrame) -> pd.DataFrame:
    """LR sensitivity per (variant, seed), for a paired comparison across variants."""
    frame = runs.assign(capped=capped_loss(runs))
    g = frame.groupby(["variant", "seed"])["capped"]
    return (g.mean() - g.min()).rename("lr_sensitivity").reset_index()


def best_vs_fixed(runs: pd.DataFrame, fixed_lr: float) -> pd.DataFrame:
    """Each variant at its own best LR (by seed-mean loss) next to all variants at one fixed LR."""
    sens = lr_sensitivity(runs).set_index("variant")
    rows = []
    for variant in sens.index:
        sub = runs[runs["variant"] == variant]
        at_best = sub[np.isclose(sub["cfg.lr"], sens.loc[variant, "best_lr"])]["val_loss"]
        at_fixed = sub[np.isclose(sub["cfg.lr"], fixed_lr)]["val_loss"]
        rows.append({"variant": variant, "best_lr": sens.loc[variant, "best_lr"],
                     "val_loss_at_best_lr": at_best.mean(), "sd_at_best": at_best.std(),
                     f"val_loss_at_lr={fixed_lr:g}": at_fixed.mean(), "sd_at_fixed": at_fixed.std()})
    return _order(pd.DataFrame(rows))


def axis_table(runs: pd.DataFrame, axis: str, metric: str = "val_loss") -> pd.DataFrame:
    """Per value of a sweep axis: each variant's mean metric and its paired Δ vs none with a 95% CI."""
    rows = []
    for value, sub in runs.groupby(axis):
        for variant in [v for v in VARIANT_ORDER if v in set(sub["variant"])]:
            vals = sub[sub["variant"] == variant]
            row = {axis: value, "variant": variant, "seeds": len(vals), f"{metric}_mean": vals[metric].mean(),
                   "diverged": int(vals["diverged"].astype(bool).sum()),
                   "spikes_per_run": vals["spike_count"].mean()}
            if variant != "none":
                c = stats.compare(sub, metric, variant)
                row.update({"delta_vs_none": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_t": c.p_t})
            rows.append(row)
    return pd.DataFrame(rows)


def divergence_table(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for variant in [v for v in VARIANT_ORDER if v in set(runs["variant"])]:
        sub = runs[runs["variant"] == variant]
        div = sub[sub["diverged"].astype(bool)]
        rows.append({"variant": variant, "runs": len(sub), "diverged": len(div),
                     "median_step_to_divergence": div["diverged_step"].median() if len(div) else np.nan,
                     "spikes_per_run": sub["spike_count"].mean(), "max_spikes": sub["spike_count"].max(),
                     "peak_grad_norm_mean": sub["peak_grad_norm"].mean(),
                     "val_loss_mean_finished": sub.loc[~sub["diverged"].astype(bool), "val_loss"].mean()})
    return pd.DataFrame(rows)


def sign_flips(init_table: pd.DataFrame, variant: str = "ln") -> dict:
    """Sign of the paired Δ(variant − none) at each init scale, and whether it flips."""
    sub = init_table[init_table["variant"] == variant].set_index("cfg.emb_init_std")["delta_vs_none"]
    signs = {float(k): ("hurts" if v > 0 else "helps") for k, v in sub.items()}
    return {"variant": variant, "by_init": signs, "flips": len(set(signs.values())) > 1}


def plot_lr_curves(runs: pd.DataFrame):
    frame = runs.assign(capped=capped_loss(runs), arm=runs["variant"])
    fig, ax = plt.subplots(figsize=(6.4, 4))
    plots.plot_bands(ax, frame, "cfg.lr", "capped")
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="final val loss (diverged = loss at init)",
           title="LR sensitivity (mean, 95% band over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _order(frame: pd.DataFrame) -> pd.DataFrame:
    key = {v: i for i, v in enumerate(VARIANT_ORDER)}
    return frame.sort_values("variant", key=lambda s: s.map(key)).reset_index(drop=True)


def _md(frame: pd.DataFrame) -> str:
    from .analysis import to_markdown

    def fmt(v):
        if isinstance(v, float):
            return "–" if not np.isfinite(v) else (f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.4f}")
        return v
    return to_markdown(frame.map(fmt))


def recommendation(sections: dict) -> str:
    """When to use embedding normalization, from whichever evidence exists."""
    parts = []
    if "lr" in sections:
        sens = sections["lr"].set_index("variant")["lr_sensitivity"]
        lowest = sens.idxmin()
        parts.append(f"LR sensitivity is lowest for `{lowest}` ({sens[lowest]:.3f} nats/char; none {sens.get('none', np.nan):.3f})")
    if "stress" in sections:
        div = sections["stress"].set_index("variant")
        parts.append("in the stress regime " + ", ".join(
            f"`{v}` diverged {int(r.diverged)}/{int(r.runs)} with {r.spikes_per_run:.1f} spikes/run" for v, r in div.iterrows()))
    if "flip" in sections:
        f = sections["flip"]
        parts.append(f"LayerNorm's effect {'flips sign' if f['flips'] else 'keeps its sign'} across init scales "
                     f"({', '.join(f'std {k:g}: {v}' for k, v in f['by_init'].items())})")
    return "; ".join(parts) + "." if parts else "No stability study has been run yet."


def write_report(out_dir=None, figures_dir=None) -> Path:
    out = Path(out_dir or default_runs_dir())
    fig_dir = Path(figures_dir or repo_root() / "figures" / "stability")
    lines = ["# Stability: when does an embedding norm pay for itself?", "",
             f"Written by `python -m embnorm_lib.stability` at commit {git_commit()[:12]} from the `runs.csv` of "
             f"the stability studies; each study is produced by `python -m embnorm_lib.sweep <study>`.", ""]
    sections: dict = {}
    available = {s: load_runs(s, out) for s in STUDIES if (out / s / "runs.csv").is_file()}
    if "stability-lr" in available:
        runs = available["stability-lr"]
        sections["lr"] = lr_sensitivity(runs)
        fig = plot_lr_curves(runs)
        plots.save(fig, fig_dir / "lr_sensitivity")
        plt.close(fig)
        paired = per_seed_sensitivity(runs)
        lines += ["## LR sensitivity (`stability-lr`: nanoGPT CPU model, 300 iterations)", "",
                  "Sensitivity = mean over the LR grid of min(loss(lr), loss at init) − the best loss over the grid "
                  "(Wortsman et al. 2023); diverged runs count at the loss at init. Figure: "
                  "`figures/stability/lr_sensitivity.png`.", "", _md(sections["lr"]), "",
                  "Per-seed sensitivity (paired by seed):", "",
                  _md(paired.pivot(index="seed", columns="variant", values="lr_sensitivity").reset_index()), "",
                  "Each variant at its own best LR, and all at the presets' 1e-3:", "",
                  _md(best_vs_fixed(runs, 1e-3)), ""]
    if "stability-init" in available:
        table = axis_table(available["stability-init"], "cfg.emb_init_std")
        sections["flip"] = sign_flips(table)
        lines += ["## Embedding-init scale (`stability-init`: 8 x 128, 150 iterations)", "",
                  "Paired Δ vs none within each init scale (the seed study's 11.46 input norm implies N(0, 1)).", "",
                  _md(table), "", f"LayerNorm effect by init: {sections['flip']}", ""]
    if "stability-stress" in available:
        sections["stress"] = divergence_table(available["stability-stress"])
        lines += ["## Stress regime (`stability-stress`: 16 layers, lr 1e-2, no warmup, 150 iterations)", "",
                  _md(sections["stress"]), ""]
    if "stability-budget" in available:
        lines += ["## Budgets (`stability-budget`: nanoGPT CPU model at 150 / 300 / 2000 iterations)", "",
                  _md(axis_table(available["stability-budget"], "cfg.max_iters")), ""]
    lines += ["## Recommendation", "", recommendation(sections), ""]
    missing = [s for s in STUDIES if s not in available]
    if missing:
        lines += [f"Not run yet: {', '.join(f'`{s}`' for s in missing)}.", ""]
    return atomic_write_text(out / "STABILITY.md", "\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=None)
    p.add_argument("--figures-dir", default=None)
    args = p.parse_args(argv)
    path = write_report(args.out_dir, args.figures_dir)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
