"""Score a study's finished runs with a suite they were not scored with, re-training where the weights are gone.

    python -m embnorm_lib rescore main --suite v2 --work-dir /tmp/embnorm-retrain
    python -m embnorm_lib rescore <study> --suite v2 --work-dir /tmp/embnorm-retrain --cells preset=nanogpt-cpu

Weights are not committed. A run whose model.pt is here is scored in place. Without weights only runs the study
scored with another suite are re-scored (a run it never scored is skipped). A run with a bitwise-identical
twin (same training identity and thread count, another study) that already has the result gets a copy naming
it. Every other run is re-trained into --work-dir (a scratch runs root, resumable, never the study's own
tree), compared with the committed run (`job.compare_runs`: per-step logs, result scalars and the v1 suite's
answers), and scored only when the re-run is bitwise the same or within float rounding with no v1 answer
changed; the committed run then gets the suite's result file, which says its weights were re-trained and
how closely the re-run matched. A re-run that differs is reported and
nothing is written for it. The result file is the only thing written into the study's tree."""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..core.config import RunConfig
from ..core.errors import entry
from ..core.records.io import read_json, runs_root
from ..core.records.rundir import RunDir
from ..core.scoring.lm_eval_adapter import evaluate_run, get_suite, write_result
from ..runner.registry import Cell, study_cells
from ..runner.reuse import _identity_key, finished_runs_by_identity
from .job import compare_runs

# a re-run within float rounding of the committed one (job.FLOAT_TOLERANCE; another CPU's kernels round
# differently) with no v1 answer changed has the committed run's weights up to rounding: scored; "differs" is not
REPRODUCED = ("bitwise", "rounding")


def _scorable(run: RunDir) -> bool:
    return run.summary.is_file() and not read_json(run.summary).get("diverged")


def plan(cells: list[Cell], out: Path, suite: str) -> dict[str, list]:
    """Sort a study's cells by how each gets the suite's result: done, in place, copy, retrain (or skipped)."""
    from ..core.scoring.lm_eval_adapter import suites

    target = get_suite(suite).run_file
    others = [s.run_file for s in suites().values() if s.run_file != target]
    finished = finished_runs_by_identity(out)
    groups: dict[str, list] = {"done": [], "in_place": [], "copy": [], "retrain": [], "skipped": []}
    for cell in cells:
        run = RunDir(cell.run_dir(out))
        if not _scorable(run):
            groups["skipped"].append(cell)  # unfinished or diverged: nothing to score
        elif getattr(run, target).is_file():
            groups["done"].append(cell)
        elif run.final_model.is_file():
            groups["in_place"].append(cell)
        elif not any(getattr(run, f).is_file() for f in others):
            groups["skipped"].append(cell)  # the study never scored this run: re-scoring re-trains only scored runs
        else:
            key = _identity_key(RunConfig.load(run.config))
            twin = next((s for s in finished.get(key, []) if s.resolve() != run.root.resolve()
                         and getattr(RunDir(s), target).is_file()), None)
            groups["copy" if twin else "retrain"].append((cell, twin) if twin else cell)
    return groups


def _score(args: tuple[str, str, int, str | None]) -> str:
    run_dir, suite, threads, data_path = args
    import torch

    torch.set_num_threads(threads)
    evaluate_run(run_dir, data_path, suite=suite)
    return run_dir


def score_all(run_dirs: list[Path], suite: str, workers: int, threads: int, desc: str,
              data_path: str | None = None) -> None:
    """The suite on several runs at once, one process per worker (each scoring is single-threaded work)."""
    from tqdm import tqdm

    if not run_dirs:
        return
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        jobs = pool.map(_score, [(str(d), suite, threads, data_path) for d in run_dirs])
        for _ in tqdm(jobs, total=len(run_dirs), desc=desc, unit="run", file=sys.stderr):
            pass


def rescore(study: str, suite: str, work_dir: Path, out: Path, workers: int = 2, cells_filter: str = "",
            data_path: str | None = None, echo=print) -> dict:
    from ..runner import sweep

    if work_dir.resolve() == out.resolve() or out.resolve() in work_dir.resolve().parents:
        raise ValueError(f"--work-dir {work_dir} is inside the runs root {out}; allowed: a scratch directory "
                         f"outside it (re-trained runs must not join the study's tree)")
    target = get_suite(suite).run_file
    cells = [c for c in study_cells(study) if cells_filter in str(c.run_dir(out).relative_to(out))]
    groups = plan(cells, out, suite)
    echo(f"{study} / suite {suite}: {len(groups['done'])} already scored, {len(groups['in_place'])} scored in "
         f"place, {len(groups['copy'])} copied from identical runs, {len(groups['retrain'])} to re-train, "
         f"{len(groups['skipped'])} unfinished, diverged or never scored")
    score_all([c.run_dir(out) for c in groups["in_place"]], suite, workers, 1, f"{suite} in place", data_path)
    for cell, twin in groups["copy"]:
        write_result(cell.run_dir(out), suite,
                     {**read_json(getattr(RunDir(twin), target)), "copied_from": str(twin.relative_to(out))})
    retrain = groups["retrain"]
    differs = []
    if retrain:
        threads = {RunConfig.load(RunDir(c.run_dir(out)).config).torch_threads for c in retrain}
        thread_count = threads.pop() if len(threads) == 1 else 0
        report = sweep.run_sweep(retrain, work_dir, data_path, workers=workers, threads=thread_count, echo=echo,
                                 reuse=False, pack="off")
        failed = {r["cell"] for r in report.failures}
        same = []
        for cell in retrain:
            if cell.label() in failed:
                differs.append({"cell": cell.label(), "status": "failed"})
                continue
            check = compare_runs(cell.run_dir(out), cell.run_dir(work_dir))
            if check["status"] in REPRODUCED:
                same.append((cell, check))
            else:
                differs.append({"cell": cell.label(), **check})
        score_all([c.run_dir(work_dir) for c, _ in same], suite, workers, 1, f"{suite} on re-trained weights",
                  data_path)
        for cell, check in same:
            result = read_json(getattr(RunDir(cell.run_dir(work_dir)), target))
            write_result(cell.run_dir(out), suite,
                         {**result,
                          "weights": f"re-trained from this run's config and seed; the re-run matched the committed "
                                     f"run ({check['status']}: per-step logs, result scalars and v1 suite answers, "
                                     f"job.compare_runs)",
                          "reproduction": {k: check[k] for k in ("status", "max_rel_diff", "max_step_drift",
                                                                 "lm_accuracies_changed", "cpu_committed",
                                                                 "cpu_here")}})
    for d in differs:
        echo(f"not scored: {d['cell']} re-trained {d['status']}: {', '.join(d.get('differences', []))}")
    return {k: len(v) for k, v in groups.items()} | {"differs": len(differs)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study")
    p.add_argument("--suite", default="v2", choices=("v1", "v2"))
    p.add_argument("--work-dir", required=True, help="scratch runs root for re-trained runs (outside runs/)")
    p.add_argument("--out-dir", default=None, help="the runs root holding the study (default runs/)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cells", default="", help="only run directories whose path under runs/ contains this")
    p.add_argument("--data-path", default=None)
    args = p.parse_args(argv)
    try:
        counts = rescore(args.study, args.suite, Path(args.work_dir), runs_root(args.out_dir), args.workers,
                         args.cells, args.data_path)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{counts}; `python -m embnorm_lib sweep {args.study} --index-only` adds the scores to runs.csv")
    return 1 if counts["differs"] else 0


if __name__ == "__main__":
    sys.exit(entry(main))
