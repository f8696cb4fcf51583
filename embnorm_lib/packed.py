"""K runs of one architecture computed as one: the forward and backward of K GPTs (same config but the seed) in
batched kernels, for devices where one small model cannot fill the machine (a 1.6M-parameter step on a GPU is
bound by kernel launches, not arithmetic).

Each member stays an ordinary `GPT`: its own parameters (so its own seed's initial values, identical to a single
run's), gradients, optimizer, clipping, diagnostics and checkpoint. Only the arithmetic is packed: every step
stacks the members' weights along a leading model dimension, runs one batched forward (the copies folded into
attention's batch dimension, which avoids vmap: SDPA has no batching rule, and the tied output head broke the
common functional-ensembling recipe), and the backward of the summed losses hands each member the gradient of
its own loss (members share no parameter). Numbers match the single-run path to float rounding, not bit for
bit: batched matmuls sum in another order.

Dropout is refused: a single run draws its dropout masks from the global generator in its own order, which a
packed step cannot reproduce per member."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

from .errors import ConfigError
from .model import GPT
from .variants import RMSNorm


def check_packable(models: Sequence[GPT]) -> None:
    """Members must differ in their seed alone, and run without dropout."""
    if not models:
        raise ConfigError("invalid pack of 0 models; allowed: one or more runs of one architecture")
    shape = {k: v for k, v in models[0].cfg.training_identity().items() if k != "seed"}
    for m in models[1:]:
        other = {k: v for k, v in m.cfg.training_identity().items() if k != "seed"}
        if other != shape:
            diff = sorted(k for k in shape if shape[k] != other.get(k))
            raise ConfigError(f"invalid pack: members differ in {', '.join(diff)}; allowed: runs that differ in "
                              f"their seed only")
    if models[0].cfg.dropout:
        raise ConfigError(f"invalid pack with dropout={models[0].cfg.dropout}; allowed: dropout 0 (each single run "
                          f"draws its own dropout masks, which a packed step cannot reproduce)")


def _stack(models: Sequence[GPT], name: str) -> torch.Tensor:
    return torch.stack([m.get_parameter(name) for m in models])


def _linear(x: torch.Tensor, models: Sequence[GPT], prefix: str) -> torch.Tensor:
    """x: (K, N, in) -> (K, N, out) with each member's own weight (out, in) and bias."""
    y = torch.bmm(x, _stack(models, f"{prefix}.weight").transpose(1, 2))
    if models[0].get_submodule(prefix).bias is not None:
        y = y + _stack(models, f"{prefix}.bias")[:, None, :]
    return y


def _norm(x: torch.Tensor, models: Sequence[GPT], prefix: str) -> torch.Tensor:
    """The members' LayerNorm, RMSNorm or identity at `prefix`, with each member's own scale and shift."""
    module = models[0].get_submodule(prefix)
    shape = (x.shape[-1],)
    if isinstance(module, torch.nn.LayerNorm):
        y = F.layer_norm(x, shape, eps=module.eps) * _stack(models, f"{prefix}.weight")[:, None, :]
        return y + _stack(models, f"{prefix}.bias")[:, None, :] if module.bias is not None else y
    if isinstance(module, RMSNorm):
        return F.rms_norm(x, shape, eps=module.eps) * _stack(models, f"{prefix}.weight")[:, None, :]
    if isinstance(module, torch.nn.Identity):
        return x
    raise ConfigError(f"invalid embedding norm {type(module).__name__} for packing; allowed: LayerNorm, RMSNorm, "
                      f"Identity")


def packed_forward(models: Sequence[GPT], idx: torch.Tensor, targets: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """idx: (K, B, T) -> logits (K, B, T, V), each member's mean loss (K,) or None, block1_input_norm (K,)."""
    cfg = models[0].cfg
    K, B, T = idx.shape
    C, H = cfg.n_embd, cfg.n_head
    if K != len(models):
        raise ValueError(f"got batches for {K} members, the pack has {len(models)}")
    if T > cfg.block_size:
        raise ValueError(f"sequence length {T} exceeds block_size {cfg.block_size}")
    wte = _stack(models, "wte.weight")  # (K, V, C); also the tied output head
    tok = torch.gather(wte, 1, idx.reshape(K, B * T, 1).expand(K, B * T, C))
    pos = _stack(models, "wpe.weight")[:, :T, :].repeat(1, B, 1)
    x = _norm(tok * models[0].token_scale + pos, models, "emb_norm")  # (K, B*T, C)
    block1_input_norm = x.detach().float().norm(dim=-1).mean(dim=1)
    for i in range(cfg.n_layer):
        p = f"blocks.{i}"
        q, k, v = _linear(_norm(x, models, f"{p}.ln_1"), models, f"{p}.attn.c_attn").split(C, dim=2)
        q, k, v = (t.reshape(K * B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(K, B * T, C)
        x = x + _linear(y, models, f"{p}.attn.c_proj")
        h = F.gelu(_linear(_norm(x, models, f"{p}.ln_2"), models, f"{p}.mlp.c_fc"))
        x = x + _linear(h, models, f"{p}.mlp.c_proj")
    logits = torch.bmm(_norm(x, models, "ln_f"), wte.transpose(1, 2)).view(K, B, T, -1)
    loss = None
    if targets is not None:
        flat = logits.float().reshape(K, B * T, -1)
        loss = torch.stack([F.cross_entropy(flat[j], targets[j].reshape(-1)) for j in range(K)])
    return logits, loss, block1_input_norm

