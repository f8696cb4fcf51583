"""Cheap, interval-controlled probes of why a variant trains the way it does.

Everything here reads the model (and optimizer) without touching any random stream, so
turning diagnostics on or off never changes the training trajectory."""
from __future__ import annotations

import math
import statistics
import string
from collections import OrderedDict

import torch
from torch.nn import functional as F

TOKEN_CLASSES = OrderedDict(
    upper=set(string.ascii_uppercase),
    lower=set(string.ascii_lowercase),
    digit=set(string.digits),
    punct=set(string.punctuation),
    space={" ", "\t"},
    newline={"\n"},
)


def token_class(ch: str) -> str:
    for name, members in TOKEN_CLASSES.items():
        if ch in members:
            return name
    return "other"


def parameter_groups(model) -> OrderedDict[str, list[torch.nn.Parameter]]:
    """Named groups: tok_emb, pos_emb, emb_norm, block{i}.attn (with ln_1), block{i}.mlp (with ln_2), final_norm."""
    groups: OrderedDict[str, list] = OrderedDict(tok_emb=[model.wte.weight], pos_emb=[model.wpe.weight])
    emb_norm = list(model.emb_norm.parameters())
    if emb_norm:
        groups["emb_norm"] = emb_norm
    for i, block in enumerate(model.blocks, start=1):
        groups[f"block{i}.attn"] = [*block.ln_1.parameters(), *block.attn.parameters()]
        groups[f"block{i}.mlp"] = [*block.ln_2.parameters(), *block.mlp.parameters()]
    groups["final_norm"] = list(model.ln_f.parameters())
    if model.lm_head.weight is not model.wte.weight:
        groups["out_head"] = [model.lm_head.weight]
    return groups


def fetch(values: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """Scalars still on the device, read back in one transfer (one host sync instead of one per value; on a GPU
    each `.item()` waits for the device). The floats are those `.item()` would give."""
    keys = [k for k, v in values.items() if isinstance(v, torch.Tensor)]
    if not keys:
        return dict(values)
    read = dict(zip(keys, torch.stack([values[k].detach().float().reshape(()) for k in keys]).tolist()))
    return {k: read.get(k, v) for k, v in values.items()}


def _norm(tensors) -> torch.Tensor | float:
    tensors = [t for t in tensors if t is not None]
    if not tensors:
        return 0.0
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.float()) for t in tensors]))


def grad_norms(groups) -> dict[str, float]:
    return fetch({f"grad_norm.{name}": _norm([p.grad for p in params]) for name, params in groups.items()})


def adam_second_moments(optimizer, groups) -> dict[str, float]:
    out = {}
    for name, params in groups.items():
        moments = [optimizer.state[p]["exp_avg_sq"].float().flatten() for p in params
                   if p in optimizer.state and "exp_avg_sq" in optimizer.state[p]]
        if moments:
            flat = torch.cat(moments)
            out[f"adam_v_mean.{name}"] = flat.mean()
            out[f"adam_v_max.{name}"] = flat.max()
    return fetch(out)


def snapshot(groups) -> dict[str, list[torch.Tensor]]:
    return {name: [p.detach().clone() for p in params] for name, params in groups.items()}


def update_ratios(before: dict[str, list[torch.Tensor]], groups) -> dict[str, float]:
    """||w_after - w_before|| / ||w_before|| per group: the size of one optimizer step."""
    norms = {}
    for name, params in groups.items():
        norms[f"delta.{name}"] = _norm([p.detach() - b for p, b in zip(params, before[name])])
        norms[f"base.{name}"] = _norm(before[name])
    norms = fetch(norms)
    out = {}
    for name in groups:
        delta, base = norms[f"delta.{name}"], norms[f"base.{name}"]
        out[f"update_ratio.{name}"] = delta / base if base > 0 else float("nan")
    return out


GRAM_MAX_ROWS = 8192


def mean_pairwise_cosine(vectors: torch.Tensor) -> torch.Tensor:
    """Mean cosine similarity over distinct pairs of rows (1.0 when all rows point the same way)."""
    v = F.normalize(vectors.float(), dim=-1)
    n = v.shape[-2]
    if n > GRAM_MAX_ROWS:  # an n x n Gram matrix would not fit (GPT-2's vocabulary: 50,257^2 floats, 10 GB)
        total = v.double().sum(dim=-2)  # the sum over all pairs of v_i . v_j is |sum v|^2; the diagonal's is sum |v_i|^2
        off_diagonal = (total * total).sum(-1) - (v.double() ** 2).sum(dim=(-2, -1))
        return (off_diagonal / (n * (n - 1))).mean().float()
    gram = v @ v.transpose(-2, -1)  # smaller sets keep the Gram form: the committed runs' numbers, bit for bit
    off_diagonal = gram.sum(dim=(-2, -1)) - gram.diagonal(dim1=-2, dim2=-1).sum(-1)
    return (off_diagonal / (n * (n - 1))).mean()


def norm_distribution(x: torch.Tensor, prefix: str) -> dict[str, torch.Tensor]:
    norms = x.float().norm(dim=-1).flatten()
    q = torch.quantile(norms, torch.tensor([0.05, 0.5, 0.95], device=norms.device))
    return {f"{prefix}.mean": norms.mean(), f"{prefix}.std": norms.std(),
            f"{prefix}.p5": q[0], f"{prefix}.p50": q[1], f"{prefix}.p95": q[2]}


def class_ids(chars: list[str]) -> dict[str, torch.Tensor]:
    # a subword token is classed by its first character ("▁" marks a space)
    ids = {name: torch.tensor([i for i, c in enumerate(chars) if token_class(c.replace("▁", " ")[:1]) == name],
                              dtype=torch.long)
           for name in [*TOKEN_CLASSES, "other"]}
    return {k: v for k, v in ids.items() if len(v)}


@torch.no_grad()
def probe(model, probe_x: torch.Tensor, chars: list[str]) -> dict[str, float]:
    """Forward a fixed probe batch and read the residual stream, attention and output logits."""
    was_training = model.training
    model.eval()
    out: dict[str, torch.Tensor] = {}
    idx = probe_x.to(next(model.parameters()).device)
    x = model.embed(idx)
    out.update(norm_distribution(x, "resid.block1_input"))
    out["cosine.block1_input_positions"] = mean_pairwise_cosine(x)
    wte = model.wte.weight
    out["cosine.token_embeddings"] = mean_pairwise_cosine(wte)
    for name, ids in class_ids(chars).items():
        out[f"tok_emb_norm.{name}"] = wte[ids.to(wte.device)].float().norm(dim=-1).mean()
        mask = torch.isin(idx, ids.to(idx.device))
        if mask.any():  # a host read, but of the fixed probe batch's ids: decided before any arithmetic
            out[f"block1_input_norm.{name}"] = x[mask].float().norm(dim=-1).mean()
    for i, block in enumerate(model.blocks, start=1):
        out[f"attn_logit_max.block{i}"] = block.attn.max_logit(block.ln_1(x))
        x = block(x)
        out.update(norm_distribution(x, f"resid.block{i}_output"))
    logits = model.lm_head(model.ln_f(x)).float()
    out["out_logit.mean_abs"] = logits.abs().mean()
    out["out_logit.max"] = logits.max()
    out["out_logit.mean_logz"] = torch.logsumexp(logits, dim=-1).mean()
    model.train(was_training)
    return fetch(out)


def find_spikes(losses: list[float], factor: float = 1.5, window: int = 20) -> list[int]:
    """Indices i where losses[i] > factor x the median of the preceding `window` finite losses."""
    spikes = []
    for i in range(1, len(losses)):
        history = [v for v in losses[max(0, i - window): i] if v is not None and v == v]
        if history and losses[i] is not None and losses[i] > factor * statistics.median(history):
            spikes.append(i)
    return spikes


def after_warmup(rows: list[dict], warmup_iters: int, factor: float, window: int) -> dict:
    """Stability measured after the warm-up (the registered stability metrics since amendment 1): loss spikes
    and the peak total gradient norm over the steps after `warmup_iters`, which leave out the initialisation
    transient that dominates the all-steps figures."""
    spikes = find_spikes([r.get("train_loss") for r in rows], factor, window)
    norms = [(r["step"], r.get("grad_norm_total")) for r in rows]
    later = [g for step, g in norms if step > warmup_iters and isinstance(g, float) and math.isfinite(g)]
    return {"spike_count_post_warmup": sum(rows[i]["step"] > warmup_iters for i in spikes),
            "peak_grad_norm_post_warmup": max(later, default=float("nan"))}
