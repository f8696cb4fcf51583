"""bench_gpu's pieces that run without a GPU: the loop figures (on the CPU here), merging parts, the refusal."""
import json

import pytest

from embnorm_lib.tools import bench_gpu


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


def _committed_seeds_final():
    from embnorm_lib.core.records.io import read_json, runs_root
    from embnorm_lib.studies import study_cells

    return {c.label(): read_json(c.run_dir(runs_root()) / "summary.json")["val_loss"]
            for c in study_cells("seeds-final")}


def test_a_study_from_another_device_is_compared_with_the_committed_runs():
    committed = _committed_seeds_final()
    shifted = {label: loss + (0.002 if label.startswith("ln ") else 0.0) for label, loss in committed.items()}
    shifted["rms seed4"] = None  # a diverged run there is left out, not compared
    result = bench_gpu.against_committed("seeds-final", shifted)
    assert result["exploratory"] and result["runs_compared"] == 14
    assert result["max_abs_val_loss_diff"] == pytest.approx(0.002)
    assert result["mean_val_loss_diff_by_arm"] == pytest.approx({"ln": 0.002, "none": 0.0, "rms": 0.0})
    ln, rms = result["paired_diff_to_none_by_arm"]["ln"], result["paired_diff_to_none_by_arm"]["rms"]
    assert ln["n"] == 5 and rms["n"] == 4
    assert ln["here_mean"] == pytest.approx(ln["committed_mean"] + 0.002)
    assert ln["here_min"] <= ln["here_mean"] <= ln["here_max"]
    assert ln["same_sign_every_seed"] and rms["same_sign_every_seed"]
    flipped = {**committed, "ln seed0": committed["none seed0"] - 0.01}
    assert not bench_gpu.against_committed("seeds-final", flipped)["paired_diff_to_none_by_arm"]["ln"][
        "same_sign_every_seed"]


def test_compare_writes_into_the_study_part_and_refuses_what_it_cannot_compare(tmp_path, capsys):
    save = tmp_path / "bench-gpu.json"
    save.write_text(json.dumps({"gpu": "Some GPU", "parts": {"study:seeds-final": {
        "study_wall_s": 60.0, "val_loss": _committed_seeds_final()}}}))
    assert bench_gpu.main(["compare", "seeds-final", "--save", str(save)]) == 0
    written = json.loads(save.read_text())
    assert written["gpu"] == "Some GPU" and written["parts"]["study:seeds-final"]["study_wall_s"] == 60.0
    assert written["parts"]["study:seeds-final"]["against_committed_cpu"]["max_abs_val_loss_diff"] == 0.0
    capsys.readouterr()
    assert bench_gpu.main(["compare", "main", "--save", str(save)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'study:main'" in err[0] and "study:seeds-final" in err[0]
    with pytest.raises(ValueError, match="'ln seed99' is not a cell"):
        bench_gpu.against_committed("seeds-final", {"ln seed99": 2.0})
