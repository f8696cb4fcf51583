"""Run a study: execute notebooks/02_train.ipynb with papermill once per cell of a grid.

    python -m embnorm_lib sweep <study>                          # a registered study (see studies/)
    python -m embnorm_lib sweep mystudy --preset tiny --variants none,ln --seeds 0-2 \\
        --set max_iters=50 --axis lr=1e-3,3e-3                   # an ad-hoc grid
    python -m embnorm_lib sweep <study> --index-only             # rebuild runs/<study>/runs.csv
    python -m embnorm_lib sweep <study> --only preset=ladder-0   # only the cells of one preset (any text of the dir)
    python -m embnorm_lib sweep <study> --only preset=ladder-0 --only seed1/  # and one seed (every --only holds)
    python -m embnorm_lib sweep <study> --fleet                  # the study as batched fleets in one process

Resumable and idempotent: finished cells (summary.json with the same config) are skipped, partial
ones resume from their checkpoint, and a lock per cell keeps two sweeps from running the
same cell (training itself holds the run directory's own lock, so a notebook run cannot mix in either). A cell whose training identity (and thread count) matches a finished run of any study
under the same runs directory is copied from it, with reused_from.json naming the source, instead
of being trained again (--no-reuse turns that off). A failing cell is recorded (its executed
notebook keeps the error) and the others go on; the exit code is 1 if any cell failed. A diverged
run is a result, not a failure."""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..core.config import check_name
from ..core.errors import BRIEF_ERRORS, ConfigError, entry
from ..core.records.io import atomic_write_text, git_commit, repo_root, runs_root, shown_path
from ..core.records.rundir import existing_study, study_dir_for
from ..core.training.interrupt import stop_on_terminate
from .cells import cells_of, only_cells, seed_cells  # noqa: F401 (importable from here as before)
from .jobs import (  # noqa: F401 (one cell's status and execution, importable from here as before)
    CELL_TIMEOUT_S,
    EXECUTORS,
    FIGURE_NOT_KEPT,
    KERNEL_START_RETRIES,
    STOP_GRACE_S,
    STOPPING,
    _papermill,
    _stop_workers,
    _worker_init,
    cell_problem,
    cell_status,
    execute_cell,
    make_submitit_executor,
    run_fleet,
    slim_notebook,
    with_execution,
)
from .registry import ABC, STUDIES, Cell, waits_for
from .results import build_index
from .reuse import complete_cell, finished_runs_by_identity, reuse_identical_run

TRAIN_NOTEBOOK = "notebooks/02_train.ipynb"
@dataclass
class SweepReport:
    results: list[dict] = field(default_factory=list)
    skipped: int = 0
    waiting: int = 0  # registered cells that cannot run yet (studies.waits_for), none of them trained
    wall_s: float = 0.0

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.results if r["status"] == "failed"]




def run_sweep(cells: list[Cell], out_dir: str | Path | None = None, data_path: str | None = None,
              workers: int = 0, threads: int = 0, notebook: str | None = None, echo=print,
              executor: str = "local", slurm: dict | None = None, reuse: bool = True,
              fleet: bool = False) -> SweepReport:
    """Every cell that can run and has not finished: completed from or copied off an identical finished run where
    one exists, else trained (as notebooks in worker processes, or one fleet); then the index and
    the sweep log. A failing cell is recorded and the others go on."""
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; allowed: {', '.join(EXECUTORS)}")
    out = runs_root(out_dir).resolve()
    notebook = str(Path(notebook or repo_root() / TRAIN_NOTEBOOK).resolve())
    if fleet:  # one process: its threads fill the machine unless asked otherwise
        cells = [with_execution(c, "fleet") for c in cells]
        workers, threads = 1, threads or (os.cpu_count() or 1)
    workers, threads = resolve_parallelism(workers, threads)
    report = SweepReport()
    cells = _runnable(cells, report, echo)
    if not cells:
        return report
    todo, incomplete = _by_status(cells, out, report)
    finished = finished_runs_by_identity(out) if (incomplete or (reuse and todo)) else {}
    _complete(incomplete, out, threads, finished, data_path, report, echo)
    if reuse and todo:
        todo = _reuse(todo, out, threads, finished, report, echo)
    if not todo:
        if report.results:
            echo(f"{len(report.results)} run(s) reused or completed from identical finished runs; nothing to train")
            _finish(out, cells, report, 0.0, workers, threads, echo)
        else:
            echo(f"all {len(cells)} runs already finished; nothing to execute")
        return report
    if fleet:
        t0 = time.perf_counter()
        report.results += run_fleet(todo, out, data_path, threads, echo)
    else:
        echo(f"{len(todo)} of {len(cells)} runs to execute ({report.skipped} already finished, "
             f"{len(report.results)} reused or completed); {workers} worker(s) x {threads} thread(s)")
        t0 = time.perf_counter()
        _execute(todo, out, data_path, workers, threads, notebook, executor, slurm, report)
    _finish(out, cells, report, time.perf_counter() - t0, workers, threads, echo)
    if report.failures:
        echo(f"{len(report.failures)} run(s) failed:")
        for r in report.failures:
            echo(f"  {r['cell']:28s} {r.get('error', '')}  ({r['run_dir']})")
    echo(f"sweep wall time {report.wall_s:.1f} s for {len(todo)} runs" + (" (fleet)" if fleet else ""))
    return report


def _runnable(cells: list[Cell], report: SweepReport, echo) -> list[Cell]:
    """The cells that can run now; those that wait (the registry says why) are counted, none of them trained."""
    whys = [waits_for(c) for c in cells]
    for why, n in Counter(w for w in whys if w).items():
        echo(f"{n} run(s) wait, none trained: {why}")
        report.waiting += n
    return [c for c, why in zip(cells, whys, strict=True) if not why]


def _by_status(cells: list[Cell], out: Path, report: SweepReport) -> tuple[list[Cell], list[Cell]]:
    """(to train, finished but incomplete); finished cells are counted as skipped."""
    todo, incomplete = [], []
    for cell in cells:
        status = cell_status(cell, out)
        if status == "done":
            report.skipped += 1
        elif status == "incomplete":
            incomplete.append(cell)
        else:
            todo.append(cell)  # new, partial, conflict, corrupt: the notebook trains, resumes or says what is wrong
    return todo, incomplete


def _complete(cells: list[Cell], out: Path, threads: int, finished: dict, data_path, report: SweepReport,
              echo) -> None:
    """Finished runs missing a result the cell asks for (e.g. lm_eval.json): completed, not retrained."""
    for cell in cells:
        try:
            result = complete_cell(cell, out, threads, finished, data_path)
        except BRIEF_ERRORS as e:
            result = {"cell": cell.label(), "run_dir": str(cell.run_dir(out)), "status": "failed", "error": str(e)}
        report.results.append(result)
        echo(f"{result['status']:9s} {cell.label():28s} {result.get('detail') or result.get('error', '')}")


def _reuse(todo: list[Cell], out: Path, threads: int, finished: dict, report: SweepReport, echo) -> list[Cell]:
    """Cells with a bitwise-identical finished run elsewhere are copied from it; returns those left to train."""
    remaining = []
    for cell in todo:
        try:
            result = reuse_identical_run(cell, out, threads, finished)
        except BRIEF_ERRORS as e:  # a damaged source run: this cell fails, naming it; the others go on
            result = {"cell": cell.label(), "run_dir": str(cell.run_dir(out)), "status": "failed", "error": str(e)}
            report.results.append(result)
            echo(f"failed    {cell.label():28s} {e}")
            continue
        if result is None:
            remaining.append(cell)
        else:
            report.results.append(result)
            echo(f"reused    {cell.label():28s} val_loss {result['val_loss']:.4f}  from {result['reused_from']}")
    return remaining


def _execute(cells: list[Cell], out: Path, data_path, workers: int, threads: int, notebook: str, executor: str,
             slurm: dict | None, report: SweepReport) -> None:
    """The cells on the executor, each result recorded and shown as it lands."""
    from tqdm import tqdm

    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=len(cells), unit="run", desc="sweep", file=sys.stderr, mininterval=2.0))
        if executor == "local":
            # spawned (not forked) workers: the parent has torch loaded and forking it is fragile
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers, initializer=_worker_init,
                                                           mp_context=multiprocessing.get_context("spawn")))
            futures = [pool.submit(execute_cell, c, str(out), data_path, threads, notebook) for c in cells]
            # on an error or Ctrl-C no queued cell starts (leaving the `with` would otherwise wait for every queued
            # job to run), and the running ones checkpoint and stop before the pool's exit has waited for them
            stack.push(lambda kind, *_: _stop_workers(pool) if kind else None)
            results = (f.result() for f in as_completed(futures))
        else:
            engine = make_submitit_executor(executor, out / ".submitit", threads, slurm)
            with engine.batch():
                submitted = [engine.submit(execute_cell, c, str(out), data_path, threads, notebook) for c in cells]
            results = (job.result() for job in submitted)
        for result in results:
            report.results.append(result)
            bar.update(1)
            bar.write(_result_line(result), file=sys.stderr)


def _result_line(result: dict) -> str:
    if result["status"] in ("ok", "diverged"):
        overhead = result["seconds"] - (result["train_wall_s"] or 0)
        loss = result["val_loss"]
        # a resumed run's train loop counts its time before the interruption too, which this sweep did not spend
        where = (f"{overhead:4.1f} s outside the train loop: kernel, imports, calibration, lm-eval" if overhead >= 0
                 else f"resumed: its train loop's {result['train_wall_s']:.1f} s include the time before it stopped")
        return (f"{result['status']:9s} {result['cell']:28s} val_loss "
                f"{'diverged' if loss is None else f'{loss:.4f}'}  {result['seconds']:6.1f} s ({where})")
    return f"{result['status']:9s} {result['cell']:28s} {result.get('error') or result.get('why', '')}"


def _finish(out: Path, cells: list[Cell], report: SweepReport, wall: float, workers: int, threads: int, echo) -> None:
    """The index and the sweep log, even when a cell failed; a write that fails (a full disk) is reported
    as one line and recorded as a failure instead of losing the results of the cells that finished."""
    report.wall_s = wall
    for study in sorted({c.study for c in cells}):
        for what, write in (("index", lambda study=study: build_index(study, out)),
                            ("sweep log", lambda study=study: _write_sweep_log(out, study, report, wall, workers,
                                                                               threads))):
            try:
                write()
            except (OSError, *BRIEF_ERRORS) as e:  # a damaged run stops the index, naming it: the log is still kept
                echo(f"could not write the {what} of {study}: {e}")
                report.results.append({"cell": f"({study} {what})", "run_dir": str(out / study), "status": "failed",
                                       "error": str(e)})


def _relative_paths(result: dict) -> dict:
    """A sweep result with its paths as io.shown_path writes them (relative to the checkout when inside it), so a
    committed log names no path of the machine that ran it."""
    return {k: shown_path(v) if k in ("run_dir", "notebook") else v for k, v in result.items()}


def _write_sweep_log(out: Path, study: str, report: SweepReport, wall: float, workers: int, threads: int) -> None:
    log_path = study_dir_for(study, out).sweep_log
    previous = log_path.read_text() if log_path.is_file() else ""
    trained = ("ok", "diverged", "failed")
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_commit": git_commit(), "wall_s": wall,
             "workers": workers, "threads": threads,
             "executed": sum(r["status"] in trained for r in report.results),
             "reused": sum(r["status"] == "reused" for r in report.results),
             "completed": sum(r["status"] == "completed" for r in report.results),
             "skipped": report.skipped + sum(r["status"] in ("skipped", "locked") for r in report.results),
             "failed": len(report.failures),
             "kernel_retries": sum(r.get("kernel_retries", 0) for r in report.results),
             "results": [_relative_paths(r) for r in report.results
                         if Path(r["run_dir"]).resolve().is_relative_to(out / study)]}
    atomic_write_text(log_path, previous + json.dumps(entry, sort_keys=True) + "\n")


def resolve_parallelism(workers: int, threads: int) -> tuple[int, int]:
    """Default: one single-threaded worker per core (measured faster here than one 2-thread worker;
    see README, "Parallelism"). Given one of the two, the other fills the machine."""
    for name, value in (("workers", workers), ("threads", threads)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise ConfigError(f"invalid {name}={value!r}; allowed: an integer >= 0 (0: fill the machine)")
    cores = os.cpu_count() or 1
    if not workers and not threads:
        threads = 1
    if not workers:
        workers = max(1, cores // threads)
    if not threads:
        threads = max(1, cores // workers)
    return workers, threads


# -- command line ---------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", help=f"a named study ({', '.join(STUDIES)}) or a new name with --preset")
    p.add_argument("--preset", help="build an ad-hoc grid on this preset instead of a named study")
    p.add_argument("--variants", default=None, help=f"an ad-hoc grid's arms, e.g. none,ln (default {','.join(ABC)})")
    p.add_argument("--seeds", default=None,
                   help="e.g. 0-4 or 0,3,7: an ad-hoc grid's seeds (default 0-2); for a named study, only its cells "
                        "of these seeds (e.g. the seeds of a size that move to a GPU together)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="fixed config override")
    p.add_argument("--axis", action="append", default=[], metavar="FIELD=V1,V2", help="extra grid axis")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads per worker")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--data-path", default=None)
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="local worker processes (default), submitit's local executor, or Slurm via submitit")
    p.add_argument("--partition", default=None, help="Slurm partition (with --executor slurm)")
    p.add_argument("--time-min", type=int, default=120, help="Slurm time limit per run, minutes")
    p.add_argument("--gpus", type=int, default=None, help="GPUs per Slurm job")
    p.add_argument("--lm-eval", action="store_true", help="also run the zero/few-shot suite at the end of each run")
    p.add_argument("--no-reuse", action="store_true",
                   help="train every cell even if another study holds a finished run with the same training identity")
    p.add_argument("--fleet", action="store_true",
                   help="train the cells in this process as batched fleets (fleet.py: runs of one shape as one "
                        "model; seconds on a GPU), not as notebooks; CUDA only")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="only the cells whose run directory under runs/<study>/ contains TEXT (e.g. preset=ladder-0); "
                        "end it with '/' to name a seed exactly (seed1/ is seed 1, not 10-19); given more than once, "
                        "a cell must contain every TEXT (--only preset=ladder-3 --only seed0/)")
    p.add_argument("--list", action="store_true", help="print the cells and their status, run nothing")
    p.add_argument("--index-only", action="store_true", help="rebuild runs.csv from the run directories")
    p.add_argument("--drop-missing", action="store_true",
                   help="with --index-only: let runs.csv lose the runs it lists whose directories are gone")
    return p


def check_fleet_device(fleet: bool) -> None:
    """--fleet on a machine without CUDA is refused: on CPU a fleet of the three arms trains fewer member-iterations
    per second than the plain sweep's workers (`bench` prints it as fleet_speedup; docs/GUIDE.md has the figure)."""
    import torch

    if fleet and not torch.cuda.is_available():
        raise ConfigError("invalid --fleet on a machine without CUDA: on CPU a fleet is slower than the plain sweep "
                          "(`bench` fleet_speedup, docs/GUIDE.md); allowed: the same command without --fleet, or "
                          "--fleet on a GPU")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    out = runs_root(args.out_dir)
    try:
        check_name("study", args.study)
        if args.index_only:
            existing_study(out, args.study, "--index-only")
            table = build_index(args.study, out, drop_missing=args.drop_missing)
            if not (out / args.study / "runs.csv").is_file():  # e.g. runs/tokenizers: no run, so nothing written
                raise ConfigError(f"invalid study {args.study!r} for --index-only: no finished run in "
                                  f"{out / args.study}, so no runs.csv was written; allowed: a study with finished runs")
            print(f"{len(table)} runs indexed in {out / args.study / 'runs.csv'}")
            return 0
        cells = cells_of(args, out)
        resolve_parallelism(args.workers, args.threads)
        check_fleet_device(args.fleet)
    except (ValueError, *BRIEF_ERRORS) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for c in cells:
            why = waits_for(c)
            print(f"{'waits' if why else cell_status(c, out):9s} {c.label():36s} {c.run_dir(out)}"
                  + (f"  (for {why})" if why else ""))
        return 0
    slurm = {"partition": args.partition, "time_min": args.time_min, "gpus": args.gpus, "parallel": args.workers or None}
    with stop_on_terminate():  # `kill PID` of a background sweep (Ctrl-C ignored) checkpoints as Ctrl-C does
        report = run_sweep(cells, out, args.data_path, args.workers, args.threads, executor=args.executor,
                           slurm=slurm, reuse=not args.no_reuse, fleet=args.fleet)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(entry(main, trains=True))
