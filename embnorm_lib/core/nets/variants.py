"""The one thing the study varies: what happens to ``tok_emb + pos_emb`` before block 1.

Each variant is one registry entry: its `EmbeddingNorm` (a function of (x, its parameters) plus the parameters'
specs, or None for no norm), ``token_scale`` (multiplies the token embedding before the sum, Gemma-style) and
``gain_init`` (the norm's initial gain; default 1). Both engines read the entry and nothing else: the single-run
model (model.py) holds the parameters in a module that calls the norm's function, and the fleet (fleet_ops.py)
calls the same function on each arm's members with their stacked parameters. Adding a variant means adding one
``EmbeddingVariant`` to ``VARIANTS`` (new variants go last: registry order is the order of tables and figures).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import ConfigError

Params = dict[str, torch.Tensor]


def _stacked(weight: torch.Tensor, x: torch.Tensor) -> bool:
    """True for the fleet's parameters (one row per member, broadcast over positions), False for a single run's."""
    return weight.dim() == x.dim()


def layer_norm(x: torch.Tensor, p: Params, eps: float) -> torch.Tensor:
    """LayerNorm over the last dimension with a learned gain (and bias if the model has biases). A single run keeps
    torch's fused call, which is what every committed run computed; stacked per-member gains cannot enter it."""
    weight, bias = p["weight"], p.get("bias")
    if not _stacked(weight, x):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    y = F.layer_norm(x, (x.shape[-1],), eps=eps)
    return torch.addcmul(bias, y, weight) if bias is not None else y * weight


def rms_norm(x: torch.Tensor, p: Params, eps: float) -> torch.Tensor:
    """Root-mean-square norm with a learned per-channel gain and no bias (Zhang & Sennrich 2019)."""
    weight = p["weight"]
    if not _stacked(weight, x):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return F.rms_norm(x, (x.shape[-1],), eps=eps) * weight


@dataclass(frozen=True)
class NormParameter:
    name: str  # as the model names it: emb_norm.<name>
    shape: Callable[[int], tuple[int, ...]]  # n_embd -> its shape
    gain: bool  # its initial value is the variant's gain (gain_init) rather than 0


@dataclass(frozen=True)
class EmbeddingNorm:
    """A norm applied to tok + pos: `apply(x, parameters by name, eps)` and the specs of its parameters."""

    name: str
    apply: Callable[[torch.Tensor, Params, float], torch.Tensor]
    parameters: Callable[[bool], tuple[NormParameter, ...]]  # the model's bias flag -> the norm's parameters
    eps: float


def _channels(d: int) -> tuple[int, ...]:
    return (d,)


GAIN = NormParameter("weight", _channels, gain=True)
LAYER_NORM = EmbeddingNorm("LayerNorm", layer_norm, lambda bias: (GAIN, NormParameter("bias", _channels, False))
                           if bias else (GAIN,), eps=1e-5)
RMS_NORM = EmbeddingNorm("RMSNorm", rms_norm, lambda bias: (GAIN,), eps=1e-6)


class EmbNorm(nn.Module):
    """A single run's embedding norm: the parameters its `EmbeddingNorm` names, applied by its function."""

    def __init__(self, norm: EmbeddingNorm, n_embd: int, bias: bool):
        super().__init__()
        self.norm = norm
        self.specs = norm.parameters(bias)
        for spec in self.specs:  # in spec order: the order of named_parameters, init and clipping
            self.register_parameter(spec.name, nn.Parameter(torch.ones(spec.shape(n_embd))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm.apply(x, {spec.name: getattr(self, spec.name) for spec in self.specs}, self.norm.eps)

    def extra_repr(self) -> str:
        return f"{self.norm.name}, eps={self.norm.eps}"


@dataclass(frozen=True)
class EmbeddingVariant:
    name: str
    description: str
    norm: EmbeddingNorm | None  # None: tok + pos enters block 1 as it is
    token_scale: Callable[[int, float], float] = lambda n_embd, emb_init_std: 1.0
    gain_init: Callable[[int, float], float] | None = None  # (n_embd, emb_init_std) -> the norm's initial gain (1)
    aliases: tuple[str, ...] = ()
    color: str = "0.3"  # the arm's colour in every figure

    def build(self, n_embd: int, bias: bool) -> nn.Module:
        return EmbNorm(self.norm, n_embd, bias) if self.norm else nn.Identity()

    def initial_value(self, name: str, n_embd: int, emb_init_std: float, bias: bool) -> float:
        """The constant an `emb_norm.<name>` parameter starts at: the gain (gain_init, else 1) or 0."""
        spec = next(s for s in self.norm.parameters(bias) if s.name == name)
        if not spec.gain:
            return 0.0
        return self.gain_init(n_embd, emb_init_std) if self.gain_init else 1.0


VARIANTS: dict[str, EmbeddingVariant] = {
    v.name: v
    for v in (
        EmbeddingVariant("none", "A: no normalization after the embedding sum", None, color="tab:blue"),
        EmbeddingVariant("ln", "B: LayerNorm(tok + pos), eps 1e-5, affine like the blocks' norms", LAYER_NORM,
                         aliases=("layernorm",), color="tab:orange"),
        EmbeddingVariant("rms", "C: RMSNorm(tok + pos), eps 1e-6, learned scale, no bias", RMS_NORM,
                         aliases=("rmsnorm",), color="tab:green"),
        EmbeddingVariant("scaled", "D: tok * sqrt(d) + pos, no norm (Gemma-style scaling)", None,
                         token_scale=lambda d, std: math.sqrt(d), color="tab:red"),
        # scale vs normalization (stability v2): normalize without rescaling, rescale without normalizing
        EmbeddingVariant("ln_matched", "B': LayerNorm(tok + pos) with its gain starting at sqrt(2) * emb_init_std, "
                                       "so block 1's input norm at init equals none's (normalizes, does not rescale)",
                         LAYER_NORM, gain_init=lambda d, std: math.sqrt(2) * std, color="tab:purple"),
        EmbeddingVariant("scaled_unit", "D': tok / emb_init_std + pos, no norm: the token embedding at unit RMS "
                                        "at init (rescales, does not normalize)",
                         None, token_scale=lambda d, std: 1.0 / std, color="tab:brown"),
    )
}

_ALIASES = {alias: v.name for v in VARIANTS.values() for alias in (v.name, *v.aliases)}


def canonical_variant(name: str) -> str:
    """Map a variant name or alias to its registry key, or fail naming what is allowed. Exact names only: coerced,
    papermill's `-p variant None` (Python's None) trained `none`, and `LN` or ` ln ` became `ln` (issue 117)."""
    if not isinstance(name, str) or name not in _ALIASES:
        raise ConfigError(f"unknown variant {name!r}; allowed: {', '.join(sorted(_ALIASES))}")
    return _ALIASES[name]


def get_variant(name: str) -> EmbeddingVariant:
    return VARIANTS[canonical_variant(name)]


def variant_names() -> tuple[str, ...]:
    """Every variant in registry order: the order of tables, figures and study grids."""
    return tuple(VARIANTS)


def variant_rank(name: str) -> int:
    """Position in the registry; a name that is not a variant sorts after all of them."""
    names = variant_names()
    return names.index(name) if name in names else len(names)


def arm_variant(arm: str) -> str:
    """The variant an arm name starts with, the longest that fits (`ln_matched_lr=1` is ln_matched's, not ln's); ""
    if none."""
    return max((v for v in VARIANTS if arm == v or arm.startswith(v + "_")), key=len, default="")
