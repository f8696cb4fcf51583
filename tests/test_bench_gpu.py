"""bench_gpu's pieces that run without a GPU: the loop figures (on the CPU here), merging parts, the refusal."""
import json

import pytest

from embnorm_lib import bench_gpu


def test_loop_figures_read_the_steady_step_time_from_the_run(data_path):
    row = bench_gpu.loop_figures("tiny", 14, device="cpu", compile=False, data_path=data_path)
    assert row["device"] == "cpu" and row["iters"] == 14 and row["ms_per_iter"] > 0
    assert row["tokens_per_s"] == pytest.approx(8 * 32 / (row["ms_per_iter"] / 1e3))
    assert row["achieved_tflops"] > 0 and row["last_train_loss"] < row["first_train_loss"]
    assert row["p90_ms_per_iter"] >= row["ms_per_iter"] and len(row["first_steps_ms"]) == bench_gpu.STEADY_FROM


def test_the_profile_part_reads_launches_and_top_operators_per_step(data_path):
    row = bench_gpu.profile_part(6, data_path, preset="tiny", device="cpu", top=500)
    assert row["device"] == "cpu" and row["iters"] == 6 and row["self_cpu_s"] > 0
    assert row["kernel_launches_per_step"] == 0 and row["self_device_s"] == 0  # no GPU, no kernels
    top = row["top_ops"]
    assert all(a["self_cpu_ms"] >= b["self_cpu_ms"] for a, b in zip(top, top[1:], strict=False))
    # the optimizer steps once per training step: call counts are per step
    assert [op["calls_per_step"] for op in top if op["name"].startswith("Optimizer.step")] == [1.0], top


def test_profile_figures_count_kernel_launches_per_step():
    from types import SimpleNamespace as E

    events = [E(key="cudaLaunchKernel", count=60, self_cpu_time_total=600.0, self_device_time_total=0.0),
              E(key="cuLaunchKernelEx", count=30, self_cpu_time_total=300.0, self_device_time_total=0.0),
              E(key="aten::mm", count=12, self_cpu_time_total=1200.0, self_device_time_total=240.0)]
    figures = bench_gpu.profile_figures(events, iters=3, top=2)
    assert figures["kernel_launches_per_step"] == 30 and figures["self_device_s"] == pytest.approx(240e-6)
    assert [op["name"] for op in figures["top_ops"]] == ["aten::mm", "cudaLaunchKernel"]
    assert figures["top_ops"][0]["calls_per_step"] == 4


def test_parts_merge_under_their_keys_and_another_gpu_replaces_the_file(tmp_path, monkeypatch):
    save = tmp_path / "bench-gpu.json"
    monkeypatch.setattr(bench_gpu.torch.cuda, "is_available", lambda: False)  # the same on a CUDA machine
    bench_gpu.merge(save, "loop", {"ms": 1.0})
    bench_gpu.merge(save, "study:main", {"study_wall_s": 100.0})
    written = json.loads(save.read_text())
    assert set(written["parts"]) == {"loop", "study:main"} and written["gpu"] == "none"
    monkeypatch.setattr(bench_gpu.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench_gpu, "gpu_info", lambda: {"gpu": "Other GPU", "capability": "8.0"})
    bench_gpu.merge(save, "gpt-small", {"ms_per_iter": 5.0})
    written = json.loads(save.read_text())
    assert written["gpu"] == "Other GPU" and set(written["parts"]) == {"gpt-small"}


def test_without_cuda_it_refuses_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(bench_gpu.torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main(["loop"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]
