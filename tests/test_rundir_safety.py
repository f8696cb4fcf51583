"""Paths that used to produce silently wrong results and must now be refusals (issue 12)."""
import json
import subprocess
import sys
import time

import pytest
import torch
from conftest import REPO, tiny

from embnorm_lib.core.errors import ConfigError, DiskFullError, RunDirError
from embnorm_lib.core.records import io as io_module
from embnorm_lib.core.records.io import RunLock, read_jsonl, write_jsonl
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.records.steplog import read_step_log
from embnorm_lib.core.training.checkpoint import ResumeError
from embnorm_lib.core.training.train import train


def names(run_dir):
    return sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []


def test_a_second_process_cannot_train_into_a_locked_run_dir(tmp_path, data_path):
    run = RunDir(tmp_path / "run")
    with RunLock(run.lock):  # another holder (a separate open file description conflicts, as across processes)
        with pytest.raises(RunDirError, match="in use by another process"):
            train(tiny(max_iters=5), run.root, data_path, progress=False)
        assert not run.config.exists()  # the refused run wrote nothing


def test_concurrent_runs_with_different_configs_never_mix(tmp_path, data_path):
    """Two command-line runs race for one directory: one trains, the other is refused; config matches results."""
    run_dir = tmp_path / "adhoc" / "ln" / "seed0"

    def start(lr):
        return subprocess.Popen([sys.executable, "-m", "embnorm_lib", "run", "--preset", "tiny", "--variant", "ln",
                                 "--study", "adhoc", "--out-dir", str(tmp_path), "--data-path", data_path,
                                 "--set", f"lr={lr}", "--set", "max_iters=60", "--set", "torch_threads=1"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [start(0.005), start(0.001)]
    outcomes = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    config = json.loads((run_dir / "config.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = read_step_log(run_dir, "metrics")
    assert len(metrics) == 60 and metrics[-1]["lr"] <= config["lr"]
    assert summary["steps"] == 60
    winners = [o for o in outcomes if o[0] == 0 and '"val_loss"' in o[1]]
    losers = [o for o in outcomes if o not in winners]
    # either the second was refused by the lock or by the config check after the first finished
    assert len(winners) >= 1
    for code, _, err in losers:
        assert code != 0 and ("in use by another process" in err or "different config" in err), err[-500:]
    # the warm-up ramp in metrics.jsonl pins which lr trained: it must be the one config.json names
    assert abs(metrics[0]["lr"] - config["lr"] / max(1, round(0.1 * 60))) < 1e-12


def test_resume_refuses_logs_that_lost_rows(tmp_path, data_path):
    cfg = tiny(max_iters=20, checkpoint_interval=10, eval_interval=5)
    run = RunDir(tmp_path / "run")
    train(cfg, run.root, data_path, progress=False, until_step=10)
    rows = read_jsonl(run.metrics)
    write_jsonl(run.metrics, rows[:4] + rows[6:])  # steps 5 and 6 lost
    with pytest.raises(ResumeError, match=r"metrics.jsonl .* does not cover the checkpoint at step 10 \(missing"):
        train(cfg, run.root, data_path, progress=False)
    write_jsonl(run.metrics, rows)
    evals = read_jsonl(run.evals)
    write_jsonl(run.evals, evals[:1])  # the step-5 and step-10 evaluations lost
    with pytest.raises(ResumeError, match=r"evals.jsonl .* \(missing steps 5, 10\)"):
        train(cfg, run.root, data_path, progress=False)
    write_jsonl(run.evals, evals)
    assert train(cfg, run.root, data_path, progress=False)["steps"] == 20  # intact logs resume


def test_resume_refuses_a_different_thread_count(tmp_path, data_path):
    threads = torch.get_num_threads()
    run = RunDir(tmp_path / "run")
    train(tiny(max_iters=10, checkpoint_interval=5, torch_threads=1), run.root, data_path, progress=False,
          until_step=5)
    other = 2 if threads != 2 else 3
    with pytest.raises(ResumeError, match="written with 1 torch thread.*allowed: torch_threads=1"):
        train(tiny(max_iters=10, checkpoint_interval=5, torch_threads=other), run.root, data_path, progress=False)
    summary = train(tiny(max_iters=10, checkpoint_interval=5, torch_threads=1), run.root, data_path, progress=False)
    assert summary["torch_threads"] == 1 and torch.get_num_threads() == threads


@pytest.mark.parametrize("changes,message", [
    (dict(block_size=2_000_000), "invalid block_size=2000000; allowed: < "),
    (dict(block_size=200_000, n_head=2, n_embd=32), "validation split has"),
    (dict(vocab_size=80), "invalid vocab_size=80"),
])
def test_a_run_that_cannot_start_writes_nothing(tmp_path, data_path, changes, message):
    run_dir = tmp_path / "study" / "ln" / "seed0"
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        train(tiny(**changes), run_dir, data_path, progress=False)
    assert not (tmp_path / "study").exists()  # no config.json poisoning the directory, no empty folders
    assert train(tiny(max_iters=3), run_dir, data_path, progress=False)["steps"] == 3  # the corrected run goes


def test_disk_full_while_checkpointing_says_so_and_leaves_no_partial_file(tmp_path, data_path, monkeypatch):
    def full_disk(obj, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0: "
                           "PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full_disk)
    run = RunDir(tmp_path / "run")
    with pytest.raises(DiskFullError, match=f"no space left while writing {run.checkpoint}"):
        train(tiny(max_iters=10, checkpoint_interval=5), run.root, data_path, progress=False)
    assert not [p for p in names(run.root) if "tmp" in p]  # the partial checkpoint is gone


@pytest.mark.parametrize("free,full", [(0, True), (4096, True), (10**9, False)])
def test_torch_saves_iostream_error_is_a_full_disk_only_where_the_disk_is_full(tmp_path, monkeypatch, free, full):
    """Issue 117, item 9: a full disk inside torch.save read 'RuntimeError: basic_ios::clear: iostream error'. The C++
    stream words every failed write so; with space left it may be a quota or an I/O error, so it is left as it is."""
    import collections
    import re
    import shutil

    from embnorm_lib.core.records import writes

    def failing_stream(obj, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise RuntimeError("basic_ios::clear: iostream error")

    monkeypatch.setattr(torch, "save", failing_stream)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda directory: usage(10**10, 10**10 - free, free))
    target = tmp_path / "run" / "ckpt.pt"
    target.parent.mkdir()
    expected = (DiskFullError, f"no space left while writing {re.escape(str(target))}$") if full else (
        RuntimeError, "^basic_ios::clear: iostream error$")
    with pytest.raises(expected[0], match=expected[1]) as raised:
        writes.save_torch({"x": 1}, target)
    assert isinstance(raised.value, DiskFullError) == full
    assert names(tmp_path) == ["run"]  # the partial file is gone either way


def test_disk_full_on_a_json_write_names_the_file(tmp_path, monkeypatch):
    import errno
    import os

    def no_space(fd):  # the data reaches the disk at fsync: where a full disk shows
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(DiskFullError, match="no space left while writing .*summary.json"):
        io_module.write_json(tmp_path / "summary.json", {"a": 1})
    monkeypatch.undo()
    assert names(tmp_path) == []


def test_malformed_json_names_the_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2\n')
    with pytest.raises(RunDirError, match=r"malformed JSON in .*metrics.jsonl line 2"):
        read_jsonl(tmp_path / "metrics.jsonl")
    (tmp_path / "config.json").write_text("{not json")
    from embnorm_lib.core.config import RunConfig

    with pytest.raises(RunDirError, match=r"malformed JSON in .*config.json"):
        RunConfig.load(tmp_path / "config.json")


def test_lock_is_released_when_its_holder_dies(tmp_path):
    lock_path = tmp_path / "run" / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom embnorm_lib.core.records.io import RunLock\n"
                               f"l = RunLock({str(lock_path)!r}); assert l.acquire(); print('held', flush=True); "
                               "time.sleep(60)"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert not RunLock(lock_path).acquire()
    holder.kill()
    holder.wait()
    deadline = time.time() + 10
    while not RunLock(lock_path).acquire():
        assert time.time() < deadline
        time.sleep(0.1)


def test_uncommitted_indexes_names_the_untracked_and_the_changed_ones(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    runs = tmp_path / "runs"
    for study in ("kept", "changed"):
        (runs / study).mkdir(parents=True)
        (runs / study / "runs.csv").write_text("run_dir\n")
        (runs / study / "sweeps.jsonl").write_text("{}\n")
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "index"], cwd=tmp_path, check=True)
    assert io_module.uncommitted_indexes(runs) == []
    (runs / "changed" / "runs.csv").write_text("run_dir\nseed0\n")
    (runs / "new").mkdir()
    (runs / "new" / "runs.csv").write_text("run_dir\n")
    (runs / "new" / "notes.txt").write_text("not an index\n")
    assert io_module.uncommitted_indexes(runs) == ["runs/changed/runs.csv", "runs/new/runs.csv"]
    with (runs / "kept" / "sweeps.jsonl").open("a") as log:  # a lane's sweep appended its line
        log.write("{}\n")
    assert io_module.uncommitted_indexes(runs) == ["runs/changed/runs.csv", "runs/kept/sweeps.jsonl",
                                                   "runs/new/runs.csv"]
    assert io_module.uncommitted_indexes(tmp_path / "runs" / "kept" / "missing") == []  # not a directory: no git


def test_asking_whether_a_lock_is_held_leaves_nothing_behind(tmp_path):
    absent = RunDir(tmp_path / "not-yet" / "seed0")
    assert not absent.training_lock().held_elsewhere() and not (tmp_path / "not-yet").exists()
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    assert not run.cell_lock().held_elsewhere() and names(run.root) == []
    with run.cell_lock():  # another holder
        assert run.cell_lock().held_elsewhere()
    assert names(run.root) == [".cell.lock"]  # made by the holder, not removed by the one who asked
    assert not run.cell_lock().held_elsewhere() and names(run.root) == [".cell.lock"]


def test_a_lock_that_leaves_no_file_removes_only_the_file_it_made(tmp_path):
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    lock = run.training_lock(leave_no_file=True)
    assert lock.acquire() and names(run.root) == [".lock"]
    assert run.training_lock().held_elsewhere()
    lock.release()
    assert names(run.root) == []
    run.lock.write_text("")  # a lock file a trainer left: it stays
    assert lock.acquire()
    lock.release()
    assert names(run.root) == [".lock"]
