"""The pilot that chooses suite v2's tasks (issue 17): each candidate task's accuracy on trained runs, its distance
from chance and ceiling, and the item-level spread that sets how many items the suite needs.

    python -m embnorm_lib.lmtasks.pilot RUN_DIR [RUN_DIR ...] [--freeze]   # -> pilot table; --freeze writes
                                                                              manifest_v2.json with the kept tasks

Items are scored with the same code the harness calls (`CharLM.loglikelihood`: the summed log-likelihood of each
choice, the highest wins, as lm-eval's `acc`), zero-shot. A task is kept if, for every piloted run, its accuracy is
at least MARGIN above chance and MARGIN below 1. The pilot is exploratory and is recorded in the manifest."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.corpora.data import load_corpus
from ..core.errors import entry
from ..core.records.io import read_json
from . import build_v2

MARGIN = 0.05  # issue 17: no task within 0.05 of chance or ceiling


def item_correct(lm, items: list[dict]) -> np.ndarray:
    """1 where the item's true choice has the highest summed log-likelihood, else 0 (zero-shot)."""
    pairs = [lm.split(it["context"], choice) for it in items for choice in it["choices"]]
    scores = np.array([lp for lp, _ in lm._score(pairs)]).reshape(len(items), -1)
    return (scores.argmax(axis=1) == np.array([it["label"] for it in items])).astype(int)


def pilot(run_dirs: list[Path], names=None, data_path=None, n_items: int = build_v2.N_TEST) -> tuple[pd.DataFrame,
                                                                                                      dict]:
    """Per run and task: accuracy and its item standard error; and the per-item correctness for paired use."""
    from ..core.scoring.lm_eval_adapter import CharLM

    corpus = load_corpus(data_path)
    names = list(names or build_v2.CANDIDATES)
    suite = build_v2.build_tasks(corpus.val_text, corpus.train_text, names, n_test=n_items)
    rows, correct = [], {}
    for run_dir in run_dirs:
        lm = CharLM.from_run_dir(run_dir, data_path)
        for name in names:
            hits = item_correct(lm, suite[name]["test"])
            correct[(str(run_dir), name)] = hits
            rows.append({"run": str(run_dir), "task": name, "items": len(hits), "acc": hits.mean(),
                         "acc_se": hits.std(ddof=1) / np.sqrt(len(hits)),
                         "above_chance": hits.mean() - build_v2.CHANCE, "below_ceiling": 1 - hits.mean()})
    return pd.DataFrame(rows), correct


def kept_tasks(table: pd.DataFrame, margin: float = MARGIN) -> list[str]:
    ok = table.groupby("task").apply(lambda t: bool((t["above_chance"] >= margin).all()
                                                    and (t["below_ceiling"] >= margin).all()), include_groups=False)
    return [name for name in build_v2.CANDIDATES if ok.get(name, False)]


def paired_item_spread(correct: dict, run_a: str, run_b: str, names) -> dict:
    """For two runs scored on the same items: per task the share of items on which they disagree, and the item
    sampling standard error of the macro accuracy difference (tasks weighted equally)."""
    per_task, variances = {}, []
    for name in names:
        d = correct[(run_a, name)] - correct[(run_b, name)]
        per_task[name] = float((d != 0).mean())
        variances.append(d.var(ddof=1) / len(d))
    return {"disagreement": per_task, "macro_diff_item_se": float(np.sqrt(sum(variances)) / len(names))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--data-path", default=None)
    p.add_argument("--items", type=int, default=build_v2.N_TEST, help="score the first N test items of each task")
    p.add_argument("--freeze", action="store_true", help="write manifest_v2.json with the kept tasks")
    args = p.parse_args(argv)
    table, correct = pilot(args.run_dirs, data_path=args.data_path, n_items=args.items)
    print(table.to_string(index=False))
    keep = kept_tasks(table)
    print(f"kept (>= {MARGIN} from chance and ceiling on every run): {', '.join(keep) or 'none'}")
    spread = (paired_item_spread(correct, str(args.run_dirs[0]), str(args.run_dirs[1]), keep)
              if len(args.run_dirs) > 1 and keep else {})
    if spread:
        from ..analyses.zeroshot import item_sampling_mde

        print(f"paired item spread ({args.run_dirs[0]} vs {args.run_dirs[1]}): {spread}")
        full_se = spread["macro_diff_item_se"] * np.sqrt(args.items / build_v2.N_TEST)
        spread["mde_lower_bound_10_seeds"] = item_sampling_mde(full_se, 10, 10)
        print(f"MDE at {build_v2.N_TEST} items per task, 10 seeds, alpha / 10 (lower bound): "
              f"{spread['mde_lower_bound_10_seeds']:.4f}")
    if args.freeze:
        labels = [f"{r.parent.name}/{r.name} ({read_json(r / 'config.json')['preset']})" for r in args.run_dirs]
        record = {"runs": labels, "margin": MARGIN, "items_per_task": args.items,
                  "acc": {f"{row.task}@{Path(row.run).parent.name}/{Path(row.run).name}": round(float(row.acc), 4)
                          for row in table.itertuples()}, **spread}
        build_v2.write_manifest(keep, args.data_path, pilot=record)
        print(f"wrote {build_v2.MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
