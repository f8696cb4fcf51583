"""The README's main job: its reproduction check and, end to end (slow), a study run then verified."""
import json
import subprocess
import sys

import pytest
from conftest import REPO

from embnorm_lib import studies
from embnorm_lib.tools import job


def _run(path, val_loss=2.5, loss_step2=3.0, acc=0.3, cpu="cpu A", ece=0.011402516189832172):
    path.mkdir(parents=True)
    rows = [{"step": 1, "train_loss": 4.0, "step_ms": 10.0}, {"step": 2, "train_loss": loss_step2, "step_ms": 12.0}]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "evals.jsonl").write_text(json.dumps({"step": 2, "val_loss": val_loss, "eval_s": 1.0}) + "\n")
    (path / "diagnostics.jsonl").write_text("")
    (path / "summary.json").write_text(json.dumps({"val_loss": val_loss, "steps": 2, "wall_s": 9.0, "cpu_model": cpu,
                                                         "ece_equal_mass": ece}))
    (path / "lm_eval.json").write_text(json.dumps({"tasks": {"t": {"0shot": {"acc": acc}}}}))
    return path


def test_reproduction_check_tells_bitwise_from_rounding_from_different(tmp_path):
    committed = _run(tmp_path / "committed")
    same = job.compare_runs(committed, _run(tmp_path / "same"))  # timings differ, results do not
    assert same["status"] == "bitwise" and same["differences"] == []
    rounding = job.compare_runs(committed, _run(tmp_path / "rounding", val_loss=2.5 + 3e-8, cpu="cpu B"))
    assert rounding["status"] == "rounding" and "val_loss" in rounding["differences"]
    assert 0 < rounding["max_rel_diff"] < job.FLOAT_TOLERANCE and rounding["cpu_here"] == "cpu B"
    # a rounding-level change moves predictions across equal-mass bin edges: measured across two hosts
    binned = job.compare_runs(committed, _run(tmp_path / "binned", val_loss=2.5 + 3e-8, ece=0.011399834896167825))
    assert binned["status"] == "rounding" and "ece_equal_mass" in binned["differences"]
    assert job.compare_runs(committed, _run(tmp_path / "ece", ece=0.0125))["status"] == "differs"
    # over hundreds of steps the rounding drifts: a single step's reading moved by 3.0e-4 across two CPUs
    drifted = job.compare_runs(committed, _run(tmp_path / "drifted", val_loss=2.5 + 3e-8, loss_step2=3.0 * (1 + 3e-4)))
    assert drifted["status"] == "rounding" and drifted["max_step_drift"] == pytest.approx(3e-4, rel=1e-3)
    assert job.compare_runs(committed, _run(tmp_path / "outcome", val_loss=2.5 * (1 + 1e-3)))["status"] == "differs"
    different = job.compare_runs(committed, _run(tmp_path / "different", loss_step2=3.1))
    assert different["status"] == "differs" and different["differences"] == ["the metrics log"]
    flipped = job.compare_runs(committed, _run(tmp_path / "flipped", acc=0.31))
    assert flipped["status"] == "differs" and flipped["lm_accuracies_changed"] == 1
    # runs committed before lm-eval became its own stage carry its scalars in summary.json too; a re-run keeps
    # them in lm_eval.json only: that is not a difference
    old = json.loads((committed / "summary.json").read_text())
    (committed / "summary.json").write_text(json.dumps({**old, "lm_macro_acc": 0.3, "lm_eval_s": 40.0}))
    assert job.compare_runs(committed, _run(tmp_path / "rerun"))["status"] == "bitwise"


def test_sample_takes_one_cell_per_arm():
    import random

    cells = studies.study_cells("main")
    sample = job.sample_cells(cells, random.Random(3))
    arms = {f"{c.variant}{c.tag}" for c in cells}
    assert len(sample) == len(arms) == 6 and {f"{c.variant}{c.tag}" for c in sample} == arms


@pytest.mark.slow
def test_main_job_runs_a_study_then_proves_it_and_changes_nothing(tmp_path, data_path):
    """`python -m embnorm_lib job smoke` twice: first it trains (nothing committed), then it re-trains one cell
    per arm, reports bit-for-bit reproduction, re-publishes without changing a byte, and prints findings."""
    import hashlib

    def call():
        done = subprocess.run([sys.executable, "-m", "embnorm_lib", "job", "smoke", "--out-dir", str(tmp_path / "runs"),
                               "--data-path", data_path, "--sample-seed", "0"], cwd=REPO, capture_output=True,
                              text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def digest():
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((tmp_path / "runs").rglob("*"))
                if p.is_file() and not p.name.startswith(".")}

    first = call()
    assert "has 0 of 6 runs; running the rest" in first.splitlines()[0]
    before = digest()
    second = call()
    assert second.splitlines()[0].startswith("embnorm: smoke is committed (6 of 6 runs)") and "min" in second.splitlines()[0]
    assert second.count("reproduces bit for bit: every logged step") == 3  # one cell per arm
    assert "publishing changed" not in second
    assert "Findings (smoke" in second and "`ln`" in second
    assert digest() == before


def test_a_note_on_changed_files_names_them_and_explains_none_away():
    from embnorm_lib.tools.job import changed_files_note

    note = changed_files_note(["figures/seeds-final/grad_norm_groups.pdf", "runs/seeds-final/REPORT.md"])
    assert note == ("note: publishing changed 2 committed file(s): figures/seeds-final/grad_norm_groups.pdf, "
                    "runs/seeds-final/REPORT.md")


def test_the_changed_files_note_names_committed_files_only(tmp_path, monkeypatch):
    import subprocess

    from embnorm_lib.tools import job

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    (tmp_path / "REPORT.md").write_text("committed\n")
    git("add", "REPORT.md")
    git("commit", "-q", "-m", "c")
    (tmp_path / "LOG").write_text("the user's own log\n")
    monkeypatch.setattr(job, "repo_root", lambda: tmp_path)
    assert job.dirty_files() == []
    (tmp_path / "REPORT.md").write_text("rewritten\n")
    assert job.dirty_files() == ["REPORT.md"]
