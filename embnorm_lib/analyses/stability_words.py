"""The stability studies' decisions in words: which arm is best at its own LR, where the grid spikes, whether the
stress regime's baseline is unstable and which arm fixes it, what the budget and init-scale grids say, and the
recommendation built from them (stability.py computes the tables these read)."""
from __future__ import annotations

import pandas as pd

from ..stats import signed
from ..studies.paper_sources import BOUNDARY_KEYS, SCALE
from ..studies.stability import STABILITY_BUDGET_V2


def effect_words(row, verbs=("costs", "gains", "does not resolve"), verb_last: bool = False) -> str:
    """'costs +0.120 [+0.10, +0.14]' / 'gains …' / 'does not resolve …' from a paired Δ (lower is better), its 95%
    t interval and the Holm decision of its table (`significant`); `verbs` names the three cases (worse, better,
    not resolved); with `verb_last`, '+0.120 [+0.10, +0.14] (higher)'."""
    span = f"{signed(row['delta_vs_none'])} [{signed(row['ci_low'])}, {signed(row['ci_high'])}]"
    verb = verbs[2] if not row["significant"] else verbs[0] if row["delta_vs_none"] > 0 else verbs[1]
    return f"{span} ({verb})" if verb_last else f"{verb} {span}"


def flip_words(flip: dict) -> str:
    if flip["flips"]:
        return "flips sign"
    return "keeps its sign" if "not resolved" not in flip["by_init"].values() else "has no resolved sign at every scale"


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


def lowest_sensitivity_words(paired: pd.DataFrame) -> str:
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
        parts.append(lowest_sensitivity_words(sections["lr_paired"]))
        parts.append("sensitivity minus none's, paired by seed (95% t CI, Holm): " + ", ".join(
            f"`{r['variant']}` " + effect_words(r, ("higher", "lower", "not resolved"), verb_last=True)
            for _, r in sections["lr_paired"].iterrows()))
    if "stress" in sections:
        div = sections["stress"].set_index("variant")
        parts.append("in the stress regime " + ", ".join(
            f"`{v}` failed {int(r.failed)}/{int(r.runs)} with {r.spikes_after_warmup_per_run:.1f} spikes/run"
            for v, r in div.iterrows()))
    if "flip" in sections:
        f = sections["flip"]
        parts.append(f"LayerNorm's effect {flip_words(f)} across init scales "
                     f"({', '.join(f'std {k:g}: {v}' for k, v in f['by_init'].items())})")
    if "budget" in sections:
        b = sections["budget"]
        ln = b[b["variant"] == "ln"].sort_values("cfg.max_iters")
        parts.append("across budgets LayerNorm " + ", ".join(
            f"{effect_words(r)} at {int(r['cfg.max_iters'])} it" for _, r in ln.iterrows()))
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


def stress_line(decision: dict) -> str:
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
            f"finds where the baseline fails: `runs/{BOUNDARY_KEYS['clip']}/BOUNDARY.md`).")


def setup_words(runs: pd.DataFrame, table: pd.DataFrame, what: str) -> str:
    """' (exploratory: 4 × 128, tiny Shakespeare, 3 seeds; Holm across this study's 6 comparisons)': the regime a
    recommendation holds in and the family its decisions come from (another study of the same runs in a larger
    family can resolve less)."""
    tied = "tied" if bool(runs.get("cfg.tie_embeddings", pd.Series([True])).iloc[0]) else "untied"
    model = (f"{int(runs['cfg.n_layer'].iloc[0])} × {int(runs['cfg.n_embd'].iloc[0])}, " if
             {"cfg.n_layer", "cfg.n_embd"} <= set(runs.columns) else "")
    return (f" (exploratory: {model}{tied} output head, {what}tiny Shakespeare, {int(runs['seed'].nunique())} seeds; "
            f"Holm across this study's {int(table['p_holm'].notna().sum())} comparisons)")


def budget_line(decision: dict, setup: str = "") -> str | None:
    costs, gains = decision["costs"], decision["gains"]
    if costs and not gains:
        return (f"- **Otherwise keep the baseline**{setup}: in a stable regime LayerNorm costs validation loss at "
                f"every budget where the difference is resolved ({', '.join(map(str, costs))} iterations); "
                f"`{STABILITY_BUDGET_V2}` re-tests these budgets with longer ones added, in a larger family "
                f"(`runs/{STABILITY_BUDGET_V2}/BUDGET.md`, the answer's budget rows).")
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
            + ", ".join(f"`{v}` {effect_words(r, ('higher', 'lower', 'not resolved'), verb_last=True)}"
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
            lines.append(stress_line(decision))
    if "budget" in sections:
        line = budget_line(budget_decision(sections["budget"]), sections.get("budget_setup", ""))
        if line:
            lines.append(line)
    if "flip" in sections and sections["flip"]["flips"]:
        by = sections["flip"]["by_init"]
        helps = ", ".join(f"{k:g}" for k, v in by.items() if v == "helps")
        hurts = ", ".join(f"{k:g}" for k, v in by.items() if v == "hurts")
        lines.append(f"- **The embedding's init scale decides the sign**{sections.get('init_setup', '')}: LayerNorm "
                     f"helps with embeddings initialised at std {helps} and hurts at std {hurts}; in that regime, "
                     f"check the embedding scale before adding a norm. `{SCALE}` re-tests these cells, with "
                     f"tied and untied heads, in a larger family (`runs/{SCALE}/SCALE.md`, the answer's init "
                     "rows).")
    if "init" in sections:
        best = lowest_init_cell(sections["init"])
        lines.append(f"- Lowest mean cell of the init grid (a description, not a tested ranking): `{best['variant']}` "
                     f"with init std {best['cfg.emb_init_std']:g} (val loss {best['val_loss_mean']:.3f}).")
        scaled = sections["init"][sections["init"]["variant"] == "scaled"]
        if len(scaled):
            lines.append("- The `scaled` embedding (tok·√d + pos) " + ", ".join(
                f"{effect_words(r)} at init std {r['cfg.emb_init_std']:g}" for _, r in scaled.iterrows())
                + " (Δ val loss vs none, nats/char).")
    return "\n".join(lines)


def lowest_init_cell(init: pd.DataFrame) -> pd.Series:
    """The init grid's cell (arm and init std) with the lowest mean validation loss: a description, not a test."""
    return init.loc[init["val_loss_mean"].idxmin()]
