"""scripts/carry_runs.py: an unfinished run carried out of one checkout and into a fresh one resumes bit for bit."""
from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from conftest import REPO, strip_timing, tiny

from embnorm_lib.core.records.steplog import read_step_log
from embnorm_lib.core.training.train import train

spec = importlib.util.spec_from_file_location("carry_runs", REPO / "scripts" / "carry_runs.py")
carry_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(carry_runs)


def quiet(_line: str) -> None:
    pass


def test_an_unfinished_run_carried_to_a_fresh_checkout_resumes_bit_for_bit(tmp_path, data_path):
    cfg = tiny(max_iters=16, checkpoint_interval=4, dropout=0.1)
    whole = train(cfg, tmp_path / "whole", data_path, progress=False)
    old, new, folder = tmp_path / "old", tmp_path / "new", tmp_path / "carry"
    unfinished = old / "runs" / "s" / "ln" / "seed0"
    train(cfg, unfinished, data_path, progress=False, until_step=10)  # stopped: checkpointed at step 10
    finished = old / "runs" / "s" / "none" / "seed0"
    train(cfg, finished, data_path, progress=False)
    (finished / "ckpt.pt").write_bytes(b"a finished run's stray checkpoint")  # finished: never carried

    entries = carry_runs.save(old, folder, echo=quiet)
    assert [(e["run"], e["step"]) for e in entries] == [("runs/s/ln/seed0", 10)]
    assert json.loads((folder / "carry.json").read_text())["runs"] == entries
    assert not (folder / "runs" / "s" / "ln" / "seed0" / ".lock").exists()

    (new / "runs").mkdir(parents=True)  # a fresh checkout: the run directory is gone
    assert carry_runs.restore(new, folder, echo=quiet) == 0
    resumed = train(cfg, new / "runs" / "s" / "ln" / "seed0", data_path, progress=False)
    assert resumed["val_loss"] == whole["val_loss"]
    for log in ("metrics", "evals"):
        assert strip_timing(read_step_log(new / "runs" / "s" / "ln" / "seed0", log)) == \
            strip_timing(read_step_log(tmp_path / "whole", log))

    # once finished here, a second restore leaves the run alone
    lines = []
    assert carry_runs.restore(new, folder, echo=lines.append) == 0
    assert lines[0] == "kept runs/s/ln/seed0: finished in this checkout"


def test_restore_refuses_a_changed_config_or_checkpoint_and_never_goes_backwards(tmp_path, data_path):
    cfg = tiny(max_iters=12, checkpoint_interval=4)
    old, folder = tmp_path / "old", tmp_path / "carry"
    run = old / "runs" / "s" / "ln" / "seed0"
    train(cfg, run, data_path, progress=False, until_step=5)  # checkpointed at step 5
    carry_runs.save(old, folder, echo=quiet)
    carried = folder / "runs" / "s" / "ln" / "seed0"

    further = tmp_path / "further"  # this checkout got past the carried step: keep it
    train(cfg, further / "runs" / "s" / "ln" / "seed0", data_path, progress=False, until_step=9)
    before = (further / "runs" / "s" / "ln" / "seed0" / "ckpt.pt").read_bytes()
    lines = []
    assert carry_runs.restore(further, folder, echo=lines.append) == 0
    assert lines[0] == "kept runs/s/ln/seed0: this checkout's checkpoint is at or past step 5"
    assert (further / "runs" / "s" / "ln" / "seed0" / "ckpt.pt").read_bytes() == before

    other = tmp_path / "other"  # another config in the same place: refused, nothing written
    target = other / "runs" / "s" / "ln" / "seed0"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}\n")
    lines = []
    assert carry_runs.restore(other, folder, echo=lines.append) == 1
    assert lines[0] == "refused runs/s/ln/seed0: this checkout's config.json differs from the carried one"
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]

    (carried / "ckpt.pt").write_bytes(b"damaged")  # the carried checkpoint changed since it was saved
    fresh = tmp_path / "fresh"
    (fresh / "runs").mkdir(parents=True)
    lines = []
    assert carry_runs.restore(fresh, folder, echo=lines.append) == 1
    assert lines[0] == "refused runs/s/ln/seed0: the carried checkpoint's sha256 is not the one saved"
    assert not (fresh / "runs" / "s").exists()


def test_a_carry_folder_inside_the_checkout_or_without_a_manifest_is_refused(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match="lies inside the checkout"):
        carry_runs.save(tmp_path, tmp_path / "carry", echo=quiet)
    assert not (tmp_path / "carry").exists() and not (tmp_path / "carry.saving").exists()
    empty = tmp_path.parent / (tmp_path.name + "-empty")
    empty.mkdir()
    try:
        with pytest.raises(SystemExit, match="no carry.json in .*; allowed: a folder written by"):
            carry_runs.restore(tmp_path, empty, echo=quiet)
    finally:
        shutil.rmtree(empty)


def test_save_replaces_only_an_empty_folder_or_an_earlier_carry_never_a_file_or_a_folder_of_other_files(tmp_path):
    """save swaps in a whole new folder: pointed at a folder of notes or at a file it refuses and deletes nothing."""
    repo = tmp_path / "repo"
    (repo / "runs").mkdir(parents=True)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me too")
    for target, why in ((precious, "holds files but no carry.json"), (a_file, "is not a folder")):
        with pytest.raises(SystemExit, match=why):
            carry_runs.save(repo, target, echo=quiet)
    assert (precious / "notes.txt").read_text() == "keep me" and a_file.read_text() == "keep me too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "precious", "repo"]
    carry = tmp_path / "carry"
    carry_runs.save(repo, carry, echo=quiet)  # new; then an earlier carry is replaced whole
    carry_runs.save(repo, carry, echo=quiet)
    assert sorted(p.name for p in carry.iterdir()) == ["carry.json"]


@pytest.mark.parametrize("runs", [[5], [{"x": 1}], [{"run": "runs/s/ln/seed0", "step": "5", "ckpt_sha256": "a"}]])
def test_a_carry_manifest_with_a_malformed_entry_is_refused_in_one_line_by_list_and_restore(tmp_path, runs, capsys):
    folder = tmp_path / "carry"
    folder.mkdir()
    (folder / "carry.json").write_text(json.dumps({"commit": "abc", "runs": runs}))
    for argv in (["list", str(folder)], ["restore", str(folder), "--any-commit"]):
        with pytest.raises(SystemExit, match="invalid entry .* allowed: run \\(a path\\), step"):
            carry_runs.main(argv)


@pytest.mark.parametrize("argv,why", [(["save", "X", "--study", "prose"], "--study 'prose' is read by land only"),
                                      (["list", "X", "--any-commit"], "--any-commit is read by restore only")])
def test_an_option_the_action_does_not_read_is_refused_not_ignored(tmp_path, capsys, argv, why):
    with pytest.raises(SystemExit):
        carry_runs.main([a.replace("X", str(tmp_path / "carry")) for a in argv])
    assert why in capsys.readouterr().err
    assert not (tmp_path / "carry").exists()


@pytest.mark.parametrize("study", ["", "../runs", "s/ln", " s"])
def test_land_refuses_a_study_that_is_no_plain_folder_name(tmp_path, study):
    """An empty --study once landed every study; '../runs' found nothing and said so as a success."""
    source = tmp_path / "wt"
    (source / "runs" / "s" / "ln").mkdir(parents=True)
    with pytest.raises(SystemExit, match="invalid --study .*allowed: a study folder there"):
        carry_runs.land(tmp_path / "repo", source, study, echo=quiet)


@pytest.mark.parametrize("run", ["runs/../../outside/ln/seed0", "/tmp/elsewhere/ln/seed0", "other/ln/seed0", "runs"])
def test_restore_refuses_a_carried_path_that_leaves_runs(tmp_path, run):
    """carry.json is a file anyone can edit: a run path with '..', an absolute one or one outside runs/ writes nothing."""
    from embnorm_lib.core.corpora.data import sha256_of

    repo, folder = tmp_path / "repo", tmp_path / "carry"
    (repo / "runs").mkdir(parents=True)
    source = folder / "runs" / "s" / "ln" / "seed0"
    source.mkdir(parents=True)
    (source / "ckpt.pt").write_bytes(b"not a checkpoint")
    (source / "config.json").write_text("{}")
    entry = {"run": run, "step": 5, "ckpt_sha256": sha256_of(source / "ckpt.pt")}
    (folder / "carry.json").write_text(json.dumps({"commit": carry_runs.git_commit(tmp_path), "runs": [entry]}))
    before = sorted(p for p in tmp_path.rglob("*"))
    lines = []
    assert carry_runs.restore(repo, folder, echo=lines.append) == 1
    assert lines[0].startswith("refused: invalid ") and "allowed:" in lines[0]
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_restore_refuses_a_checkpoint_that_is_not_a_torch_file_even_when_its_hash_matches(tmp_path):
    from embnorm_lib.core.corpora.data import sha256_of

    repo, folder = tmp_path / "repo", tmp_path / "carry"
    (repo / "runs").mkdir(parents=True)
    source = folder / "runs" / "s" / "ln" / "seed0"
    source.mkdir(parents=True)
    (source / "ckpt.pt").write_bytes(b"#!/bin/sh\necho not a checkpoint\n")
    (source / "config.json").write_text("{}")
    entry = {"run": "runs/s/ln/seed0", "step": 5, "ckpt_sha256": sha256_of(source / "ckpt.pt")}
    (folder / "carry.json").write_text(json.dumps({"commit": carry_runs.git_commit(tmp_path), "runs": [entry]}))
    lines = []
    assert carry_runs.restore(repo, folder, echo=lines.append) == 1
    assert "not a training checkpoint" in lines[0]
    assert not (repo / "runs" / "s").exists()


def _checkout(repo) -> str:
    """A git checkout with one commit and a runs/ folder; its HEAD."""
    import subprocess

    (repo / "runs").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "registered"], check=True)
    return _git_head(repo)


def _git_head(repo) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_path):
    """One finished tiny run, trained once for this module's landing tests (each copies it)."""
    run = tmp_path_factory.mktemp("trained") / "seed0"
    train(tiny(max_iters=4), run, data_path, progress=False)
    return run


def _finished_in(source, arm, trained, commit):
    """A finished, sealed run of `source` trained at `commit`, with the executed notebook a sweep of an older commit
    leaves (papermill's paths absolute), a stray checkpoint and a lock file."""
    from embnorm_lib.core.records.seal import reseal

    run = source / "runs" / "s" / arm / "seed0"
    shutil.copytree(trained, run)
    summary = json.loads((run / "summary.json").read_text())
    summary["git_commit"] = commit
    (run / "summary.json").write_text(json.dumps(summary))
    reseal(carry_runs.RunDir(run), "summary.json")
    notebook = {"cells": [], "metadata": {"papermill": {"input_path": str(source / "notebooks" / "02_train.ipynb"),
                                                        "output_path": str(run / "02_train.ipynb")}},
                "nbformat": 4, "nbformat_minor": 5}
    (run / "02_train.ipynb").write_text(json.dumps(notebook))
    (run / "ckpt.pt").write_bytes(b"weights stay local")
    (run / ".lock").write_bytes(b"")
    return run


def test_land_copies_a_worktrees_finished_runs_sealed_without_weights_and_with_checkout_relative_paths(tmp_path,
                                                                                                       trained,
                                                                                                       data_path):
    from embnorm_lib.core.records.seal import verify_run

    source, repo = tmp_path / "wt", tmp_path / "main"
    run = _finished_in(source, "ln", trained, _checkout(repo))
    train(tiny(max_iters=8, checkpoint_interval=4), source / "runs" / "s" / "none" / "seed0", data_path,
          progress=False, until_step=5)  # unfinished: stays where it trains

    lines = []
    assert carry_runs.land(repo, source, echo=lines.append) == 0
    landed = repo / "runs" / "s" / "ln" / "seed0"
    assert lines[0] == "landed runs/s/ln/seed0"
    assert not (repo / "runs" / "s" / "none").exists()
    assert sorted(p.name for p in landed.iterdir()) == sorted(
        p.name for p in run.iterdir() if p.name not in ("ckpt.pt", "model.pt", ".lock", ".cell.lock"))
    assert "ckpt.pt" not in {p.name for p in landed.iterdir()}
    verify_run(carry_runs.RunDir(landed))
    papermill = json.loads((landed / "02_train.ipynb").read_text())["metadata"]["papermill"]
    assert papermill == {"input_path": "notebooks/02_train.ipynb", "output_path": "runs/s/ln/seed0/02_train.ipynb"}
    assert not (run / ".cell.lock").exists()  # looking at the cell leaves no lock file behind

    other = _finished_in(source, "rms", trained, _git_head(repo))  # a parameter naming the worktree's path
    notebook = json.loads((other / "02_train.ipynb").read_text())
    notebook["metadata"]["papermill"]["parameters"] = {"data_path": str(source / "data" / "corpus.txt")}
    (other / "02_train.ipynb").write_text(json.dumps(notebook))
    lines = []
    assert carry_runs.land(repo, source, echo=lines.append) == 1
    assert lines[0].startswith(f"refused runs/s/rms/seed0: its notebook names {source.resolve()} beyond")
    assert not (repo / "runs" / "s" / "rms").exists()

    shutil.rmtree(other)
    with pytest.raises(SystemExit, match="invalid --study 'nope': no runs/nope in .*; allowed: a study folder"):
        carry_runs.land(repo, source, "nope", echo=quiet)
    lines = []  # one study only: another study's run stays where it is
    shutil.copytree(run, source / "runs" / "t" / "ln" / "seed0")
    assert carry_runs.land(repo, source, "s", echo=lines.append) == 0
    assert not (repo / "runs" / "t").exists() and lines[-1].endswith(": 0 landed, 1 already here, 0 refused")
    shutil.rmtree(source / "runs" / "t")
    lines = []  # landing again keeps what is here
    assert carry_runs.land(repo, source, echo=lines.append) == 0
    assert len(lines) == 1 and lines[0].endswith(": 0 landed, 1 already here, 0 refused")


def test_land_refuses_a_damaged_seal_a_dirty_or_foreign_commit_and_a_cell_a_sweep_owns(tmp_path, trained):
    source, repo = tmp_path / "wt", tmp_path / "main"
    head = _checkout(repo)
    damaged = _finished_in(source, "ln", trained, head)
    with open(damaged / "evals.jsonl", "a") as f:
        f.write("{}\n")
    _finished_in(source, "rms", trained, head + "-dirty")
    _finished_in(source, "none", trained, "0" * 40)
    owned = _finished_in(source, "scaled", trained, head)
    from embnorm_lib.core.records.seal import file_record

    odd_summary = _finished_in(source, "ln_tag=a", trained, head)  # its seal agrees, but it is not a summary
    (odd_summary / "summary.json").write_text("[1, 2]")
    manifest = json.loads((odd_summary / "manifest.json").read_text())
    manifest["files"]["summary.json"] = file_record(odd_summary / "summary.json")
    (odd_summary / "manifest.json").write_text(json.dumps(manifest))
    odd_notebook = _finished_in(source, "ln_tag=b", trained, head)
    (odd_notebook / "02_train.ipynb").write_text("not json")
    (source / "runs" / "s" / "linked").mkdir()
    (source / "runs" / "s" / "linked" / "seed0").symlink_to(owned)
    (source / "runs" / "summary.json").write_text("{}")  # not a run directory: not a run
    cell = carry_runs.RunDir(owned).cell_lock()
    assert cell.acquire()
    lines = []
    try:
        assert carry_runs.land(repo, source, echo=lines.append) == 1
    finally:
        cell.release()
    refusals = dict(line.split(": ", 1) for line in lines if line.startswith("refused"))
    assert "evals.jsonl" in refusals["refused runs/s/ln/seed0"]
    assert refusals["refused runs/s/rms/seed0"].endswith("allowed: a clean commit of this repository")
    assert "not in this checkout's history" in refusals["refused runs/s/none/seed0"]
    assert refusals["refused runs/s/scaled/seed0"].startswith("a sweep still owns its cell")
    assert refusals["refused runs/s/ln_tag=a/seed0"].startswith("summary.json is not a JSON object; allowed:")
    assert refusals["refused runs/s/ln_tag=b/seed0"].startswith("02_train.ipynb is not JSON; allowed:")
    assert refusals["refused runs/s/linked/seed0"].startswith("it is a link; allowed:")
    assert lines[-1].endswith("7 finished run(s) in " + str(source.resolve()) + ": 0 landed, 0 already here, 7 refused")
    assert not (repo / "runs" / "s").exists() or not any((repo / "runs" / "s").rglob("*"))


def test_land_refuses_its_own_checkout(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match="cannot land from .*; allowed: another checkout"):
        carry_runs.land(tmp_path, tmp_path, echo=quiet)


def test_lm_eval_adapter_refuses_a_study_path(capsys):
    from embnorm_lib.core.scoring import lm_eval_adapter

    assert lm_eval_adapter.main(["../evil"]) == 2
    assert "invalid study='../evil'" in capsys.readouterr().err


def test_restore_refuses_a_checkout_at_another_commit(tmp_path, monkeypatch):
    """Restored into the main checkout instead of the worktree the runs were trained in (it happened), a run would
    resume under another commit's code; refused in one line naming both commits."""
    folder = tmp_path / "carry"
    folder.mkdir()
    (folder / "carry.json").write_text(json.dumps({"commit": "a" * 40, "repo": "/elsewhere", "runs": []}))
    monkeypatch.setattr(carry_runs, "git_commit", lambda repo: "b" * 40)
    lines = []
    assert carry_runs.restore(tmp_path / "checkout", folder, echo=lines.append) == 1
    assert len(lines) == 1 and "aaaaaaaaaaaa" in lines[0] and "bbbbbbbbbbbb" in lines[0]
    assert carry_runs.restore(tmp_path / "checkout", folder, echo=lines.append, any_commit=True) == 0
