"""The stability half of the question: LR sensitivity, init scale, stress, budgets.

    python -m embnorm_lib.analyses.stability          # tables + figures from whichever stability studies exist
                                             # -> runs/STABILITY.md, figures/stability/

Reads the runs.csv of the studies `stability-lr`, `stability-init`, `stability-stress` and
`stability-budget` (see embnorm_lib/sweep.py), each produced by `python -m embnorm_lib sweep <study>`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import stats
from ..core.errors import entry
from ..core.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
from ..core.rundir import study_dir_for
from ..core.variants import variant_names
from ..publishing import plots
from ..publishing.render import compact_markdown, layouts_text
from ..runner.results import has_index, load_runs, load_series, reused_mask, study_provenance
from ..studies import studies_of
from . import plots as analysis_plots

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


def _effect_words(row, verbs=("costs", "gains", "does not resolve"), verb_last: bool = False) -> str:
    """'costs +0.120 [+0.10, +0.14]' / 'gains …' / 'does not resolve …' from a paired Δ (lower is better), its 95%
    t interval and the Holm decision of its table (`significant`); `verbs` names the three cases (worse, better,
    not resolved); with `verb_last`, '+0.120 [+0.10, +0.14] (higher)'."""
    span = f"{row['delta_vs_none']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"
    verb = verbs[2] if not row["significant"] else verbs[0] if row["delta_vs_none"] > 0 else verbs[1]
    return f"{span} ({verb})" if verb_last else f"{verb} {span}"


def _flip_words(flip: dict) -> str:
    if flip["flips"]:
        return "flips sign"
    return "keeps its sign" if "not resolved" not in flip["by_init"].values() else "has no resolved sign at every scale"


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


def lowest_sensitivity(paired: pd.DataFrame) -> dict:
    """The ranking of paired LR sensitivity: each arm's mean over seeds, the lowest, and whether the Holm-corrected
    paired tests against none resolve it."""
    means = {"none": float(paired["sensitivity_none"].iloc[0]),
             **dict(zip(paired["variant"], paired["sensitivity_variant"].astype(float)))}
    lowest = min(means, key=means.get)
    if lowest == "none":
        resolved = bool((paired["significant"] & (paired["delta_vs_none"] > 0)).all())
    else:
        row = paired.set_index("variant").loc[lowest]
        resolved = bool(row["significant"] and row["delta_vs_none"] < 0)
    return {"means": means, "lowest": lowest, "resolved": resolved}


def _lowest_sensitivity_words(paired: pd.DataFrame) -> str:
    """The ranking of paired LR sensitivity (means over seeds), stated as resolved only when the Holm-corrected
    paired tests against none resolve it."""
    low = lowest_sensitivity(paired)
    listing = ", ".join(f"`{v}` {m:.4f}" for v, m in low["means"].items())
    return (f"mean LR sensitivity per seed: {listing} (nats/char); lowest `{low['lowest']}`, "
            + ("resolved by the paired tests" if low["resolved"] else "a ranking the paired tests do not resolve"))


def recommendation(sections: dict) -> str:
    """When to use embedding normalization: evidence sentences and a verdict, all from the tables."""
    parts = []
    if "lr_paired" in sections:
        parts.append(_lowest_sensitivity_words(sections["lr_paired"]))
        parts.append("sensitivity minus none's, paired by seed (95% t CI, Holm): " + ", ".join(
            f"`{r['variant']}` " + _effect_words(r, ("higher", "lower", "not resolved"), verb_last=True)
            for _, r in sections["lr_paired"].iterrows()))
    if "stress" in sections:
        div = sections["stress"].set_index("variant")
        parts.append("in the stress regime " + ", ".join(
            f"`{v}` failed {int(r.failed)}/{int(r.runs)} with {r.spikes_after_warmup_per_run:.1f} spikes/run"
            for v, r in div.iterrows()))
    if "flip" in sections:
        f = sections["flip"]
        parts.append(f"LayerNorm's effect {_flip_words(f)} across init scales "
                     f"({', '.join(f'std {k:g}: {v}' for k, v in f['by_init'].items())})")
    if "budget" in sections:
        b = sections["budget"]
        ln = b[b["variant"] == "ln"].sort_values("cfg.max_iters")
        parts.append("across budgets LayerNorm " + ", ".join(
            f"{_effect_words(r)} at {int(r['cfg.max_iters'])} it" for _, r in ln.iterrows()))
    if not parts:
        return "No stability study has been run yet."
    return "; ".join(parts) + ".\n\n" + verdict(sections)


def tuned_winner(best: pd.DataFrame, paired: pd.DataFrame) -> dict:
    """The arm with the lowest loss at its own best LR, and whether the paired tests (Holm) resolve that ranking."""
    best, paired = best.set_index("variant"), paired.set_index("variant")
    winner = best["best_loss"].idxmin()
    if winner == "none":
        resolved = bool((paired["significant"] & (paired["delta_vs_none"] > 0)).all())
    else:
        resolved = bool(paired.loc[winner, "significant"] and paired.loc[winner, "delta_vs_none"] < 0)
    return {"winner": winner, "resolved": resolved}


def grid_spikes(grid: pd.DataFrame) -> dict:
    """The LRs of the grid where each arm's runs spiked (arms in the grid's order), and the arms that never did."""
    spiky = grid[grid["spikes_per_run"] > 0]
    by_variant = {v: list(g["cfg.lr"]) for v, g in spiky.groupby("variant", sort=False)}
    return {"spiky": by_variant, "quiet": [v for v in grid["variant"].unique() if v not in by_variant]}


def stress_decision(stress: pd.DataFrame) -> dict | None:
    """The protocol's stability definition in the stress regime: whether the baseline is unstable (a failure, or at
    least one spike per run after the warm-up) and which arms fix it (no failure, fewer spikes); None without none."""
    div = stress.set_index("variant")
    if "none" not in div.index:
        return None
    base = div.loc["none"]
    fixers = [v for v, r in div.iterrows() if v != "none" and r["failed"] == 0
              and r["spikes_after_warmup_per_run"] < base["spikes_after_warmup_per_run"]]
    return {"unstable": bool(base["failed"] > 0 or base["spikes_after_warmup_per_run"] >= 1), "fixers": fixers}


def budget_decision(budget: pd.DataFrame) -> dict:
    """The budgets (iterations) at which LayerNorm's resolved difference costs, and those at which it gains."""
    ln = budget[budget["variant"] == "ln"]
    return {"costs": [int(r["cfg.max_iters"]) for _, r in ln.iterrows() if r["significant"] and r["delta_vs_none"] > 0],
            "gains": [int(r["cfg.max_iters"]) for _, r in ln.iterrows() if r["significant"] and r["delta_vs_none"] < 0]}


def _stress_line(decision: dict) -> str:
    fixers = decision["fixers"]
    if decision["unstable"] and fixers:
        return (f"- **Use an embedding norm where the baseline is unstable**: in the stress regime the "
                f"baseline is unstable by the protocol's definition and {', '.join(f'`{v}`' for v in fixers)} "
                f"fix{'es' if len(fixers) == 1 else ''} it.")
    if decision["unstable"]:
        return ("- In the stress regime the baseline is unstable, but no variant fixes it "
                "(each still diverges or spikes as often): an embedding norm is not a cure there.")
    return ("- Even the stress regime leaves the baseline stable (no failure, < 1 spike/run after the warm-up), "
            "so that regime has no instability for an embedding norm to fix (stability v2's LR search "
            "finds where the baseline fails: `runs/stability-lr-v2/BOUNDARY.md`).")


def setup_words(runs: pd.DataFrame, table: pd.DataFrame, what: str) -> str:
    """' (exploratory: 4 × 128, tiny Shakespeare, 3 seeds; Holm across this study's 6 comparisons)': the regime a
    recommendation holds in and the family its decisions come from (another study of the same runs in a larger
    family can resolve less)."""
    tied = "tied" if bool(runs.get("cfg.tie_embeddings", pd.Series([True])).iloc[0]) else "untied"
    model = (f"{int(runs['cfg.n_layer'].iloc[0])} × {int(runs['cfg.n_embd'].iloc[0])}, " if
             {"cfg.n_layer", "cfg.n_embd"} <= set(runs.columns) else "")
    return (f" (exploratory: {model}{tied} output head, {what}tiny Shakespeare, {int(runs['seed'].nunique())} seeds; "
            f"Holm across this study's {int(table['p_holm'].notna().sum())} comparisons)")


def _budget_line(decision: dict, setup: str = "") -> str | None:
    costs, gains = decision["costs"], decision["gains"]
    if costs and not gains:
        return (f"- **Otherwise keep the baseline**{setup}: in a stable regime LayerNorm costs validation loss at "
                f"every budget where the difference is resolved ({', '.join(map(str, costs))} iterations); "
                "`stability-budget-v2` re-tests these budgets with longer ones added, in a larger family "
                "(`runs/stability-budget-v2/BUDGET.md`, the answer's budget rows).")
    if gains and not costs:
        return (f"- LayerNorm improves validation loss at {', '.join(map(str, gains))} iterations in the "
                f"stable regime as well.")
    if gains and costs:
        return (f"- The budget decides: LayerNorm helps at {', '.join(map(str, gains))} and costs at "
                f"{', '.join(map(str, costs))} iterations — an early-speed effect, not a final-quality one.")
    return None


def verdict(sections: dict) -> str:
    """The protocol's stability definition applied to the stress regime, then the accuracy side."""
    lines = []
    if "lr" in sections:
        best = sections["lr"].set_index("variant")
        won = tuned_winner(sections["lr"], sections["lr_best"])
        winner = won["winner"]
        paired = sections["lr_best"].set_index("variant")
        lines.append("- Tuned, not just at one LR: at its own best LR each arm reaches " + ", ".join(
            f"`{v}` {r.best_loss:.3f} (lr {r.best_lr:g})" for v, r in best.iterrows())
            + (f"; `{winner}` is best (paired by seed, Holm: " if won["resolved"] else
               f"; `{winner}` has the lowest mean, a ranking the paired tests do not resolve (")
            + ", ".join(f"`{v}` {_effect_words(r, ('higher', 'lower', 'not resolved'), verb_last=True)}"
                        for v, r in paired.iterrows()) + ").")
    if "lr_grid" in sections:
        spikes = grid_spikes(sections["lr_grid"])
        if spikes["spiky"]:
            quiet = spikes["quiet"]
            lines.append("- Loss spikes on the LR grid: " + "; ".join(
                f"`{v}` at lr {', '.join(f'{x:g}' for x in lrs)}" for v, lrs in spikes["spiky"].items())
                + (f"; no spikes for {', '.join(f'`{v}`' for v in quiet)}." if quiet else "."))
    if "stress" in sections:
        decision = stress_decision(sections["stress"])
        if decision is not None:
            lines.append(_stress_line(decision))
    if "budget" in sections:
        line = _budget_line(budget_decision(sections["budget"]), sections.get("budget_setup", ""))
        if line:
            lines.append(line)
    if "flip" in sections and sections["flip"]["flips"]:
        by = sections["flip"]["by_init"]
        helps = ", ".join(f"{k:g}" for k, v in by.items() if v == "helps")
        hurts = ", ".join(f"{k:g}" for k, v in by.items() if v == "hurts")
        lines.append(f"- **The embedding's init scale decides the sign**{sections.get('init_setup', '')}: LayerNorm "
                     f"helps with embeddings initialised at std {helps} and hurts at std {hurts}; in that regime, "
                     "check the embedding scale before adding a norm. `stability-scale-v2` re-tests these cells, with "
                     "tied and untied heads, in a larger family (`runs/stability-scale-v2/SCALE.md`, the answer's init "
                     "rows).")
    if "init" in sections:
        best = lowest_init_cell(sections["init"])
        lines.append(f"- Lowest mean cell of the init grid (a description, not a tested ranking): `{best['variant']}` "
                     f"with init std {best['cfg.emb_init_std']:g} (val loss {best['val_loss_mean']:.3f}).")
        scaled = sections["init"][sections["init"]["variant"] == "scaled"]
        if len(scaled):
            lines.append("- The `scaled` embedding (tok·√d + pos) " + ", ".join(
                f"{_effect_words(r)} at init std {r['cfg.emb_init_std']:g}" for _, r in scaled.iterrows())
                + " (Δ val loss vs none, nats/char).")
    return "\n".join(lines)


def lowest_init_cell(init: pd.DataFrame) -> pd.Series:
    """The init grid's cell (arm and init std) with the lowest mean validation loss: a description, not a test."""
    return init.loc[init["val_loss_mean"].idxmin()]


def analyse(out: Path) -> tuple[dict[str, pd.DataFrame], dict]:
    """The stability studies that have a runs.csv, and the tables the report and the recommendation are made of."""
    available = {s: load_runs(s, out) for s in STUDIES if has_index(s, out)}
    sections: dict = {}
    if "stability-lr" in available:
        runs = available["stability-lr"]
        sections["lr"] = lr_sensitivity(runs)
        sections["lr_paired"] = paired_sensitivity(runs)
        sections["lr_grid"] = lr_divergence(runs)
        sections["lr_best"] = best_lr_paired(runs)
    if "stability-init" in available:
        sections["init"] = axis_table(available["stability-init"], "cfg.emb_init_std")
        sections["flip"] = sign_flips(sections["init"])
        runs = available["stability-init"]
        iters = f"{int(runs['cfg.max_iters'].iloc[0])} iterations, " if "cfg.max_iters" in runs else ""
        sections["init_setup"] = setup_words(runs, sections["init"], iters)
    if "stability-stress" in available:
        sections["stress"] = divergence_vs_none(available["stability-stress"])
    if "stability-budget" in available:
        sections["budget"] = axis_table(available["stability-budget"], "cfg.max_iters")
        iters = available["stability-budget"]["cfg.max_iters"]
        sections["budget_setup"] = setup_words(available["stability-budget"], sections["budget"],
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

    if "stability-lr" in available:
        runs = available["stability-lr"]
        figure(analysis_plots.plot_lr_curves(runs.assign(capped=capped_loss(runs), arm=runs["variant"])), "lr_sensitivity")
        paired = per_seed_sensitivity(runs)
        lines += ["## LR sensitivity (`stability-lr`: nanoGPT CPU model, 300 iterations)", "",
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
    if "stability-init" in available:
        runs, table = available["stability-init"], sections["init"]
        lines += ["## Embedding-init scale (`stability-init`: 8 x 128, 150 iterations)", "",
                  "Paired Δ val loss vs none within each init scale (the seed study's block-1 input norm of 11.46 "
                  "implies N(0, 1) embeddings; GPT-2 uses N(0, 0.02)).", "", compact_markdown(table), "",
                  f"LayerNorm effect by init: {', '.join(f'std {k:g}: {v}' for k, v in sections['flip']['by_init'].items())}"
                  f" — it {_flip_words(sections['flip'])}.", ""]
        if "final_block1_input_norm" in runs:
            norms = runs.pivot_table(index="variant", columns="cfg.emb_init_std", values="final_block1_input_norm",
                                     aggfunc="mean")
            norms.columns = [f"std={c:g}" for c in norms.columns]
            lines += ["Final block-1 input norm (mean over seeds) by variant and init std:", "",
                      compact_markdown(_order(norms.reset_index())), ""]
    if "stability-stress" in available:
        figure(analysis_plots.plot_loss_traces(load_series("stability-stress", "metrics", out),
                                "stress regime: train loss per run"), "stress_loss_traces")
        lines += ["## Stress regime (`stability-stress`: 16 layers, lr 1e-2, no warmup, 150 iterations)", "",
                  "Divergence = non-finite loss (the run stops and records the step); failed = diverged or a final "
                  "loss above the loss at initialisation; spike = train loss above 1.5 x the running median of the "
                  "last 20 steps. Fisher's exact test compares each failure rate with none's. Figure: "
                  "`figures/stability/stress_loss_traces.png`.", "",
                  compact_markdown(sections["stress"]), ""]
    if "stability-budget" in available:
        table = sections["budget"]
        figure(analysis_plots.plot_budget_deltas(table), "budget_deltas")
        lines += ["## Budgets (`stability-budget`: nanoGPT CPU model at 150 / 300 / 2000 iterations)", "",
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
