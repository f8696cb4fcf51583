"""The run directory's lock under an interleaving of three attempts (issue 70, item 4). Each attempt opens the lock file
itself, so the three conflict exactly as three processes do (flock is per open file description); the delays are
injected where the race used to be: between an attempt's first look at the directory and its lock."""
import json

import pytest

from embnorm_lib.core.errors import RunDirError
from embnorm_lib.core.records import io as io_module
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.training.checkpoint import holding


def test_a_refused_attempt_never_removes_the_winners_lock_or_directory(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "study" / "ln" / "seed0")
    winner = holding(run, True)  # B
    acquire = io_module.RunLock.acquire
    calls = []

    def delayed(self):
        calls.append(self.path)
        if len(calls) == 1:  # injected delay: A has looked at the (missing) directory; B takes the lock meanwhile
            winner.__enter__()
        return acquire(self)

    monkeypatch.setattr(io_module.RunLock, "acquire", delayed)
    with pytest.raises(RunDirError, match="in use by another process"), holding(run, True):  # A
        pass
    monkeypatch.setattr(io_module.RunLock, "acquire", acquire)
    assert run.lock.is_file() and run.root.is_dir()  # A left B's lock and directory alone
    with pytest.raises(RunDirError, match="in use by another process"), holding(run, True):  # C: refused too
        run.config.write_text(json.dumps({"lr": 0.1}))  # never reached
    run.config.write_text(json.dumps({"lr": 0.001}))  # B writes its run
    run.metrics.write_text(json.dumps({"step": 1, "lr": 0.001}) + "\n")
    winner.__exit__(None, None, None)
    assert json.loads(run.config.read_text()) == {"lr": 0.001}  # one run's config beside that run's metrics
    assert sorted(p.name for p in run.root.iterdir()) == [".lock", "config.json", "metrics.jsonl"]
    with holding(run, True):  # and the lock is free for the next taker
        pass


def test_an_attempt_that_writes_nothing_leaves_no_trace_but_keeps_what_existed(tmp_path):
    (tmp_path / "study").mkdir()
    run = RunDir(tmp_path / "study" / "ln" / "seed0")
    with pytest.raises(ValueError), holding(run, True):
        raise ValueError("a check failed before anything was written")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["study"]  # its own directories gone, the study's kept


def test_a_refused_attempt_removes_only_empty_directories_it_made(tmp_path):
    run = RunDir(tmp_path / "study" / "ln" / "seed0")
    other = io_module.RunLock(run.lock)
    assert other.acquire()
    try:
        with pytest.raises(RunDirError), holding(run, True):
            pass
        assert run.lock.is_file()
    finally:
        other.release()
