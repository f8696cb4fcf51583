import json

import pytest

from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.records.seal import reseal
from embnorm_lib.core.records.steplog import parquet_path, read_step_log, write_parquet_log
from embnorm_lib.core.training.train import train
from embnorm_lib.runner import sweep
from embnorm_lib.studies import Cell
from embnorm_lib.tools import rescore

CELLS = [Cell("tinystudy", "tiny", v, 0, (("max_iters", 20), ("eval_interval", 10))) for v in ("none", "ln")]


def _train_cells(cells, out, data_path, **_):
    """The sweep's training without its notebook kernel: the same train() the notebook calls."""
    for cell in cells:
        train(cell.config(), cell.run_dir(out), data_path, progress=False)
    return sweep.SweepReport()


@pytest.fixture
def study(tmp_path, data_path, monkeypatch):
    monkeypatch.setattr(rescore, "study_cells", lambda name: CELLS)
    monkeypatch.setattr(sweep, "run_sweep", _train_cells)
    out = tmp_path / "runs"
    _train_cells(CELLS, out, data_path)
    for cell in CELLS:  # weights are not committed; the study scored its runs with the other suite
        RunDir(cell.run_dir(out)).final_model.unlink()
        RunDir(cell.run_dir(out)).lm_eval_v2.write_text(json.dumps({"macro": {"0shot": {"acc": 0.4}}}))
        reseal(RunDir(cell.run_dir(out)), "lm_eval_v2.json")  # as the stage that scores a run does
    return out


def test_retrained_weights_are_scored_only_when_the_rerun_is_bitwise_the_same(study, tmp_path, data_path):
    none, ln = (RunDir(c.run_dir(study)) for c in CELLS)
    rows = read_step_log(ln, "metrics")
    rows[5]["train_loss"] += 0.1  # the committed ln run no longer matches what its config trains
    write_parquet_log(parquet_path(ln, "metrics"), rows)
    before = sorted(p.name for p in study.rglob("*"))
    counts = rescore.rescore("tinystudy", "v1", tmp_path / "work", study, workers=1, data_path=data_path,
                             echo=lambda *a: None)
    assert counts["retrain"] == 2 and counts["differs"] == 1
    scored = json.loads(none.lm_eval.read_text())
    assert "bitwise" in scored["weights"] and scored["reproduction"]["status"] == "bitwise"
    assert scored["macro"]["0shot"]["acc"] > 0
    assert not ln.lm_eval.exists()  # a re-run that differs gives the committed run nothing
    assert sorted(p.name for p in study.rglob("*")) == sorted(before + ["lm_eval.json"])
    again = rescore.rescore("tinystudy", "v1", tmp_path / "work", study, workers=1, data_path=data_path,
                            echo=lambda *a: None)
    assert again["done"] == 1 and again["retrain"] == 1  # resumable: the scored run is not scored again


def test_a_twin_with_the_result_is_copied_and_the_work_dir_must_be_outside_the_study(study, tmp_path):
    none = RunDir(CELLS[0].run_dir(study))
    twin = study / "otherstudy" / "none" / "seed0"
    twin.mkdir(parents=True)
    for f in ("config.json", "summary.json"):
        (twin / f).write_text((none.root / f).read_text())
    (twin / "lm_eval.json").write_text(json.dumps({"macro": {"0shot": {"acc": 0.5}}}))
    groups = rescore.plan(CELLS, study, "v1")
    assert [c for c, _ in groups["copy"]] == CELLS[:1] and groups["retrain"] == CELLS[1:]
    with pytest.raises(ValueError, match="--work-dir .* inside the runs root"):
        rescore.rescore("tinystudy", "v1", study / "scratch", study, echo=lambda *a: None)


def test_a_run_the_study_never_scored_is_not_retrained_for_a_suite(study, tmp_path):
    for cell in CELLS:
        RunDir(cell.run_dir(study)).lm_eval_v2.unlink()
    groups = rescore.plan(CELLS, study, "v1")
    assert groups["skipped"] == CELLS and not groups["retrain"]
