"""Sealed run directories and a study's expected runs (issue 70): a finished run's manifest is written last; the index
and publication verify every finished run against it and refuse, in one line naming the run and the file, when
anything is missing, truncated or altered; the runs a registered study must have come from the registry."""
import hashlib
import json
import re
import shutil

import pytest
from conftest import REPO, tiny

from embnorm_lib.core.errors import RunDirError
from embnorm_lib.core.records import seal
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.publishing import publish
from embnorm_lib.runner import results, sweep
from embnorm_lib.studies import MissingRunsError, check_registered_runs


def fake_run(root, arm="none", seed=0, steps=3) -> RunDir:
    """A finished run as the trainer leaves it: config, summary, logs and, last, its seal."""
    run = RunDir(root / arm / f"seed{seed}")
    run.root.mkdir(parents=True)
    run.config.write_text(json.dumps({"variant": arm, "seed": seed}))
    run.summary.write_text(json.dumps({"variant": arm, "seed": seed, "steps": steps, "val_loss": 2.0 + seed,
                                       "diverged": False}))
    run.metrics.write_text("".join(json.dumps({"step": s, "train_loss": 3.0 - 0.1 * s}) + "\n"
                                   for s in range(1, steps + 1)))
    run.evals.write_text(json.dumps({"step": steps, "val_loss": 2.0}) + "\n")
    seal.seal_run(run)
    return run


def test_a_trained_run_is_sealed_last_with_sizes_hashes_rows_and_steps(tmp_path, data_path):
    from embnorm_lib.core.training.train import train

    run = RunDir(tmp_path / "t" / "ln" / "seed0")
    train(tiny(variant="ln", max_iters=4, eval_interval=2, lm_eval=False), run.root, data_path, progress=False)
    manifest = json.loads(run.manifest.read_text())
    assert manifest["steps"] == 4 and manifest["files"]["metrics.parquet"]["rows"] == 4
    assert {"config.json", "summary.json", "metrics.parquet", "diagnostics.parquet", "evals.jsonl"} <= set(
        manifest["files"])
    assert not {"metrics.jsonl", "diagnostics.jsonl"} & set(manifest["files"])  # the live run's JSONL went
    assert not {"model.pt", "ckpt.pt", ".lock"} & set(manifest["files"])  # local files are not results
    body = run.summary.read_bytes()
    assert manifest["files"]["summary.json"] == {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    # written last: no result file is newer than the seal
    assert all(p.stat().st_mtime_ns <= run.manifest.stat().st_mtime_ns for p in seal.sealed_files(run))
    seal.verify_run(run)


def _drop_line(path):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1] + lines[2:]))


@pytest.mark.parametrize("damage,message", [
    (lambda r: r.summary.write_text(r.summary.read_text()[:10]),
     r"summary.json is shorter than sealed \(10 of \d+ bytes: truncated or edited\)"),
    (lambda r: r.summary.write_text(""), "summary.json is shorter than sealed"),
    (lambda r: r.summary.unlink(), "summary.json is missing"),
    (lambda r: r.config.write_text("[1, 2]"), "config.json is shorter than sealed"),
    (lambda r: _drop_line(r.metrics), "metrics.jsonl is shorter than sealed"),  # a whole line lost: summary unchanged
    (lambda r: r.evals.write_text(r.evals.read_text().replace("2.0", "1.0")), "evals.jsonl was altered"),
    (lambda r: r.lm_eval.write_text('{"macro": {}'), "lm_eval.json was added after the run was sealed"),
    (lambda r: r.manifest.unlink(), "manifest.json is missing"),
    # what the sealed-file check passes over (issue 116 #6): a hidden file or a sub-directory inside the run
    (lambda r: (r.root / ".extra").write_text("1"), r"\.extra is a hidden file inside a sealed run"),
    (lambda r: (r.root / "stray").mkdir(), "stray is a sub-directory inside a sealed run"),
])
def test_the_index_refuses_a_damaged_run_in_one_line_and_keeps_runs_csv(tmp_path, damage, message):
    study = tmp_path / "tdamaged"
    runs = [fake_run(study, arm, seed) for arm in ("none", "ln") for seed in (0, 1)]
    table = results.build_index("tdamaged", tmp_path)
    assert len(table) == 4
    index_before = (study / "runs.csv").read_bytes()
    damage(runs[1])
    with pytest.raises(RunDirError, match=message) as refused:
        results.build_index("tdamaged", tmp_path)
    text = str(refused.value)
    assert "\n" not in text and str(runs[1].root) in text and "allowed:" in text
    assert (study / "runs.csv").read_bytes() == index_before  # never a smaller study


def test_a_lost_metrics_line_is_caught_even_when_the_byte_count_is_kept(tmp_path):
    run = fake_run(tmp_path / "t", steps=5)
    lines = run.metrics.read_text().splitlines(keepends=True)
    del lines[2]
    run.metrics.write_text("".join(lines) + " " * len(json.dumps({"step": 3, "train_loss": 2.7}) + "\n"))
    with pytest.raises(seal.SealError, match="metrics.jsonl has 4 rows, sealed with 5"):
        seal.verify_run(run)


def test_sealing_an_old_run_checks_it_first_and_the_command_seals_only_unsealed_runs(tmp_path, capsys):
    good = fake_run(tmp_path / "told")
    good.manifest.unlink()
    cut = fake_run(tmp_path / "told", seed=1, steps=4)
    cut.manifest.unlink()
    _drop_line(cut.metrics)  # ends at step 4 still: caught by the sealed row count only after sealing...
    cut.metrics.write_text("".join(cut.metrics.read_text().splitlines(keepends=True)[:-1]))  # ...so cut its end
    assert seal.main(["told", "--out-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "metrics.jsonl ends at step 3, summary.json says 4" in captured.err and captured.err.count("\n") == 1
    assert good.manifest.is_file() and not cut.manifest.exists()
    before = good.manifest.read_bytes()
    assert seal.main(["told", "--out-dir", str(tmp_path), "--check"]) == 2  # the unsealed run is named again
    assert good.manifest.read_bytes() == before
    assert seal.main(["../x", "--out-dir", str(tmp_path)]) == 2


def test_a_stage_that_adds_a_file_reseals_but_never_over_damage(tmp_path):
    run = fake_run(tmp_path / "t")
    run.lm_eval.write_text("{}")
    seal.reseal(run, run.lm_eval.name)
    seal.verify_run(run)
    run.metrics.write_text("")
    run.lm_eval.write_text('{"a": 1}')
    with pytest.raises(seal.SealError, match="metrics.jsonl is shorter than sealed"):
        seal.reseal(run, run.lm_eval.name)


def test_a_damaged_finished_cell_is_corrupt_for_the_sweep(tmp_path):
    from embnorm_lib.core.training.checkpoint import write_config
    from embnorm_lib.studies import grid

    cell = grid("tcell", "tiny", ["ln"], [0])[0]
    run = RunDir(cell.run_dir(tmp_path))
    run.root.mkdir(parents=True)
    write_config(run, cell.config())
    run.summary.write_text(json.dumps({"steps": 0}))
    run.metrics.write_text("")
    seal.seal_run(run)
    assert sweep.cell_status(cell, tmp_path) == "done"
    run.lm_eval.write_text("{")  # e.g. a scoring cut short: never reported as done
    assert sweep.cell_status(cell, tmp_path) == "corrupt"
    assert "lm_eval.json was added after the run was sealed" in sweep.cell_problem(cell, tmp_path)


def test_the_registry_gives_the_expected_runs_unfinished_ladders_stay_partial(tmp_path):
    with pytest.raises(MissingRunsError, match=r"study seeds-final: 15 of 15 registered runs are missing"):
        check_registered_runs("seeds-final", tmp_path)
    check_registered_runs("ladder", tmp_path)  # its report counts finished runs per size (a study still training)
    check_registered_runs("an-adhoc-study", tmp_path)  # not registered: no expected set


@pytest.mark.committed
def test_every_committed_run_is_sealed():
    study = REPO / "runs" / "seeds-final"
    for run in seal.run_dirs_of(study):
        seal.verify_run(run)


def _committed_digest() -> dict[str, str]:
    """Every committed output a publish of seeds-final could touch."""
    paths = [REPO / "README.md", REPO / "runs" / "README.md", *sorted((REPO / "paper").rglob("*")),
             *sorted((REPO / "figures").rglob("*")), *sorted((REPO / "runs" / "seeds-final").rglob("*"))]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


@pytest.mark.committed
@pytest.mark.parametrize("damage,message", [
    (lambda study: (study / "ln" / "seed2" / "summary.json").write_text("{"), "ln/seed2: summary.json is shorter than sealed"),
    (lambda study: shutil.rmtree(study / "none" / "seed3"), r"1 of 15 registered runs are missing or unfinished "
                                                             r"\(none/seed3\)"),
])
def test_publishing_a_damaged_copy_of_a_committed_study_refuses_and_changes_no_committed_byte(tmp_path, capsys, damage,
                                                                                            message):
    """The replay of issue 70: one summary.json truncated (or a run deleted) in a copy of seeds-final."""
    out = tmp_path / "runs"
    shutil.copytree(REPO / "runs" / "seeds-final", out / "seeds-final")
    damage(out / "seeds-final")
    copy_before = {p: p.read_bytes() for p in (out / "seeds-final").rglob("*") if p.is_file()}
    committed = _committed_digest()
    assert publish.main(["seeds-final", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and re.search(message, err)
    assert {p: p.read_bytes() for p in (out / "seeds-final").rglob("*") if p.is_file()} == copy_before
    assert _committed_digest() == committed


def test_seal_check_applies_the_index_identity_checks(tmp_path, capsys, data_path):
    """Issue 117 #9: `seal --check` passed a run whose summary names another seed, which the index refuses."""
    from embnorm_lib.core.records.io import read_json, write_json
    from embnorm_lib.core.records.seal import main, reseal
    from embnorm_lib.core.training.train import train

    run = RunDir(tmp_path / "runs" / "s" / "ln" / "seed0")
    train(tiny(max_iters=2, eval_at_init=False), run.root, data_path, progress=False)
    write_json(run.summary, {**read_json(run.summary), "seed": 3})
    reseal(run, run.summary.name)
    assert main(["s", "--check", "--out-dir", str(tmp_path / "runs")]) == 2
    assert "summary.json has seed=3 in directory seed0" in capsys.readouterr().err


def test_verify_run_refuses_what_no_seal_covers(tmp_path):
    """seal --check and the index share verify_run: a hidden file, a sub-directory or a link in a sealed run is named."""
    run = fake_run(tmp_path / "tlink")
    (run.root / ".lock").write_text("")  # a lock is the run's own
    seal.verify_run(run)
    (run.root / "evals.json").symlink_to(run.config)
    with pytest.raises(seal.SealError, match="evals.json is a symbolic link inside a sealed run; allowed:"):
        seal.verify_run(run)
