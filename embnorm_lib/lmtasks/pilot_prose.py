"""The pilot of suite v3 (amendment 17 item 7): `none` runs of the prose ladder scored on every item, zero-shot, to
say where each task sits between chance and ceiling and what macro difference 6 confirmatory seeds can detect.

    python -m embnorm_lib.lmtasks.pilot_prose RUN_DIR [RUN_DIR ...] --data-path data/open-prose.txt [--record]

Items are scored with the harness's own scoring (`item_correct`: the choice with the highest summed log-likelihood,
lm-eval's `acc`). Two MDEs at 6 seeds, 80% power and the prose family's Holm level (alpha / 4), both exploratory:
from the item-sampling spread of one pair of runs (a lower bound: seeds add their own spread), and from the spread of
the runs' macro accuracies times sqrt(2) (a paired difference of two arms that share nothing but the seed). The runs
of one pilot share a preset; `--record` keeps its figures in lmtasks/pilot_v3.json under that preset."""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import entry
from ..core.records.io import read_json, write_json
from ..stats import ALPHA, power_figures
from . import build_prose
from .pilot import item_correct

RECORD = build_prose.HERE / "pilot_v3.json"
CONFIRMATORY_SEEDS = 6
FAMILY_TESTS = 4  # per recipe and size: {ln, rms} x {macro accuracy, bits per byte}


def score(run_dirs: list[Path], data_path) -> tuple[pd.DataFrame, dict]:
    """Per run and task: items, accuracy, its distance from chance and ceiling; and each run's 0/1 per item."""
    from ..core.scoring.lm_eval_adapter import CharLM

    suite = build_prose.verified_suite(str(data_path))
    rows, correct = [], {}
    for run_dir in run_dirs:
        lm = CharLM.from_run_dir(run_dir, data_path)
        for task in build_prose.TASKS:
            hits = item_correct(lm, suite[task]["test"])
            correct[(str(run_dir), task)] = hits
            rows.append({"run": str(run_dir), "task": task, "items": len(hits), "acc": float(hits.mean()),
                         "above_chance": float(hits.mean() - build_prose.CHANCE[task]),
                         "below_ceiling": float(1 - hits.mean())})
    return pd.DataFrame(rows), correct


def mde_figures(table: pd.DataFrame, correct: dict) -> dict:
    """The two exploratory MDEs of the macro accuracy difference at CONFIRMATORY_SEEDS seeds (see the docstring)."""
    alpha = ALPHA / FAMILY_TESTS
    macro = table.groupby("run")["acc"].mean()
    pair_se = []
    for a, b in itertools.combinations(macro.index, 2):
        variances = [np.var(correct[(a, t)] - correct[(b, t)], ddof=1) / len(correct[(a, t)])
                     for t in build_prose.TASKS]
        pair_se.append(float(np.sqrt(sum(variances)) / len(variances)))
    item_se = float(np.mean(pair_se)) if pair_se else float("nan")
    seed_sd = float(macro.std(ddof=1)) if len(macro) > 1 else float("nan")
    return {"runs": len(macro), "macro_acc_mean": float(macro.mean()), "macro_acc_sd_over_runs": seed_sd,
            "macro_diff_item_se": item_se, "alpha": alpha, "seeds": CONFIRMATORY_SEEDS,
            "mde_item_sampling_lower_bound": power_figures(item_se, CONFIRMATORY_SEEDS, alpha=alpha)[0],
            "mde_from_run_spread": power_figures(seed_sd * np.sqrt(2), CONFIRMATORY_SEEDS, alpha=alpha)[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m embnorm_lib.lmtasks.pilot_prose", description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--data-path", required=True, help="the open-prose corpus file")
    p.add_argument("--record", action="store_true", help=f"write {RECORD.name}")
    args = p.parse_args(argv)
    presets = sorted({read_json(r / "config.json")["preset"] for r in args.run_dirs})
    if len(presets) != 1:
        raise SystemExit(f"invalid run dirs: presets {', '.join(presets)}; allowed: runs of one preset (seeds differ)")
    table, correct = score(args.run_dirs, args.data_path)
    figures = mde_figures(table, correct)
    print(table.to_string(index=False))
    print(json.dumps(figures, indent=2))
    if args.record:
        labels = {str(r): f"{r.parent.name}/{r.name}" for r in args.run_dirs}
        record = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
        record[presets[0]] = {"runs": sorted(labels.values()),
                              "suite_sha256": json.loads(build_prose.MANIFEST.read_text())["sha256"],
                              "acc": {f"{row.task}@{labels[row.run]}": round(row.acc, 4) for row in table.itertuples()},
                              **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in figures.items()}}
        write_json(RECORD, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
