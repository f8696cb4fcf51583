"""The final pass's logits kept in a file when too large for memory (4,096 tokens x the prose ladder's validation
split): calibration and the loss by position read them in chunks and give the in-memory numbers (issue 112)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embnorm_lib.core.config import RunConfig
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.scoring import evaluate as evaluate_module
from embnorm_lib.core.scoring.calibration import CalibrationStream, calibration_from_logits, calibration_streamed
from embnorm_lib.core.scoring.evaluate import by_position
from embnorm_lib.core.training.train import train

SCALARS = ("ece_equal_width", "ece_equal_mass", "brier", "mean_confidence", "nll_t1", "temperature_opt", "nll_t_opt")


def test_streamed_calibration_equals_the_in_memory_one(tmp_path):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 8, 50, generator=generator) * 3
    targets = torch.randint(0, 50, (37, 8), generator=generator)
    path = tmp_path / "logits.npy"
    store = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=tuple(logits.shape))
    store[:] = logits.numpy()
    store.flush()
    memory, streamed = calibration_from_logits(logits, targets), calibration_streamed(store, targets, windows=5)
    for key in SCALARS:
        assert streamed[key] == pytest.approx(memory[key], rel=1e-5, abs=1e-7), key
    assert streamed["reliability_equal_mass"]["count"] == memory["reliability_equal_mass"]["count"]
    assert streamed["temperature_curve"]["nll"] == pytest.approx(memory["temperature_curve"]["nll"], rel=1e-6)
    subset = calibration_streamed(store, targets, windows=5, temperature_windows=10)
    assert subset["temperature_windows"] == 10 and subset["brier"] == streamed["brier"]
    a, b = by_position(logits, targets), by_position(store, targets)
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-6) and b["val_acc"] == pytest.approx(a["val_acc"])


def test_a_run_whose_logits_exceed_the_bound_streams_them_and_writes_no_file(tmp_path, monkeypatch, corpus_cache):
    cfg = RunConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_iters=4, eval_interval=4,
                    checkpoint_interval=4, diag_interval=2, eval_windows=24, torch_threads=1, seed=3)
    in_memory = train(cfg, tmp_path / "a", None)
    monkeypatch.setattr("embnorm_lib.core.scoring.evaluate.KEEP_IN_MEMORY_BYTES", 0)
    kept = []
    real = evaluate_module.evaluate

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        kept.append(result[1] if isinstance(result, tuple) else None)
        return result

    monkeypatch.setattr("embnorm_lib.core.training.train.evaluate", spy)
    streamed = train(cfg, tmp_path / "b", None)
    assert isinstance(kept[-1], CalibrationStream) and not RunDir(tmp_path / "b").final_logits.exists()
    assert not any(p.suffix == ".npy" for p in (tmp_path / "b").rglob("*"))  # nothing on disk, nothing left behind
    for key in SCALARS:  # the optimum of a nearly flat NLL (4 steps of training) moves with float rounding; its value
        # does not
        assert streamed[key] == pytest.approx(in_memory[key], rel=1e-2 if key == "temperature_opt" else 1e-5,
                                              abs=1e-7), key
    assert streamed["val_loss"] == in_memory["val_loss"]
    a, b = (json.loads((tmp_path / d / "positions.json").read_text()) for d in ("a", "b"))
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-6)


def test_the_stream_equals_a_file_read_in_chunks_bit_for_bit(tmp_path):
    """The committed prose runs were calibrated from a file of their logits read 16 windows at a time; the stream,
    fed by the evaluation's groups of 128 windows, gives those numbers exactly."""
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(300, 8, 40, generator=generator) * 2
    targets = torch.randint(0, 40, (300, 8), generator=generator)
    store = np.lib.format.open_memmap(tmp_path / "l.npy", mode="w+", dtype=np.float32, shape=tuple(logits.shape))
    store[:] = logits.numpy()
    stream = CalibrationStream(300, 8, 40, chunk=16)
    for i in range(0, 300, 128):
        stream.add(logits[i: i + 128], targets[i: i + 128])
    assert stream.calibration() == calibration_streamed(store, targets)
    assert stream.by_position() == by_position(store, targets)


def test_the_temperature_subset_is_bounded_in_bytes(monkeypatch):
    monkeypatch.setattr("embnorm_lib.core.scoring.calibration.TEMPERATURE_BYTES", 3 * 8 * 40 * 4)
    stream = CalibrationStream(300, 8, 40)
    assert len(stream.keep) == 3  # not 256: three windows' logits fill the bound
    generator = torch.Generator().manual_seed(2)
    stream.add(torch.randn(300, 8, 40, generator=generator), torch.randint(0, 40, (300, 8), generator=generator))
    assert stream.calibration()["temperature_windows"] == 3 and sum(len(k) for k in stream.kept) == 3


MEMORY_PROBE = """
import resource, sys, torch
from embnorm_lib.core.scoring import calibration, evaluate
from embnorm_lib.core.config import RunConfig
from embnorm_lib.core.device import Precision
from embnorm_lib.core.nets.model import GPT
MB = 1 << 20
evaluate.KEEP_IN_MEMORY_BYTES = evaluate.GROUP_BYTES = calibration.TEMPERATURE_BYTES = 64 * MB
torch.manual_seed(0)
cfg = RunConfig(n_layer=1, n_head=1, n_embd=8, block_size=64, vocab_size=50257, bias=False)
model = GPT(cfg)
x = torch.randint(0, 50257, (int(sys.argv[1]), 64))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
metrics, stream = evaluate.evaluate(model, x, x.roll(-1, 1), Precision("fp32", torch.device("cpu")),
                                    keep_logits=True)
calib, positions = calibration.calibration(stream, x.roll(-1, 1)), evaluate.by_position(stream, x.roll(-1, 1))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(peak - before, x.numel() * 50257 * 4, calib["temperature_windows"], positions["windows"])
"""


@pytest.mark.slow  # ~30 s: 2 GB of logits go through softmax several times
def test_gpt2_vocabulary_is_evaluated_and_calibrated_within_a_stated_memory_bound(tmp_path):
    """Vocabulary 50,257 over 160 windows of 64: 2.06 GB of float32 logits. With the bounds set to 64 MB each (a
    group of windows, the temperature subset, what stays in memory), the evaluation and calibration grow the process
    by less than 640 MB: a few groups' logits and their softmax, plus one number per token."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, "160"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1500:]
    grew, logits_bytes, temperature_windows, windows = map(int, done.stdout.split())
    assert logits_bytes > 2_000_000_000 and windows == 160 and temperature_windows == 5
    assert grew < 640 * (1 << 20), f"grew {grew / 2**20:.0f} MB"
