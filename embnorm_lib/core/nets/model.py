"""A GPT-2-style Pre-LN decoder in one file. The study's switch sits in ``GPT.forward``:
``x = self.emb_norm(tok_emb * token_scale + pos_emb)``; everything else is shared by all variants."""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..config import RunConfig
from .variants import EmbNorm, get_variant


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: RunConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        return tuple(t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.heads(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))

    @torch.no_grad()
    def max_logit(self, x: torch.Tensor) -> torch.Tensor:
        """Largest pre-softmax attention logit over unmasked pairs (Wortsman et al. 2023 track this)."""
        q, k, _ = self.heads(x)
        T = x.shape[1]
        logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        return logits.masked_fill(~causal, float("-inf")).amax()


class MLP(nn.Module):
    def __init__(self, cfg: RunConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: RunConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


@torch.no_grad()
def init_parameter_(p: torch.Tensor, name: str, is_norm: bool, cfg: RunConfig, generator: torch.Generator) -> None:
    """One parameter's GPT-2 initial value, in place. GPT.reset_parameters calls it in parameter-name order; the
    fleet (fleet.py) calls it on views of its stacked buffer in the same order, so both draw the same numbers."""
    if name in ("wte.weight", "wpe.weight"):
        p.normal_(0.0, cfg.emb_init_std, generator=generator)
    elif name.startswith("emb_norm."):  # the variant's constants (variants.py)
        p.fill_(get_variant(cfg.variant).initial_value(name.removeprefix("emb_norm."), cfg.n_embd, cfg.emb_init_std,
                                                       cfg.bias))
    elif is_norm:
        p.fill_(1.0 if name.endswith("weight") else 0.0)
    elif name.endswith(".bias") or (name == "lm_head.weight" and cfg.head_init == "zero"):
        p.zero_()
    else:
        std = cfg.init_std / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else cfg.init_std
        p.normal_(0.0, std, generator=generator)


class GPT(nn.Module):
    def __init__(self, cfg: RunConfig):
        super().__init__()
        self.cfg = cfg
        variant = get_variant(cfg.variant)
        self.token_scale = variant.token_scale(cfg.n_embd, cfg.emb_init_std)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.emb_norm = variant.build(cfg.n_embd, cfg.bias)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=1e-5, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:  # GPT-2: the output head is the token embedding
            self.lm_head.weight = self.wte.weight
        self.reset_parameters(torch.Generator().manual_seed(cfg.seed))

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> None:
        """GPT-2 init from a generator of its own, drawn in a fixed order by parameter name.

        Norm weights/biases are constants, so a variant's extra norm consumes no random draws
        and every shared parameter gets the same values in every variant with the same seed. An untied output
        head is drawn last (N(0, init_std)), so it leaves every other parameter's values as they are tied."""
        norms = self.norm_parameter_names()
        for name, p in self.named_parameters():
            init_parameter_(p, name, name in norms, self.cfg, generator)

    def norm_parameter_names(self) -> set[str]:
        return {f"{m_name}.{p_name}" for m_name, m in self.named_modules() if isinstance(m, (nn.LayerNorm, EmbNorm))
                for p_name, _ in m.named_parameters()}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weight counted once

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """The tensor entering block 1: the study's single switch."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.emb_norm(self.wte(idx) * self.token_scale + self.wpe(pos))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Returns (logits, loss, block1_input_norm); loss is None without targets."""
        T = idx.shape[1]
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        x = self.embed(idx)
        block1_input_norm = x.detach().float().norm(dim=-1).mean()
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss, block1_input_norm

    def flops_per_token(self) -> int:
        """Training FLOPs per token, fwd+bwd: 6N for the weights plus 12*L*d*T for attention
        (PaLM appendix B; nanoGPT's estimate_mfu), N without the position table."""
        c = self.cfg
        n = self.num_params() - self.wpe.weight.numel()
        return 6 * n + 12 * c.n_layer * c.n_embd * c.block_size
