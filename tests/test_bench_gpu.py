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
