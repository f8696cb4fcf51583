"""The practitioner's GPU check (issue 115 item 6): embnorm's model beside nanoGPT's own at GPT-2-small shape, and
GPT-2-small steps on synthetic token shards, both merged into runs/bench-gpu.json.

    python -m embnorm_lib bench-nanogpt side-by-side --nanogpt PATH   # PATH: a nanoGPT checkout (its model.py)
    python -m embnorm_lib bench-nanogpt shards                        # gpt2-124m steps on generated FineWeb shards

nanoGPT's code is not part of this project: the side-by-side imports `model.py` from a checkout the user supplies
(carried to the GPU machine beside the tree). Both models get the preset's shape (12 x 768, block 1024, vocabulary
50,304, no biases, no dropout), the same random batch, AdamW with the preset's settings, bf16 autocast on CUDA and
`torch.compile` unless `--no-compile`; embnorm runs its `none` variant, which is GPT-2's architecture. Reported per
model: the median ms per step after the warm-up, tokens per second, the peak memory, and embnorm's tokens/s as a ratio
of nanoGPT's. Figures, never pass/fail; on a CPU the same code runs (a test does, at a tiny shape) and nothing is
merged unless `--save` is given."""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from ..core.config import RunConfig, preset_config
from ..core.errors import ConfigError, entry
from ..core.nets.model import GPT

WARMUP_STEPS = 5  # compilation and allocator warm-up: not timed


def load_nanogpt(path: str | Path) -> ModuleType:
    """nanoGPT's model module from a checkout (GPT and GPTConfig), refused in one line when it is not one."""
    model_py = Path(path).expanduser() / "model.py"
    if not model_py.is_file():
        raise ConfigError(f"invalid --nanogpt {path}: no model.py there; allowed: a nanoGPT checkout "
                          "(github.com/karpathy/nanoGPT)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", model_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not (hasattr(module, "GPT") and hasattr(module, "GPTConfig")):
        raise ConfigError(f"invalid --nanogpt {path}: its model.py defines no GPT and GPTConfig; allowed: a nanoGPT "
                          "checkout")
    return module


def nanogpt_for(module: ModuleType, cfg: RunConfig) -> torch.nn.Module:
    conf = module.GPTConfig(block_size=cfg.block_size, vocab_size=cfg.vocab_size, n_layer=cfg.n_layer,
                            n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=0.0, bias=False)
    return module.GPT(conf)


def time_steps(model: torch.nn.Module, loss_of, cfg: RunConfig, batch: int, steps: int, device: str,
               compile: bool) -> dict:
    """Train `model` for WARMUP_STEPS + `steps` steps on one fixed random batch; the median step time after the
    warm-up, tokens per second and peak memory. `loss_of(model, x, y)` is the model's own loss."""
    model = model.to(device).train()
    step_model = torch.compile(model) if compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=generator).to(device)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=generator).to(device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(WARMUP_STEPS + steps):
        t0 = time.perf_counter()
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
            loss = loss_of(step_model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if step >= WARMUP_STEPS:
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    return {"ms_per_step": ms, "tokens_per_s": batch * cfg.block_size / (ms / 1e3),
            "n_params": sum(p.numel() for p in model.parameters()), "last_loss": float(loss.detach()),
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}


def side_by_side(nanogpt: str | Path, preset: str = "gpt2-124m", batch: int = 8, steps: int = 20, device: str = "",
                 compile: bool = True) -> dict:
    """embnorm's `none` model and nanoGPT's at one preset's shape, timed alike (time_steps)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = preset_config(preset, variant="none", dropout=0.0)
    module = load_nanogpt(nanogpt)
    torch.manual_seed(0)
    ours = time_steps(GPT(cfg), lambda m, x, y: m(x, y)[1], cfg, batch, steps, device, compile)
    theirs = time_steps(nanogpt_for(module, cfg), lambda m, x, y: m(x, y)[1], cfg, batch, steps, device, compile)
    return {"preset": preset, "batch": batch, "block_size": cfg.block_size, "steps": steps, "device": device,
            "compile": compile, "embnorm": ours, "nanogpt": theirs,
            "tokens_per_s_ratio": ours["tokens_per_s"] / theirs["tokens_per_s"]}


def synthetic_shards(directory: Path, vocab: int = 50257, train_tokens: int = 2_000_000, val_tokens: int = 300_000,
                     ) -> Path:
    """llm.c / FineWeb-layout shards of random token ids (a header of 256 int32: magic, version, count)."""
    from ..core.corpora.shards import HEADER_INTS, MAGIC, VERSION

    rng = np.random.default_rng(0)
    for name, n in (("synthetic_val_000000.bin", val_tokens), ("synthetic_train_000001.bin", train_tokens)):
        header = np.zeros(HEADER_INTS, dtype=np.int32)
        header[:3] = (MAGIC, VERSION, n)
        with open(directory / name, "wb") as f:
            f.write(header.tobytes())
            f.write(rng.integers(0, vocab, n).astype(np.uint16).tobytes())
    return directory


def shards_part(iters: int = 50, preset: str = "gpt2-124m", device: str = "cuda") -> dict:
    """`preset`'s steps on synthetic shards, as a shards run trains them: ms/step, tokens/s, model FLOP/s and the
    peak memory (bench_gpu.loop_figures), with MFU against the measured bf16 matmul peak on CUDA."""
    from ..core.corpora.shards import shard_overrides
    from . import bench_gpu

    with tempfile.TemporaryDirectory(prefix="embnorm-shards-") as tmp:
        # ids below GPT-2's 50,257 (the preset pads its vocabulary to 50,304), or a small preset's own vocabulary
        shards = synthetic_shards(Path(tmp), vocab=min(50257, preset_config(preset).vocab_size))
        extra = shard_overrides(str(shards), {})
        cfg_extra = {k: v for k, v in extra.items() if k in ("tokenizer", "corpus_sha256")}
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        row = bench_gpu.loop_figures(preset, iters, device=device, data_path=str(shards), **cfg_extra)
    if device.startswith("cuda"):
        row["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
        row["bf16_matmul_peak_tflops"] = bench_gpu.matmul_peak_tflops()
        row["mfu_vs_measured_bf16_peak"] = row["achieved_tflops"] / row["bf16_matmul_peak_tflops"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="embnorm_lib bench-nanogpt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=("side-by-side", "shards"))
    p.add_argument("--nanogpt", default="", help="a nanoGPT checkout (side-by-side)")
    p.add_argument("--preset", default="gpt2-124m")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=20, help="timed steps (side-by-side) or training steps (shards)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--save", default=None, help="merge into this JSON (default on CUDA: runs/bench-gpu.json)")
    args = p.parse_args(argv)
    from ..core.records.io import runs_root
    from . import bench_gpu

    cuda = torch.cuda.is_available()
    if args.part == "side-by-side":
        if not args.nanogpt:
            raise ConfigError("side-by-side needs --nanogpt PATH; allowed: a nanoGPT checkout's folder")
        key, figures = "vs-nanogpt", side_by_side(args.nanogpt, args.preset, args.batch, args.steps,
                                                  compile=not args.no_compile)
    else:
        key, figures = f"shards:{args.preset}", shards_part(args.steps, args.preset, "cuda" if cuda else "cpu")
    print(f"{key}: {figures}")
    save = Path(args.save) if args.save else (runs_root() / "bench-gpu.json" if cuda else None)
    if save is not None:
        bench_gpu.merge(save, key, figures)
        print(f"wrote {save}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
