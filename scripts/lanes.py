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

A session's machine does not outlive it, so a run still training at its end is lost. `--until HH:MM` (UTC, the next such time within 12 hours)
starts a cell only while its estimated time still ends by then (its steps left at the median seconds per step of
the runs of its study and preset landed here, or of its preset in any study, x RUN_MARGIN, plus START_S); a cell
that would not is skipped, and its lane goes on to the next. Name several studies, joined by commas
(`start prose-lr,prose --until 14:40`), to fill a session's last hour with the shorter cells of the second: each
lane takes its cells of the first study first. A preset with no landed run is timed by the FLOPs of its steps at the
speed of the landed preset nearest in FLOPs per token.

    python scripts/lanes.py start prose-lr,prose --worktree /work/wt-prose22 --until 14:40 -- \\
        --data-path data/open-prose.txt
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from embnorm_lib.core.records.rundir import RunDir  # noqa: E402
from embnorm_lib.studies import STUDIES  # noqa: E402

# a session's runs share its 2 cores with its tests and publishing: on 2026-12-07 two prose-gpt2-1 runs took 0.9-1.2 s
# a step beside the suite and check_reports, against 0.54 s for that preset's landed runs
RUN_MARGIN = 1.7
START_S = 180  # kernel start, corpus read and tokenizing, the final evaluation's scoring: not in a run's wall_s


def cell_path(study: str, cell) -> str:
    """A cell as the sweep's `--only` reads it: `<arm>/seed<k>/` under runs/<study>/."""
    return cell.run_dir(Path("runs")).relative_to(Path("runs") / study).as_posix() + "/"


def cell_paths(study: str, only: list[str]) -> list[str]:
    """The study's registered cells as the sweep's `--only` reads them (`<arm>/seed<k>/` under runs/<study>/)."""
    if study not in STUDIES:
        raise SystemExit(f"unknown study {study!r}; allowed: {', '.join(STUDIES)}")
    if any(not text.strip() for text in only):
        blank = next(text for text in only if not text.strip())
        raise SystemExit(f"invalid --only {blank!r}; allowed: text of a run directory (a blank one would match every "
                         f"cell)")
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
    first, so a session's first hours finish runs instead of starting new ones; then by preset and seed
    (`seed_major`)."""
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
    todo = seed_major(todo)
    if worktree is not None:
        todo.sort(key=lambda rel: -trained_to(RunDir(worktree / "runs" / study / rel)))
    return todo, to_land, training


def seed_major(cells: list[str]) -> list[str]:
    """Within each preset (kept in the registry's order), the lowest seed's cells first: a paired comparison needs
    every arm of a seed, so a session that stops part-way leaves whole seeds, not one arm's seeds."""
    def preset(rel: str) -> str:
        found = re.search(r"preset=([^_/]+)", rel)
        return found.group(1) if found else ""

    def seed(rel: str) -> int:
        found = re.search(r"/seed(\d+)/$", rel)
        return int(found.group(1)) if found else 0

    order = {p: i for i, p in enumerate(dict.fromkeys(map(preset, cells)))}
    return sorted(cells, key=lambda rel: (order[preset(rel)], seed(rel)))


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


def lane_commands(study: str, cells: list, lanes: int, sweep_args: list[str], left: dict | None = None,
                  latest_start: dict | None = None) -> list[str]:
    """One shell command per lane: its cells' sweeps in turn, each on one worker and one thread, stopping at a
    failed one. A cell is a run directory of `study` or a (study, run directory) pair; one with a latest start
    (epoch seconds) is skipped, not trained, when its lane reaches it later."""
    queues = deal(cells, lanes, left)
    return [" && ".join(_cell_command(study, cell, sweep_args, (latest_start or {}).get(cell)) for cell in queue)
            for queue in queues if queue]


def _cell_command(study: str, cell, sweep_args: list[str], latest: float | None) -> str:
    study, rel = cell if isinstance(cell, tuple) else (study, cell)
    sweep = (f"python -m embnorm_lib sweep {shlex.quote(study)} --workers 1 --threads 1 --only {shlex.quote(rel)}"
             + "".join(" " + shlex.quote(a) for a in sweep_args))
    if latest is None:
        return sweep
    skipped = shlex.quote(f"lanes: {study} {rel} skipped: it would not finish by --until")
    return f"if [ $(date +%s) -le {int(latest)} ]; then {sweep}; else echo {skipped}; fi"


def landed_speeds(repo: Path) -> tuple[dict[tuple[str, str], float], dict[str, tuple[float, float]]]:
    """From the runs landed in this checkout: (study, preset) -> median wall seconds per iteration, and preset ->
    (training FLOPs per token, median wall seconds per training FLOP)."""
    import pandas as pd

    per_step, by_preset = {}, {}
    for index in sorted((repo / "runs").glob("*/runs.csv")):
        runs = pd.read_csv(index)
        if not {"cfg.preset", "wall_s", "max_iters", "tokens", "flops_per_token"} <= set(runs.columns):
            continue
        runs = runs[(runs["wall_s"] > 0) & (runs["max_iters"] > 0) & (runs["tokens"] > 0)]
        for preset, group in runs.groupby("cfg.preset"):
            per_step[(index.parent.name, preset)] = float((group["wall_s"] / group["max_iters"]).median())
            by_preset.setdefault(preset, []).append(group)
    # a preset landed in several studies: the median over all its runs, not whichever study was read last
    per_flop = {}
    for preset, groups in by_preset.items():
        runs = pd.concat(groups)
        seconds = runs["wall_s"] / (runs["flops_per_token"] * runs["tokens"])
        per_flop[preset] = (float(runs["flops_per_token"].median()), float(seconds.median()))
    return per_step, per_flop


def estimates(cells: list[tuple[str, str]], left: dict, repo: Path) -> dict[tuple[str, str], float]:
    """Each (study, run directory)'s seconds still to train: at its study's landed runs of its preset, else its
    preset's in other studies; a preset never landed at the seconds per FLOP of the landed preset nearest in FLOPs
    per token (a larger model uses the cores better, so scaling a smaller one's rate up errs long)."""
    from embnorm_lib.core.nets.model import GPT

    per_step, per_flop = landed_speeds(repo)
    configs = {(study, cell_path(study, cell)): cell.config()
               for study in dict.fromkeys(s for s, _ in cells) for cell in STUDIES[study].cells()}
    found = {}
    for key in cells:
        cfg = configs[key]
        others = sorted(v for (_, p), v in per_step.items() if p == cfg.preset)
        rate = per_step.get((key[0], cfg.preset), others[len(others) // 2] if others else None)
        if rate is None and per_flop:
            flops = GPT(cfg).flops_per_token()
            _, seconds = min(per_flop.values(), key=lambda known: abs(math.log(known[0] / flops)))
            rate = seconds * flops * cfg.tokens_per_iter
        found[key] = START_S + (rate or 0.0) * left[key] * RUN_MARGIN
    return found


def parse_until(text: str, now: float | None = None) -> float:
    """HH:MM (UTC) as epoch seconds: the next such time within 12 hours, so a session that crosses midnight can
    name its end; refused if malformed or more than 12 hours behind or ahead (a time already past, mistyped)."""
    now = time.time() if now is None else now
    allowed = "allowed: HH:MM, a UTC time within the next 12 hours"
    try:
        if not re.fullmatch(r"\d\d:\d\d", text):  # strptime alone takes 7:5 and 23:5
            raise ValueError
        clock = datetime.strptime(text, "%H:%M").time()
    except ValueError:
        raise SystemExit(f"invalid --until {text!r}; {allowed}") from None
    day = datetime.fromtimestamp(now, timezone.utc).date()
    until = datetime.combine(day, clock, timezone.utc).timestamp()
    if until <= now:
        until += 24 * 3600  # tomorrow's
    if until - now > 12 * 3600:
        raise SystemExit(f"invalid --until {text!r}: already past or more than 12 hours ahead (now "
                         f"{datetime.fromtimestamp(now, timezone.utc):%H:%M} UTC); {allowed}")
    return until


def start(study: str, only: list[str], worktree: Path, lanes: int, sweep_args: list[str], dry_run: bool,
          repo: Path = REPO, echo=print, until: float | None = None) -> list[str]:
    """`study`: one study, or several joined by commas (each lane takes its cells of the first study first)."""
    worktree = check_worktree(worktree, repo)
    check_lanes(lanes)
    check_data_path(worktree, sweep_args)
    names = study.split(",")
    if len(set(names)) < len(names):
        raise SystemExit(f"invalid study list {study!r}: a study named twice; allowed: each study once")
    cells, left = [], {}
    for name in names:
        todo, to_land, training = plan(name, only, repo, worktree)
        for rel in to_land:
            echo(f"finished in the worktree, not here: {rel} (python scripts/carry_runs.py land {worktree} --study "
                 f"{name})")
        for rel in training:
            echo(f"training in the worktree now, left to its process: {rel}")
        left.update({(name, rel): n for rel, n in steps_left(name, todo, worktree).items()})
        cells += [(name, rel) for rel in todo]
    latest = None
    if until is not None:
        latest = {key: until - seconds for key, seconds in estimates(cells, left, repo).items()}
        if latest and max(latest.values()) < time.time():
            shortest = (until - max(latest.values())) / 60
            echo(f"nothing started: no cell can finish by --until {datetime.fromtimestamp(until, timezone.utc):%H:%M}"
                 f" UTC (the shortest is estimated at {shortest:.0f} min); allowed: a later --until")
            return []
    if len(names) == 1:  # one study: its cells as plain run directories, as ever
        cells, left = [rel for _, rel in cells], {rel: n for (_, rel), n in left.items()}
        latest = latest and {rel: t for (_, rel), t in latest.items()}
    commands = lane_commands(names[0], cells, lanes, sweep_args, left, latest)
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


def check_data_path(worktree: Path, sweep_args: list[str]) -> None:
    """A sweep's --data-path is read in the worktree: a missing one would fail in every lane's log, one by one."""
    for k, arg in enumerate(sweep_args):
        if arg == "--data-path" and k + 1 < len(sweep_args):
            path = sweep_args[k + 1]
        elif arg.startswith("--data-path="):
            path = arg.split("=", 1)[1]
        else:
            continue
        if not (worktree / path).expanduser().exists():
            raise SystemExit(f"invalid --data-path {path!r}: not found in the worktree {worktree}; allowed: a corpus "
                             f"file or shard folder there (relative paths are read from the worktree)")


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
    p.add_argument("study", help="a study, or several joined by commas (start: the first study's cells first)")
    p.add_argument("--only", action="append", default=[], metavar="TEXT")
    p.add_argument("--worktree", type=Path, default=None)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--until", metavar="HH:MM", default=None, help="start: no cell that would end after this UTC time")
    args = p.parse_args(argv)
    check_lanes(args.lanes)
    if args.action == "plan" and args.until is not None:
        raise SystemExit(f"--until {args.until!r} is read by start only; allowed: plan without it")
    if args.action == "plan" and "," in args.study:
        raise SystemExit(f"invalid study {args.study!r} for plan; allowed: one study (start takes several)")
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
    until = parse_until(args.until) if args.until is not None else None
    start(args.study, args.only, args.worktree, args.lanes, sweep_args, args.dry_run, until=until)
    return 0


if __name__ == "__main__":
    sys.exit(main())
