"""Issue 117 #7: a kill in one of the end-of-run windows (after summary.json and before the seal; after a stage's
result file and before the reseal) resumes by re-running the same command, with the files as written."""
from __future__ import annotations

import pytest
from conftest import tiny

from embnorm_lib.core import seal
from embnorm_lib.core import train as train_module
from embnorm_lib.core.io import read_json
from embnorm_lib.core.lm_eval_adapter import score_if_asked, write_result
from embnorm_lib.core.rundir import RunDir
from embnorm_lib.core.train import train


class Killed(BaseException):
    """Stands for SIGKILL at that point: nothing after it runs."""


def killed_once(original):
    calls = []

    def wrapper(*args, **kwargs):
        if not calls:
            calls.append(1)
            raise Killed
        return original(*args, **kwargs)
    return wrapper


@pytest.fixture
def finished(tmp_path, data_path):
    cfg = tiny(max_iters=8, eval_at_init=False, lm_eval=True)
    train(cfg, tmp_path / "run", data_path, progress=False)
    return cfg, RunDir(tmp_path / "run")


def test_a_kill_after_the_summary_and_before_the_seal_resumes_by_rerunning(tmp_path, data_path, monkeypatch):
    cfg = tiny(max_iters=8, eval_at_init=False)
    monkeypatch.setattr(train_module, "seal_run", killed_once(seal.seal_run))
    with pytest.raises(Killed):
        train(cfg, tmp_path / "run", data_path, progress=False)
    run = RunDir(tmp_path / "run")
    summary_bytes = run.summary.read_bytes()
    assert not run.manifest.exists()
    with pytest.raises(seal.SealError, match="re-running the command that trained it seals it"):
        seal.verify_run(run)
    again = train(cfg, run.root, data_path, progress=False)  # the same command, not a retrain
    assert run.summary.read_bytes() == summary_bytes and again == read_json(run.summary)
    seal.verify_run(run)
    assert not run.checkpoint.exists()


def test_a_kill_inside_a_stages_reseal_resumes_by_rerunning(finished, data_path, monkeypatch):
    cfg, run = finished
    result = {"macro": {"0shot": {"acc": 0.5}}, "tasks": {}}
    monkeypatch.setattr(seal, "reseal", killed_once(seal.reseal))
    with pytest.raises(Killed):
        write_result(run.root, "v1", result)
    written = run.lm_eval.read_bytes()
    with pytest.raises(seal.SealError, match="lm_eval.json was added after the run was sealed"):
        seal.verify_run(run)
    assert score_if_asked(cfg, run.root, data_path) == result  # the same command: sealed in, not scored again
    assert run.lm_eval.read_bytes() == written and not (run.root / seal.SEALING).exists()
    assert "lm_eval.json" in seal.verify_run(run)["files"]


def test_a_kill_before_the_result_file_forgets_the_intent(finished):
    _, run = finished
    (run.root / seal.SEALING).write_text('{"file": "lm_eval.json", "sha256": "0"}')
    seal.finish_interrupted(run)
    assert not (run.root / seal.SEALING).exists() and not run.lm_eval.exists()
    seal.verify_run(run)


def test_the_seal_command_names_the_runs_directory_in_use(tmp_path):
    run = RunDir(tmp_path / "runs" / "adhoc" / "ln" / "seed0")
    assert seal.seal_command(run) == f"python -m embnorm_lib seal adhoc --out-dir {tmp_path / 'runs'}"
