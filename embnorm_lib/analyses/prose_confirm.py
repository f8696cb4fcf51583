"""The prose ladder's confirmatory analysis (amendment 17 item 7, amendment 20) as a record: per recipe and size, `ln`
and `rms` each against `none`, paired by seed, on final bits per byte and zero-shot macro accuracy (suite v3); one Holm
family of 4 tests per recipe and size, a TOST against +-0.01 Holm-adjusted in the same family, the registered words,
the trained check, and ECE and Brier as unadjusted secondary differences; the compute multiplier from the interim
evaluations and the budget control's "size or budget?" comparison, both secondary. The report renders this record
(templates/prose_confirm.md.j2); nothing in it is computed twice."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.recipes import RECIPES
from ..stats import compare, comparison_family, mean_interval
from ..stats.equivalence import EQUIVALENT_WORDS, MARGINS
from ..stats.metrics import METRICS
from ..studies import prose

LN2 = math.log(2)


def bits_per_byte(runs: pd.DataFrame) -> pd.Series:
    """Final validation loss in bits per byte: the loss per character (a byte here: the corpus is ASCII) over ln 2."""
    return runs["val_loss_per_char"] / LN2 if "val_loss_per_char" in runs else runs["val_loss"] * np.nan

PRIMARY = ("val_bits_per_byte", "lm3_macro_acc")  # the registered family's metrics, with their margins
SECONDARY = ("ece_equal_width", "brier")  # reported with unadjusted intervals, labelled secondary
NORMS = ("ln", "rms")


def word(row: dict) -> str:
    """The registered words (amendment 18 item 2): equivalence first, then the direction where Holm resolves it."""
    if row["equivalent"]:
        return EQUIVALENT_WORDS
    if not row["significant"]:
        return "not resolved"
    better = (row["mean_diff"] < 0) == METRICS[row["metric"]].lower_is_better
    return "helps" if better else "costs"


def _keep(row: dict, keys: tuple[str, ...]) -> dict:
    return {k: (None if isinstance(row[k], float) and not math.isfinite(row[k]) else row[k]) for k in keys}


def interim_curve(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """One run's learning curve on the fixed validation subset: its interim evaluations (those on as many tokens as
    the first, at step 0), as steps and validation loss; the final pass over the whole split is left out."""
    rows = rows.sort_values("step")
    subset = rows[rows["val_tokens"] == rows["val_tokens"].iat[0]]
    return subset["step"].to_numpy(float), subset["val_loss"].to_numpy(float)


def interpolated_share_to_reach(steps: np.ndarray, loss: np.ndarray, target: float) -> float:
    """The share of the steps to its last interim evaluation at which a run's loss, interpolated linearly between
    evaluations, first reaches `target` (nan where it never does)."""
    hit = np.flatnonzero(loss <= target)
    if not len(hit):
        return math.nan
    i = hit[0]
    if i == 0:
        return float(steps[0] / steps[-1])
    frac = (loss[i - 1] - target) / (loss[i - 1] - loss[i])
    return float((steps[i - 1] + frac * (steps[i] - steps[i - 1])) / steps[-1])


def compute_multiplier(runs: pd.DataFrame, evals: pd.DataFrame) -> dict:
    """Amendment 17 item 7 (secondary): per norm, over the seeds where both arms ran, the share of `none`'s steps at
    which `none` reaches the norm's final interim loss (`none_to_norm`: under 1 where the norm ends worse, so `none`
    gets there early) and the norm's share to reach `none`'s (`norm_to_none`: under 1 where the norm ends better);
    mean and 95% t interval over the seeds where the curve gets there (`reached` of `of`; a seed where it never does
    is one where the target lies beyond that run's end)."""
    curves = {}
    for run in runs.itertuples():
        rows = evals[(evals["arm"] == run.arm) & (evals["seed"] == run.seed)]
        if len(rows):
            curves[(run.variant, int(run.seed))] = interim_curve(rows)
    found = {}
    for norm in NORMS:
        seeds = sorted(s for (v, s) in curves if v == norm and ("none", s) in curves)
        if not seeds:
            continue
        found[norm] = {}
        for key, (runner, target) in {"none_to_norm": ("none", norm), "norm_to_none": (norm, "none")}.items():
            shares = [interpolated_share_to_reach(*curves[(runner, s)], curves[(target, s)][1][-1]) for s in seeds]
            reached = [x for x in shares if math.isfinite(x)]
            mean = mean_interval(reached)
            found[norm][key] = {"mean": mean["mean"], "ci_low": mean["ci_low"], "ci_high": mean["ci_high"],
                                "reached": mean["n"], "of": len(seeds)}
    return found


def _by_seed(runs: pd.DataFrame, metric: str, norm: str) -> pd.Series:
    """The norm's value minus `none`'s, per seed."""
    table = runs.pivot_table(index="seed", columns="variant", values=metric, aggfunc="first")
    return (table[norm] - table["none"]).dropna() if {norm, "none"} <= set(table.columns) else pd.Series(dtype=float)


def size_or_budget(main: pd.DataFrame, budget: pd.DataFrame, recipe: str) -> list[dict]:
    """Amendment 19 item 3 (exploratory): per norm and primary metric, the difference from `none` at 1,920
    iterations (`main`, size 0-x4) and at 480 (`budget`, the same model on a quarter of the tokens), and the change
    between them paired by seed (main minus budget), mean and 95% t interval over the seeds both have."""
    rows = []
    for norm in NORMS:
        for metric in PRIMARY:
            if metric not in main or metric not in budget:
                continue
            at_main, at_budget = _by_seed(main, metric, norm), _by_seed(budget, metric, norm)
            seeds = sorted(set(at_main.index) & set(at_budget.index))
            if not seeds:
                continue
            change = (at_main[seeds] - at_budget[seeds]).tolist()
            rows.append({"recipe": recipe, "variant": norm, "metric": metric, "n": len(seeds),
                         "diff_main": float(at_main[seeds].mean()), "diff_budget": float(at_budget[seeds].mean()),
                         **{f"change_{k}" if k != "mean" else "change": v for k, v in mean_interval(change).items()}})
    return rows


def cell_record(runs: pd.DataFrame, recipe: str, level: str, bigram_bits_per_byte: float, margin: float,
                evals: pd.DataFrame | None = None) -> dict:
    """One recipe and size: its family, secondary differences, compute multiplier (where `evals`, the studies' interim
    evaluation rows, are given) and trained check, over the registered seeds present."""
    seeds = prose.confirmatory_seeds(recipe, level)
    sub = runs[runs["seed"].isin(seeds)]
    none_bpb = sub.loc[sub["variant"] == "none", "val_bits_per_byte"]
    per_arm = sub.groupby("variant")["seed"].nunique()
    complete = all(per_arm.get(v, 0) == len(seeds) for v in ("none", *NORMS))
    family = comparison_family(sub, list(PRIMARY), list(NORMS)) if len(sub) else pd.DataFrame()
    keys = ("variant", "metric", "n", "baseline_mean", "mean_diff", "ci_low", "ci_high", "p_holm", "significant",
            "p_tost_holm", "equivalent", "mde_80_holm")
    rows = [{**_keep(r, keys), "word": word(r)} for r in family.to_dict("records")]
    secondary = [_keep(vars(compare(sub, m, v)), ("variant", "metric", "n", "mean_diff", "ci_low", "ci_high"))
                 for v in NORMS for m in SECONDARY if m in sub and sub[m].notna().any()]
    trained_below = bigram_bits_per_byte * (1 - margin)
    none_mean = float(none_bpb.mean()) if len(none_bpb) else None
    return {"recipe": recipe, "recipe_words": RECIPES[recipe].description, "level": level,
            "params": prose.non_embedding_params(prose.rung_of(level)), "preset": prose.preset_name(recipe, level),
            "seeds": list(seeds),
            "complete": complete, "runs": int(len(sub)), "none_bits_per_byte": none_mean,
            "trained": none_mean is not None and none_mean <= trained_below, "trained_below": trained_below,
            "family": rows, "secondary": secondary,
            "multiplier": compute_multiplier(sub, evals) if evals is not None and len(evals) else {}}


def confirmatory_record(runs: pd.DataFrame, bigram_bits_per_byte: float, margin: float,
                        evals: pd.DataFrame | None = None, budget: pd.DataFrame | None = None,
                        levels: tuple[str, ...] = prose.MAIN_LEVELS) -> dict:
    """Every recipe and size of `levels` that has runs, smallest first; with `budget` (the budget control's runs),
    the size-or-budget comparison per recipe."""
    runs = runs.assign(val_bits_per_byte=bits_per_byte(runs))
    at = {(recipe, level): runs[runs["cfg.preset"] == prose.preset_name(recipe, level)]
          for level in levels for recipe in prose.RECIPE_NAMES}
    cells = [cell_record(sub, recipe, level, bigram_bits_per_byte, margin, evals)
             for (recipe, level), sub in at.items() if len(sub)]
    budget_rows = []
    if budget is not None and len(budget):
        budget = budget.assign(val_bits_per_byte=bits_per_byte(budget))
        for recipe in prose.RECIPE_NAMES:
            main = at.get((recipe, prose.MAIN_LEVELS[0]), runs.iloc[:0])
            control = budget[budget["cfg.preset"] == prose.preset_name(recipe, prose.BUDGET_LEVEL)]
            if len(main) and len(control):
                budget_rows += size_or_budget(main, control, recipe)
    role = "confirmatory" if set(levels) <= set(prose.MAIN_LEVELS) else "exploratory"  # amendment 19 item 5
    # the TOST margins (stats.equivalence.MARGINS): 0.01 bits per byte and 0.01 accuracy, as registered
    (equivalence_margin,) = {MARGINS[m] for m in PRIMARY}
    return {"kind": "prose-confirmatory", "role": role, "cells": cells, "trained_margin": margin,
            "equivalence_margin": equivalence_margin, "size_or_budget": budget_rows,
            "figure": None,  # its path, once write_report draws it
            "bigram_bits_per_byte": bigram_bits_per_byte, "metrics": list(PRIMARY), "secondary": list(SECONDARY),
            "finished": int(np.sum([c["runs"] for c in cells]))}
