"""Token shards (issue 115): nanoGPT's train.bin/val.bin and llm.c/FineWeb shards, detected from a directory,
memory-mapped, refused in one line when damaged, and trained on end to end."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from embnorm_lib.core.corpora import shards
from embnorm_lib.core.corpora.data import BatchSampler, validation_windows
from embnorm_lib.core.errors import DataError
from embnorm_lib.core.scoring.diagnostics import mean_pairwise_cosine

VOCAB = 50257


def ids(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 1000, n).astype(np.uint16)
    out[n // 2] = VOCAB - 1  # GPT-2's end-of-text id: the vocabulary must hold it
    return out


def nanogpt_dir(tmp_path, n_train=6000, n_val=1500):
    d = tmp_path / "openwebtext"
    d.mkdir()
    ids(n_train, 0).tofile(d / "train.bin")
    ids(n_val, 1).tofile(d / "val.bin")
    return d


def write_fineweb(path, tokens: np.ndarray, magic=shards.MAGIC, version=shards.VERSION, count=None):
    header = np.zeros(shards.HEADER_INTS, dtype=np.int32)
    header[:3] = (magic, version, len(tokens) if count is None else count)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def fineweb_dir(tmp_path):
    d = tmp_path / "fineweb10B"
    d.mkdir()
    write_fineweb(d / "fineweb_val_000000.bin", ids(1500, 2))
    write_fineweb(d / "fineweb_train_000001.bin", ids(3000, 3))
    write_fineweb(d / "fineweb_train_000002.bin", ids(3000, 4))
    return d


def test_layouts_are_detected_and_shards_read_as_one_sequence(tmp_path):
    nano = shards.load_shards(nanogpt_dir(tmp_path))
    assert nano.layout == "nanogpt" and len(nano.train) == 6000 and nano.max_id == VOCAB - 1
    fine = shards.load_shards(fineweb_dir(tmp_path))
    assert fine.layout == "fineweb" and len(fine.train) == 6000 and len(fine.val) == 1500
    whole = np.concatenate([ids(3000, 3), ids(3000, 4)]).astype(np.int64)
    across = torch.arange(2990, 3010)  # a window across the two training shards
    assert torch.equal(fine.train[across], torch.from_numpy(whole[2990:3010]))
    starts = torch.tensor([[0], [2995], [5900]]) + torch.arange(40)
    assert torch.equal(fine.train[starts], torch.from_numpy(whole)[starts])


def test_batches_and_validation_windows_equal_the_in_memory_ones(tmp_path):
    corpus = shards.load_shards(fineweb_dir(tmp_path))
    memory = torch.from_numpy(np.concatenate([ids(3000, 3), ids(3000, 4)]).astype(np.int64))
    a, b = BatchSampler(corpus.train, 32, 8, seed=3), BatchSampler(memory, 32, 8, seed=3)
    for _ in range(3):  # the same seed gives the same batches whatever holds the ids: paired arms stay paired
        (xa, ya), (xb, yb) = a.next_batch(), b.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    val = torch.from_numpy(ids(1500, 2).astype(np.int64))
    for k in (0, 5):
        got, want = validation_windows(corpus.val, 32, k), validation_windows(val, 32, k)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("damage, message", [
    (dict(magic=shards.MAGIC_LLAMA3), "llama-3"),
    (dict(magic=123), "magic 123; allowed: 20240520"),
    (dict(version=7), "version 7; allowed: 1"),
    (dict(count=999), "the header says 999 tokens but the file holds 1500"),
])
def test_a_damaged_shard_is_refused_in_one_line(tmp_path, damage, message):
    d = fineweb_dir(tmp_path)
    write_fineweb(d / "fineweb_val_000000.bin", ids(1500, 2), **damage)
    with pytest.raises(DataError, match=message) as e:
        shards.load_shards(d)
    assert "\n" not in str(e.value)


def test_missing_splits_and_other_folders_are_refused(tmp_path):
    d = fineweb_dir(tmp_path)
    (d / "fineweb_val_000000.bin").unlink()
    with pytest.raises(DataError, match=r"no validation shard \(\*_val_\*\.bin\)"):
        shards.find_shards(d)
    nano = nanogpt_dir(tmp_path)
    (nano / "val.bin").unlink()
    with pytest.raises(DataError, match="val.bin is missing"):
        shards.find_shards(nano)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(DataError, match=r"no token shards \(found: a.txt\)"):
        shards.find_shards(tmp_path / "notes")
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "train.bin").write_bytes(b"abc")
    (odd / "val.bin").write_bytes(b"ab")
    with pytest.raises(DataError, match="3 bytes; allowed: a positive, even number"):
        shards.load_shards(odd)


def test_the_vocabulary_must_hold_every_id_and_the_error_names_the_smallest(tmp_path):
    corpus = shards.load_shards(nanogpt_dir(tmp_path))
    with pytest.raises(DataError, match=f"vocab_size=65 .* token id {VOCAB - 1}; allowed: {VOCAB} or more"):
        corpus.check_vocab(65)
    corpus.check_vocab(VOCAB)


def test_the_shard_set_is_named_by_its_contents(tmp_path):
    d = nanogpt_dir(tmp_path)
    first = shards.shards_sha256(shards.find_shards(d))
    data = ids(6000, 0)
    data[10] += 1
    data.tofile(d / "train.bin")
    assert shards.shards_sha256(shards.find_shards(d)) != first
    with pytest.raises(DataError, match="the shard set the run was trained on"):
        shards.load_shards(d, corpus_sha256=first)


def test_overrides_detect_a_directory_and_refuse_a_text_tokenizer(tmp_path):
    d = nanogpt_dir(tmp_path)
    got = shards.shard_overrides(str(d), {"vocab_size": 50304})
    assert got["tokenizer"] == "shards" and got["corpus_sha256"] == shards.load_shards(d).sha256
    assert shards.shard_overrides(str(tmp_path / "missing.txt"), {}) == {}
    with pytest.raises(DataError, match="invalid tokenizer='char' with data_path"):
        shards.shard_overrides(str(d), {"tokenizer": "char"})


def test_mean_pairwise_cosine_of_a_large_set_needs_no_gram_matrix(monkeypatch):
    v = torch.randn(500, 16) + 0.2
    small = mean_pairwise_cosine(v)
    monkeypatch.setattr("embnorm_lib.core.scoring.diagnostics.GRAM_MAX_ROWS", 100)
    assert float(mean_pairwise_cosine(v)) == pytest.approx(float(small), abs=1e-6)


@pytest.mark.parametrize("layout", ["nanogpt", pytest.param("fineweb", marks=pytest.mark.slow)])
def test_run_trains_on_a_shard_directory(tmp_path, layout):
    d = nanogpt_dir(tmp_path) if layout == "nanogpt" else fineweb_dir(tmp_path)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "embnorm_lib", "run", "--preset", "tiny", "--variant", "ln", "--seed", "0",
           "--data-path", str(d), "--set", "vocab_size=50304", "--set", "max_iters=3", "--set", "eval_windows=4",
           "--out-dir", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(next(out.rglob("summary.json")).read_text())
    config = json.loads(next(out.rglob("config.json")).read_text())
    assert summary["steps"] == 3 and summary["tokenizer"] == "shards"
    assert config["tokenizer"] == "shards" and config["corpus_sha256"] == shards.load_shards(d).sha256
    without_vocab = [a for a in cmd[:-2] if a != "vocab_size=50304"]
    without_vocab.remove("--set")  # the one before vocab_size: the tiny preset's 65 characters remain
    too_small = subprocess.run(without_vocab + ["--out-dir", str(tmp_path / "r2")], capture_output=True, text=True,
                               timeout=300)
    assert too_small.returncode != 0
    assert f"allowed: {VOCAB} or more" in too_small.stderr and "Traceback" not in too_small.stderr
    assert not (tmp_path / "r2").exists()  # refused before anything is written


@pytest.mark.slow  # two torchrun launches and a single run: ~40 s
def test_two_gloo_ranks_on_shards_match_one_process(tmp_path):
    from embnorm_lib.core.records.steplog import read_step_log

    d = nanogpt_dir(tmp_path)
    args = ["--preset", "tiny", "--variant", "rms", "--seed", "2", "--data-path", str(d), "--set", "vocab_size=50257",
            "--set", "max_iters=6", "--set", "eval_windows=4", "--set", "torch_threads=1", "--study", "s"]
    single = subprocess.run([sys.executable, "-m", "embnorm_lib", "run", *args, "--out-dir", str(tmp_path / "one")],
                            capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-2000:]
    ranks = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                            "-m", "embnorm_lib", "run", *args, "--out-dir", str(tmp_path / "two")],
                           capture_output=True, text=True, timeout=300)
    assert ranks.returncode == 0, ranks.stderr[-2000:]
    a, b = (read_step_log(tmp_path / k / "s" / "rms" / "seed2", "metrics") for k in ("one", "two"))
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 7))
    assert max(abs(x["train_loss"] - y["train_loss"]) for x, y in zip(a, b)) < 1e-5


def test_the_guide_carries_the_cost_table_the_code_computes():
    from embnorm_lib.core.records.io import repo_root
    from embnorm_lib.tools import gpu_cost

    table = gpu_cost.render(*gpu_cost.cost_rows())
    assert table in (repo_root() / "docs" / "GUIDE.md").read_text()
    measured, rows = gpu_cost.cost_rows()
    chinchilla = next(r for r in rows if r["preset"] == "gpt2-124m-chinchilla")
    assert 19 <= chinchilla["tokens"] / 124_374_528 <= 21  # 20 tokens per parameter of the model as built
    assert chinchilla["gpu_hours_per_study"] == pytest.approx(15 * chinchilla["gpu_hours_per_run"])


def test_gpt2_124m_presets_match_nanogpt_and_the_speedrun_recipe():
    from embnorm_lib.core.config import preset_config
    from embnorm_lib.core.recipes import RECIPES

    cfg = preset_config("gpt2-124m")
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.vocab_size) == (12, 12, 768, 1024, 50304)
    assert cfg.batch_size * cfg.block_size == 491_520 and cfg.lr == 6e-4 and (cfg.beta1, cfg.beta2) == (0.9, 0.95)
    assert cfg.max_iters == 600_000 and round(cfg.warmup_frac * cfg.max_iters) == 2000 and cfg.bias is False
    speedrun = preset_config("gpt2-124m-chinchilla-speedrun")
    assert all(getattr(speedrun, k) == v for k, v in RECIPES["speedrun"].overrides.items())


def test_the_kaggle_quickstart_passes_a_shard_directory_to_its_sweep():
    from embnorm_lib.core import quickstart

    assert quickstart.data_arguments("", 0) == []
    assert quickstart.data_arguments("/kaggle/input/fineweb", 50304) == ["--data-path", "/kaggle/input/fineweb",
                                                                           "--set", "vocab_size=50304"]
    with pytest.raises(ValueError, match=r"invalid vocab_size=True; allowed: 0 \(the preset's\) or a positive"):
        quickstart.data_arguments("x", True)


@pytest.mark.slow  # four papermill runs and both analysis notebooks: ~2 min on 2 cores
def test_a_study_sweeps_and_publishes_on_shards(tmp_path):
    """Issue 115 #5: an ad-hoc paired study on token shards, end to end: the sweep, runs.csv, the report."""
    d = nanogpt_dir(tmp_path)
    out = tmp_path / "runs"
    common = ["--out-dir", str(out)]
    sweep = [sys.executable, "-m", "embnorm_lib", "sweep", "shardstudy", "--preset", "tiny", "--variants", "none,ln",
             "--seeds", "0-1", "--data-path", str(d), "--set", "vocab_size=50304", "--set", "max_iters=3", "--set",
             "eval_windows=4", "--workers", "1", *common]
    done = subprocess.run(sweep, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    published = subprocess.run([sys.executable, "-m", "embnorm_lib", "publish", "shardstudy", *common],
                               capture_output=True, text=True, timeout=900)
    assert published.returncode == 0, published.stderr[-2000:]
    import pandas as pd

    runs = pd.read_csv(out / "shardstudy" / "runs.csv")
    assert len(runs) == 4 and set(runs["variant"]) == {"none", "ln"}
    assert (runs["cfg.corpus_sha256"] == shards.load_shards(d).sha256).all()
    report = (out / "shardstudy" / "REPORT.md").read_text()
    assert "ln" in report and "val_loss" in (out / "shardstudy" / "report.html").read_text()
