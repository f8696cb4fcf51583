"""Amendment 21's comparison as a record (exploratory: no Holm, no TOST, no decision words): per recipe at size 1,
for `ln` and `rms`, the norm's paired effect (arm minus `none`, by seed) with the embedding tables weight-decayed (the
`prose` study's runs) and not decayed (this study's), the difference of the two effects, and each arm's own
change (not decayed minus decayed), each a mean with its 95% t interval over the seeds both studies have. The report
renders this record (templates/prose_embdecay.md.j2)."""
from __future__ import annotations

import pandas as pd

from ..stats import mean_interval
from ..studies import prose
from .prose_confirm import NORMS, PRIMARY, bits_per_byte


def _per_seed(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """seed x arm table of one metric (seeds 0-5 only: the seeds amendment 21 item 3 reads)."""
    runs = runs[runs["seed"].isin(prose.CONFIRMATORY_SEEDS)]
    if metric not in runs or not len(runs):
        return pd.DataFrame()
    return runs.pivot_table(index="seed", columns="variant", values=metric, aggfunc="first")


def _interval(values: pd.Series) -> dict:
    found = mean_interval(values.tolist())
    return {"mean": found["mean"], "ci_low": found["ci_low"], "ci_high": found["ci_high"], "n": found["n"],
            "seeds": [int(s) for s in values.index]}


def recipe_record(decayed: pd.DataFrame, undecayed: pd.DataFrame, recipe: str) -> dict:
    """One recipe: `effects` per norm and metric (the effect decayed, not decayed, and their difference, not decayed
    minus decayed) and `arm_changes` per arm and metric, over the seeds present in both studies for the arms read."""
    effects, arm_changes = [], []
    for metric in PRIMARY:
        on, off = _per_seed(decayed, metric), _per_seed(undecayed, metric)
        for arm in ("none", *NORMS):
            if arm in on and arm in off:
                change = (off[arm] - on[arm]).dropna()
                if len(change):
                    arm_changes.append({"arm": arm, "metric": metric, "change": _interval(change)})
        for norm in NORMS:
            if not {"none", norm} <= set(on.columns) & set(off.columns):
                continue
            effect_on, effect_off = (on[norm] - on["none"]).dropna(), (off[norm] - off["none"]).dropna()
            seeds = sorted(set(effect_on.index) & set(effect_off.index))
            if not seeds:
                continue
            effects.append({"variant": norm, "metric": metric,
                            "decayed": _interval(effect_on[seeds]), "undecayed": _interval(effect_off[seeds]),
                            "difference": _interval(effect_off[seeds] - effect_on[seeds])})
    return {"recipe": recipe, "preset": prose.preset_name(recipe, prose.EMB_DECAY_LEVEL), "effects": effects,
            "arm_changes": arm_changes}


def embdecay_record(decayed: pd.DataFrame, undecayed: pd.DataFrame) -> dict:
    """Every recipe with runs in `undecayed` (amendment 21's runs), read beside `decayed` (the `prose` study's runs
    at the same size); `complete` once each arm has all of seeds 0-5 in both."""
    decayed, undecayed = (frame.assign(val_bits_per_byte=bits_per_byte(frame)) for frame in (decayed, undecayed))
    recipes = []
    for recipe in prose.RECIPE_NAMES:
        preset = prose.preset_name(recipe, prose.EMB_DECAY_LEVEL)
        on = decayed[decayed["cfg.preset"] == preset] if len(decayed) else decayed
        off = undecayed[undecayed["cfg.preset"] == preset]
        if not len(off):
            continue
        found = recipe_record(on, off, recipe)
        need = set(prose.CONFIRMATORY_SEEDS)
        found["complete"] = all(need <= set(frame.loc[frame["variant"] == arm, "seed"])
                                for frame in (on, off) for arm in ("none", *NORMS))
        recipes.append(found)
    return {"kind": "prose-embedding-decay", "role": "exploratory", "recipes": recipes, "metrics": list(PRIMARY),
            "seeds": list(prose.CONFIRMATORY_SEEDS), "level": prose.EMB_DECAY_LEVEL,
            "finished": int(len(undecayed)), "decayed_runs": int(len(decayed))}
