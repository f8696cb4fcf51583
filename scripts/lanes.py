"""Train a study's remaining runs in background lanes from a worktree at a fixed commit: one command at a session's start.

    python scripts/lanes.py plan ladder-data --only preset=ladder-data-3
    python scripts/lanes.py start ladder-data --worktree /work/wt-ladder17 --only preset=ladder-data-3 \\
        --lanes 2 -- --data-path ../data/open-english.txt

A ladder's runs train on this project's two cores for hours each, one single-thread lane per core, in a worktree at
the commit that registered them (see docs/GUIDE.md); the runs land in this checkout with `carry_runs.py land`. The
remaining runs are the study's registered cells (every `--only` text in the run directory's path, as the sweep reads
it) that this checkout has not finished. A fresh worktree lacks the runs landed since its commit, so a plain sweep
there would train those again: each lane instead runs `sweep STUDY --only <one cell>` for each cell of its queue in
turn (the cells with the most steps left dealt first, each to the lane with the least work so far; in a lane those
resuming from a checkpoint go first, furthest on first; a cell already finished in the worktree waits to be landed,
one whose run a process is training is left to it). A lane's kernels import the worktree's own package (PYTHONPATH=the worktree, for
commits older than the sweep that does this itself). Arguments after `--` go to every sweep (`--data-path` is read in
the worktree). `--dry-run` prints each lane's command and starts nothing. Logs: WORKTREE.lanes/lane-K.log.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from embnorm_lib.core.records.rundir import RunDir  # noqa: E402
from embnorm_lib.studies import STUDIES  # noqa: E402


def cell_path(study: str, cell) -> str:
    """A cell as the sweep's `--only` reads it: `<arm>/seed<k>/` under runs/<study>/."""
    return cell.run_dir(Path("runs")).relative_to(Path("runs") / study).as_posix() + "/"


def cell_paths(study: str, only: list[str]) -> list[str]:
    """The study's registered cells as the sweep's `--only` reads them (`<arm>/seed<k>/` under runs/<study>/)."""
    if study not in STUDIES:
        raise SystemExit(f"unknown study {study!r}; allowed: {', '.join(STUDIES)}")
    if any(not text.strip() for text in only):
        raise SystemExit("invalid --only ''; allowed: text of a run directory (an empty one would match every cell)")
    paths = [cell_path(study, cell) for cell in STUDIES[study].cells()]
    chosen = [p for p in paths if all(text in p for text in only)]
    if not chosen:
        raise SystemExit(f"no cell of {study} contains {' and '.join(map(repr, only))}; allowed: text of a run "
                         f"directory, e.g. {paths[0]!r}")
    return chosen


def is_training(run: RunDir) -> bool:
    """A process holds the run's lock (it trains or writes it); looking leaves no lock file behind."""
    return run.training_lock().held_elsewhere()


def trained_to(run: RunDir) -> int:
    """How far a run with a checkpoint has trained: its metrics log's last step (0 without a checkpoint). The
    checkpoint holds that step or, after an interruption, an earlier one, which the run resumes from."""
    if not run.checkpoint.is_file() or not run.metrics.is_file():
        return 0
    with open(run.metrics, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
        lines = f.read().splitlines()
    try:
        return int(json.loads(lines[-1])["step"])
    except (IndexError, ValueError, KeyError, TypeError):
        return 0


def check_worktree(worktree: Path, repo: Path) -> Path:
    """The worktree, resolved: another checkout of this repository, at a commit of this checkout's history."""
    worktree = worktree.resolve()
    head = subprocess.run(["git", "-C", str(worktree), "rev-parse", "HEAD"], capture_output=True, text=True)
    known = head.returncode == 0 and subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", head.stdout.strip(), "HEAD"],
        capture_output=True).returncode == 0
    if worktree == repo.resolve() or not known or not (worktree / "embnorm_lib").is_dir():
        raise SystemExit(f"invalid --worktree {worktree}; allowed: another checkout of this repository at a commit of "
                         f"its history (git worktree add --detach DIR COMMIT)")
    return worktree


def plan(study: str, only: list[str], repo: Path, worktree: Path | None = None) -> tuple[list[str], list[str], list[str]]:
    """(cells to train, cells finished in the worktree that this checkout still lacks: land them first, cells a
    process trains in the worktree now). Cells to train that resume from a checkpoint come first, the furthest on
    first, so a session's first hours finish runs instead of starting new ones."""
    todo, to_land, training = [], [], []
    for rel in cell_paths(study, only):
        if RunDir(repo / "runs" / study / rel).summary.is_file():
            continue
        there = RunDir(worktree / "runs" / study / rel) if worktree else None
        if there is not None and there.summary.is_file():
            to_land.append(rel)
        elif there is not None and is_training(there):
            training.append(rel)
        else:
            todo.append(rel)
    if worktree is not None:
        todo.sort(key=lambda rel: -trained_to(RunDir(worktree / "runs" / study / rel)))
    return todo, to_land, training


def steps_left(study: str, cells: list[str], worktree: Path) -> dict[str, int]:
    """Each cell's iterations still to train: its registered max_iters less what its checkpoint holds."""
    iters = {cell_path(study, cell): cell.config().max_iters for cell in STUDIES[study].cells()}
    return {rel: max(0, iters[rel] - trained_to(RunDir(worktree / "runs" / study / rel))) for rel in cells}


def deal(cells: list[str], lanes: int, left: dict[str, int] | None = None) -> list[list[str]]:
    """The lanes' queues. With the steps each cell has left, the longest first onto the lane with the least work so
    far (the lanes then end about together: a new run beside two nearly finished ones gets a lane of its own instead
    of waiting behind one); without, round-robin. Each queue keeps the cells' order (resuming ones first)."""
    if left is None:
        return [cells[k::lanes] for k in range(lanes)]
    queues, load = [[] for _ in range(lanes)], [0] * lanes
    for rel in sorted(cells, key=lambda rel: -left[rel]):  # stable: equal work keeps the cells' order
        k = load.index(min(load))
        queues[k].append(rel)
        load[k] += left[rel]
    return [sorted(queue, key=cells.index) for queue in queues]


def lane_commands(study: str, cells: list[str], lanes: int, sweep_args: list[str],
                  left: dict[str, int] | None = None) -> list[str]:
    """One shell command per lane: its cells' sweeps in turn, each on one worker and one thread, stopping at a
    failed one."""
    queues = deal(cells, lanes, left)
    return [" && ".join(f"python -m embnorm_lib sweep {shlex.quote(study)} --workers 1 --threads 1 --only "
                        f"{shlex.quote(rel)}" + "".join(" " + shlex.quote(a) for a in sweep_args) for rel in queue)
            for queue in queues if queue]


def start(study: str, only: list[str], worktree: Path, lanes: int, sweep_args: list[str], dry_run: bool,
          repo: Path = REPO, echo=print) -> list[str]:
    worktree = check_worktree(worktree, repo)
    check_lanes(lanes)
    todo, to_land, training = plan(study, only, repo, worktree)
    for rel in to_land:
        echo(f"finished in the worktree, not here: {rel} (python scripts/carry_runs.py land {worktree} --study {study})")
    for rel in training:
        echo(f"training in the worktree now, left to its process: {rel}")
    commands = lane_commands(study, todo, lanes, sweep_args, steps_left(study, todo, worktree))
    logs = worktree.with_name(worktree.name + ".lanes")
    for k, command in enumerate(commands):
        echo(f"lane {k}: {command.count(' && ') + 1} run(s), log {logs / f'lane-{k}.log'}")
        echo(f"  cd {shlex.quote(str(worktree))} && export PYTHONPATH={shlex.quote(str(worktree))} && {command}")
        if dry_run:
            continue
        logs.mkdir(exist_ok=True)
        with open(logs / f"lane-{k}.log", "ab") as log:
            subprocess.Popen(["bash", "-c", command], cwd=worktree, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "PYTHONPATH": str(worktree)})
    if not commands:
        echo(f"nothing to train: every cell of {study} with {' and '.join(map(repr, only))} is finished or training")
    elif not dry_run:
        echo("before the session ends: python scripts/carry_runs.py save /work/carry (in the worktree), and land "
             "each finished run here with python scripts/carry_runs.py land")
    return commands


def check_lanes(lanes: int) -> None:
    cores = os.cpu_count() or 1
    if not 1 <= lanes <= cores:
        raise SystemExit(f"invalid --lanes {lanes}; allowed: 1 to {cores} (one single-thread lane per core)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sweep_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("plan", "start"))
    p.add_argument("study")
    p.add_argument("--only", action="append", default=[], metavar="TEXT")
    p.add_argument("--worktree", type=Path, default=None)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    check_lanes(args.lanes)
    if args.action == "plan":
        worktree = check_worktree(args.worktree, REPO) if args.worktree else None
        todo, to_land, training = plan(args.study, args.only, REPO, worktree)
        steps = {rel: trained_to(RunDir(worktree / "runs" / args.study / rel)) if worktree else 0 for rel in todo}
        print("\n".join([*(rel + (f" (trained to step {steps[rel]}; resumes from its checkpoint)" if steps[rel] else "") for rel in todo), *(f"{rel} (finished in the worktree: land it)" for rel in to_land),
                         *(f"{rel} (training in the worktree now)" for rel in training)]))
        return 0
    if args.worktree is None:
        raise SystemExit("start needs --worktree DIR; allowed: a git worktree of this repository at the commit that "
                         "trains the runs")
    start(args.study, args.only, args.worktree, args.lanes, sweep_args, args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
