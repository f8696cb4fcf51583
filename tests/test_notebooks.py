import json
import subprocess
from pathlib import Path

import nbformat
import papermill as pm
import pytest
from conftest import REPO

from embnorm_lib.runner.kernels import execute_notebook

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_are_clean_and_have_a_kernelspec(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"


def cells_of(nb) -> list[tuple[str, str, list]]:
    return [(c.cell_type, c.source, sorted(c.metadata.get("tags", []))) for c in nb.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_in_sync_with_their_jupytext_source(path):
    """Each notebook is authored as notebooks/<name>.py (jupytext percent format, lintable) and paired with its
    .ipynb (papermill, JupyterLab, Kaggle); an edit to one side alone fails here. Re-pair with
    `jupytext --sync notebooks/*.ipynb`."""
    import jupytext

    source = path.with_suffix(".py")
    assert source.is_file(), f"{path.name} has no paired source {source.name}"
    assert cells_of(jupytext.read(source)) == cells_of(nbformat.read(path, as_version=4)), \
        f"{path.name} and {source.name} differ: run `jupytext --sync notebooks/*.ipynb`"


def test_the_sync_check_sees_an_edit_on_one_side(tmp_path):
    import jupytext

    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    edited = nbformat.read(NOTEBOOKS[0], as_version=4)
    edited.cells[-1].source += "\n# an edit made in JupyterLab only"
    assert cells_of(jupytext.read(NOTEBOOKS[0].with_suffix(".py"))) == cells_of(nb)
    assert cells_of(edited) != cells_of(nb)


def test_train_notebook_declares_its_parameters():
    params = pm.inspect_notebook(str(REPO / "notebooks" / "02_train.ipynb"))
    for name in ("variant", "seed", "preset", "max_iters", "study", "out_dir", "data_path"):
        assert name in params, name
    assert params["seed"]["default"] == "0" and params["max_iters"]["default"] == "0"


# From notebooks/ as well in `pytest -m slow`: every sweep in the default suite executes 02_train with its kernel
# there (sweep.TRAIN_NOTEBOOK's folder), so that working directory is covered without a second kernel here.
@pytest.mark.parametrize("cwd", [REPO, pytest.param(REPO / "notebooks", marks=pytest.mark.slow)],
                         ids=["from-repo-root", "from-notebooks"])
def test_design_card_command_runs_and_leaves_a_valid_run_dir(tmp_path, data_path, cwd):
    notebook = Path("notebooks/02_train.ipynb") if cwd == REPO else Path("02_train.ipynb")
    out_nb = tmp_path / "out.ipynb"
    cmd = ["papermill", str(notebook), str(out_nb), "-p", "variant", "ln", "-p", "seed", "3",
           "-p", "preset", "tiny", "-p", "max_iters", "4", "-p", "study", "pmtest", "-p", "out_dir",
           str(tmp_path / "runs"), "-p", "data_path", data_path, "-p", "progress", "False"]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = tmp_path / "runs" / "pmtest" / "ln" / "seed3"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["variant"] == "ln" and summary["seed"] == 3 and summary["steps"] == 4
    config = json.loads((run_dir / "config.json").read_text())
    assert config["preset"] == "tiny" and config["max_iters"] == 4
    executed = nbformat.read(out_nb, as_version=4)
    text_outputs = sum(len(o.get("text", "")) for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert text_outputs < 5000  # no per-step spam


def test_data_notebook_runs(tmp_path, data_path):
    execute_notebook(str(REPO / "notebooks" / "01_data.ipynb"), str(tmp_path / "data.ipynb"),
                     parameters=dict(data_path=data_path, figures_dir=str(tmp_path / "fig")),
                     progress_bar=False, cwd=str(REPO / "notebooks"), execution_timeout=600)
    assert (tmp_path / "fig" / "char_classes.png").stat().st_size > 1000
    # issue 116 #5: no absolute path and no repr (a raw dict, [PosixPath(...)]) in what the notebook shows
    executed = nbformat.read(tmp_path / "data.ipynb", as_version=4)
    shown = json.dumps([o for c in executed.cells if c.cell_type == "code" for o in c.outputs])
    assert "PosixPath(" not in shown and str(REPO) not in shown and "{'path'" not in shown
    assert "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed" in shown  # the checksum in full


def test_kaggle_quickstart_installs_only_what_the_image_lacks():
    """Runs the notebook's setup cell against a fake image that has everything but statsmodels: it installs
    statsmodels alone (never torch or the repo's pins) and says no restart is needed."""
    import subprocess as sp
    from unittest import mock

    from embnorm_lib.core import quickstart

    nb = nbformat.read(REPO / "notebooks" / "kaggle_quickstart.ipynb", as_version=4)
    setup = next(c.source for c in nb.cells if c.cell_type == "code" and "missing_packages()" in c.source)
    image = {p: "1.0" for p in (*quickstart.RUN_PACKAGES, "torch") if p != "statsmodels"}

    def version(name):
        if name not in image:
            raise quickstart.metadata.PackageNotFoundError(name)
        return image[name]

    calls = []

    def pip(cmd, **kw):
        calls.append(cmd)
        image.update({p: "0.15" for p in cmd if p in quickstart.RUN_PACKAGES})

    with mock.patch.object(quickstart.metadata, "version", side_effect=version), \
            mock.patch.object(sp, "run", side_effect=pip):
        namespace = {"repo_url": ""}
        exec(compile(setup, "setup-cell", "exec"), namespace)
    assert len(calls) == 1 and calls[0][-1] == "statsmodels" and "torch" not in " ".join(calls[0])
    assert namespace["changed"] == []  # nothing the kernel had loaded changed: no restart


# Every bad value but the data path goes through the notebook's own configuration cell (the data path is refused
# where training reads it). Under papermill, one probe per cell that refuses (configuration, training) checks that
# the refusal is papermill's last line: every other refusal is the same ConfigError through the same one-line hook.
BAD_DATA_PATH = (dict(data_path=5), "ConfigError: invalid data_path=5; allowed: a text file's path as text")
BAD_PARAMETERS = [
    (dict(seed=3.5), "ConfigError: invalid seed=3.5; allowed: an integer"),
    (dict(run_tag="/../../y"), "ConfigError: invalid run_tag='/../../y'"),
    (dict(figures="no"), "ConfigError: invalid figures='no'; allowed: True or False"),  # text read as True
    (dict(progress="maybe"), "ConfigError: invalid progress='maybe'; allowed: True or False"),  # issue 116 #7
    # issue 117, items 8-9: each of these trained (a run named for another lr, arm `none` for Python's None) or ended
    # in a traceback from deep inside training
    (dict(run_tag="_lr=0.5"), "ConfigError: invalid run_tag='_lr=0.5': this run's lr is 0.001; allowed: "),
    (dict(variant=None), "ConfigError: unknown variant None; allowed: layernorm, ln, "),
    (dict(out_dir=5), "ConfigError: invalid out_dir=5; allowed: a directory path as text"),
    (dict(out_dir="/proc/nope"), "ConfigError: invalid out_dir '/proc/nope': cannot write in /proc"),
]


def _good_parameters(tmp_path, data_path) -> dict:
    return dict(variant="ln", preset="tiny", out_dir=str(tmp_path / "runs"), data_path=data_path, progress=False)


@pytest.mark.parametrize("params,message", BAD_PARAMETERS)
def test_bad_notebook_parameters_are_refused_by_the_notebooks_configuration_cell(tmp_path, data_path, params,
                                                                                  message):
    """The training notebook's parameters cell and its configuration cell, executed as written in the .ipynb with
    the parameters papermill would inject: the refusal names the bad value, and nothing is written anywhere."""
    from embnorm_lib.core.errors import ConfigError

    nb = nbformat.read(REPO / "notebooks" / "02_train.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    parameters = next(src for src in code if src.lstrip().startswith("variant ="))
    configuration = next(src for src in code if "config_from_parameters(" in src and "run_dir_from_parameters(" in src)
    namespace: dict = {}
    exec(compile(parameters, "parameters", "exec"), namespace)
    namespace.update({**_good_parameters(tmp_path, data_path), **params})
    with pytest.raises(ConfigError) as err:
        exec(compile(configuration, "configuration", "exec"), namespace)
    assert f"ConfigError: {err.value}".startswith(message) and "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "x").exists()


@pytest.mark.parametrize("params,message", [BAD_PARAMETERS[0], BAD_DATA_PATH], ids=["configuration-cell", "training-cell"])
def test_bad_notebook_parameters_are_one_line_refusals_under_papermill(tmp_path, data_path, params, message):
    """Under papermill the refusal is the error's whole traceback (so the last line papermill prints), and
    nothing is written anywhere."""
    out = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        execute_notebook(str(REPO / "notebooks" / "02_train.ipynb"), str(out),
                         progress_bar=False, cwd=str(REPO / "notebooks"),
                         parameters={**_good_parameters(tmp_path, data_path), **params})
    assert len(err.value.traceback) == 1 and err.value.traceback[0].startswith(message)
    assert str(err.value).strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "x").exists()


def test_a_pinned_kernel_keeps_the_code_it_started_with(tmp_path):
    """The training notebook pins the library first: a module edited on disk while a run trains (here plots, which
    the notebook's last cell imports) must not reach the run."""
    import os
    import shutil
    import sys

    shutil.copytree(REPO / "embnorm_lib", tmp_path / "embnorm_lib", ignore=shutil.ignore_patterns("__pycache__"))
    script = "\n".join([
        "import pathlib, sys",
        "from embnorm_lib.core.notebook import pin_library",
        "pin_library()",
        "edited = pathlib.Path(sys.argv[1]) / 'embnorm_lib' / 'publishing' / 'plots.py'",
        "edited.write_text(edited.read_text() + '\\nraise RuntimeError(\"edited after the run started\")\\n')",
        "from embnorm_lib.publishing import plots",
        "print(plots.__file__)"])
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(tmp_path / "embnorm_lib" / "publishing" / "plots.py")
    assert "edited after the run started" in (tmp_path / "embnorm_lib" / "publishing" / "plots.py").read_text()


def test_pinning_reads_the_source_without_importing_it(tmp_path):
    """A pin costs milliseconds: no module is imported by it (plotting stays unloaded in a sweep's kernel that draws
    no figure), and pinning twice adds no second finder."""
    import sys

    script = "\n".join([
        "import sys",
        "from embnorm_lib.core.notebook import pin_library",
        "pin_library(); pin_library()",
        "print(sum(type(f).__name__ == '_PinnedLibrary' for f in sys.meta_path))",
        "print('embnorm_lib.publishing.plots' in sys.modules, 'matplotlib.pyplot' in sys.modules)",
        "from embnorm_lib.publishing import plots",
        "print(type(plots.__loader__).__name__, plots.__spec__.origin == plots.__file__)"])
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["1", "False False", "_PinnedSource True"]


def test_the_smoke_check_and_the_design_card_run_never_share_a_directory(tmp_path, data_path):
    """Issue 116 #2: both wrote runs/adhoc/ln/seed3, so whichever ran second failed on the other's config. A smoke
    run of the default study has its own study; a finished run is announced (shown, not retrained) and another
    config's run is refused in one line that says which way out to take."""
    from conftest import tiny

    from embnorm_lib.core.notebook import existing_run_note, run_dir_from_parameters
    from embnorm_lib.core.training.checkpoint import ResumeError
    from embnorm_lib.core.training.train import train

    out = str(tmp_path / "runs")
    cfg = tiny(variant="ln", seed=3, max_iters=3, eval_windows=8)
    smoke_dir = run_dir_from_parameters(cfg, "adhoc", out, smoke=True)
    card_dir = run_dir_from_parameters(cfg, "adhoc", out)
    assert smoke_dir.parts[-3:] == ("adhoc-smoke", "ln", "seed3") and card_dir.parts[-3:] == ("adhoc", "ln", "seed3")
    assert run_dir_from_parameters(cfg, "mine", out, smoke=True).parts[-3] == "mine"  # a named study is kept
    assert existing_run_note(cfg, card_dir) == ""
    train(cfg, card_dir, data_path, progress=False)
    assert "has finished already: its results are shown below, nothing is trained" in existing_run_note(cfg, card_dir)
    with pytest.raises(ResumeError, match=r"\(max_iters: 3 -> 4\); allowed: the same parameters .* another study "
                                          r"\(-p study NAME, or --study NAME\), or delete that directory") as refused:
        existing_run_note(cfg.replace(max_iters=4), card_dir)
    assert "\n" not in str(refused.value)


def test_the_design_card_says_how_long_it_will_take_from_committed_runs_of_its_config():
    """Issue 116 #4: the design card trains for minutes on a CPU; it says how many before it starts, from the
    committed runs of its own config (never a guess: a config nobody ran gets no estimate)."""
    import statistics

    from embnorm_lib.core.config import preset_config
    from embnorm_lib.core.notebook import recorded_time_note
    from embnorm_lib.core.records.io import read_json

    cfg = preset_config("seeds-final", variant="ln", seed=3)
    note = recorded_time_note(cfg)
    import re

    walls = [read_json(p)["wall_s"] for p in sorted((REPO / "runs").glob("main/ln_preset=seeds-final/seed*/summary.json"))]
    found = re.search(r"about (\d+\.\d) min \(the median of (\d+) committed runs of this config", note)
    assert found and int(found[2]) >= len(walls) == 10  # main's ten and any other study's runs of this config
    assert min(walls) / 60 - 0.05 <= float(found[1]) <= 2 * statistics.median(walls) / 60  # plus lm-eval, not more
    assert recorded_time_note(preset_config("seeds-final", variant="ln", seed=3, max_iters=7)) == ""


def test_lab_works_on_ignored_copies_and_never_touches_the_committed_notebooks(tmp_path, data_path):
    """Issue 116 #1: JupyterLab autosaved edits into notebooks/. `python -m embnorm_lib lab` opens copies in the
    git-ignored lab/ instead: a copy is made once and then kept (the user's edits), and a copy runs as the original."""
    import shutil

    from embnorm_lib.tools.lab import prepare_lab

    (tmp_path / "notebooks").mkdir()
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        shutil.copy2(notebook, tmp_path / "notebooks" / notebook.name)
    before = {p.name: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()}
    lab, copied, kept = prepare_lab(tmp_path)
    assert lab == tmp_path / "lab" and "02_train.ipynb" in copied and kept == []
    edited = nbformat.read(lab / "02_train.ipynb", as_version=4)
    parameters = next(c for c in edited.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source = parameters.source.replace("seed = 0", "seed = 7")
    nbformat.write(edited, lab / "02_train.ipynb")  # what an autosave of an edited parameters cell writes
    _, copied, kept = prepare_lab(tmp_path)
    assert copied == [] and "02_train.ipynb" in kept and "seed = 7" in (lab / "02_train.ipynb").read_text()
    assert {p.name: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()} == before
    ignored = subprocess.run(["git", "check-ignore", "-q", "lab/02_train.ipynb"], cwd=REPO)
    assert ignored.returncode == 0, "lab/ must be git-ignored"


def _quickstart_cells() -> list[str]:
    nb = nbformat.read(REPO / "notebooks" / "kaggle_quickstart.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_kaggle_quickstart_takes_an_uploaded_copy_and_says_where_to_get_a_clone_url(tmp_path, monkeypatch):
    """Issue 116 #5: the quickstart needed a hosted git URL the README never gives. It now says where to get one, and
    takes the folder of an uploaded copy (a Kaggle dataset, read-only: it is copied)."""
    import shutil
    import sys
    from unittest import mock

    from embnorm_lib.core import quickstart

    setup = next(c for c in _quickstart_cells() if "missing_packages()" in c)
    upload = tmp_path / "input" / "embnorm"
    shutil.copytree(REPO / "embnorm_lib", upload / "embnorm_lib", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "working"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ValueError, match=r"^set repo_url; allowed: a git clone URL of your copy of embnorm \(push "):
        exec(compile(setup, "setup-cell", "exec"), {"repo_url": ""})
    with pytest.raises(ValueError, match=r"no embnorm_lib/ in that folder; allowed: a git clone URL"):
        exec(compile(setup, "setup-cell", "exec"), {"repo_url": str(tmp_path)})
    with mock.patch.object(quickstart, "missing_packages", return_value=[]):
        namespace = {"repo_url": str(upload)}
        exec(compile(setup, "setup-cell", "exec"), namespace)
    assert namespace["here"] == work / "embnorm" and (work / "embnorm" / "embnorm_lib" / "core" / "quickstart.py").is_file()


def test_kaggle_quickstart_shows_rendered_tables_and_plain_output(capsys):
    """Issue 116 #5: the sweep cell printed a CompletedProcess repr and every progress line in stderr's red, and the
    summary was a Markdown table printed as raw text."""
    import ast
    import sys

    from IPython.display import Markdown

    from embnorm_lib.core import quickstart

    for source in _quickstart_cells():
        last = ast.parse(source).body[-1]
        assert not (isinstance(last, ast.Expr) and "subprocess.run" in ast.unparse(last)), ast.unparse(last)
    quickstart.run_command([sys.executable, "-c", "import sys; print('ok', file=sys.stderr)"])
    assert capsys.readouterr() == ("ok\n", "")  # on stdout: a notebook shows it plain
    with pytest.raises(RuntimeError, match=r"^python[\d.]* -c import sys; sys.exit\('boom'\) failed \(exit 1\): boom$"):
        quickstart.run_command([sys.executable, "-c", "import sys; sys.exit('boom')"])
    summary = _quickstart_cells()[-1]
    *body, last = ast.parse(summary).body
    namespace = {"study": "seeds-final"}
    exec(compile(ast.Module(body=body, type_ignores=[]), "summary-cell", "exec"), namespace)
    shown = eval(compile(ast.Expression(last.value), "summary-cell", "eval"), namespace)
    assert isinstance(shown, Markdown) and shown.data.startswith("| arm")


@pytest.mark.committed
def test_every_published_analysis_notebook_runs_the_code_its_notebook_holds_now():
    """A study's executed 03/04 notebooks are the notebooks as they are now, run on its runs: after the library's
    modules moved (core/ in folders), three studies' copies still imported the old paths, and the main job's
    re-publish rewrote them on a fresh clone."""
    published = sorted((REPO / "runs").glob("*/0[34]_*.ipynb"))
    assert published
    for path in published:
        source = nbformat.read(REPO / "notebooks" / path.name, as_version=4)
        executed = nbformat.read(path, as_version=4)
        want = [c.source for c in source.cells if c.cell_type == "code"]
        got = [c.source for c in executed.cells
               if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])]
        assert got == want, f"{path.relative_to(REPO)} was executed from another version of {path.name}: publish again"
