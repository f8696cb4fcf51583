import json
import os
import subprocess
import sys

import nbformat
import pandas as pd
import pytest
from conftest import REPO

from embnorm_lib import studies
from embnorm_lib.core.notebook import FIGURE_NOT_DRAWN
from embnorm_lib.core.records.io import read_jsonl
from embnorm_lib.runner import reuse, sweep

# one seed, two variants: every notebook execution costs a kernel start (the seed axis is covered by studies.grid)
GRID = ["--preset", "tiny", "--variants", "none,ln", "--seeds", "0", "--set", "max_iters=6",
        "--set", "eval_interval=3"]


def run_cli(args, data_path, timeout=600):
    return subprocess.run([sys.executable, "-m", "embnorm_lib", "sweep", *args, "--data-path", data_path],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_grid_builds_tags_for_extra_axes():
    cells = studies.grid("s", "tiny", ["none", "layernorm"], [0, 1], fixed={"max_iters": 5},
                       axes={"lr": [1e-3, 3e-3]})
    assert len(cells) == 8
    assert {c.variant for c in cells} == {"none", "ln"}
    assert {c.tag for c in cells} == {"_lr=0.001", "_lr=0.003"}
    assert cells[0].config().max_iters == 5
    assert len(studies.study_cells("seeds-final")) == 15 and len(studies.study_cells("main")) == 45
    with pytest.raises(ValueError, match="unknown study 'nope'"):
        studies.study_cells("nope")


def test_parallelism_defaults_fill_the_machine():
    cores = os.cpu_count()
    assert sweep.resolve_parallelism(0, 0) == (cores, 1)
    assert sweep.resolve_parallelism(1, 0) == (1, cores)
    assert sweep.resolve_parallelism(0, cores) == (1, cores)


def test_sweep_runs_all_cells_indexes_them_and_is_idempotent(tmp_path, data_path, capsys):
    out = tmp_path / "runs"
    first = run_cli(["tgrid", *GRID, "--out-dir", str(out)], data_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # the kernels use IPC sockets and log at ERROR (runner/kernels.py): ipykernel's warning about local TCP never shows
    assert "Kernel is running over TCP" not in first.stderr
    table = pd.read_csv(out / "tgrid" / "runs.csv")
    assert len(table) == 2 and set(table["variant"]) == {"none", "ln"} and set(table["seed"]) == {0}
    assert {"cfg.lr", "val_loss", "val_acc", "ece_equal_width", "git_commit"} <= set(table.columns)
    for run_dir in (out / "tgrid").glob("*/seed*"):
        nb = nbformat.read(run_dir / "02_train.ipynb", as_version=4)  # executed copy kept with the run
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in code)
        assert any("val_loss" in o.get("text", "") for c in code for o in c.outputs)
        # kept small: figures are redrawn from the logs, so none is stored
        assert not any(k.startswith("image/") for c in code for o in c.outputs for k in o.get("data", {}))
        assert any(FIGURE_NOT_DRAWN in o.get("text", "") for c in code for o in c.outputs)
    # the same command again, in this process (nothing to train: no worker or kernel starts)
    assert sweep.main(["tgrid", *GRID, "--out-dir", str(out), "--data-path", data_path]) == 0
    assert "nothing to execute" in capsys.readouterr().out
    log = read_jsonl(out / "tgrid" / "sweeps.jsonl")
    assert len(log) == 1 and log[0]["executed"] == 2

    # another study with the same cells copies the finished runs instead of training them again
    fixed = {"max_iters": 6, "eval_interval": 3}
    copies = studies.grid("tcopy", "tiny", ["none", "ln"], [0], fixed=fixed)
    report = sweep.run_sweep(copies, out, data_path, echo=lambda *a: None)
    assert [r["status"] for r in report.results] == ["reused"] * 2
    for cell in copies:
        source = studies.grid("tgrid", "tiny", [cell.variant], [cell.seed], fixed=fixed)[0].run_dir(out)
        target = cell.run_dir(out)
        assert (target / "metrics.parquet").read_bytes() == (source / "metrics.parquet").read_bytes()
        assert json.loads((target / "reused_from.json").read_text())["run_dir"] == str(source.relative_to(out))
        assert not (target / "ckpt.pt").exists()
    assert pd.read_csv(out / "tcopy" / "runs.csv")["reused_from"].str.startswith("tgrid/").all()
    assert read_jsonl(out / "tcopy" / "sweeps.jsonl")[0]["reused"] == 2
    # a cell that differs in anything that shapes training is not a copy
    other = studies.grid("tother", "tiny", ["none"], [0], fixed={**fixed, "lr": 2e-3})[0]
    assert reuse.reuse_identical_run(other, out, 1, reuse.finished_runs_by_identity(out)) is None
    assert not other.run_dir(out).exists()


@pytest.mark.slow  # 15 s; test_sweep_safety's malformed-file test covers a failing cell beside finishing ones
def test_a_failing_cell_is_reported_and_the_others_finish(tmp_path, data_path):
    out = tmp_path / "runs"
    conflicting = out / "tfail" / "ln" / "seed1"
    conflicting.mkdir(parents=True)
    (conflicting / "config.json").write_text(json.dumps({**studies.grid("tfail", "tiny", ["ln"], [1])[0]
                                                         .config().to_dict(), "lr": 0.5}))
    (conflicting / "ckpt.pt").write_bytes(b"a checkpoint of that other run")  # a config alone would not bar it
    grid = ["--preset", "tiny", "--variants", "none,ln", "--seeds", "1", "--set", "max_iters=6", "--set", "eval_interval=3"]
    done = run_cli(["tfail", *grid, "--out-dir", str(out)], data_path)
    assert done.returncode == 1
    assert "1 run(s) failed" in done.stdout and "ln seed1" in done.stdout and "ResumeError" in done.stdout
    assert pd.read_csv(out / "tfail" / "runs.csv")["run_dir"].tolist() == ["none/seed1"]  # the other cell finished
    failed_nb = nbformat.read(conflicting / "02_train.ipynb", as_version=4)
    assert any(o.get("ename") == "ResumeError" for c in failed_nb.cells if c.cell_type == "code" for o in c.outputs)


def test_invalid_grid_is_refused_before_anything_runs(tmp_path, data_path, capsys):
    from embnorm_lib.core.errors import entry

    argv = ["tbad", "--preset", "tiny", "--axis", "lr=0.001,-1", "--out-dir", str(tmp_path), "--data-path", data_path]
    assert entry(sweep.main, argv) == 2 and "invalid lr=-1" in capsys.readouterr().err
    assert not (tmp_path / "tbad").exists()


def test_only_narrows_a_study_to_the_matching_cells_and_refuses_text_that_matches_none(tmp_path, capsys):
    cells = studies.study_cells("ladder")
    kept = sweep.only_cells(cells, "preset=ladder-0", tmp_path)
    assert kept and len(kept) < len(cells) and all(c.preset == "ladder-0" for c in kept)
    assert sweep.only_cells(cells, "", tmp_path) == cells
    fresh_seeds = studies.study_cells("ladder-bpe-rep2")  # seeds 5-14
    assert {c.seed for c in sweep.only_cells(fresh_seeds, "seed1", tmp_path)} == {10, 11, 12, 13, 14}
    assert {c.seed for c in sweep.only_cells(fresh_seeds, "seed10/", tmp_path)} == {10}  # '/' ends the name
    assert sweep.main(["ladder", "--only", "nope", "--list", "--out-dir", str(tmp_path)]) == 2
    assert "invalid --only 'nope'" in capsys.readouterr().err and not (tmp_path / "ladder").exists()
    # given twice, both hold (a rung and one seed of it), in either order
    for first, second in (("preset=ladder-1", "seed2/"), ("seed2/", "preset=ladder-1")):
        assert sweep.main(["ladder", "--only", first, "--only", second, "--list", "--out-dir", str(tmp_path)]) == 0
        listed = [line for line in capsys.readouterr().out.splitlines() if "ladder-" in line]
        assert len(listed) == 3 and all("preset=ladder-1" in line and "seed2" in line for line in listed), listed
    assert sweep.main(["ladder", "--only", "preset=ladder-1", "--only", "seed9/", "--list",
                       "--out-dir", str(tmp_path)]) == 2
    assert "invalid --only 'seed9/'" in capsys.readouterr().err


def test_seeds_narrows_a_named_study_to_those_seeds_and_refuses_one_it_does_not_register(tmp_path, capsys):
    """The seeds of one size that move to a GPU together (amendment 15, item 3) are chosen by --seeds."""
    assert sweep.main(["ladder", "--only", "preset=ladder-1", "--seeds", "2-4", "--list",
                       "--out-dir", str(tmp_path)]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if "ladder-" in line]
    assert len(listed) == 9 and {line.split("seed")[-1].split()[0] for line in listed} == {"2", "3", "4"}, listed
    assert sweep.main(["ladder", "--seeds", "7", "--list", "--out-dir", str(tmp_path)]) == 2
    assert "seed 7 is not registered here; allowed: 0, 1, 2, 3, 4" in capsys.readouterr().err
    assert not (tmp_path / "ladder").exists()


def test_slim_notebook_keeps_what_a_terminal_shows_and_drops_figures_and_timestamps(tmp_path):
    from embnorm_lib.runner.jobs import FIGURE_NOT_KEPT, slim_notebook

    nb = nbformat.v4.new_notebook(metadata={"widgets": {"state": {}}})
    papermill = {"duration": 1.5, "start_time": "2026-11-29T00:00:00Z", "end_time": "2026-11-29T00:00:01.5Z",
                 "exception": False, "status": "completed"}
    cell = nbformat.v4.new_code_cell("train()", metadata={"execution": {"iopub.status.busy": "2026-11-29T00:00:00Z"},
                                                           "papermill": papermill})
    failed = nbformat.v4.new_code_cell("1/0", metadata={"papermill": {**papermill, "exception": True,
                                                                        "status": "failed"}})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="step 0 val_loss 4.2\n"),
                    nbformat.v4.new_output("execute_result", data={"text/html": "<table><tr><td>4.2</td></tr></table>",
                                                                   "text/plain": "   val_loss\n0       4.2"}),
                    nbformat.v4.new_output("stream", name="stderr", text="\r  0%|     | 0/100"),
                    nbformat.v4.new_output("stream", name="stderr", text="\r100%|#####| 100/100\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="step 50 val_loss 3.1\n"),
                    nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})]
    nb.cells = [cell, failed]
    path = tmp_path / "02_train.ipynb"
    nbformat.write(nb, path)
    indented = path.stat().st_size
    assert slim_notebook(path)
    assert path.stat().st_size < indented and path.read_text().count("\n") == 1  # compact JSON, one line
    out = nbformat.read(path, as_version=4)
    kept = out.cells[0]
    assert [(o.output_type, o.get("name"), o.get("text")) for o in kept.outputs[:4]] == [
        ("stream", "stdout", "step 0 val_loss 4.2\n"), ("execute_result", None, None),
        ("stream", "stderr", "100%|#####| 100/100\n"), ("stream", "stdout", "step 50 val_loss 3.1\n")]
    assert kept.outputs[1].data == {"text/plain": "   val_loss\n0       4.2"}  # the table as text, not twice
    assert kept.outputs[4].data == {"text/plain": FIGURE_NOT_KEPT}
    assert "execution" not in kept.metadata and kept.metadata.papermill == {"duration": 1.5}
    assert out.cells[1].metadata.papermill == {"duration": 1.5, "exception": True, "status": "failed"}
    nbformat.validate(out)
    assert "widgets" not in out.metadata
    assert not slim_notebook(path)  # a slim notebook stays as it is


def test_a_resumed_runs_result_line_says_so_instead_of_a_negative_overhead():
    from embnorm_lib.runner.sweep import _result_line

    fresh = {"status": "ok", "cell": "ln seed0", "val_loss": 1.75, "seconds": 500.0, "train_wall_s": 430.0}
    assert "70.0 s outside the train loop" in _result_line(fresh)
    resumed = {**fresh, "seconds": 134.2, "train_wall_s": 510.0}
    line = _result_line(resumed)
    assert "resumed: its train loop's 510.0 s include the time before it stopped" in line and "-" not in line.split("(")[1]


@pytest.mark.slow  # ~22 s end to end; the rule itself is the next test's, in the default suite
def test_a_relative_data_path_is_read_from_the_callers_directory_not_the_kernels(tmp_path, data_path):
    """The kernel runs in notebooks/, so `--data-path data/x.txt` (the GUIDE's command) failed there with 'data file
    not found'; the sweep resolves it where it was typed."""
    out = tmp_path / "runs"
    data = os.path.realpath(data_path)
    done = subprocess.run([sys.executable, "-m", "embnorm_lib", "sweep", "trel", "--preset", "tiny", "--variants", "none",
                           "--seeds", "0", "--set", "max_iters=2", "--out-dir", str(out),
                           "--data-path", os.path.basename(data)],
                          cwd=os.path.dirname(data), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (out / "trel" / "none" / "seed0" / "summary.json").is_file()


def test_the_notebook_gets_a_checkout_file_relative_to_its_folder_and_an_outside_one_absolute(tmp_path, monkeypatch):
    from embnorm_lib.core.records.io import repo_root
    from embnorm_lib.runner.jobs import kernel_data_path

    root = repo_root().resolve()
    monkeypatch.chdir(root)
    assert kernel_data_path("data/open-english.txt", root / "notebooks") == os.path.join("..", "data", "open-english.txt")
    assert kernel_data_path(None, root / "notebooks") == "" == kernel_data_path("", root / "notebooks")
    monkeypatch.chdir(tmp_path)
    assert kernel_data_path("x.txt", root / "notebooks") == str((tmp_path / "x.txt").resolve())


def test_slim_notebook_writes_papermills_paths_relative_to_the_checkout(tmp_path):
    """The sweep hands papermill absolute paths; kept as they are, the executed copy named the machine's folder
    (test_no_packed_notebook_names_an_absolute_path caught two such runs of a worktree)."""
    from embnorm_lib.core.records.io import repo_root
    from embnorm_lib.runner.jobs import slim_notebook

    root = repo_root().resolve()
    nb = nbformat.v4.new_notebook(metadata={"papermill": {
        "input_path": str(root / "notebooks" / "02_train.ipynb"),
        "output_path": str(root / "runs" / "s" / "ln" / "seed0" / "02_train.ipynb")}})
    path = tmp_path / "02_train.ipynb"
    nbformat.write(nb, path)
    slim_notebook(path)
    record = nbformat.read(path, as_version=4).metadata.papermill
    assert record == {"input_path": "notebooks/02_train.ipynb", "output_path": "runs/s/ln/seed0/02_train.ipynb"}
    outside = nbformat.v4.new_notebook(metadata={"papermill": {"input_path": str(tmp_path / "x.ipynb")}})
    nbformat.write(outside, path)
    slim_notebook(path)  # a notebook outside the checkout keeps its path: nothing to be relative to
    assert nbformat.read(path, as_version=4).metadata.papermill == {"input_path": str(tmp_path / "x.ipynb")}


def test_a_fleet_is_refused_on_a_machine_without_cuda_in_one_line(tmp_path, capsys, monkeypatch):
    """On CPU a fleet is slower than the plain sweep (bench's fleet_speedup), so the command line refuses it there."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert sweep.main(["tfleet", "--preset", "tiny", "--seeds", "0", "--fleet", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid --fleet on a machine without CUDA") and err.count("\n") == 1, err
    assert "allowed: the same command without --fleet" in err and not (tmp_path / "tfleet").exists()
    sweep.check_fleet_device(False)  # the plain sweep is never refused


def test_the_retired_packing_switch_is_gone():
    with pytest.raises(SystemExit):
        sweep.parser().parse_args(["t", "--pack", "on"])
