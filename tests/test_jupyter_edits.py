"""Issue 116 #1: an edit JupyterLab autosaves into the committed training notebook must not steer the README's
design-card command (`papermill notebooks/02_train.ipynb out.ipynb -p variant ln -p seed 3`), which takes every
value but variant and seed from the notebook's parameters cell."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from embnorm_lib.core.errors import ConfigError
from embnorm_lib.core.notebook import TRAIN_DEFAULTS, TRAIN_NOTEBOOK, check_committed_defaults, parameters_cell_values

REPO = Path(__file__).resolve().parents[1]


def test_the_library_knows_the_committed_defaults():
    assert parameters_cell_values(REPO / TRAIN_NOTEBOOK) == TRAIN_DEFAULTS


def _checkout_with(tmp_path: Path, old: str, new: str) -> Path:
    (tmp_path / "notebooks").mkdir()
    notebook = json.loads((REPO / TRAIN_NOTEBOOK).read_text())
    cell = next(c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))
    source = "".join(cell["source"])
    assert old in source
    cell["source"] = source.replace(old, new)
    (tmp_path / TRAIN_NOTEBOOK).write_text(json.dumps(notebook))
    return tmp_path


def test_a_run_that_would_use_an_edited_default_is_refused_in_one_line(tmp_path):
    repo = _checkout_with(tmp_path, "max_iters = 0 ", "max_iters = 30 ")
    used = {**TRAIN_DEFAULTS, "max_iters": 30}
    with pytest.raises(ConfigError, match=r"^notebooks/02_train.ipynb's parameters cell differs from the committed "
                                          r"one \(max_iters: 0 -> 30\) and this run would use it; allowed: "):
        check_committed_defaults(used, repo)
    check_committed_defaults({**TRAIN_DEFAULTS, "max_iters": 50}, repo)  # passed with -p: the user's own value
    check_committed_defaults(used, tmp_path / "no-checkout")  # one notebook on Kaggle: nothing to compare with
    check_committed_defaults(TRAIN_DEFAULTS, REPO)  # the committed notebook as it is


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(port: int, path: str, token: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/{path}", method="PUT" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def _save_through_jupyter(root: Path, edit: tuple[str, str]) -> None:
    """Open notebooks/02_train.ipynb through a Jupyter server's contents API (what JupyterLab's editor uses),
    edit its parameters cell and save it, as an autosave does."""
    port, token = _free_port(), "embnorm-test"
    server = subprocess.Popen([sys.executable, "-m", "jupyter_server", f"--ServerApp.root_dir={root}",
                               f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
                               "--ServerApp.open_browser=False", "--ServerApp.port_retries=0", "--allow-root"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                _api(port, "status", token)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the Jupyter server did not start") from None
                time.sleep(0.5)
        model = _api(port, "contents/notebooks/02_train.ipynb?content=1", token)
        cell = next(c for c in model["content"]["cells"] if "parameters" in c["metadata"].get("tags", []))
        assert edit[0] in cell["source"]
        cell["source"] = cell["source"].replace(*edit)
        _api(port, "contents/notebooks/02_train.ipynb", token,
             {"type": "notebook", "format": "json", "content": model["content"]})
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_edit_saved_through_jupyter_does_not_reach_the_design_card_command(tmp_path, data_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "embnorm_lib", checkout / "embnorm_lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", checkout / "pyproject.toml")
    (checkout / "notebooks").mkdir()
    shutil.copy2(REPO / TRAIN_NOTEBOOK, checkout / TRAIN_NOTEBOOK)
    _save_through_jupyter(checkout, ("max_iters = 0 ", "max_iters = 30 "))
    assert "max_iters = 30" in (checkout / TRAIN_NOTEBOOK).read_text()
    command = ["papermill", str(TRAIN_NOTEBOOK), str(tmp_path / "out.ipynb"), "-p", "variant", "ln", "-p", "seed",
               "3", "-p", "data_path", data_path, "-p", "progress", "False"]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(
        "ConfigError: notebooks/02_train.ipynb's parameters cell differs from the committed one (max_iters: 0 -> 30)")
    assert not (checkout / "runs").exists()  # nothing trained, nothing written
