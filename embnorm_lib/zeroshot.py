"""Suite v2's item-level analysis (issue 17, item 2): every arm and seed answers the same items, so the paired
difference in accuracy varies with the seed and with the item; both are resampled.

The registered zero-shot v2 endpoint (docs/PROTOCOL.md amendment 1, item 6) is the per-seed macro accuracy,
paired t over seeds with Holm across variant x task; `two_way_bootstrap` is its labelled secondary: a percentile
interval from resampling seeds and, independently, items within each task (the same items for every seed, as
they were scored), which counts the finite item sample as a source of variance beside the seeds. The analysis
returns data frames; reports render them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .io import read_json
from .results import study_dir
from .rundir import finished_run_dirs


def item_matrix(study: str, out: Path, shots: str = "0shot") -> dict[str, dict[str, dict[int, np.ndarray]]]:
    """{task: {arm: {seed: 0/1 per item}}} from every finished run's lm_eval_v2.json (suite v2)."""
    matrix: dict = {}
    for run in finished_run_dirs(study_dir(study, out)):
        if not run.lm_eval_v2.is_file():
            continue
        for task, by_shots in read_json(run.lm_eval_v2)["items"].items():
            if shots in by_shots:
                bits = np.frombuffer(by_shots[shots].encode(), dtype=np.uint8) - ord("0")
                matrix.setdefault(task, {}).setdefault(run.arm, {})[run.seed] = bits.astype(np.int8)
    return matrix


def paired_item_differences(matrix: dict, variant: str, baseline: str = "none") -> dict[str, np.ndarray]:
    """Per task, a seeds x items array of correct(variant) - correct(baseline), over the seeds both arms have."""
    out = {}
    for task, arms in matrix.items():
        if variant not in arms or baseline not in arms:
            continue
        seeds = sorted(set(arms[variant]) & set(arms[baseline]))
        if seeds:
            out[task] = np.stack([arms[variant][s] - arms[baseline][s] for s in seeds]).astype(float)
    return out


def two_way_bootstrap(diffs: dict[str, np.ndarray], n_boot: int = 10_000, seed: int = 0,
                      level: float = 0.95) -> dict:
    """Macro (tasks weighted equally) mean paired difference with a percentile interval from resampling seeds and
    items within each task independently. Every task must have the same seeds (rows)."""
    tasks = sorted(diffs)
    n_seeds = {diffs[t].shape[0] for t in tasks}
    if len(n_seeds) != 1:
        raise ValueError(f"tasks have different seed counts {sorted(n_seeds)}; allowed: the same seeds for every task")
    n_s = n_seeds.pop()
    rng = np.random.default_rng(seed)
    seed_weights = rng.multinomial(n_s, np.full(n_s, 1 / n_s), size=n_boot)  # B x S resampling counts
    stat = np.zeros(n_boot)
    for t in tasks:
        d = diffs[t]
        n_i = d.shape[1]
        item_weights = rng.multinomial(n_i, np.full(n_i, 1 / n_i), size=n_boot)  # B x I
        stat += np.einsum("bs,si,bi->b", seed_weights, d, item_weights, optimize=True) / (n_s * n_i)
    stat /= len(tasks)
    alpha = 1 - level
    macro = float(np.mean([diffs[t].mean() for t in tasks]))
    return {"mean_diff": macro, "ci_low": float(np.quantile(stat, alpha / 2)),
            "ci_high": float(np.quantile(stat, 1 - alpha / 2)), "seeds": n_s,
            "items": {t: int(diffs[t].shape[1]) for t in tasks}, "method": "two-way bootstrap (seeds x items)"}


def item_table(matrix: dict, variants=("ln", "rms"), baseline: str = "none") -> pd.DataFrame:
    """Per variant: the macro difference from the baseline with the two-way bootstrap interval (secondary)."""
    rows = []
    for variant in variants:
        diffs = paired_item_differences(matrix, variant, baseline)
        if diffs:
            rows.append({"variant": variant, **{k: v for k, v in two_way_bootstrap(diffs).items() if k != "items"}})
    return pd.DataFrame(rows)


def item_sampling_mde(item_se: float, n_seeds: int = 10, tests: int = 10) -> float:
    """The suite's minimum detectable macro difference (80% power, paired t over n_seeds at the strictest Holm level
    alpha / tests) if the per-seed difference varied only as much as one seed pair's item-level spread gives
    (`item_se`: the standard error of its macro difference over items). A lower bound: a true effect that differs
    between seeds adds to it, and the measured MDE replaces it once the suite has scored the seeds."""
    return stats.power_figures(item_se, n_seeds, alpha=stats.ALPHA / tests)[0]
