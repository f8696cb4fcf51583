"""Device and numeric precision: cuda -> mps -> cpu, bf16 only where the hardware has it."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .errors import ConfigError


def select_device(requested: str = "auto") -> torch.device:
    if requested != "auto":
        if requested == "cuda" and not torch.cuda.is_available():
            raise ConfigError("invalid device='cuda': CUDA is not available on this machine; allowed here: cpu, auto")
        if requested == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("invalid device='mps': MPS is not available on this machine; allowed here: cpu, auto")
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def cuda_has_native_bf16() -> bool:
    # is_bf16_supported() says True on a T4 through slow emulation (pytorch PR #148322):
    # trust compute capability >= 8.0 (Ampere) instead.
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


def resolve_precision(requested: str, device: torch.device) -> str:
    """'auto' means bf16 on Ampere+, fp16 (with loss scaling) on older CUDA, fp32 elsewhere."""
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if cuda_has_native_bf16() else "fp16"
    return "fp32"


# torch.compile's fixed cost against what it saves per step. Measured on an H100 (2026-11-27) and an H200
# (2026-11-28; runs/bench-gpu.json, runs/bench-gpu/): at the seeds-final size (1.6M parameters, launch-bound either
# way) compiling took 18-21 s and cut the median step from 18.5 to 15.2 ms (H100) and from 24.9 to 14.2 ms (H200),
# which pays back only after ~1,800-6,400 steps, longer than any run here. Large models are compute-bound, where
# inductor's fusion pays (nanoGPT reports ~250 -> ~135 ms/iteration at GPT-2 small), so `auto` compiles from this
# many parameters on: gpt-small (~86M) compiles, the size ladder (<= 15M) does not.
COMPILE_MIN_PARAMS = 50_000_000


def resolve_compile(requested: bool | str, device: torch.device, n_params: int) -> bool:
    """'auto' means compile on CUDA for models of COMPILE_MIN_PARAMS parameters or more; never on CPU or MPS."""
    if requested == "auto":
        return device.type == "cuda" and n_params >= COMPILE_MIN_PARAMS
    return bool(requested)


_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Precision:
    name: str
    device: torch.device

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=_DTYPES[self.name])

    def grad_scaler(self) -> torch.amp.GradScaler:
        # fp16 gradients underflow without loss scaling; bf16/fp32 do not need it.
        return torch.amp.GradScaler(self.device.type, enabled=self.name == "fp16")
