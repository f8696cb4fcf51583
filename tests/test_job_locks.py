"""A job that trains several runs at once (fleet.py) takes every member's lock through one function
(checkpoint.holding_all) and reads a finished member through its seal, never its summary.json alone (issue 75)."""
import json

import pytest
from conftest import tiny

from embnorm_lib.core.errors import RunDirError
from embnorm_lib.core.records import seal
from embnorm_lib.core.records.io import RunLock
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.training import checkpoint
from embnorm_lib.core.training.fleet import fleet_configs, train_fleet

JOBS = {"fleet": (fleet_configs, train_fleet)}


def finished(root, cfg) -> RunDir:
    """A run as its trainer leaves it once finished (config, summary, metrics, and last its seal): no training."""
    run = RunDir(root / f"seed{cfg.seed}")
    run.root.mkdir(parents=True)
    run.config.write_text(cfg.to_json())
    run.summary.write_text(json.dumps({"steps": 2, "val_loss": 2.5 + cfg.seed, "diverged": False}))
    run.metrics.write_text("".join(json.dumps({"step": s, "train_loss": 3.0}) + "\n" for s in (1, 2)))
    seal.seal_run(run)
    return run


@pytest.mark.parametrize("kind", JOBS)
def test_a_job_returns_finished_members_through_their_seal_and_refuses_an_altered_one(tmp_path, data_path, kind,
                                                                                        monkeypatch):
    configure, train_job = JOBS[kind]
    cfgs = configure([tiny(seed=s, max_iters=2) for s in (0, 1)])
    runs = [finished(tmp_path, c) for c in cfgs]
    locked = []
    original = checkpoint.holding  # what checkpoint.holding_all calls; a copy of its loop elsewhere would not
    monkeypatch.setattr(checkpoint, "holding", lambda run, is_main: locked.append(run.root) or original(run, is_main))
    assert [s["val_loss"] for s in train_job(cfgs, [r.root for r in runs], data_path)] == [2.5, 3.5]
    assert locked == [r.root for r in runs]
    runs[1].summary.write_text(json.dumps({"steps": 2, "val_loss": 1.0, "diverged": False}))  # a better loss
    with pytest.raises(RunDirError, match=r"seed1: summary.json (was altered|is shorter than sealed)"):
        train_job(cfgs, [r.root for r in runs], data_path)
    for run in runs:  # both locks released
        with RunLock(run.lock):
            pass


@pytest.mark.parametrize("kind", JOBS)
def test_a_job_with_a_member_in_use_is_refused_and_touches_no_other_member(tmp_path, data_path, kind):
    configure, train_job = JOBS[kind]
    cfgs = configure([tiny(seed=s, max_iters=2) for s in (0, 1)])
    dirs = [tmp_path / "seed0", tmp_path / "seed1"]
    with RunLock(RunDir(dirs[1]).lock):  # another process trains member 2
        with pytest.raises(RunDirError, match="seed1 is in use by another process"):
            train_job(cfgs, dirs, data_path)
    assert not dirs[0].exists()  # member 1's lock was taken, then removed with the directory it made
