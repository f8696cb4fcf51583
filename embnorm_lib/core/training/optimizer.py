"""The optimizer every single run trains with: AdamW, weight decay on matrices and embedding tables only (norms and
biases are not decayed), the tables at their own decay where the config sets one (emb_weight_decay)."""
from __future__ import annotations

import torch

from ..config import RunConfig
from ..nets.model import GPT


def make_optimizer(model: GPT, cfg: RunConfig, device: torch.device) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]  # matrices and embeddings; norms and biases are not decayed
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.emb_weight_decay is not None and cfg.emb_weight_decay != cfg.weight_decay:
        tables = {id(model.wte.weight), id(model.wpe.weight)}  # the tied head is wte.weight itself
        groups = [{"params": [p for p in decay if id(p) not in tables], "weight_decay": cfg.weight_decay},
                  {"params": [p for p in decay if id(p) in tables], "weight_decay": cfg.emb_weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused)
