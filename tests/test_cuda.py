"""The CUDA paths (issue 20), skipped where torch sees no CUDA device: bf16 autocast on compute capability >= 8.0,
fp16 with loss scaling (what a T4 uses), torch.compile on and off, checkpoints across devices."""
import pytest
import torch
from conftest import tiny

from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.records.steplog import read_step_log
from embnorm_lib.core.training.train import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (issue 20)")


def cuda_run(tmp_path, name, data_path, **overrides):
    cfg = tiny(device="cuda", **{"max_iters": 40, "eval_interval": 20, "compile": False, **overrides})  # compile: its test
    return train(cfg, tmp_path / name, data_path, progress=False)


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 8,
                    reason="bf16 autocast needs compute capability >= 8.0")
def test_bf16_autocast_trains_on_ampere_or_newer(tmp_path, data_path):
    summary = cuda_run(tmp_path, "bf16", data_path, precision="bf16")
    assert summary["device"].startswith("cuda") and summary["precision"] == "bf16"
    assert summary["val_loss"] < summary["init_val_loss"] - 0.3 and not summary["diverged"]


def test_auto_precision_is_bf16_on_ampere_and_fp16_before(tmp_path, data_path):
    summary = cuda_run(tmp_path, "auto", data_path, max_iters=5)
    assert summary["precision"] == ("bf16" if torch.cuda.get_device_capability()[0] >= 8 else "fp16")


def test_fp16_with_loss_scaling_trains(tmp_path, data_path):
    summary = cuda_run(tmp_path, "fp16", data_path, precision="fp16")
    assert summary["precision"] == "fp16"
    assert summary["val_loss"] < summary["init_val_loss"] - 0.3 and not summary["diverged"]
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in read_step_log(tmp_path / "fp16", "metrics"))


def test_compile_on_and_off_give_the_same_loss_within_tolerance(tmp_path, data_path):
    eager = cuda_run(tmp_path, "eager", data_path, precision="fp32")
    compiled = cuda_run(tmp_path, "compiled", data_path, precision="fp32", compile=True)
    assert compiled["val_loss"] == pytest.approx(eager["val_loss"], rel=2e-3)


def test_cuda_and_cpu_agree_in_fp32(tmp_path, data_path):
    gpu = cuda_run(tmp_path, "gpu", data_path, precision="fp32")
    cpu = train(tiny(max_iters=40, eval_interval=20, device="cpu", precision="fp32"), tmp_path / "cpu", data_path,
                progress=False)
    assert gpu["val_loss"] == pytest.approx(cpu["val_loss"], rel=5e-3)


@pytest.mark.parametrize("first, second", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_written_on_one_device_resumes_on_the_other(tmp_path, data_path, first, second):
    cfg = tiny(max_iters=30, eval_interval=10, checkpoint_interval=10, precision="fp32", compile=False)
    whole = train(cfg.replace(device=first), tmp_path / "whole", data_path, progress=False)
    partial = train(cfg.replace(device=first), tmp_path / "moved", data_path, progress=False, until_step=20)
    assert partial == {"finished": False, "step": 20} and RunDir(tmp_path / "moved").checkpoint.exists()
    resumed = train(cfg.replace(device=second), tmp_path / "moved", data_path, progress=False)
    assert resumed["device"].startswith(second) and resumed["steps"] == 30
    steps = [r["step"] for r in read_step_log(tmp_path / "moved", "metrics")]
    assert steps == list(range(1, 31))
    assert resumed["val_loss"] == pytest.approx(whole["val_loss"], rel=5e-3)


def test_a_run_trained_on_cuda_is_scored_there(tmp_path, data_path):
    from embnorm_lib.core.scoring.lm_eval_adapter import score_if_asked

    cfg = tiny(max_iters=5, eval_interval=0, eval_at_init=False, diag_interval=0, device="cuda", lm_eval=True)
    train(cfg, tmp_path / "run", data_path, progress=False)
    assert score_if_asked(cfg, tmp_path / "run", data_path)["device"] == "cuda"
