"""Issue 115 #6, prepared before a GPU is lent: the side-by-side with nanoGPT's model and the shards steps run on a
CPU at a tiny shape (the figures are the GPU's to give). nanoGPT's code is not part of this project, so the test
writes a stand-in model.py of its own with nanoGPT's interface (GPTConfig fields, GPT(config), forward -> logits,
loss)."""
from __future__ import annotations

import pytest

from embnorm_lib.core.errors import ConfigError
from embnorm_lib.tools import bench_nanogpt

STAND_IN = '''
from dataclasses import dataclass
import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 64
    n_layer: int = 1
    n_head: int = 1
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = False


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=config.bias)

    def forward(self, idx, targets=None):
        logits = self.head(self.emb(idx))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss
'''


def test_side_by_side_times_both_models_alike_on_a_cpu(tmp_path):
    (tmp_path / "model.py").write_text(STAND_IN)
    figures = bench_nanogpt.side_by_side(tmp_path, preset="tiny", batch=2, steps=2, device="cpu", compile=False)
    for model in ("embnorm", "nanogpt"):
        assert figures[model]["ms_per_step"] > 0 and figures[model]["tokens_per_s"] > 0
    assert figures["tokens_per_s_ratio"] == pytest.approx(figures["embnorm"]["tokens_per_s"]
                                                          / figures["nanogpt"]["tokens_per_s"])
    assert figures["embnorm"]["n_params"] > figures["nanogpt"]["n_params"]  # the stand-in is one layer, no blocks


def test_a_folder_without_nanogpt_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"no model.py there; allowed: a nanoGPT checkout"):
        bench_nanogpt.load_nanogpt(tmp_path)
    (tmp_path / "model.py").write_text("x = 1\n")
    with pytest.raises(ConfigError, match=r"defines no GPT and GPTConfig"):
        bench_nanogpt.load_nanogpt(tmp_path)


def test_the_shards_part_trains_on_synthetic_shards_on_a_cpu():
    row = bench_nanogpt.shards_part(iters=3, preset="tiny", device="cpu")
    assert row["iters"] == 3 and row["tokens_per_s"] > 0 and row["achieved_tflops"] > 0
