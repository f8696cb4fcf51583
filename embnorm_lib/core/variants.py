"""The one thing the study varies: what happens to ``tok_emb + pos_emb`` before block 1.

Each variant is one registry entry. ``build`` returns the module applied to the summed
embedding; ``token_scale`` multiplies the token embedding before the sum (Gemma-style
scaling); ``gain_init`` sets the norm's initial gain (default 1). Adding a variant means adding one
``EmbeddingVariant`` to ``VARIANTS``; new variants go last (the first three are the study's arms A, B, C and the
fourth is D, in every grid).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .errors import ConfigError


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned per-channel scale and no bias (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


@dataclass(frozen=True)
class EmbeddingVariant:
    name: str
    description: str
    build: Callable[[int, bool], nn.Module]  # (n_embd, bias) -> module applied to tok+pos
    token_scale: Callable[[int, float], float] = lambda n_embd, emb_init_std: 1.0
    gain_init: Callable[[float], float] | None = None  # emb_init_std -> the norm's initial gain (None: 1)
    aliases: tuple[str, ...] = ()
    color: str = "0.3"  # the arm's colour in every figure


VARIANTS: dict[str, EmbeddingVariant] = {
    v.name: v
    for v in (
        EmbeddingVariant("none", "A: no normalization after the embedding sum",
                         lambda d, bias: nn.Identity(), color="tab:blue"),
        EmbeddingVariant("ln", "B: LayerNorm(tok + pos), eps 1e-5, affine like the blocks' norms",
                         lambda d, bias: nn.LayerNorm(d, eps=1e-5, bias=bias), aliases=("layernorm",),
                         color="tab:orange"),
        EmbeddingVariant("rms", "C: RMSNorm(tok + pos), eps 1e-6, learned scale, no bias",
                         lambda d, bias: RMSNorm(d, eps=1e-6), aliases=("rmsnorm",), color="tab:green"),
        EmbeddingVariant("scaled", "D: tok * sqrt(d) + pos, no norm (Gemma-style scaling)",
                         lambda d, bias: nn.Identity(), token_scale=lambda d, std: math.sqrt(d),
                         color="tab:red"),
        # scale vs normalization (stability v2): normalize without rescaling, rescale without normalizing
        EmbeddingVariant("ln_matched", "B': LayerNorm(tok + pos) with its gain starting at sqrt(2) * emb_init_std, "
                                       "so block 1's input norm at init equals none's (normalizes, does not rescale)",
                         lambda d, bias: nn.LayerNorm(d, eps=1e-5, bias=bias),
                         gain_init=lambda std: math.sqrt(2) * std, color="tab:purple"),
        EmbeddingVariant("scaled_unit", "D': tok / emb_init_std + pos, no norm: the token embedding at unit RMS "
                                        "at init (rescales, does not normalize)",
                         lambda d, bias: nn.Identity(), token_scale=lambda d, std: 1.0 / std, color="tab:brown"),
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
