"""The fleet's CUDA path (issue 75), skipped where torch sees no CUDA device: the step captured as a CUDA graph
gives what eager steps give, follows the CPU fleet in fp32, isolates a diverging member, and trains in bf16."""
import pytest
import torch
from conftest import strip_timing, tiny

from embnorm_lib.core.records.steplog import read_step_log
from embnorm_lib.core.training.fleet import fleet_configs, train_fleet

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (issue 75)")


def _fleet(tmp_path, name, data_path, cuda_graph=True, **overrides):
    cfgs = [tiny(variant=v, seed=s, **{"max_iters": 30, "eval_windows": 32, "device": "cuda", "precision": "fp32",
                                       **overrides}) for v in ("none", "ln", "rms") for s in (0, 1)]
    dirs = [tmp_path / name / f"m{i}" for i in range(len(cfgs))]
    return train_fleet(fleet_configs(cfgs), dirs, data_path, cuda_graph=cuda_graph), dirs


def test_a_graph_captured_step_gives_what_eager_steps_give(tmp_path, data_path):
    graphed, g_dirs = _fleet(tmp_path, "graph", data_path)
    eager, e_dirs = _fleet(tmp_path, "eager", data_path, cuda_graph=False)
    assert all(s["fleet_cuda_graph"] for s in graphed) and not any(s["fleet_cuda_graph"] for s in eager)
    for a, b in zip(g_dirs, e_dirs):
        rows_a, rows_b = (strip_timing(read_step_log(d, "metrics")) for d in (a, b))
        for ra, rb in zip(rows_a, rows_b, strict=True):
            assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=1e-5)


def test_the_cuda_fleet_follows_the_cpu_fleet_in_fp32(tmp_path, data_path):
    cuda, _ = _fleet(tmp_path, "cuda", data_path)
    cpu, _ = _fleet(tmp_path, "cpu", data_path, device="cpu")
    for a, b in zip(cuda, cpu):
        assert a["device"].startswith("cuda") and b["device"] == "cpu"
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-3)
        assert a["ece_equal_width"] == pytest.approx(b["ece_equal_width"], abs=2e-3)  # calibrated on the device


def test_a_diverging_member_leaves_the_others_unchanged_under_a_graph(tmp_path, data_path):
    base = {"max_iters": 20, "eval_windows": 16, "device": "cuda", "precision": "fp32"}
    healthy = [tiny(variant="ln", seed=s, **base) for s in range(3)]
    poisoned = [*healthy[:1], healthy[1].replace(lr=1e4, grad_clip=0.0, warmup_frac=0.0), *healthy[2:]]
    out = {}
    for name, cfgs in (("healthy", healthy), ("poisoned", poisoned)):
        dirs = [tmp_path / name / f"m{i}" for i in range(3)]
        out[name] = (train_fleet(fleet_configs(cfgs), dirs, data_path), dirs)
    assert out["poisoned"][0][1]["diverged"]
    for i in (0, 2):
        assert (strip_timing(read_step_log(out["poisoned"][1][i], "metrics"))
                == strip_timing(read_step_log(out["healthy"][1][i], "metrics")))


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 8,
                    reason="bf16 autocast needs compute capability >= 8.0")
def test_a_bf16_fleet_trains(tmp_path, data_path):
    summaries, _ = _fleet(tmp_path, "bf16", data_path, precision="bf16", max_iters=40)
    for s in summaries:
        assert s["precision"] == "bf16" and not s["diverged"] and s["val_loss"] < s["init_val_loss"] - 0.3
