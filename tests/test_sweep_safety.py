"""The sweep under bad input, damaged files, concurrent sweeps and missing per-run results (issue 12)."""
import json

import pandas as pd
import pytest

from embnorm_lib import studies
from embnorm_lib.core.errors import RunDirError
from embnorm_lib.core.records.io import read_jsonl
from embnorm_lib.core.training.train import train
from embnorm_lib.runner import results, reuse, sweep

FIXED = {"max_iters": 4, "eval_interval": 2}


@pytest.mark.parametrize("args,message", [
    (["--seeds", "-1"], "invalid --seeds '-1'"),
    (["--seeds", "1.5"], "invalid --seeds '1.5'"),
    (["--seeds", "abc"], "invalid --seeds 'abc'"),
    (["--seeds", "3-1"], "invalid --seeds '3-1'"),
    (["--workers", "-3"], "invalid workers=-3"),
    (["--threads", "-1"], "invalid threads=-1"),
    (["--set", "seed=3"], "invalid overrides key(s) seed"),
    (["--axis", "variant=ln,rms"], "invalid axes key(s) variant"),
    (["--set", "lr"], "invalid assignment 'lr'"),
])
def test_bad_sweep_arguments_get_one_line(tmp_path, capsys, args, message):
    code = sweep.main(["tbad", "--preset", "tiny", "--out-dir", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "tbad").exists()


def test_sweep_study_names_cannot_leave_out_dir(tmp_path, capsys):
    assert sweep.main(["../escape", "--preset", "tiny", "--out-dir", str(tmp_path / "runs")]) == 2
    assert "invalid study='../escape'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="invalid overrides="):
        studies.grid("s", "tiny", ["ln"], [0], fixed="lr=1")


def _finished(out, study, variants=("none", "ln"), seeds=(0,), data_path=None, **fixed):
    cells = studies.grid(study, "tiny", list(variants), list(seeds), fixed={**FIXED, **fixed})
    for cell in cells:
        train(cell.config().replace(torch_threads=1), cell.run_dir(out), data_path, progress=False)
    return cells


def test_a_cell_finished_by_another_sweep_is_skipped_not_reexecuted(tmp_path, data_path):
    out = tmp_path / "runs"
    cell = _finished(out, "tdup", ["ln"], data_path=data_path)[0]
    kept = cell.run_dir(out) / "02_train.ipynb"
    kept.write_text("the notebook the first sweep kept")
    # the second sweep had planned the cell before the first finished it: under the cell lock it looks again
    result = sweep.execute_cell(cell, str(out), data_path, 1, str(sweep.repo_root() / sweep.TRAIN_NOTEBOOK))
    assert result["status"] == "skipped" and "another sweep" in result["why"]
    assert kept.read_text() == "the notebook the first sweep kept"
    report = sweep.SweepReport(results=[result])
    sweep._write_sweep_log(out, "tdup", report, 0.0, 1, 1)
    entry = read_jsonl(out / "tdup" / "sweeps.jsonl")[-1]
    assert entry["executed"] == 0 and entry["skipped"] == 1


def test_a_malformed_file_fails_its_cell_and_the_rest_finish(tmp_path, data_path):
    out = tmp_path / "runs"
    cells = _finished(out, "tbroken", ["none"], [0, 1], data_path=data_path)
    broken = cells[1].run_dir(out)
    (broken / "summary.json").write_text('{"val_loss": 2.5,')  # cut short
    assert sweep.cell_status(cells[1], out) == "corrupt"
    assert "summary.json is shorter than sealed" in sweep.cell_problem(cells[1], out)
    # the index refuses the damaged run in one line, naming it, instead of indexing a smaller study (issue 70)
    with pytest.raises(RunDirError, match=r"tbroken/none/seed1: summary.json is shorter than sealed"):
        results.build_index("tbroken", out)
    assert not (out / "tbroken" / "runs.csv").exists()
    assert reuse.finished_runs_by_identity(out)  # the readable runs are still found for reuse
    lines = []
    report = sweep.run_sweep(cells, out, data_path, workers=1, threads=1, echo=lines.append, reuse=False)
    failed = {r["cell"]: r for r in report.failures}
    assert "summary.json is shorter than sealed" in failed[cells[1].label()]["error"]
    assert any("could not write the index of tbroken" in line and "summary.json" in line for line in lines)
    assert report.skipped == 1 and read_jsonl(out / "tbroken" / "sweeps.jsonl")[-1]["failed"] == 2


def test_missing_lm_eval_is_completed_from_an_identical_run_or_refused(tmp_path, data_path):
    out = tmp_path / "runs"
    sources = _finished(out, "tsource", ["none", "ln"], data_path=data_path)
    fake = {"macro": {"0shot": {"acc": 0.31, "acc_norm": 0.3, "acc_stderr": 0.01}},
            "tasks": {"shakespeare_word_cloze": {"0shot": {"acc": 0.31, "acc_norm": 0.3}}}, "seconds": 1.0}
    (sources[0].run_dir(out) / "lm_eval.json").write_text(json.dumps(fake))  # only `none` was scored
    targets = _finished(out, "ttarget", ["none", "ln"], data_path=data_path)  # trained without lm-eval
    for cell in targets:
        (cell.run_dir(out) / "model.pt").unlink()  # as on a fresh clone: weights are not committed
    wanted = [c.__class__(**{**c.__dict__, "overrides": tuple(sorted({**dict(c.overrides), "lm_eval": True}.items()))})
              for c in targets]
    assert [sweep.cell_status(c, out) for c in wanted] == ["incomplete", "incomplete"]
    report = sweep.run_sweep(wanted, out, data_path, workers=1, threads=1, echo=lambda *a: None)
    by_cell = {r["cell"]: r for r in report.results}
    done = by_cell[wanted[0].label()]
    assert done["status"] == "completed" and "tsource/none/seed0" in done["detail"]
    copied = json.loads((wanted[0].run_dir(out) / "lm_eval.json").read_text())
    assert copied["copied_from"] == "tsource/none/seed0" and copied["macro"] == fake["macro"]
    assert json.loads((wanted[0].run_dir(out) / "config.json").read_text())["lm_eval"] is True
    refused = by_cell[wanted[1].label()]
    assert refused["status"] == "failed" and "lacks lm_eval.json" in refused["error"]
    table = pd.read_csv(out / "ttarget" / "runs.csv")
    assert table.set_index("variant").loc["none", "lm_macro_acc"] == 0.31
    assert pd.isna(table.set_index("variant").loc["ln", "lm_macro_acc"])


def test_index_and_log_survive_a_failing_write(tmp_path, monkeypatch):
    out = tmp_path / "runs"
    (out / "tfull").mkdir(parents=True)
    cells = studies.grid("tfull", "tiny", ["ln"], [0])

    def no_space(*args, **kwargs):
        raise OSError(28, "no space left while writing runs.csv")

    monkeypatch.setattr(sweep, "build_index", no_space)
    lines = []
    report = sweep.SweepReport(results=[{"cell": "ln seed0", "run_dir": str(cells[0].run_dir(out)), "status": "ok"}])
    sweep._finish(out, cells, report, 1.0, 1, 1, lines.append)
    assert any("could not write the index of tfull" in line for line in lines)
    assert report.failures and read_jsonl(out / "tfull" / "sweeps.jsonl")[-1]["failed"] == 1
