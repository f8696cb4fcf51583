"""The Kaggle/Colab quickstart's setup: idempotent across kernel restarts, installs only what is missing."""
import importlib.metadata as metadata
import subprocess

import nbformat
import pytest
from conftest import REPO

from embnorm_lib.core import quickstart
from embnorm_lib.runner.kernels import execute_notebook


def test_only_missing_packages_are_installed_and_installed_ones_keep_their_version():
    present = {"numpy": "1.26.4", "pandas": "2.2.2", "torch": "2.5.1+cu121"}

    def version(name):
        if name in present:
            return present[name]
        raise metadata.PackageNotFoundError(name)

    assert quickstart.missing_packages(["numpy", "pandas", "papermill"], version) == ["papermill"]
    assert "torch" not in quickstart.RUN_PACKAGES  # the image's CUDA build stays
    assert not {"jupyterlab", "pytest", "submitit"} & set(quickstart.RUN_PACKAGES)
    assert quickstart.restart_needed({"numpy": "1.26.4", "scipy": "1.13"}, {"numpy": "2.4.6", "scipy": "1.13"}) \
        == ["numpy"]
    assert quickstart.restart_needed(present, dict(present)) == []


@pytest.mark.parametrize("seeds,text", [(0, "0"), ("0-2", "0-2"), ([0, 3], "0,3"), ("1,4-5", "1,4-5")])
def test_seeds_parameter_accepts_an_int_a_range_or_a_list(seeds, text):
    assert quickstart.seeds_text(seeds) == text


@pytest.mark.parametrize("seeds", [True, -1, "1.5", "abc", ""])
def test_bad_seeds_parameter_is_refused(seeds):
    with pytest.raises(ValueError, match="invalid seeds="):
        quickstart.seeds_text(seeds)


def test_setup_cell_runs_twice_as_after_a_kernel_restart(tmp_path):
    """First run clones; the second (a restarted kernel starts in the same folder) reuses the clone."""
    origin = tmp_path / "origin"
    (origin / "embnorm_lib" / "core").mkdir(parents=True)
    (origin / "embnorm_lib" / "__init__.py").write_text("")
    (origin / "embnorm_lib" / "core" / "__init__.py").write_text("")
    (origin / "embnorm_lib" / "core" / "quickstart.py").write_text((REPO / "embnorm_lib" / "core" / "quickstart.py").read_text())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(origin)], check=True)
    subprocess.run([*git, "-C", str(origin), "add", "."], check=True)
    subprocess.run([*git, "-C", str(origin), "commit", "-qm", "stand-in"], check=True)
    full = nbformat.read(REPO / "notebooks" / "kaggle_quickstart.ipynb", as_version=4)
    setup = [i for i, c in enumerate(full.cells) if c.cell_type == "code" and "missing_packages()" in c.source]
    assert len(setup) == 1
    full.cells = full.cells[: setup[0] + 1]  # parameters ... setup; the GPU check and the sweep are not run here
    trimmed = tmp_path / "setup.ipynb"
    nbformat.write(full, trimmed)
    work = tmp_path / "kaggle-working"
    work.mkdir()
    outputs = []
    for attempt in range(2):
        out = tmp_path / f"run{attempt}.ipynb"
        execute_notebook(str(trimmed), str(out), progress_bar=False, cwd=str(work),
                         parameters={"repo_url": f"file://{origin}"})
        nb = nbformat.read(out, as_version=4)
        outputs.append("".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs))
    assert (work / "embnorm" / "embnorm_lib").is_dir()
    assert "using the existing clone" not in outputs[0] and "using the existing clone" in outputs[1]
    assert all("no restart needed" in text and "installing" not in text for text in outputs)
