"""Issue 117 #7: a kill in one of the end-of-run windows (after summary.json and before the seal; after a stage's
result file and before the reseal) resumes by re-running the same command, with the files as written."""
from __future__ import annotations

import pytest
from conftest import tiny

from embnorm_lib.core.records import seal
from embnorm_lib.core.records.io import read_json
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.scoring.lm_eval_adapter import score_if_asked, write_result
from embnorm_lib.core.training import train as train_module
from embnorm_lib.core.training.train import train


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


def _comparable(run: RunDir) -> dict:
    """What a finished run holds, timings aside: the summary's numbers and every sealed file's rows."""
    from embnorm_lib.core.records.steplog import read_step_log

    drop = ("wall_s", "train_ms_per_iter", "eval_s_total", "lm_eval_s", "seconds")
    summary = {k: v for k, v in read_json(run.summary).items() if k not in drop}
    logs = {log: [{k: v for k, v in r.items() if k not in ("step_ms", "wall_s", "eval_s")}
                  for r in read_step_log(run.root, log)] for log in ("metrics", "evals")}
    return {"summary": summary, "logs": logs, "lm_eval": read_json(run.lm_eval) if run.lm_eval.is_file() else None,
            "files": sorted(seal.verify_run(run)["files"])}


@pytest.mark.slow  # ~30 s on an idle core (one rerun per file); the two windows above are in the default suite
def test_a_kill_at_every_file_appearance_of_the_runs_end_resumes_by_rerunning(tmp_path, data_path, monkeypatch):
    """Issue 117's probe: killed right after each file the end of a run writes (the last checkpoint onwards: logs,
    calibration, weights, summary, seal; then the zero-shot stage's result and its reseal), re-running the same
    commands finishes the run with the files an uninterrupted run has."""
    from embnorm_lib.core.records import writes
    from embnorm_lib.core.scoring import lm_eval_adapter

    fake = {"macro": {"0shot": {"acc": 0.5, "acc_norm": 0.5}}, "tasks": {"t": {"0shot": {"acc": 0.5}}}}
    monkeypatch.setattr(lm_eval_adapter, "evaluate_lm", lambda *a, **k: fake)  # the suite is tested elsewhere
    cfg = tiny(max_iters=6, eval_interval=3, checkpoint_interval=3, eval_at_init=False, lm_eval=True)

    def commands(root):
        train(cfg, root, data_path, progress=False)
        score_if_asked(cfg, root, data_path)

    written, original = [], writes._write_through_temp
    monkeypatch.setattr(writes, "_write_through_temp", lambda path, write: written.append(path.name) or
                        original(path, write))
    commands(tmp_path / "whole")
    want = _comparable(RunDir(tmp_path / "whole"))
    last_checkpoint = max(i for i, name in enumerate(written) if name == "ckpt.pt")
    kills = range(last_checkpoint, len(written))
    assert {"summary.json", "manifest.json", "lm_eval.json"} <= {written[k] for k in kills}
    for kill in kills:
        count = [0]

        def dying(path, write, kill=kill, count=count):
            out = original(path, write)
            count[0] += 1
            if count[0] == kill + 1:
                raise Killed
            return out
        monkeypatch.setattr(writes, "_write_through_temp", dying)
        root = tmp_path / f"kill{kill}"
        with pytest.raises(Killed):
            commands(root)
        monkeypatch.setattr(writes, "_write_through_temp", original)
        commands(root)  # the same commands again
        assert _comparable(RunDir(root)) == want, f"killed after writing {written[kill]}"
        assert not (root / seal.SEALING).exists() and not RunDir(root).checkpoint.exists()
