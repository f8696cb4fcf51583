"""The prose ladder's confirmatory analysis (amendment 17 item 7, amendment 20) as a record: per recipe and size, `ln`
and `rms` each against `none`, paired by seed, on final bits per byte and zero-shot macro accuracy (suite v3); one Holm
family of 4 tests per recipe and size, a TOST against +-0.01 Holm-adjusted in the same family, the registered words,
the trained check, and ECE and Brier as unadjusted secondary differences. The report renders this record
(templates/prose_confirm.md.j2); nothing in it is computed twice."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import compare, comparison_family
from ..stats.equivalence import EQUIVALENT_WORDS
from ..studies import prose

LN2 = math.log(2)


def bits_per_byte(runs: pd.DataFrame) -> pd.Series:
    """Final validation loss in bits per byte: the loss per character (a byte here: the corpus is ASCII) over ln 2."""
    return runs["val_loss_per_char"] / LN2 if "val_loss_per_char" in runs else runs["val_loss"] * np.nan

PRIMARY = ("val_bits_per_byte", "lm3_macro_acc")  # the registered family's metrics, with their margins
SECONDARY = ("ece_equal_width", "brier")  # reported with unadjusted intervals, labelled secondary
NORMS = ("ln", "rms")
HIGHER_IS_BETTER = {"lm3_macro_acc"}


def word(row: dict) -> str:
    """The registered words (amendment 18 item 2): equivalence first, then the direction where Holm resolves it."""
    if row["equivalent"]:
        return EQUIVALENT_WORDS
    if not row["significant"]:
        return "not resolved"
    better = (row["mean_diff"] > 0) == (row["metric"] in HIGHER_IS_BETTER)
    return "helps" if better else "costs"


def _keep(row: dict, keys: tuple[str, ...]) -> dict:
    return {k: (None if isinstance(row[k], float) and not math.isfinite(row[k]) else row[k]) for k in keys}


def cell_record(runs: pd.DataFrame, recipe: str, level: str, bigram_bits_per_byte: float, margin: float) -> dict:
    """One recipe and size: its family, secondary differences and trained check, over the registered seeds present."""
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
    return {"recipe": recipe, "level": level, "preset": prose.preset_name(recipe, level), "seeds": list(seeds),
            "complete": complete, "runs": int(len(sub)), "none_bits_per_byte": none_mean,
            "trained": none_mean is not None and none_mean <= trained_below, "trained_below": trained_below,
            "family": rows, "secondary": secondary}


def confirmatory_record(runs: pd.DataFrame, bigram_bits_per_byte: float, margin: float) -> dict:
    """Every recipe and size of the confirmatory ladder that has runs, smallest first."""
    runs = runs.assign(val_bits_per_byte=bits_per_byte(runs))
    cells = [cell_record(runs[runs["cfg.preset"] == prose.preset_name(recipe, level)], recipe, level,
                         bigram_bits_per_byte, margin)
             for level in prose.MAIN_LEVELS for recipe in prose.RECIPE_NAMES
             if (runs["cfg.preset"] == prose.preset_name(recipe, level)).any()]
    return {"kind": "prose-confirmatory", "cells": cells, "margin": margin,
            "bigram_bits_per_byte": bigram_bits_per_byte, "metrics": list(PRIMARY), "secondary": list(SECONDARY),
            "finished": int(np.sum([c["runs"] for c in cells]))}
