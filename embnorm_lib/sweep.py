"""Run a study: execute notebooks/02_train.ipynb with papermill once per cell of a grid.

    python -m embnorm_lib.sweep seeds-final                      # a named study (see STUDIES)
    python -m embnorm_lib.sweep mystudy --preset tiny --variants none,ln --seeds 0-2 \\
        --set max_iters=50 --axis lr=1e-3,3e-3                   # an ad-hoc grid
    python -m embnorm_lib.sweep seeds-final --index-only         # rebuild runs/<study>/runs.csv
    python -m embnorm_lib.sweep ladder --only preset=ladder-0    # only the cells of one rung (any text of the dir)
    python -m embnorm_lib.sweep ladder --only preset=ladder-0 --only seed1/   # and one seed (every --only holds)
    python -m embnorm_lib.sweep main --fleet                     # the study as batched fleets in one process

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: imported where used, it is slow to load
    import submitit

from .cli import parse_seeds, parse_value, split_assignment
from .config import RunConfig, check_name
from .errors import BRIEF_ERRORS, ConfigError, RunDirError, entry
from .io import (
    atomic_write_text,
    default_runs_dir,
    git_commit,
    read_json,
    repo_root,
    runs_root,
    shown_path,
    write_bytes_if_changed,
)
from .results import build_index
from .reuse import complete_cell, finished_runs_by_identity, missing_results, reuse_identical_run
from .rundir import RunDir, study_dir_for
from .seal import finished_summary
from .studies import ABC, STUDIES, Cell, grid, study_cells, waits_for

TRAIN_NOTEBOOK = "notebooks/02_train.ipynb"
KERNEL_START_RETRIES = 3
CELL_TIMEOUT_S = 6 * 3600  # a notebook cell running longer than this fails the run instead of hanging the sweep


# -- one cell -------------------------------------------------------------------------------------

def cell_status(cell: Cell, out_dir: Path) -> str:
    """'done' (finished with this config and every result it asks for), 'incomplete' (finished, but a
    result the cell asks for is missing, e.g. lm_eval.json), 'partial' (checkpoint to resume), 'new',
    'conflict' (another config), or 'corrupt' (a file that cannot be read; see cell_problem)."""
    return _cell_status(cell, out_dir)[0]


def cell_problem(cell: Cell, out_dir: Path) -> str:
    return _cell_status(cell, out_dir)[1]


def _cell_status(cell: Cell, out_dir: Path) -> tuple[str, str]:
    run = RunDir(cell.run_dir(out_dir))
    if not run.config.is_file():
        return ("partial" if run.checkpoint.is_file() else "new"), ""
    try:
        if RunConfig.load(run.config).training_identity() != cell.config().training_identity():
            return "conflict", f"run dir {run.root} holds a run with a different config"
        if (summary := finished_summary(run)) is not None:  # a damaged or unsealed run is 'corrupt', naming the file
            return ("incomplete" if missing_results(cell.config(), run.root, summary) else "done"), ""
    except BRIEF_ERRORS as e:
        return "corrupt", str(e)
    return ("partial" if run.checkpoint.is_file() else "new"), ""


def _is_kernel_start_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("Kernel didn't respond", "Address already in use", "ZMQError",
                                   "Kernel died before replying"))


def execute_cell(cell: Cell, out_dir: str, data_path: str | None, threads: int, notebook: str) -> dict:
    """Run one cell through papermill in this (worker) process. Returns a result record."""
    return execute_job([cell], out_dir, data_path, threads, notebook)[0]


def execute_job(cells: list[Cell], out_dir: str, data_path: str | None, threads: int, notebook: str) -> list[dict]:
    """One execution of the training notebook in this (worker) process: one cell, or cells that differ in their
    seed alone and are marked packed (`plan_jobs`), trained as one packed job whose executed notebook every member's
    run directory keeps. One result record per cell."""
    out = Path(out_dir)
    records = [{"cell": c.label(), "run_dir": str(c.run_dir(out))} for c in cells]
    held = []
    try:
        for cell in cells:
            lock = RunDir(cell.run_dir(out)).cell_lock()
            if not lock.acquire():
                return [{**r, "status": "locked"} for r in records]
            held.append(lock)
        results: list[dict | None] = [None] * len(cells)
        for i, cell in enumerate(cells):
            status, _ = _cell_status(cell, out)  # again, under the lock: another sweep may have finished it
            if status == "done":
                results[i] = {**records[i], "status": "skipped", "why": "finished by another sweep meanwhile"}
            elif status == "incomplete":
                results[i] = {**records[i], "status": "failed",
                              "error": "finished but incomplete: run_sweep completes it"}
        todo = [i for i, r in enumerate(results) if r is None]
        if todo:
            for i, record in zip(todo, _execute_notebook([cells[i] for i in todo], out, data_path, threads,
                                                         notebook), strict=True):
                results[i] = {**records[i], **record}
        return results
    finally:
        for lock in held:
            lock.release()


def _execute_notebook(cells: list[Cell], out: Path, data_path, threads: int, notebook: str) -> list[dict]:
    import papermill as pm

    first = cells[0]
    overrides = dict(first.overrides)
    if threads:
        overrides["torch_threads"] = threads
    packed = overrides.get("execution") == "packed"
    params = dict(variant=first.variant, seed=first.seed, preset=first.preset, max_iters=0, study=first.study,
                  # "" for the checkout's runs/ (the notebook's default): the executed copy names no machine's path
                  out_dir="" if out.resolve() == default_runs_dir().resolve() else str(out),
                  data_path=data_path or "", overrides=overrides, run_tag=first.tag,
                  progress=False, figures=False,  # the figure would be dropped by slim_notebook anyway
                  pack_seeds=",".join(str(c.seed) for c in cells) if packed else "")
    executed = RunDir(first.run_dir(out)).notebook
    start, retries = time.perf_counter(), 0
    env_threads = {k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")} if threads else {}
    os.environ.update(env_threads)  # inherited by the kernel this worker starts
    while True:
        try:
            pm.execute_notebook(notebook, str(executed), parameters=params, kernel_name="python3",
                                progress_bar=False, cwd=str(Path(notebook).parent), log_output=False,
                                execution_timeout=CELL_TIMEOUT_S)
            break
        except pm.PapermillExecutionError as e:
            _drop_unreadable_notebook(executed)
            return [{"status": "failed", "error": f"{e.ename}: {e.evalue}".splitlines()[0][:300],
                     "notebook": str(executed), "seconds": time.perf_counter() - start, "kernel_retries": retries}
                    ] * len(cells)
        except Exception as e:  # kernel start races under load (papermill #239, #511): retry those
            if _is_kernel_start_failure(e) and retries < KERNEL_START_RETRIES:
                retries += 1
                time.sleep(2 * retries)
                continue
            _drop_unreadable_notebook(executed)
            return [{"status": "failed", "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                     "seconds": time.perf_counter() - start, "kernel_retries": retries}] * len(cells)
    slim_notebook(executed)
    records = []
    for cell in cells:
        run = RunDir(cell.run_dir(out))
        if run.notebook != executed:  # a packed job: every member keeps the job's notebook
            write_bytes_if_changed(run.notebook, executed.read_bytes())
        try:
            summary = read_json(run.summary)
        except (OSError, RunDirError) as e:
            records.append({"status": "failed", "error": str(e)[:300], "seconds": time.perf_counter() - start})
            continue
        records.append({"status": "diverged" if summary.get("diverged") else "ok",
                        "seconds": time.perf_counter() - start, "kernel_retries": retries,
                        "train_wall_s": summary.get("wall_s"), "val_loss": summary.get("val_loss"),
                        **({"packed_with": len(cells)} if packed else {})})
    return records


# -- packing ----------------------------------------------------------------------------------------

PACK_MODES = ("auto", "on", "off")
PACK_MAX_MEMBERS = 16  # seeds per packed job


def packing_enabled(pack: str) -> bool:
    """auto: on CUDA (one small model cannot fill a GPU), never on CPU (measured slower there: README)."""
    if pack not in PACK_MODES:
        raise ConfigError(f"invalid pack={pack!r}; allowed: {', '.join(PACK_MODES)}")
    if pack != "auto":
        return pack == "on"
    import torch

    return torch.cuda.is_available()


def with_execution(cell: Cell, execution: str) -> Cell:
    return replace(cell, overrides=tuple(sorted({**dict(cell.overrides), "execution": execution}.items())))


def assign_execution(cells: list[Cell], out: Path, packing: bool) -> list[Cell]:
    """Each cell's execution mode. A partial run keeps the mode its checkpoint was written in (it resumes in kind
    only); with packing on, the other cells are packed where another seed of their config is packed too (a pack of
    one is a single run). Single cells stay as registered."""
    def partial_mode(cell: Cell) -> str | None:
        run = RunDir(cell.run_dir(out))
        if run.checkpoint.is_file() and run.config.is_file():
            with contextlib.suppress(*BRIEF_ERRORS, OSError):
                return RunConfig.load(run.config).execution
        return None

    partial = [partial_mode(c) for c in cells]
    wanted = [p or ("packed" if packing else "single") for p in partial]
    members = Counter(_pack_key(c) for c, w in zip(cells, wanted, strict=True) if w == "packed")
    return [with_execution(c, "packed") if w == "packed" and (p == "packed" or members[_pack_key(c)] > 1) else c
            for c, w, p in zip(cells, wanted, partial, strict=True)]


def _pack_key(cell: Cell) -> tuple:
    return (cell.study, cell.preset, cell.variant, cell.tag_axes,
            tuple((k, v) for k, v in cell.overrides if k != "execution"))


def plan_jobs(cells: list[Cell], max_members: int = PACK_MAX_MEMBERS) -> list[list[Cell]]:
    """Packed cells of one config (seeds apart) become packed jobs of up to `max_members`; the rest run alone."""
    jobs, packs = [], {}
    for cell in cells:
        if dict(cell.overrides).get("execution") == "packed":
            packs.setdefault(_pack_key(cell), []).append(cell)
        else:
            jobs.append([cell])
    for members in packs.values():
        jobs.extend(members[i:i + max_members] for i in range(0, len(members), max_members))
    return jobs


def run_fleet(cells: list[Cell], out: Path, data_path: str | None, threads: int, echo=print) -> list[dict]:
    """The cells trained in this process as batched fleets (fleet.py), then each one's zero/few-shot suite when it
    asks for one. One result record per cell. A cell with a checkpoint (a partial run of another mode) fails with
    what to do; the others train."""
    from .fleet import train_fleet
    from .fleet_lmeval import score_if_asked

    start = time.perf_counter()
    records = [{"cell": c.label(), "run_dir": str(c.run_dir(out))} for c in cells]
    partial = {i for i, c in enumerate(cells) if RunDir(c.run_dir(out)).checkpoint.is_file()}
    results: list[dict | None] = [None] * len(cells)
    for i in partial:
        results[i] = {**records[i], "status": "failed", "error": "a partial run (ckpt.pt): resume it without --fleet"}
    todo = [i for i in range(len(cells)) if i not in partial]
    cfgs = [cells[i].config().replace(torch_threads=threads) for i in todo]
    try:
        summaries = train_fleet(cfgs, [cells[i].run_dir(out) for i in todo], data_path, echo=echo) if todo else []
        lm_s = time.perf_counter()
        score_if_asked(cfgs, [cells[i].run_dir(out) for i in todo], data_path)  # one shared forward per shape
        lm_s = time.perf_counter() - lm_s
    except BRIEF_ERRORS as e:
        return [r or {**records[i], "status": "failed", "error": str(e)[:300], "seconds": time.perf_counter() - start}
                for i, r in enumerate(results)]
    for i, summary in zip(todo, summaries, strict=True):
        results[i] = {**records[i], "status": "diverged" if summary.get("diverged") else "ok",
                      "seconds": time.perf_counter() - start, "train_wall_s": summary.get("wall_s"),
                      "val_loss": summary.get("val_loss"), "fleet_members": summary.get("fleet_members"),
                      "lm_eval_s_all": lm_s}
    return results


FIGURE_NOT_KEPT = ("[figure not kept with the run: redraw it from metrics.jsonl and evals.jsonl with "
                   "plots.plot_run(notebook.run_table(run_dir), notebook.eval_table(run_dir))]")


def slim_notebook(path: Path) -> bool:
    """Keep an executed run notebook small: its figures (most of its bytes) are redrawn from the run's logs at
    will, so each becomes one line saying how; text outputs and errors stay. True if the file changed."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if any(k.startswith("image/") for k in data):
                out["data"] = {"text/plain": FIGURE_NOT_KEPT}
                changed = True
    if "widgets" in nb.metadata:  # a widget's saved state: stale as soon as the kernel is gone
        del nb.metadata["widgets"]
        changed = True
    if changed:
        write_bytes_if_changed(path, nbformat.writes(nb).encode())
    return changed


def _drop_unreadable_notebook(path: Path) -> None:
    """A notebook cut short (e.g. by a full disk) is not kept: an invalid .ipynb breaks every later reader."""
    import nbformat

    if path.is_file():
        try:
            nbformat.read(path, as_version=4)
        except Exception:  # any parse or validation failure: the file is not a notebook any more
            path.unlink(missing_ok=True)


@dataclass
class SweepReport:
    results: list[dict] = field(default_factory=list)
    skipped: int = 0
    waiting: int = 0  # registered cells that cannot run yet (studies.waits_for), none of them trained
    wall_s: float = 0.0

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.results if r["status"] == "failed"]


EXECUTORS = ("local", "submitit-local", "slurm")


def make_submitit_executor(kind: str, folder: Path, threads: int, slurm: dict | None = None) -> submitit.AutoExecutor:
    """A submitit executor: 'submitit-local' runs jobs as local processes, 'slurm' submits them to Slurm."""
    import submitit

    executor = submitit.AutoExecutor(folder=str(folder), cluster="local" if kind == "submitit-local" else "slurm")
    params = {"timeout_min": int((slurm or {}).get("time_min", 120)), "cpus_per_task": max(1, threads)}
    if kind == "slurm":
        slurm = slurm or {}
        params.update({k: v for k, v in {"slurm_partition": slurm.get("partition"),
                                          "gpus_per_node": slurm.get("gpus"),
                                          "slurm_array_parallelism": slurm.get("parallel")}.items() if v})
    executor.update_parameters(**params)
    return executor


def run_sweep(cells: list[Cell], out_dir: str | Path | None = None, data_path: str | None = None,
              workers: int = 0, threads: int = 0, notebook: str | None = None, echo=print,
              executor: str = "local", slurm: dict | None = None, reuse: bool = True,
              pack: str = "auto", fleet: bool = False) -> SweepReport:
    from tqdm import tqdm

    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; allowed: {', '.join(EXECUTORS)}")
    out = runs_root(out_dir).resolve()
    notebook = str(Path(notebook or repo_root() / TRAIN_NOTEBOOK).resolve())
    if fleet:  # one process: its threads fill the machine unless asked otherwise
        cells = [with_execution(c, "fleet") for c in cells]
        workers, threads = 1, threads or (os.cpu_count() or 1)
    workers, threads = resolve_parallelism(workers, threads)
    report = SweepReport()
    whys = [waits_for(c) for c in cells]
    for why, n in Counter(w for w in whys if w).items():
        echo(f"{n} run(s) wait, none trained: {why}")
        report.waiting += n
    cells = [c for c, why in zip(cells, whys, strict=True) if not why]
    if not cells:
        return report
    todo, incomplete = [], []
    for cell in cells:
        status = cell_status(cell, out)
        if status == "done":
            report.skipped += 1
        elif status == "incomplete":
            incomplete.append(cell)
        else:
            todo.append(cell)  # new, partial, conflict, corrupt: the notebook trains, resumes or says what is wrong
    if not fleet:
        todo = assign_execution(todo, out, packing_enabled(pack) if todo else False)
    finished = finished_runs_by_identity(out) if (incomplete or (reuse and todo)) else {}
    for cell in incomplete:
        try:
            result = complete_cell(cell, out, threads, finished, data_path)
        except BRIEF_ERRORS as e:
            result = {"cell": cell.label(), "run_dir": str(cell.run_dir(out)), "status": "failed", "error": str(e)}
        report.results.append(result)
        echo(f"{result['status']:9s} {cell.label():28s} {result.get('detail') or result.get('error', '')}")
    if reuse and todo:
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
        todo = remaining
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
        _finish(out, cells, report, time.perf_counter() - t0, workers, threads, echo)
        if report.failures:
            echo(f"{len(report.failures)} run(s) failed:")
            for r in report.failures:
                echo(f"  {r['cell']:28s} {r.get('error', '')}  ({r['run_dir']})")
        echo(f"sweep wall time {report.wall_s:.1f} s for {len(todo)} runs (fleet)")
        return report
    jobs = plan_jobs(todo)
    packed = sum(len(j) for j in jobs if len(j) > 1 or dict(j[0].overrides).get("execution") == "packed")
    echo(f"{len(todo)} of {len(cells)} runs to execute ({report.skipped} already finished, "
         f"{len(report.results)} reused or completed); {workers} worker(s) x {threads} thread(s)"
         + (f"; {packed} of them in {sum(len(j) > 1 for j in jobs)} packed job(s)" if packed else ""))
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=len(todo), unit="run", desc="sweep", file=sys.stderr, mininterval=2.0))
        if executor == "local":
            # spawned (not forked) workers: the parent has torch loaded and forking it is fragile
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers,
                                                           mp_context=multiprocessing.get_context("spawn")))
            futures = [pool.submit(execute_job, j, str(out), data_path, threads, notebook) for j in jobs]
            # Ctrl-C: no queued cell starts (leaving the `with` would otherwise wait for every queued job to run);
            # the running ones got the same SIGINT and resume from their last checkpoint next time
            stack.push(lambda kind, *_: pool.shutdown(wait=False, cancel_futures=True) if kind else None)
            results = (r for f in as_completed(futures) for r in f.result())
        else:
            engine = make_submitit_executor(executor, out / ".submitit", threads, slurm)
            with engine.batch():
                submitted = [engine.submit(execute_job, j, str(out), data_path, threads, notebook) for j in jobs]
            results = (r for job in submitted for r in job.result())
        for result in results:
            report.results.append(result)
            bar.update(1)
            if result["status"] in ("ok", "diverged"):
                overhead = result["seconds"] - (result["train_wall_s"] or 0)
                loss = result["val_loss"]
                bar.write(f"{result['status']:9s} {result['cell']:28s} val_loss "
                          f"{'diverged' if loss is None else f'{loss:.4f}'}  {result['seconds']:6.1f} s "
                          f"({overhead:4.1f} s outside the train loop: kernel, imports, calibration, lm-eval)", file=sys.stderr)
            else:
                bar.write(f"{result['status']:9s} {result['cell']:28s} {result.get('error') or result.get('why', '')}",
                          file=sys.stderr)
    _finish(out, cells, report, time.perf_counter() - t0, workers, threads, echo)
    if report.failures:
        echo(f"{len(report.failures)} run(s) failed:")
        for r in report.failures:
            echo(f"  {r['cell']:28s} {r.get('error', '')}  ({r['run_dir']})")
    echo(f"sweep wall time {report.wall_s:.1f} s for {len(todo)} runs")
    return report


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

def only_cells(cells: list[Cell], text: str, out: Path) -> list[Cell]:
    """The cells whose run directory (relative to the study's directory, written with a trailing '/') contains
    `text`; all of them for ''. The trailing '/' lets a seed be named exactly: 'seed1/' is seed 1, not seeds 10-19."""
    if not text:
        return cells
    kept = [c for c in cells if text in f"{c.run_dir(out).relative_to(out / c.study)}/"]
    if not kept:
        arms = sorted({str(c.run_dir(out).parent.relative_to(out / c.study)) for c in cells})
        raise ConfigError(f"invalid --only {text!r}: no cell's run directory contains it; allowed: text from one of "
                          f"{', '.join(arms[:6])}{', ...' if len(arms) > 6 else ''}")
    return kept


def seed_cells(cells: list[Cell], seeds: list[int]) -> list[Cell]:
    """The cells of these seeds; a seed no cell has is refused, naming the seeds the study registers."""
    have = sorted({c.seed for c in cells})
    missing = sorted(set(seeds) - set(have))
    if missing:
        raise ConfigError(f"invalid --seeds: seed {missing[0]} is not registered here; allowed: "
                          f"{', '.join(map(str, have))}")
    return [c for c in cells if c.seed in seeds]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", help=f"a named study ({', '.join(STUDIES)}) or a new name with --preset")
    p.add_argument("--preset", help="build an ad-hoc grid on this preset instead of a named study")
    p.add_argument("--variants", default=",".join(ABC))
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
    p.add_argument("--pack", default="auto", choices=PACK_MODES,
                   help="train the seeds of one config as packed jobs (packed.py): auto = on CUDA only")
    p.add_argument("--fleet", action="store_true",
                   help="train the cells in this process as batched fleets (fleet.py: runs of one shape as one "
                        "model; seconds on a GPU), not as notebooks")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="only the cells whose run directory under runs/<study>/ contains TEXT (e.g. preset=ladder-0); "
                        "end it with '/' to name a seed exactly (seed1/ is seed 1, not 10-19); given more than once, "
                        "a cell must contain every TEXT (--only preset=ladder-3 --only seed0/)")
    p.add_argument("--list", action="store_true", help="print the cells and their status, run nothing")
    p.add_argument("--index-only", action="store_true", help="rebuild runs.csv from the run directories")
    args = p.parse_args(argv)
    out = runs_root(args.out_dir)
    try:
        check_name("study", args.study)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.index_only:
        try:
            table = build_index(args.study, out)
        except BRIEF_ERRORS as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"{len(table)} runs indexed in {out / args.study / 'runs.csv'}")
        return 0
    try:
        if args.preset:
            fixed = {k: parse_value(v) for k, v in map(split_assignment, args.set)}
            axes = {k: [parse_value(x) for x in v.split(",")] for k, v in map(split_assignment, args.axis)}
            cells = grid(args.study, args.preset, args.variants.split(","), parse_seeds(args.seeds or "0-2"), fixed,
                         axes)
        else:
            cells = study_cells(args.study)
            if args.seeds is not None:
                cells = seed_cells(cells, parse_seeds(args.seeds))
        if args.lm_eval:
            cells = [replace(c, overrides=tuple(sorted({**dict(c.overrides), "lm_eval": True}.items())))
                     for c in cells]
        for text in args.only:
            cells = only_cells(cells, text, out)
        for c in cells:
            c.config()  # validate every cell before running any
        resolve_parallelism(args.workers, args.threads)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for c in cells:
            why = waits_for(c)
            print(f"{'waits' if why else cell_status(c, out):9s} {c.label():36s} {c.run_dir(out)}"
                  + (f"  (for {why})" if why else ""))
        return 0
    slurm = {"partition": args.partition, "time_min": args.time_min, "gpus": args.gpus, "parallel": args.workers or None}
    report = run_sweep(cells, out, args.data_path, args.workers, args.threads, executor=args.executor, slurm=slurm,
                       reuse=not args.no_reuse, pack=args.pack, fleet=args.fleet)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(entry(main))
