"""The stability half of the question: LR sensitivity, init scale, stress, budgets.

    python -m embnorm_lib.analyses.stability          # tables + figures from whichever stability studies exist
                                             # -> runs/STABILITY.md, figures/stability/

Reads the runs.csv of the v1 stability studies (studies/stability.py: LR sensitivity, init scale, stress, budgets),
each produced by `python -m embnorm_lib sweep <study>`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import stats
from ..core.errors import entry
from ..core.nets.variants import variant_names
from ..core.records.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
from ..core.records.rundir import study_dir_for
from ..publishing import plots
from ..publishing.render import compact_markdown, layouts_text
from ..runner.results import has_index, load_runs, load_series, reused_mask, study_provenance
from ..studies import studies_of
from ..studies.stability import STABILITY_BUDGET, STABILITY_INIT, STABILITY_LR, STABILITY_STRESS
from . import plots as analysis_plots
from .stability_words import flip_words, recommendation, setup_words, verdict

STUDIES = tuple(studies_of("stability"))
QUESTION = ("When, if ever, does an embedding norm pay for itself in training stability: across peak learning rates, "
            "embedding init scales, a stress regime and training budgets?")
VARIANT_ORDER = variant_names()


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
    return with_holm(pd.DataFrame(rows))


def with_holm(table: pd.DataFrame) -> pd.DataFrame:
    """Holm across the table's paired tests (its rows with a p_t): `p_holm` and `significant`, the only basis
    for words like costs/gains/higher/lower."""
    if "p_t" not in table:
        return table
    reject, adjusted = stats.holm(table["p_t"].to_numpy(float))
    return table.assign(p_holm=adjusted, significant=reject)


def divergence_table(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for variant in [v for v in VARIANT_ORDER if v in set(runs["variant"])]:
        sub = runs[runs["variant"] == variant]
        div = sub[sub["diverged"].astype(bool)]
        failed, later = stats.registered_stability(sub)
        rows.append({"variant": variant, "runs": len(sub), "diverged": len(div), "failed": int(failed.sum()),
                     "median_step_to_divergence": div["diverged_step"].median() if len(div) else np.nan,
                     "spikes_per_run": sub["spike_count"].mean(), "spikes_after_warmup_per_run": later.mean(),
                     "max_spikes": sub["spike_count"].max(),
                     "peak_grad_norm_mean": sub["peak_grad_norm"].mean(),
                     "val_loss_mean_finished": sub.loc[~sub["diverged"].astype(bool), "val_loss"].mean()})
    return pd.DataFrame(rows)


def sign_flips(init_table: pd.DataFrame, variant: str = "ln") -> dict:
    """Sign of the paired Δ(variant − none) at each init scale, and whether it flips."""
    sub = init_table[init_table["variant"] == variant].set_index("cfg.emb_init_std")
    signs = {float(k): ("not resolved" if not r["significant"] else "hurts" if r["delta_vs_none"] > 0 else "helps")
             for k, r in sub.iterrows()}
    return {"variant": variant, "by_init": signs, "flips": {"helps", "hurts"} <= set(signs.values())}


def lr_divergence(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant and learning rate: runs, divergences and loss spikes; where along the grid each arm breaks."""
    frame = runs.assign(capped=capped_loss(runs), diverged=runs["diverged"].astype(bool))
    table = frame.groupby(["variant", "cfg.lr"]).agg(runs=("seed", "size"), diverged=("diverged", "sum"),
                                                    spikes_per_run=("spike_count", "mean"),
                                                    capped_loss_mean=("capped", "mean")).reset_index()
    return _order(table)


def paired_sensitivity(runs: pd.DataFrame) -> pd.DataFrame:
    """Per-seed LR sensitivity of each variant minus that of `none` (same seed), with a 95% CI."""
    per_seed = per_seed_sensitivity(runs)
    rows = []
    for variant in [v for v in VARIANT_ORDER if v in set(per_seed["variant"]) and v != "none"]:
        c = stats.compare(per_seed, "lr_sensitivity", variant)
        rows.append({"variant": variant, "seeds": c.n, "sensitivity_none": c.baseline_mean,
                     "sensitivity_variant": c.variant_mean, "delta_vs_none": c.mean_diff,
                     "ci_low": c.ci_low, "ci_high": c.ci_high, "p_t": c.p_t})
    return with_holm(pd.DataFrame(rows))


def divergence_vs_none(runs: pd.DataFrame) -> pd.DataFrame:
    """The divergence table plus, per variant, Fisher's exact test of its divergence rate against none's."""
    from scipy.stats import fisher_exact

    table = divergence_table(runs)
    base = table.set_index("variant").loc["none"] if "none" in set(table["variant"]) else None
    p_values = []
    for _, row in table.iterrows():
        if base is None or row["variant"] == "none":
            p_values.append(np.nan)
            continue
        contingency = [[row["failed"], row["runs"] - row["failed"]],
                       [base["failed"], base["runs"] - base["failed"]]]
        p_values.append(fisher_exact(contingency).pvalue)
    return table.assign(p_fisher_vs_none=p_values)


def study_cost(study: str, runs: pd.DataFrame, out: Path) -> dict:
    """Runs, how many were trained here vs copied from an identical run of another study, their summed
    train-loop time, and the sweeps' wall time (sweeps.jsonl)."""
    reused = reused_mask(runs)
    sweep_wall = study_provenance(study, out)["sweep_wall_s"] if study_dir_for(study, out).sweep_log.is_file() else np.nan
    return {"study": study, "runs": len(runs), "trained": int((~reused).sum()), "reused": int(reused.sum()),
            "train_loop_min": runs.loc[~reused, "wall_s"].sum() / 60 if "wall_s" in runs else np.nan,
            "sweep_wall_min": sweep_wall / 60}


def _order(frame: pd.DataFrame) -> pd.DataFrame:
    key = {v: i for i, v in enumerate(VARIANT_ORDER)}
    return frame.sort_values("variant", key=lambda s: s.map(key), kind="stable").reset_index(drop=True)


def best_lr_paired(runs: pd.DataFrame) -> pd.DataFrame:
    """Each variant at its own best LR against none at none's best LR, paired by seed (t CI, Holm)."""
    sens = lr_sensitivity(runs).set_index("variant")
    frame = runs.assign(capped=capped_loss(runs))
    at_best = pd.concat([frame[(frame["variant"] == v) & np.isclose(frame["cfg.lr"], sens.loc[v, "best_lr"])]
                         for v in sens.index])
    rows = []
    for variant in [v for v in sens.index if v != "none"]:
        c = stats.compare(at_best, "capped", variant)
        rows.append({"variant": variant, "best_lr": sens.loc[variant, "best_lr"], "loss": c.variant_mean,
                     "none_loss": c.baseline_mean, "delta_vs_none": c.mean_diff, "ci_low": c.ci_low,
                     "ci_high": c.ci_high, "p_t": c.p_t})
    return with_holm(pd.DataFrame(rows))


def analyse(out: Path) -> tuple[dict[str, pd.DataFrame], dict]:
    """The stability studies that have a runs.csv, and the tables the report and the recommendation are made of."""
    available = {s: load_runs(s, out) for s in STUDIES if has_index(s, out)}
    sections: dict = {}
    if STABILITY_LR in available:
        runs = available[STABILITY_LR]
        sections["lr"] = lr_sensitivity(runs)
        sections["lr_paired"] = paired_sensitivity(runs)
        sections["lr_grid"] = lr_divergence(runs)
        sections["lr_best"] = best_lr_paired(runs)
    if STABILITY_INIT in available:
        sections["init"] = axis_table(available[STABILITY_INIT], "cfg.emb_init_std")
        sections["flip"] = sign_flips(sections["init"])
        runs = available[STABILITY_INIT]
        iters = f"{int(runs['cfg.max_iters'].iloc[0])} iterations, " if "cfg.max_iters" in runs else ""
        sections["init_setup"] = setup_words(runs, sections["init"], iters)
    if STABILITY_STRESS in available:
        sections["stress"] = divergence_vs_none(available[STABILITY_STRESS])
    if STABILITY_BUDGET in available:
        sections["budget"] = axis_table(available[STABILITY_BUDGET], "cfg.max_iters")
        iters = available[STABILITY_BUDGET]["cfg.max_iters"]
        sections["budget_setup"] = setup_words(available[STABILITY_BUDGET], sections["budget"],
                                               f"{int(iters.min())}–{int(iters.max())} iterations, ")
    return available, sections


def _layouts_words(available: dict, out: Path) -> str:
    """' with 2 worker(s) x 1 thread(s)': the sweeps' parallelism as their logs recorded it."""
    text = layouts_text(x for s in available if study_dir_for(s, out).sweep_log.is_file()
                        for x in study_provenance(s, out)["layouts"])
    return f" with {text}" if text else ""


def write_report(out_dir=None, figures_dir=None) -> Path:
    from ..publishing.study_header import header_lines

    out = runs_root(out_dir)
    fig_dir = Path(figures_dir or default_figures_dir(out, "stability"))
    available, sections = analyse(out)
    answer = [line for line in verdict(sections).splitlines() if line.startswith("- ")] if available else []
    lines = ["# Stability: when does an embedding norm pay for itself?", "",
             *header_lines(list(STUDIES), answer, question=QUESTION, pending="no stability study has run yet"),
             f"Written by `python -m embnorm_lib.analyses.stability` at commit {git_commit()[:12]} from the `runs.csv` of "
             f"the stability studies; each study is produced by `python -m embnorm_lib sweep <study>`. Figures: "
             f"`figures/stability/`.", "",
             "**Exploratory** (docs/PROTOCOL.md amendment 1): 3 seeds per cell and grids chosen after the first "
             "results. Intervals are 95% paired t intervals; each table is one Holm family (`p_holm`, "
             "`significant`), and a direction or ranking is stated only where it is significant. Spikes and "
             "failures: `failed` = non-finite loss or a final loss above the loss at initialisation.", ""]

    footer = "embnorm · stability · runs.csv " + " ".join(fingerprint(study_dir_for(s, out).index) for s in available)

    def figure(fig, name):
        plots.save(fig, fig_dir / name, footer)
        plt.close(fig)

    if STABILITY_LR in available:
        runs = available[STABILITY_LR]
        figure(analysis_plots.plot_lr_curves(runs.assign(capped=capped_loss(runs), arm=runs["variant"])), "lr_sensitivity")
        paired = per_seed_sensitivity(runs)
        lines += [f"## LR sensitivity (`{STABILITY_LR}`: nanoGPT CPU model, 300 iterations)", "",
                  "Sensitivity = mean over the LR grid of min(loss(lr), loss at init) − the best loss over the grid "
                  "(Wortsman et al. 2023); diverged runs count at the loss at init. Figure: "
                  "`figures/stability/lr_sensitivity.png` (mean and 95% band over seeds).", "",
                  compact_markdown(sections["lr"]), "",
                  "Per-seed sensitivity, and each variant's paired difference from none:", "",
                  compact_markdown(paired.pivot(index="seed", columns="variant", values="lr_sensitivity").reset_index()), "",
                  compact_markdown(sections["lr_paired"]), "",
                  "Each variant at its own best LR, and all at the presets' 1e-3:", "",
                  compact_markdown(best_vs_fixed(runs, 1e-3)), "",
                  "Divergences and spikes along the grid:", "",
                  compact_markdown(sections["lr_grid"]), ""]
    if STABILITY_INIT in available:
        runs, table = available[STABILITY_INIT], sections["init"]
        lines += [f"## Embedding-init scale (`{STABILITY_INIT}`: 8 x 128, 150 iterations)", "",
                  "Paired Δ val loss vs none within each init scale (the seed study's block-1 input norm of 11.46 "
                  "implies N(0, 1) embeddings; GPT-2 uses N(0, 0.02)).", "", compact_markdown(table), "",
                  f"LayerNorm effect by init: {', '.join(f'std {k:g}: {v}' for k, v in sections['flip']['by_init'].items())}"
                  f" — it {flip_words(sections['flip'])}.", ""]
        if "final_block1_input_norm" in runs:
            norms = runs.pivot_table(index="variant", columns="cfg.emb_init_std", values="final_block1_input_norm",
                                     aggfunc="mean")
            norms.columns = [f"std={c:g}" for c in norms.columns]
            lines += ["Final block-1 input norm (mean over seeds) by variant and init std:", "",
                      compact_markdown(_order(norms.reset_index())), ""]
    if STABILITY_STRESS in available:
        figure(analysis_plots.plot_loss_traces(load_series(STABILITY_STRESS, "metrics", out),
                                "stress regime: train loss per run"), "stress_loss_traces")
        lines += [f"## Stress regime (`{STABILITY_STRESS}`: 16 layers, lr 1e-2, no warmup, 150 iterations)", "",
                  "Divergence = non-finite loss (the run stops and records the step); failed = diverged or a final "
                  "loss above the loss at initialisation; spike = train loss above 1.5 x the running median of the "
                  "last 20 steps. Fisher's exact test compares each failure rate with none's. Figure: "
                  "`figures/stability/stress_loss_traces.png`.", "",
                  compact_markdown(sections["stress"]), ""]
    if STABILITY_BUDGET in available:
        table = sections["budget"]
        figure(analysis_plots.plot_budget_deltas(table), "budget_deltas")
        lines += [f"## Budgets (`{STABILITY_BUDGET}`: nanoGPT CPU model at 150 / 300 / 2000 iterations)", "",
                  "The same paired comparison at three budgets: an effect that shrinks with the budget is early speed, "
                  "one that stays is final quality. Figure: `figures/stability/budget_deltas.png`.", "",
                  compact_markdown(table), ""]
    lines += ["## Recommendation", "", recommendation(sections), ""]
    if available:
        cost = pd.DataFrame([study_cost(s, r, out) for s, r in available.items()])
        lines += ["## Grid and cost", "",
                  "Runs copied from an identical finished run of another study (`reused_from.json`) are not trained "
                  "twice; train-loop minutes are summed over the runs trained for the study, sweep wall time is the "
                  "sum over its sweep invocations" + _layouts_words(available, out) + ".", "",
                  compact_markdown(cost), "",
                  f"Total: {cost['runs'].sum()} runs, {cost['trained'].sum()} trained, " +
                  (f"{cost['sweep_wall_min'].sum():.1f} min of sweep wall time." if cost["sweep_wall_min"].notna().any()
                   else "no sweep log (sweeps.jsonl) to time them."), ""]
    missing = [s for s in STUDIES if s not in available]
    if missing:
        lines += [f"Not run yet: {', '.join(f'`{s}`' for s in missing)}.", ""]
    return write_text_stable(out / "STABILITY.md", "\n".join(lines))


def recommendation_for(out_dir=None) -> str | None:
    """The recommendation (markdown bullets) computed from the stability studies' runs.csv, for other reports to
    quote; None when no stability study has run."""
    available, sections = analyse(runs_root(out_dir))
    return recommendation(sections) if available else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=None)
    p.add_argument("--figures-dir", default=None)
    args = p.parse_args(argv)
    path = write_report(args.out_dir, args.figures_dir)
    print(path.read_text())
    print("(runs/README.md and the README's findings quote this: `python -m embnorm_lib publish stability`)")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
