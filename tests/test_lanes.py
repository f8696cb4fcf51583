"""scripts/lanes.py: a study's remaining runs, dealt to background lanes in a worktree, each cell trained once."""
from __future__ import annotations

import importlib.util
import shlex

import pytest
from conftest import REPO

spec = importlib.util.spec_from_file_location("lanes", REPO / "scripts" / "lanes.py")
lanes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lanes)

STUDY, ONLY = "ladder-data", ["preset=ladder-data-0"]


def _finish(root, rel):
    run = root / "runs" / STUDY / rel
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")


def test_plan_leaves_out_what_is_finished_here_waits_to_land_or_is_training(tmp_path):
    repo, worktree = tmp_path / "main", tmp_path / "wt"
    cells = lanes.seed_major(lanes.cell_paths(STUDY, ONLY))  # the order plan keeps
    assert len(cells) == len(set(cells)) >= 6 and all(c.endswith("/") and "ladder-data-0/" in c for c in cells)
    _finish(repo, cells[0])  # landed
    _finish(worktree, cells[1])  # finished in the worktree, not landed
    training = lanes.RunDir(worktree / "runs" / STUDY / cells[2])
    training.root.mkdir(parents=True)
    lock = training.training_lock()
    assert lock.acquire()
    try:
        todo, to_land, training_now = lanes.plan(STUDY, ONLY, repo, worktree)
    finally:
        lock.release()
    assert to_land == [cells[1]] and training_now == [cells[2]]
    assert todo == cells[3:]
    untouched = lanes.RunDir(worktree / "runs" / STUDY / cells[3])
    assert not untouched.root.exists()  # looking leaves nothing behind
    todo, _, _ = lanes.plan(STUDY, ONLY, repo, worktree)  # nobody trains cells[2] now
    assert todo == cells[2:]
    assert lanes.plan(STUDY, ONLY, repo)[0] == cells[1:]  # without a worktree: all this checkout lacks


def test_each_cell_goes_to_one_lane_on_one_thread_with_the_sweep_arguments():
    cells = lanes.cell_paths(STUDY, ONLY)
    commands = lanes.lane_commands(STUDY, cells, 2, ["--data-path", "../data/open english.txt"])
    assert len(commands) == 2
    onlys = [part.split("--only ")[1].split(" ")[0] for c in commands for part in c.split(" && ")]
    assert sorted(onlys) == sorted(shlex.quote(c) for c in cells)
    for command in commands:
        for part in command.split(" && "):
            words = shlex.split(part)
            assert words[:5] == ["python", "-m", "embnorm_lib", "sweep", STUDY]
            assert words[5:9] == ["--workers", "1", "--threads", "1"]
            assert words[-2:] == ["--data-path", "../data/open english.txt"]
    assert lanes.lane_commands(STUDY, cells[:1], 2, []) == [lanes.lane_commands(STUDY, cells[:1], 1, [])[0]]


def _git(*args):
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *map(str, args)],
                          check=True, capture_output=True)


def test_start_dry_run_starts_nothing_and_bad_input_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(lanes.os, "cpu_count", lambda: 2)
    repo, worktree = tmp_path / "main", tmp_path / "wt"
    repo.mkdir()
    _git("-C", repo, "init", "-q")
    _git("-C", repo, "commit", "-q", "--allow-empty", "-m", "registered")
    _git("clone", "-q", repo, worktree)  # a checkout of the same history
    (worktree / "embnorm_lib").mkdir()
    lines = []
    commands = lanes.start(STUDY, ONLY, worktree, 2, [], dry_run=True, repo=repo, echo=lines.append)
    assert len(commands) == 2 and lines[0].startswith("lane 0: ")
    assert f"export PYTHONPATH={worktree}" in lines[1]
    assert not (tmp_path / "wt.lanes").exists() and not (worktree / "runs").exists()
    with pytest.raises(SystemExit, match="invalid --worktree .*; allowed: another checkout"):
        lanes.start(STUDY, ONLY, repo, 2, [], dry_run=True, repo=repo)
    copy = tmp_path / "copy"  # a folder with the package but no checkout of this history
    (copy / "embnorm_lib").mkdir(parents=True)
    for bad in (copy, tmp_path / "missing"):
        with pytest.raises(SystemExit, match="invalid --worktree .*; allowed: another checkout of this repository at"):
            lanes.start(STUDY, ONLY, bad, 2, [], dry_run=True, repo=repo)
    for bad in (0, 3):
        with pytest.raises(SystemExit, match=f"invalid --lanes {bad}; allowed: 1 to 2 "):
            lanes.start(STUDY, ONLY, worktree, bad, [], dry_run=True, repo=repo)
    for blank in ("", " "):
        with pytest.raises(SystemExit, match=f"invalid --only '{blank}'; allowed: text of a run directory"):
            lanes.cell_paths(STUDY, [blank])
    for args in (["--data-path", "data/missing.txt"], ["--data-path=data/missing.txt"]):
        with pytest.raises(SystemExit, match="invalid --data-path 'data/missing.txt': not found in the worktree"):
            lanes.start(STUDY, ONLY, worktree, 2, args, dry_run=True, repo=repo)
    (worktree / "data").mkdir()
    (worktree / "data" / "corpus.txt").write_text("x")
    assert lanes.start(STUDY, ONLY, worktree, 2, ["--data-path", "data/corpus.txt"], dry_run=True, repo=repo,
                       echo=lines.append)
    with pytest.raises(SystemExit, match="a study named twice; allowed: each study once"):
        lanes.start(f"{STUDY},{STUDY}", ONLY, worktree, 2, [], dry_run=True, repo=repo)
    with pytest.raises(SystemExit, match="--until '14:00' is read by start only"):
        lanes.main(["plan", STUDY, "--until", "14:00"])
    with pytest.raises(SystemExit, match="unknown study 'nope'; allowed: "):
        lanes.cell_paths("nope", [])
    with pytest.raises(SystemExit, match="no cell of ladder-data contains 'seed99/'; allowed: text of a run"):
        lanes.cell_paths(STUDY, ["seed99/"])


def test_cells_that_resume_from_a_checkpoint_are_dealt_first_furthest_on_first(tmp_path):
    repo, worktree = tmp_path / "main", tmp_path / "wt"
    cells = lanes.seed_major(lanes.cell_paths(STUDY, ONLY))
    for rel, step in ((cells[4], 1125), (cells[2], 7875), (cells[5], None)):
        run = lanes.RunDir(worktree / "runs" / STUDY / rel)
        run.root.mkdir(parents=True)
        run.metrics.write_text("".join(f'{{"step": {s}, "train_loss": 1.0}}\n' for s in (0, step or 0)))
        if step is not None:  # a metrics log without a checkpoint resumes from nothing
            run.checkpoint.write_bytes(b"ckpt")
    todo, _, _ = lanes.plan(STUDY, ONLY, repo, worktree)
    assert todo[:2] == [cells[2], cells[4]]
    assert todo[2:] == [c for c in cells if c not in (cells[2], cells[4])]  # the rest keep their order
    assert lanes.trained_to(lanes.RunDir(worktree / "runs" / STUDY / cells[5])) == 0
    assert [q.split("--only ")[1].split(" ")[0] for q in lanes.lane_commands(STUDY, todo, 2, [])] == [cells[2], cells[4]]


def test_the_most_work_left_goes_first_to_the_least_loaded_lane(tmp_path):
    """Two runs near their end and one new: the new one gets a lane of its own instead of waiting behind a resumed
    one (round-robin would put it after the first), so both lanes end about together."""
    worktree = tmp_path / "wt"
    cells = lanes.cell_paths(STUDY, ["preset=ladder-data-3", "seed8"]) + lanes.cell_paths(STUDY, [
        "preset=ladder-data-3", "rms", "seed7"])
    ln8, none8, rms8, rms7 = (next(c for c in cells if c.startswith(arm) and c.endswith(seed))
                              for arm, seed in (("ln", "seed8/"), ("none", "seed8/"), ("rms", "seed8/"),
                                                ("rms", "seed7/")))
    for rel, step in ((ln8, 7875), (rms7, 6750)):
        run = lanes.RunDir(worktree / "runs" / STUDY / rel)
        run.root.mkdir(parents=True)
        run.metrics.write_text(f'{{"step": {step}, "train_loss": 1.0}}\n')
        run.checkpoint.write_bytes(b"ckpt")
    todo = [ln8, rms7, rms8]  # as plan orders them: resuming first, furthest on first
    left = lanes.steps_left(STUDY, todo, worktree)
    assert left == {ln8: 9000 - 7875, rms7: 9000 - 6750, rms8: 9000}
    assert lanes.deal(todo, 2, left) == [[rms8], [ln8, rms7]]
    assert lanes.deal(todo, 2) == [[ln8, rms8], [rms7]]  # round-robin, without the steps
    assert lanes.deal([ln8, none8, rms8], 2, dict.fromkeys([ln8, none8, rms8], 9000)) == [[ln8, rms8], [none8]]
    commands = lanes.lane_commands(STUDY, todo, 2, [], left)
    assert [[part.split("--only ")[1].split(" ")[0] for part in c.split(" && ")] for c in commands] == [[rms8],
                                                                                                       [ln8, rms7]]


def test_until_skips_a_cell_that_would_end_too_late_and_its_lane_goes_on(tmp_path):
    """--until: a cell whose latest start has passed is skipped (a line in the log, exit 0) and the lane goes on to
    its next cell; one that still fits runs (here a stand-in `python` on PATH records what it was asked)."""
    import subprocess
    import time

    cells = lanes.cell_paths(STUDY, ONLY)[:3]
    now = time.time()
    latest = {cells[0]: now - 60, cells[1]: now + 3600}  # cells[2]: not timed, always runs
    (command,) = lanes.lane_commands(STUDY, cells, 1, [], latest_start=latest)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "ran.txt"}\n')
    (stub / "python").chmod(0o755)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                          env={"PATH": f"{stub}:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"lanes: {STUDY} {cells[0]} skipped: it would not finish by --until"
    ran = (tmp_path / "ran.txt").read_text().splitlines()
    assert [line.split("--only ")[1].split(" ")[0] for line in ran] == cells[1:]


def test_until_is_the_next_such_utc_time_within_12_hours():
    from datetime import datetime, timezone

    noon = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc).timestamp()
    assert lanes.parse_until("14:40", now=noon) == noon + 2 * 3600 + 40 * 60
    late = datetime(2026, 12, 7, 22, 48, tzinfo=timezone.utc).timestamp()
    assert lanes.parse_until("00:50", now=late) == late + 2 * 3600 + 2 * 60  # a session that crosses midnight
    for past in ("11:59", "00:01", "12:00"):  # behind now (or 24 h ahead): a mistyped time, never tomorrow's
        with pytest.raises(SystemExit, match=f"invalid --until '{past}': already past or more than 12 hours ahead "
                                             "\\(now 12:00 UTC\\); allowed: HH:MM"):
            lanes.parse_until(past, now=noon)
    for bad in ("2pm", "25:00", "", "7:5", "23:5", " 23:00", "23:00:00"):
        with pytest.raises(SystemExit, match=f"invalid --until '{bad}'; allowed: HH:MM, a UTC time within the next 12"):
            lanes.parse_until(bad, now=noon)


def test_several_studies_fill_each_lane_first_study_first_each_cell_timed_by_its_landed_runs(tmp_path, monkeypatch):
    """`start A,B --until`: every lane trains its cells of A before those of B; each cell's latest start is the
    deadline less its estimate: its own study's landed speed for its preset, else the FLOP-scaled speed of the
    nearest landed preset."""
    import pandas as pd

    monkeypatch.setattr(lanes.os, "cpu_count", lambda: 2)
    repo, worktree = tmp_path / "main", tmp_path / "wt"
    repo.mkdir()
    _git("-C", repo, "init", "-q")
    _git("-C", repo, "commit", "-q", "--allow-empty", "-m", "registered")
    _git("clone", "-q", repo, worktree)
    (worktree / "embnorm_lib").mkdir()
    # ladder-data-0 landed at 0.5 s a step; ladder-data-lr's runs of ladder-data-1 never landed
    landed = repo / "runs" / STUDY
    landed.mkdir(parents=True)
    pd.DataFrame({"cfg.preset": ["ladder-data-0"] * 2, "wall_s": [240.0, 260.0], "max_iters": [500, 500],
                  "tokens": [10**6] * 2, "flops_per_token": [8 * 10**5] * 2}).to_csv(landed / "runs.csv", index=False)
    lines, until = [], 10**10
    first, second = f"{STUDY}", "ladder-data-lr"
    commands = lanes.start(f"{first},{second}", ["none_"], worktree, 2, [], dry_run=True, repo=repo,
                           echo=lines.append, until=until)
    assert len(commands) == 2
    seen = set()
    for command in commands:
        studies = [shlex.split(part.split("; then ")[1])[4] for part in command.split(" && ")]
        assert studies == sorted(studies, key=[first, second].index)  # the first study's cells first
        seen.update(studies)
    assert seen == {first, second}
    estimates = lanes.estimates([(first, c) for c in lanes.cell_paths(first, ["preset=ladder-data-0", "seed0/"])],
                                {(first, c): 480 for c in lanes.cell_paths(first, ["preset=ladder-data-0", "seed0/"])},
                                repo)
    assert set(estimates.values()) == {lanes.START_S + 0.5 * 480 * lanes.RUN_MARGIN}
    bigger = lanes.cell_paths(second, ["preset=ladder-data-1"])[:1]
    (scaled,) = lanes.estimates([(second, bigger[0])], {(second, bigger[0]): 100}, repo).values()
    assert scaled > lanes.START_S + 0.5 * 100 * lanes.RUN_MARGIN  # a larger model: more seconds a step
    lines = []  # a deadline no cell can meet starts nothing and says so (its lanes would only echo "skipped")
    assert lanes.start(first, ONLY, worktree, 2, [], dry_run=True, repo=repo, echo=lines.append,
                       until=lanes.time.time() + 60) == []
    assert lines[-1].startswith("nothing started: no cell can finish by --until ") and "allowed: a later" in lines[-1]


def test_a_preset_landed_in_several_studies_is_timed_by_the_median_of_all_its_runs(tmp_path):
    """Seconds per FLOP of a preset come from every study that landed it (it was whichever study was read last)."""
    import pandas as pd

    for study, walls in (("a-study", [100.0, 110.0, 120.0]), ("b-study", [400.0])):
        folder = tmp_path / "runs" / study
        folder.mkdir(parents=True)
        pd.DataFrame({"cfg.preset": ["p"] * len(walls), "wall_s": walls, "max_iters": [10] * len(walls),
                      "tokens": [1000] * len(walls), "flops_per_token": [10] * len(walls)}
                     ).to_csv(folder / "runs.csv", index=False)
    per_step, per_flop = lanes.landed_speeds(tmp_path)
    assert per_step == {("a-study", "p"): 11.0, ("b-study", "p"): 40.0}  # per study, as before
    assert per_flop == {"p": (10.0, 115.0 / 10_000)}  # the median of 100, 110, 120, 400 s over 10,000 FLOPs


def test_a_seeds_arms_go_before_the_next_seed_within_each_preset_in_registry_order():
    """A session that stops part-way should leave whole seeds (every arm: a paired comparison needs them all), and
    the registry's preset order (the tuning's critical path first) stays."""
    import re

    cells = lanes.cell_paths("prose", [])
    ordered = lanes.seed_major(cells)
    assert sorted(ordered) == sorted(cells)
    presets = [re.search(r"preset=([^_/]+)", c).group(1) for c in ordered]
    assert list(dict.fromkeys(presets)) == list(dict.fromkeys(re.search(r"preset=([^_/]+)", c).group(1)
                                                              for c in cells))
    first = [c for c in ordered if presets[ordered.index(c)] == presets[0]]
    seeds = [int(re.search(r"/seed(\d+)/$", c).group(1)) for c in first]
    assert seeds == sorted(seeds) and seeds[:3] == [seeds[0]] * 3  # the 3 arms of the lowest seed first
    assert {c.split("_")[0] for c in first[:3]} == {"none", "ln", "rms"}
