import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
from conftest import REPO, tiny

from embnorm_lib.core.records.io import atomic_write_text
from embnorm_lib.core.records.steplog import read_step_log
from embnorm_lib.core.training import distributed
from embnorm_lib.core.training.train import train

TINY = ["--preset", "tiny", "--variant", "ln", "--seed", "1", "--set", "max_iters=16", "--set", "torch_threads=1",
        "--set", "eval_interval=8"]


def torchrun(args, data_path, nproc=2):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "embnorm_lib", "run", *args, "--data-path", data_path]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def compare_runs(a, b, tol):
    ra, rb = read_step_log(a, "metrics"), read_step_log(b, "metrics")
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    for key in ("train_loss", "grad_norm_total", "block1_input_norm"):
        assert max(abs(x[key] - y[key]) for x, y in zip(ra, rb)) < tol, key
    wa = torch.load(a / "model.pt", weights_only=True)
    wb = torch.load(b / "model.pt", weights_only=True)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < tol


@pytest.fixture(scope="module")
def single(tmp_path_factory, data_path):
    out = tmp_path_factory.mktemp("single")
    train(tiny(variant="ln", seed=1, max_iters=16, torch_threads=1, eval_interval=8), out / "run", data_path,
          progress=False)
    return out / "run"


def test_two_ranks_match_one_process_with_the_same_global_batch(tmp_path, data_path, single):
    torchrun([*TINY, "--study", "ddp", "--out-dir", str(tmp_path)], data_path)
    run = tmp_path / "ddp" / "ln" / "seed1"
    compare_runs(single, run, 1e-5)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 16 and summary["tokens"] == 16 * 8 * 32


@pytest.mark.slow  # ~10 s of torchrun; two ranks against one process stays in the default suite
def test_resume_across_world_sizes(tmp_path, data_path, single):
    torchrun([*TINY, "--study", "ddp", "--out-dir", str(tmp_path), "--until-step", "8"], data_path)
    run = tmp_path / "ddp" / "ln" / "seed1"
    assert (run / "ckpt.pt").exists() and not (run / "summary.json").exists()
    train(tiny(variant="ln", seed=1, max_iters=16, torch_threads=1, eval_interval=8), run, data_path, progress=False)
    compare_runs(single, run, 1e-5)


def test_gradient_accumulation_matches_the_full_batch(tmp_path, data_path, single):
    train(tiny(variant="ln", seed=1, max_iters=16, torch_threads=1, eval_interval=8, grad_accum=4), tmp_path / "acc",
          data_path, progress=False)
    compare_runs(single, tmp_path / "acc", 1e-5)


def test_global_batch_must_divide_evenly():
    with pytest.raises(ValueError, match=r"invalid batch_size=8; allowed: a multiple of .* 2 x 3 = 6"):
        distributed.micro_batch_size(8, 2, 3)


def test_only_rank_zero_may_write(tmp_path, monkeypatch):
    monkeypatch.setattr(distributed, "current_rank", lambda: 1)
    with pytest.raises(RuntimeError, match="rank 1 tried to write"):
        atomic_write_text(tmp_path / "x.json", "{}")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow  # two full sweeps through papermill: about 2 minutes here
def test_submitit_local_executor_gives_the_same_index_as_local_processes(tmp_path, data_path):
    grid = ["--preset", "tiny", "--variants", "none,ln", "--seeds", "0", "--set", "max_iters=5",
            "--set", "eval_interval=0", "--threads", "1", "--data-path", data_path]
    tables = {}
    for executor in ("local", "submitit-local"):
        out = tmp_path / executor
        done = subprocess.run([sys.executable, "-m", "embnorm_lib", "sweep", "tsub", *grid, "--executor", executor,
                               "--out-dir", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        tables[executor] = pd.read_csv(out / "tsub" / "runs.csv")
    cols = ["arm", "seed", "val_loss", "val_acc", "final_grad_norm", "ece_equal_width"]
    pd.testing.assert_frame_equal(tables["local"][cols], tables["submitit-local"][cols])
