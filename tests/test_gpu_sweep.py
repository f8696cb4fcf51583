"""scripts/gpu_sweep.sh: registered runs trained on a lent GPU come back as one tarball of the run directories that
finished, without weights (the device tool returns at most 8 files). Run here on the CPU with a tiny grid."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~35 s: four tiny runs through papermill
def test_finished_runs_come_back_packed_without_weights(tmp_path, data_path):
    # a copy of the code, so the sweep's runs/ is the copy's and not this checkout's
    root = tmp_path / "repo"
    for folder in ("embnorm_lib", "notebooks", "scripts"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "EMBNORM_DATA": data_path, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "scripts/gpu_sweep.sh", "240", "tgpu", "--preset", "tiny", "--seeds", "0-1",
                           "--variants", "none,ln", "--workers", "2", "--threads", "1"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    log = (out / "gpu_sweep.log").read_text()
    assert done.returncode == 0 and "== finished runs: 4" in log, log[-2000:]
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert {n.rsplit("/", 1)[0] for n in names if n.endswith("summary.json")} == {
        f"runs/tgpu/{v}/seed{s}" for v in ("none", "ln") for s in (0, 1)}
    assert not any(n.endswith(".pt") or "/." in n for n in names), names
    summary = json.loads((root / "runs/tgpu/ln/seed0/summary.json").read_text())
    assert summary["device"] == "cpu" and summary["precision"] == "fp32"  # each run records where it trained
