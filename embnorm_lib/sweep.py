"""Run a study: execute notebooks/02_train.ipynb with papermill once per cell of a grid.

    python -m embnorm_lib.sweep seeds-final                      # a named study (see STUDIES)
    python -m embnorm_lib.sweep mystudy --preset tiny --variants none,ln --seeds 0-2 \\
        --set max_iters=50 --axis lr=1e-3,3e-3                   # an ad-hoc grid
    python -m embnorm_lib.sweep seeds-final --index-only         # rebuild runs/<study>/runs.csv

Resumable and idempotent: finished cells (summary.json with the same config) are skipped, partial
ones resume from their checkpoint, and a lock per run directory keeps two sweeps from running the
same cell. A cell whose training identity (and thread count) matches a finished run of any study
under the same runs directory is copied from it, with reused_from.json naming the source, instead
of being trained again (--no-reuse turns that off). A failing cell is recorded (its executed
notebook keeps the error) and the others go on; the exit code is 1 if any cell failed. A diverged
run is a result, not a failure."""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from .config import RunConfig
from .io import default_runs_dir, repo_root, write_json
from .notebook import config_from_parameters
from .train import RunDir, run_dir_for
from .variants import canonical_variant

TRAIN_NOTEBOOK = "notebooks/02_train.ipynb"
KERNEL_START_RETRIES = 3
CELL_TIMEOUT_S = 6 * 3600  # a notebook cell running longer than this fails the run instead of hanging the sweep


@dataclass(frozen=True)
class Cell:
    """One run of a study: a preset, a variant, a seed, and any further config overrides."""

    study: str
    preset: str
    variant: str
    seed: int
    overrides: tuple[tuple[str, Any], ...] = ()
    tag_axes: tuple[str, ...] = ()  # which overrides name the run directory

    @property
    def tag(self) -> str:
        values = dict(self.overrides)
        return "".join(f"_{k}={values[k] if k != 'preset' else self.preset}" for k in self.tag_axes)

    def config(self) -> RunConfig:
        return config_from_parameters(self.preset, self.variant, self.seed, overrides=dict(self.overrides))

    def run_dir(self, out_dir: Path) -> Path:
        return run_dir_for(self.study, self.variant, self.seed, out_dir, tag=self.tag)

    def label(self) -> str:
        return f"{self.variant}{self.tag} seed{self.seed}"


def grid(study: str, preset: str, variants: Iterable[str], seeds: Iterable[int],
         fixed: dict[str, Any] | None = None, axes: dict[str, list] | None = None,
         tag_preset: bool = False) -> list[Cell]:
    """variants x seeds x every combination of `axes`; `fixed` overrides apply to all cells."""
    axes = axes or {}
    names = list(axes)
    cells = []
    for values in itertools.product(*(axes[n] for n in names)) if names else [()]:
        overrides = {**(fixed or {}), **dict(zip(names, values))}
        tag_axes = (("preset",) if tag_preset else ()) + tuple(names)
        for variant in variants:
            for seed in seeds:
                cells.append(Cell(study, preset, canonical_variant(variant), int(seed),
                                  tuple(sorted(overrides.items())), tag_axes))
    return cells


VARIANTS_ABC = ("none", "ln", "rms")
VARIANTS_ABCD = ("none", "ln", "rms", "scaled")

STUDIES: dict[str, callable] = {
    # seed study Table 1 protocol: 3 variants x 3 seeds x 150 iterations
    "seeds-prelim": lambda: grid("seeds-prelim", "seeds-prelim", VARIANTS_ABC, range(3)),
    # the seed study's final plan: 5 seeds x 300 iterations
    "seeds-final": lambda: grid("seeds-final", "seeds-final", VARIANTS_ABC, range(5)),
    # 10 seeds of the short regime next to 5 seeds of a converged (nanoGPT CPU recipe) regime
    "main": lambda: (grid("main", "seeds-final", VARIANTS_ABC, range(10), tag_preset=True)
                     + grid("main", "nanogpt-cpu", VARIANTS_ABC, range(5), tag_preset=True)),
    # -- stability (docs/PROTOCOL.md "Stability"; budgets chosen to fit about an hour here) ----------
    # LR sensitivity (Wortsman et al. 2023): 7 learning rates, 1e-4 ... 3e-2, on the nanoGPT CPU model
    "stability-lr": lambda: grid("stability-lr", "nanogpt-cpu", VARIANTS_ABC, range(3), fixed={"max_iters": 300},
                                 axes={"lr": [1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2]}),
    # embedding-init scale: GPT-2's N(0, 0.02) vs PyTorch's N(0, 1), on the seed study's model and budget
    "stability-init": lambda: grid("stability-init", "seeds-prelim", VARIANTS_ABCD, range(3),
                                   axes={"emb_init_std": [0.02, 1.0]}),
    # stress: 16 layers, lr 1e-2, no warmup
    "stability-stress": lambda: grid("stability-stress", "stress-deep", VARIANTS_ABCD, range(3)),
    # the same comparison at 150, 300 and 2000 (converged) iterations of the nanoGPT CPU model
    "stability-budget": lambda: grid("stability-budget", "nanogpt-cpu", VARIANTS_ABC, range(3),
                                     axes={"max_iters": [150, 300, 2000]}),
    # smoke study for the README and CI: a tiny model, a few iterations
    "smoke": lambda: grid("smoke", "tiny", VARIANTS_ABC, range(2), fixed={"max_iters": 20}),
}


def study_cells(name: str) -> list[Cell]:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; allowed: {', '.join(STUDIES)} (or give --preset for a grid)")
    return STUDIES[name]()


# -- one cell -------------------------------------------------------------------------------------

def cell_status(cell: Cell, out_dir: Path) -> str:
    """'done' (finished with this config), 'partial' (checkpoint to resume), 'new', or 'conflict'."""
    run = RunDir(cell.run_dir(out_dir))
    if run.config.is_file():
        if RunConfig.load(run.config).training_identity() != cell.config().training_identity():
            return "conflict"
        if run.summary.is_file():
            return "done"
        if run.checkpoint.is_file():
            return "partial"
    return "new"


class RunLock:
    """An exclusive, non-blocking flock on <run_dir>/.lock; released when the process dies."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        self.fd = None

    def acquire(self) -> bool:
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            return False

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _is_kernel_start_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("Kernel didn't respond", "Address already in use", "ZMQError",
                                   "Kernel died before replying"))


def execute_cell(cell: Cell, out_dir: str, data_path: str | None, threads: int, notebook: str) -> dict:
    """Run one cell through papermill in this (worker) process. Returns a result record."""
    import papermill as pm

    out = Path(out_dir)
    run_dir = cell.run_dir(out)
    lock = RunLock(run_dir)
    if not lock.acquire():
        return {"cell": cell.label(), "status": "locked", "run_dir": str(run_dir)}
    try:
        overrides = dict(cell.overrides)
        if threads:
            overrides["torch_threads"] = threads
        params = dict(variant=cell.variant, seed=cell.seed, preset=cell.preset, max_iters=0, study=cell.study,
                      out_dir=str(out), data_path=data_path or "", overrides=overrides, run_tag=cell.tag,
                      progress=False)
        executed = run_dir / "02_train.ipynb"
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
                return {"cell": cell.label(), "status": "failed", "run_dir": str(run_dir),
                        "error": f"{e.ename}: {e.evalue}".splitlines()[0][:300], "notebook": str(executed),
                        "seconds": time.perf_counter() - start, "kernel_retries": retries}
            except Exception as e:  # kernel start races under load (papermill #239, #511): retry those
                if _is_kernel_start_failure(e) and retries < KERNEL_START_RETRIES:
                    retries += 1
                    time.sleep(2 * retries)
                    continue
                return {"cell": cell.label(), "status": "failed", "run_dir": str(run_dir),
                        "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                        "seconds": time.perf_counter() - start, "kernel_retries": retries}
        summary = json.loads((run_dir / "summary.json").read_text())
        return {"cell": cell.label(), "status": "diverged" if summary.get("diverged") else "ok",
                "run_dir": str(run_dir), "seconds": time.perf_counter() - start, "kernel_retries": retries,
                "train_wall_s": summary.get("wall_s"), "val_loss": summary.get("val_loss")}
    finally:
        lock.release()


# -- reuse of identical runs ----------------------------------------------------------------------

REUSED_FROM = "reused_from.json"
NOT_COPIED = ("ckpt.pt", ".lock", "*.tmp")


def finished_runs_by_identity(out: Path) -> dict[str, Path]:
    """Every finished run under `out` (any study), keyed by its training identity and thread count."""
    found: dict[str, Path] = {}
    for summary in sorted(out.glob("*/*/*/summary.json")):
        try:
            cfg = RunConfig.load(summary.parent / "config.json")
        except (OSError, ValueError, TypeError):
            continue
        found.setdefault(_identity_key(cfg), summary.parent)
    return found


def _identity_key(cfg: RunConfig) -> str:
    # thread count is part of the key: results are bitwise equal only for the same torch thread count
    return json.dumps({**cfg.training_identity(), "torch_threads": cfg.torch_threads}, sort_keys=True)


def reuse_identical_run(cell: Cell, out: Path, threads: int, finished: dict[str, Path]) -> dict | None:
    """Copy a finished run of another study with the same training identity into this cell's run directory
    (its own files, not re-trained) and record where it came from. None if there is no such run."""
    cfg = cell.config()
    if threads:
        cfg = replace(cfg, torch_threads=threads)
    source = finished.get(_identity_key(cfg))
    target = cell.run_dir(out)
    if source is None or source.resolve() == target.resolve():
        return None
    if cfg.lm_eval and not (source / "lm_eval.json").is_file():
        return None
    lock = RunLock(target)
    if not lock.acquire():
        return None  # another sweep is on this cell
    try:
        if any(p.name != ".lock" for p in target.iterdir()):
            return None  # something of this cell is already there: leave it to training (resume or conflict)
        tmp = target.with_name(f".{target.name}.reuse.tmp")  # hidden: never indexed or committed
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(*NOT_COPIED))
        origin = source
        if (source / REUSED_FROM).is_file():  # a copy of a copy names the run that was trained
            origin = out / json.loads((source / REUSED_FROM).read_text())["run_dir"]
        write_json(tmp / REUSED_FROM, {"run_dir": str(origin.relative_to(out)),
                                       "reused_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                       "why": "same training identity and torch thread count: training again "
                                              "would reproduce these numbers bit for bit"})
        # summary.json marks a run finished, so it moves in last
        for path in sorted(tmp.iterdir(), key=lambda p: p.name == "summary.json"):
            os.replace(path, target / path.name)
        tmp.rmdir()
    finally:
        lock.release()
    summary = json.loads((target / "summary.json").read_text())
    return {"cell": cell.label(), "status": "reused", "run_dir": str(target), "reused_from": str(origin),
            "seconds": 0.0, "train_wall_s": 0.0, "val_loss": summary.get("val_loss")}


# -- the index ------------------------------------------------------------------------------------

def build_index(study: str, out_dir: str | Path | None = None):
    """runs/<study>/runs.csv: one row per finished run, every config field and summary scalar."""
    import pandas as pd

    root = Path(out_dir or default_runs_dir()) / study
    rows = []
    for summary_path in sorted(root.glob("**/summary.json")):
        run_dir = summary_path.parent
        cfg = json.loads((run_dir / "config.json").read_text())
        summary = json.loads(summary_path.read_text())
        row = {"run_dir": str(run_dir.relative_to(root)), "arm": run_dir.parent.name}
        reused = run_dir / REUSED_FROM
        row["reused_from"] = json.loads(reused.read_text())["run_dir"] if reused.is_file() else ""
        row.update({f"cfg.{k}": v for k, v in cfg.items()})
        row.update({k: v for k, v in summary.items() if not isinstance(v, (list, dict))})
        rows.append(row)
    table = pd.DataFrame(rows)
    if rows:
        table = table.sort_values(["arm", "seed"]).reset_index(drop=True)
        from .io import atomic_write_text

        atomic_write_text(root / "runs.csv", table.to_csv(index=False))
    return table


# -- the sweep ------------------------------------------------------------------------------------

@dataclass
class SweepReport:
    results: list[dict] = field(default_factory=list)
    skipped: int = 0

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.results if r["status"] == "failed"]


EXECUTORS = ("local", "submitit-local", "slurm")


def make_submitit_executor(kind: str, folder: Path, threads: int, slurm: dict | None = None):
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
              executor: str = "local", slurm: dict | None = None, reuse: bool = True) -> SweepReport:
    from tqdm import tqdm

    out = Path(out_dir or default_runs_dir()).resolve()
    notebook = str(Path(notebook or repo_root() / TRAIN_NOTEBOOK).resolve())
    workers, threads = resolve_parallelism(workers, threads)
    report = SweepReport()
    todo = []
    for cell in cells:
        status = cell_status(cell, out)
        if status == "done":
            report.skipped += 1
        else:
            todo.append(cell)
    if reuse and todo:
        finished, remaining = finished_runs_by_identity(out), []
        for cell in todo:
            result = reuse_identical_run(cell, out, threads, finished)
            if result is None:
                remaining.append(cell)
            else:
                report.results.append(result)
                echo(f"reused   {cell.label():28s} val_loss {result['val_loss']:.4f}  from {result['reused_from']}")
        todo = remaining
    if not todo:
        if report.results:
            echo(f"{len(report.results)} run(s) reused from identical finished runs; nothing else to execute")
            for study in sorted({c.study for c in cells}):
                build_index(study, out)
            _write_sweep_log(out, cells, report, 0.0, workers, threads)
        else:
            echo(f"all {len(cells)} runs already finished; nothing to execute")
        return report
    echo(f"{len(todo)} of {len(cells)} runs to execute ({report.skipped} already finished, "
         f"{len(report.results)} reused); "
         f"{workers} worker(s) x {threads} thread(s)")
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; allowed: {', '.join(EXECUTORS)}")
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=len(todo), unit="run", desc="sweep", file=sys.stderr, mininterval=2.0))
        if executor == "local":
            # spawned (not forked) workers: the parent has torch loaded and forking it is fragile
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers,
                                                           mp_context=multiprocessing.get_context("spawn")))
            futures = [pool.submit(execute_cell, c, str(out), data_path, threads, notebook) for c in todo]
            finished = (f.result() for f in as_completed(futures))
        else:
            engine = make_submitit_executor(executor, out / ".submitit", threads, slurm)
            with engine.batch():
                jobs = [engine.submit(execute_cell, c, str(out), data_path, threads, notebook) for c in todo]
            finished = (job.result() for job in jobs)
        for result in finished:
            report.results.append(result)
            bar.update(1)
            if result["status"] in ("ok", "diverged"):
                overhead = result["seconds"] - (result["train_wall_s"] or 0)
                loss = result["val_loss"]
                bar.write(f"{result['status']:8s} {result['cell']:28s} val_loss "
                          f"{'diverged' if loss is None else f'{loss:.4f}'}  {result['seconds']:6.1f} s "
                          f"({overhead:4.1f} s outside the train loop: kernel, imports, calibration, plots)", file=sys.stderr)
            else:
                bar.write(f"{result['status']:8s} {result['cell']:28s} {result.get('error', '')}", file=sys.stderr)
    report_wall = time.perf_counter() - t0
    for study in sorted({c.study for c in cells}):
        build_index(study, out)
    _write_sweep_log(out, cells, report, report_wall, workers, threads)
    if report.failures:
        echo(f"{len(report.failures)} run(s) failed:")
        for r in report.failures:
            echo(f"  {r['cell']:28s} {r.get('error', '')}  ({r['run_dir']})")
    echo(f"sweep wall time {report_wall:.1f} s for {len(todo)} runs")
    return report


def _write_sweep_log(out: Path, cells: list[Cell], report: SweepReport, wall: float, workers: int,
                     threads: int) -> None:
    from .io import git_commit

    for study in sorted({c.study for c in cells}):
        log_path = out / study / "sweeps.jsonl"
        previous = log_path.read_text() if log_path.is_file() else ""
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_commit": git_commit(), "wall_s": wall,
                 "workers": workers, "threads": threads, "executed": sum(r["status"] != "reused" for r in report.results),
                 "reused": sum(r["status"] == "reused" for r in report.results),
                 "skipped": report.skipped, "failed": len(report.failures),
                 "kernel_retries": sum(r.get("kernel_retries", 0) for r in report.results),
                 "results": report.results}
        from .io import atomic_write_text

        atomic_write_text(log_path, previous + json.dumps(entry, sort_keys=True) + "\n")


def resolve_parallelism(workers: int, threads: int) -> tuple[int, int]:
    """Default: one single-threaded worker per core (measured faster here than one 2-thread worker;
    see README, "Parallelism"). Given one of the two, the other fills the machine."""
    cores = os.cpu_count() or 1
    if not workers and not threads:
        threads = 1
    if not workers:
        workers = max(1, cores // threads)
    if not threads:
        threads = max(1, cores // workers)
    return workers, threads


# -- command line ---------------------------------------------------------------------------------

def _parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            seeds.extend(range(int(lo), int(hi) + 1))
        else:
            seeds.append(int(part))
    return seeds


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", help=f"a named study ({', '.join(STUDIES)}) or a new name with --preset")
    p.add_argument("--preset", help="build an ad-hoc grid on this preset instead of a named study")
    p.add_argument("--variants", default=",".join(VARIANTS_ABC))
    p.add_argument("--seeds", default="0-2", help="e.g. 0-4 or 0,3,7")
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
    p.add_argument("--list", action="store_true", help="print the cells and their status, run nothing")
    p.add_argument("--index-only", action="store_true", help="rebuild runs.csv from the run directories")
    args = p.parse_args(argv)
    out = Path(args.out_dir or default_runs_dir())
    if args.index_only:
        table = build_index(args.study, out)
        print(f"{len(table)} runs indexed in {out / args.study / 'runs.csv'}")
        return 0
    try:
        if args.preset:
            fixed = {k: _parse_value(v) for k, v in map(_split_assignment, args.set)}
            axes = {k: [_parse_value(x) for x in v.split(",")] for k, v in map(_split_assignment, args.axis)}
            cells = grid(args.study, args.preset, args.variants.split(","), _parse_seeds(args.seeds), fixed, axes)
        else:
            cells = study_cells(args.study)
        if args.lm_eval:
            cells = [replace(c, overrides=tuple(sorted({**dict(c.overrides), "lm_eval": True}.items())))
                     for c in cells]
        for c in cells:
            c.config()  # validate every cell before running any
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for c in cells:
            print(f"{cell_status(c, out):9s} {c.label():36s} {c.run_dir(out)}")
        return 0
    slurm = {"partition": args.partition, "time_min": args.time_min, "gpus": args.gpus, "parallel": args.workers or None}
    report = run_sweep(cells, out, args.data_path, args.workers, args.threads, executor=args.executor, slurm=slurm,
                       reuse=not args.no_reuse)
    return 1 if report.failures else 0


def _split_assignment(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ValueError(f"invalid assignment {text!r}; expected FIELD=VALUE")
    key, value = text.split("=", 1)
    return key.strip(), value


if __name__ == "__main__":
    sys.exit(main())
