"""The final pass's logits kept in a file when too large for memory (4,096 tokens x the prose ladder's validation
split): calibration and the loss by position read them in chunks and give the in-memory numbers (issue 112)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embnorm_lib.core import evaluate as evaluate_module
from embnorm_lib.core.calibration import calibration_from_logits, calibration_streamed
from embnorm_lib.core.config import RunConfig
from embnorm_lib.core.evaluate import by_position
from embnorm_lib.core.rundir import RunDir
from embnorm_lib.core.train import train

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


def test_a_run_whose_logits_exceed_the_bound_keeps_them_in_a_file_then_removes_it(tmp_path, monkeypatch,
                                                                                  corpus_cache):
    cfg = RunConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_iters=4, eval_interval=4,
                    checkpoint_interval=4, diag_interval=2, eval_windows=24, torch_threads=1, seed=3)
    in_memory = train(cfg, tmp_path / "a", None)
    monkeypatch.setattr("embnorm_lib.core.evaluate.KEEP_IN_MEMORY_BYTES", 0)
    kept = []
    real = evaluate_module.evaluate

    def spy(*args, **kwargs):
        kept.append(kwargs.get("keep_path"))
        return real(*args, **kwargs)

    monkeypatch.setattr("embnorm_lib.core.train.evaluate", spy)
    in_file = train(cfg, tmp_path / "b", None)
    assert kept[-1] is not None and not RunDir(tmp_path / "b").final_logits.exists()
    for key in SCALARS:  # the optimum of a nearly flat NLL (4 steps of training) moves with float rounding; its value
        # does not
        assert in_file[key] == pytest.approx(in_memory[key], rel=1e-2 if key == "temperature_opt" else 1e-5,
                                             abs=1e-7), key
    assert in_file["val_loss"] == in_memory["val_loss"]
    a, b = (json.loads((tmp_path / d / "positions.json").read_text()) for d in ("a", "b"))
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-6)
