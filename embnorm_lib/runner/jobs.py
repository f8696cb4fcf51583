"""One cell of a sweep: its status on disk, its execution through the training notebook (papermill) in a worker
process, fleets (a study's runs of one shape as one batched model) and the executors that run cells (local
processes, submitit, Slurm). runner/sweep.py decides what runs and keeps the record."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: imported where used, it is slow to load
    import submitit

from ..core.config import RunConfig
from ..core.errors import BRIEF_ERRORS, RunDirError
from ..core.records.io import default_runs_dir, read_json, repo_root
from ..core.records.rundir import RunDir, holds_a_run
from ..core.records.seal import finished_summary
from .kernels import execute_notebook
from .notebook_archive import FIGURE_NOT_KEPT, slim_notebook  # noqa: F401 (sweep and compact_logs import them here)
from .registry import Cell
from .reuse import missing_results

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
        if holds_a_run(run) and RunConfig.load(run.config).training_identity() != cell.config().training_identity():
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


# -- Ctrl-C (and SIGTERM, which a sweep takes as Ctrl-C: interrupt.stop_on_terminate) -------------------
# A notebook's kernel runs in a session of its own (jupyter_client), so the terminal's Ctrl-C reaches the sweep and its
# workers but not the kernel that trains. A worker that gets SIGINT (from the terminal) or SIGTERM (forwarded by the
# sweep, or from a scheduler) starts no further job and interrupts its kernel, whose training loop checkpoints the
# last whole step and stops (train.stop_on_interrupt); papermill then shuts the kernel down.
STOPPING = threading.Event()  # set in a worker process once it has been asked to stop
STOP_GRACE_S = 120  # after this long a kernel still running is killed (its last checkpoint is whole: atomic writes)


def _worker_init() -> None:
    # a sweep started with Ctrl-C ignored (a background job, nohup) passes that on to its workers: they keep it, and
    # SIGTERM, which the sweep forwards (`_stop_workers`), stops them in either case
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, lambda signum, frame: STOPPING.set())


def _kernels() -> list[int]:
    """The process groups of this process's notebook kernels (each leads its own: jupyter_client's new session)."""
    import psutil

    groups = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error, OSError):
            if any("ipykernel" in part for part in child.cmdline()):
                groups.append(os.getpgid(child.pid))
    return groups


def _signal_kernels(signum: int) -> None:
    for group in _kernels():
        with contextlib.suppress(OSError):
            os.killpg(group, signum)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C or SIGTERM in the sweep: queued jobs are cancelled (one a worker already holds is refused by its
    STOPPING), and every worker is told to stop; the pool's exit waits for their notebooks to checkpoint and end."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # read first: shutdown forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGTERM)  # SIGINT would not reach a background sweep's workers


def _papermill(run) -> None:  # noqa: ANN001 (a callable that executes the notebook)
    """`run()` in a thread while this (main) thread watches for a stop. In a thread papermill installs no signal
    handlers of its own (nbclient's would shut the kernel down at once on SIGINT, before it can checkpoint); once
    STOPPING is set, the kernel is interrupted every second until its notebook ends (a signal that lands between two
    cells is ignored by an idle kernel), and killed after STOP_GRACE_S. The notebook's error is raised here."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as e:  # handed to the caller's thread
            failure.append(e)

    thread = threading.Thread(target=target, name="papermill", daemon=True)
    thread.start()
    stop_since = None
    while thread.is_alive():
        thread.join(timeout=1.0)
        if STOPPING.is_set() and thread.is_alive():
            stop_since = stop_since or time.monotonic()
            overdue = time.monotonic() - stop_since > STOP_GRACE_S
            _signal_kernels(signal.SIGKILL if overdue else signal.SIGINT)
    if failure:
        raise failure[0]


def _interrupted(error: BaseException, start: float) -> dict:
    return {"status": "interrupted", "error": f"stopped by Ctrl-C or SIGTERM ({type(error).__name__}); a run that "
            f"was training resumes from its checkpoint", "seconds": time.perf_counter() - start}


def execute_cell(cell: Cell, out_dir: str, data_path: str | None, threads: int, notebook: str) -> dict:
    """One execution of the training notebook for one cell in this (worker) process, under the cell's lock.
    Returns a result record."""
    out = Path(out_dir)
    record = {"cell": cell.label(), "run_dir": str(cell.run_dir(out))}
    if STOPPING.is_set():  # a cell this worker already held when the sweep stopped does not start
        return {**record, "status": "interrupted", "error": "not started: the sweep was stopped"}
    lock = RunDir(cell.run_dir(out)).cell_lock()
    if not lock.acquire():
        return {**record, "status": "locked"}
    try:
        status, _ = _cell_status(cell, out)  # again, under the lock: another sweep may have finished it
        if status == "done":
            return {**record, "status": "skipped", "why": "finished by another sweep meanwhile"}
        if status == "incomplete":
            return {**record, "status": "failed", "error": "finished but incomplete: run_sweep completes it"}
        return {**record, **_execute_notebook(cell, out, data_path, threads, notebook)}
    finally:
        lock.release()


def kernel_data_path(data_path: str | os.PathLike | None, kernel_cwd: Path) -> str:
    """The notebook's data_path parameter for a --data-path given from the caller's directory. The kernel runs in
    the notebook's folder, so a relative path is resolved here first (`--data-path data/x.txt` from the checkout
    failed with 'data file not found' in the kernel); a file inside the checkout is then written relative to the
    kernel's folder, so the executed notebook names no machine's path; one outside it stays absolute. "" keeps the
    notebook's own search ($EMBNORM_DATA, the cache, ../shared/data, a download)."""
    if not data_path:
        return ""
    path = Path(data_path).expanduser().resolve()
    if path.is_relative_to(repo_root().resolve()):
        return os.path.relpath(path, Path(kernel_cwd).resolve())
    return str(path)


def _execute_notebook(cell: Cell, out: Path, data_path, threads: int, notebook: str) -> dict:
    import papermill as pm

    overrides = dict(cell.overrides)
    if threads:
        overrides["torch_threads"] = threads
    params = dict(variant=cell.variant, seed=cell.seed, preset=cell.preset, max_iters=0, study=cell.study,
                  # "" for the checkout's runs/ (the notebook's default): the executed copy names no machine's path
                  out_dir="" if out.resolve() == default_runs_dir().resolve() else str(out),
                  data_path=kernel_data_path(data_path, Path(notebook).parent), overrides=overrides,
                  run_tag=cell.tag,
                  progress=False, figures=False)  # the figure would be dropped by slim_notebook anyway
    executed = RunDir(cell.run_dir(out)).notebook
    start, retries = time.perf_counter(), 0
    env_threads = {k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")} if threads else {}
    os.environ.update(env_threads)  # inherited by the kernel this worker starts
    while True:
        try:
            _papermill(lambda: execute_notebook(notebook, str(executed), parameters=params, progress_bar=False,
                                                cwd=str(Path(notebook).parent), log_output=False,
                                                execution_timeout=CELL_TIMEOUT_S))
            break
        except pm.PapermillExecutionError as e:
            _drop_unreadable_notebook(executed)
            if STOPPING.is_set():
                return _interrupted(e, start)
            return {"status": "failed", "error": f"{e.ename}: {e.evalue}".splitlines()[0][:300],
                    "notebook": str(executed), "seconds": time.perf_counter() - start, "kernel_retries": retries}
        except Exception as e:  # kernel start races under load (papermill #239, #511): retry those
            if STOPPING.is_set():
                _drop_unreadable_notebook(executed)
                return _interrupted(e, start)
            if _is_kernel_start_failure(e) and retries < KERNEL_START_RETRIES:
                retries += 1
                time.sleep(2 * retries)
                continue
            _drop_unreadable_notebook(executed)
            return {"status": "failed", "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                    "seconds": time.perf_counter() - start, "kernel_retries": retries}
    slim_notebook(executed)
    try:
        summary = read_json(RunDir(cell.run_dir(out)).summary)
    except (OSError, RunDirError) as e:
        return {"status": "failed", "error": str(e)[:300], "seconds": time.perf_counter() - start}
    return {"status": "diverged" if summary.get("diverged") else "ok", "seconds": time.perf_counter() - start,
            "kernel_retries": retries, "train_wall_s": summary.get("wall_s"), "val_loss": summary.get("val_loss")}


def with_execution(cell: Cell, execution: str) -> Cell:
    return replace(cell, overrides=tuple(sorted({**dict(cell.overrides), "execution": execution}.items())))


def run_fleet(cells: list[Cell], out: Path, data_path: str | None, threads: int, echo=print) -> list[dict]:
    """The cells trained in this process as batched fleets (fleet.py), then their zero/few-shot suites where asked:
    one result record per cell. A cell with a checkpoint (a partial run of another mode) fails with what to do."""
    from ..core.scoring.fleet_lmeval import score_if_asked
    from ..core.training.fleet import train_fleet

    start = time.perf_counter()
    records = [{"cell": c.label(), "run_dir": str(c.run_dir(out))} for c in cells]
    partial = {i for i, c in enumerate(cells) if RunDir(c.run_dir(out)).checkpoint.is_file()}
    results: list[dict | None] = [None] * len(cells)
    for i in partial:
        results[i] = {**records[i], "status": "failed", "error": "a partial run (ckpt.pt): resume it without --fleet"}
    todo = [i for i in range(len(cells)) if i not in partial]
    cfgs = [cells[i].config().replace(torch_threads=threads) for i in todo]
    try:
        summaries = train_fleet(cfgs, [cells[i].run_dir(out) for i in todo], data_path, echo=echo,
                                out_dir=out) if todo else []
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


def _drop_unreadable_notebook(path: Path) -> None:
    """A notebook cut short (e.g. by a full disk) is not kept: an invalid .ipynb breaks every later reader."""
    import nbformat

    if path.is_file():
        try:
            nbformat.read(path, as_version=4)
        except Exception:  # any parse or validation failure: the file is not a notebook any more
            path.unlink(missing_ok=True)


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
