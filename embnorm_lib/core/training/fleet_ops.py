"""The fleet's arithmetic (fleet.py): which runs form one group, the layout of the members' parameters in one flat
buffer, the batched forward (every member's loss without a Python loop over members), the diagnostics probe, clipping
and AdamW over the flat buffer with per-member hyperparameters, and the schedule and batch tables."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from ..config import RunConfig
from ..device import resolve_precision, select_device
from ..errors import ConfigError
from ..nets.model import GPT
from ..nets.variants import EmbeddingNorm, get_variant
from ..scoring import diagnostics as diag
from .train import lr_at

# What members of one group must share: the tensor shapes of a step and of an evaluation, and where it runs.
SHAPE_FIELDS = ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "vocab_size", "tokenizer", "corpus_sha256",
                "bias", "tie_embeddings", "eval_windows", "interim_eval_windows", "device", "precision")
RING_STEPS = 256  # steps of readings the device holds between two host copies
ADAM_EPS = 1e-8  # torch.optim.AdamW's default, which every single run uses
GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before a CUDA graph is captured (what capture asks for)
FINISH_THREADS = 16  # members finished at once (calibration, weights, logs)
EVAL_ELEMENTS_GPU = 1 << 25  # logits per batched evaluation forward on a GPU (members x windows x tokens x vocab)
_LAYOUT_WARNING = "grad and param do not obey the gradient layout contract"  # views of one buffer: expected


# -- groups -------------------------------------------------------------------------------------------

def shape_key(cfg: RunConfig) -> tuple:
    return tuple(getattr(cfg, f) for f in SHAPE_FIELDS)


def check_fleet_configs(cfgs: Sequence[RunConfig]) -> None:
    """What a fleet member may not be: checked for every member before anything is written."""
    if not cfgs:
        raise ConfigError("invalid fleet of 0 runs; allowed: one or more runs")
    for cfg in cfgs:
        if cfg.execution != "fleet":
            raise ConfigError(f"invalid execution={cfg.execution!r} for a fleet member; allowed: fleet "
                              f"(fleet_configs marks them)")
        if cfg.dropout:
            raise ConfigError(f"invalid dropout={cfg.dropout} in a fleet; allowed: 0 (a single run draws its masks "
                              f"from the global generator in an order a batched step cannot reproduce)")
        if cfg.grad_accum != 1:
            raise ConfigError(f"invalid grad_accum={cfg.grad_accum} in a fleet; allowed: 1")
        if cfg.emb_weight_decay not in (None, cfg.weight_decay):
            raise ConfigError(f"invalid emb_weight_decay={cfg.emb_weight_decay} in a fleet; allowed: null or "
                              f"weight_decay's value (the fleet decays every matrix and table as one slice)")
        device = select_device(cfg.device)
        if resolve_precision(cfg.precision, device) == "fp16":
            raise ConfigError(f"invalid precision={cfg.precision!r} on {device} in a fleet (resolves to fp16, "
                              f"which needs a loss scaler per member); allowed: fp32, bf16")


def fleet_configs(cfgs: Sequence[RunConfig]) -> list[RunConfig]:
    return [cfg.replace(execution="fleet") for cfg in cfgs]


def groups_of(cfgs: Sequence[RunConfig]) -> list[list[int]]:
    """Indices of `cfgs` by shape, in order of first appearance."""
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(shape_key(cfg), []).append(i)
    return list(groups.values())


# -- the stacked parameters -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """One parameter's place in a member's row of the flat buffer."""

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def end(self) -> int:
        return self.offset + self.numel


def slot_key(name: str, shape: tuple[int, ...], shapes: dict[str, set[tuple[int, ...]]]) -> str:
    """A parameter's key among the arms': its name, or name@shape where arms give one name two shapes (an RMSNorm
    gain is (d,), a ScaleNorm gain (1,)): a layout merged by name alone initialised such a fleet wrongly."""
    return name if len(shapes[name]) == 1 else f"{name}@{'x'.join(map(str, shape))}"


def shapes_by_name(named_shapes) -> dict[str, set[tuple[int, ...]]]:
    shapes: dict[str, set[tuple[int, ...]]] = {}
    for name, shape in named_shapes:
        shapes.setdefault(name, set()).add(tuple(shape))
    return shapes


class Layout:
    """The union of the arms' parameters in one row, keyed by name and shape (`slot_key`): weight-decayed ones
    (matrices, embeddings) first, so the decay is one slice; an arm's norm that another arm lacks has a slot that
    stays at its constant there."""

    def __init__(self, templates: dict[str, GPT]):
        self.shapes = shapes_by_name((n, p.shape) for t in templates.values() for n, p in t.named_parameters())
        self.keys: dict[str, dict[str, str]] = {}  # arm -> its parameter name -> its slot's key
        keys: list[str] = []
        shape_of: dict[str, tuple[int, ...]] = {}
        for arm, template in templates.items():
            self.keys[arm] = {}
            at = -1
            for name, p in template.named_parameters():
                key = self.keys[arm][name] = slot_key(name, tuple(p.shape), self.shapes)
                if key not in shape_of:
                    keys.insert(at + 1, key)
                    shape_of[key] = tuple(p.shape)
                at = keys.index(key)
        ordered = [k for k in keys if len(shape_of[k]) >= 2] + [k for k in keys if len(shape_of[k]) < 2]
        self.slots: dict[str, Slot] = {}
        offset = 0
        for key in ordered:
            self.slots[key] = Slot(key, shape_of[key], offset)
            offset += self.slots[key].numel
        self.size = offset
        # each parameter's [offset, end) in the models' own order: the order clip_grad_norm_ sums their norms in
        self.bounds = [(self.slots[k].offset, self.slots[k].end) for k in keys]
        self.n_decay = sum(s.numel for s in self.slots.values() if len(s.shape) >= 2)


@dataclass(frozen=True)
class ArmNorm:
    """An arm's embedding norm in a fleet: the variant's `EmbeddingNorm` (None: no norm) and the slot key of each
    of its parameters (emb_norm.<name> -> key)."""

    norm: EmbeddingNorm | None
    keys: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, variant: str, bias: bool, key_of) -> ArmNorm:
        norm = get_variant(variant).norm
        if norm is None:
            return cls(None)
        return cls(norm, tuple((s.name, key_of(f"emb_norm.{s.name}")) for s in norm.parameters(bias)))


@dataclass
class Members:
    """Per-member constants of the forward, in fleet order (members of one arm are contiguous)."""

    norms: list[ArmNorm]
    token_scale: torch.Tensor  # [K]
    segments: list[tuple[ArmNorm, int, int]]  # (norm, first, end): one per run of members with an equal norm

    @classmethod
    def build(cls, norms: list[ArmNorm], token_scale: torch.Tensor) -> Members:
        segments = []
        for k, norm in enumerate(norms):
            if segments and segments[-1][0] == norm:
                segments[-1] = (norm, segments[-1][1], k + 1)
            else:
                segments.append((norm, k, k + 1))
        return cls(norms, token_scale, segments)

    def subset(self, index: list[int]) -> Members:
        return Members.build([self.norms[i] for i in index],
                             self.token_scale[torch.tensor(index, device=self.token_scale.device)])


# -- the batched forward ----------------------------------------------------------------------------------

def _linear(x: torch.Tensor, w: dict, name: str) -> torch.Tensor:
    """x (K, N, in) with each member's weight (K, out, in) and bias (K, out)."""
    weight, bias = w[f"{name}.weight"], w.get(f"{name}.bias")
    if bias is None:
        return torch.bmm(x, weight.transpose(1, 2))
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


def _layer_norm(x: torch.Tensor, w: dict, name: str, eps: float = 1e-5) -> torch.Tensor:
    y = F.layer_norm(x, (x.shape[-1],), eps=eps)
    bias = w.get(f"{name}.bias")
    weight = w[f"{name}.weight"].unsqueeze(1)
    return torch.addcmul(bias.unsqueeze(1), y, weight) if bias is not None else y * weight


def _emb_norm(x: torch.Tensor, w: dict, members: Members) -> torch.Tensor:
    """Each arm's norm (the variant's own function, variants.py) on its contiguous segment of members, its
    parameters one row per member broadcast over positions: as many calls as segments, not members."""
    whole = len(members.segments) == 1
    parts = []
    for arm, a, b in members.segments:
        part = x if whole else x[a:b]
        if arm.norm is not None:
            params = {name: (w[key] if whole else w[key][a:b]).unsqueeze(1) for name, key in arm.keys}
            part = arm.norm.apply(part, params, arm.norm.eps)
        parts.append(part)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _embed(w: dict, members: Members, cfg: RunConfig, idx: torch.Tensor) -> torch.Tensor:
    """idx (K, B, T) -> the tensor entering block 1 (K, B*T, C): the study's switch, per arm segment."""
    K, B, T = idx.shape
    C = cfg.n_embd
    tok = torch.gather(w["wte.weight"], 1, idx.reshape(K, B * T, 1).expand(K, B * T, C)).view(K, B, T, C)
    x = (tok * members.token_scale.view(K, 1, 1, 1) + w["wpe.weight"][:, None, :T]).view(K, B * T, C)
    return _emb_norm(x, w, members)


def _heads(h: torch.Tensor, w: dict, name: str, cfg: RunConfig, T: int) -> tuple[torch.Tensor, ...]:
    """q, k, v of attention `name` for h (K, B*T, C), each (K*B, heads, T, head size)."""
    K, N, C = h.shape
    q, k, v = _linear(h, w, name).split(C, dim=2)
    return tuple(t.reshape(K * (N // T), T, cfg.n_head, C // cfg.n_head).transpose(1, 2) for t in (q, k, v))


def _block(x: torch.Tensor, w: dict, cfg: RunConfig, i: int, T: int) -> torch.Tensor:
    K, N, C = x.shape
    p = f"blocks.{i}"
    q, k, v = _heads(_layer_norm(x, w, f"{p}.ln_1"), w, f"{p}.attn.c_attn", cfg, T)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(K, N, C)
    x = x + _linear(y, w, f"{p}.attn.c_proj")
    return x + _linear(F.gelu(_linear(_layer_norm(x, w, f"{p}.ln_2"), w, f"{p}.mlp.c_fc")), w, f"{p}.mlp.c_proj")


def _logits(x: torch.Tensor, w: dict, cfg: RunConfig) -> torch.Tensor:
    head = w["wte.weight"] if cfg.tie_embeddings else w["lm_head.weight"]
    return torch.bmm(_layer_norm(x, w, "ln_f"), head.transpose(1, 2))


def fleet_forward(w: dict, members: Members, cfg: RunConfig, idx: torch.Tensor, targets: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """idx (K, B, T) -> logits (K, B*T, V), each member's mean loss (K,) or None, block-1 input norm (K,)."""
    K, B, T = idx.shape
    x = _embed(w, members, cfg, idx)
    block1_input_norm = x.detach().float().norm(dim=-1).mean(dim=1)
    for i in range(cfg.n_layer):
        x = _block(x, w, cfg, i, T)
    logits = _logits(x, w, cfg)
    losses = None
    if targets is not None:
        nll = F.cross_entropy(logits.float().reshape(K * B * T, -1), targets.reshape(-1), reduction="none")
        losses = nll.view(K, B * T).mean(dim=1)
    return logits, losses, block1_input_norm


def _norm_distribution(x: torch.Tensor, prefix: str) -> dict[str, torch.Tensor]:
    """diagnostics.norm_distribution per member: x (K, N, C) -> (K,) each."""
    norms = x.float().norm(dim=-1)
    q = torch.quantile(norms, torch.tensor([0.05, 0.5, 0.95], device=norms.device), dim=1)
    return {f"{prefix}.mean": norms.mean(1), f"{prefix}.std": norms.std(1), f"{prefix}.p5": q[0],
            f"{prefix}.p50": q[1], f"{prefix}.p95": q[2]}


def _mean_pairwise_cosine(vectors: torch.Tensor) -> torch.Tensor:
    """diagnostics.mean_pairwise_cosine over the last two dimensions, per leading index."""
    v = F.normalize(vectors.float(), dim=-1)
    n = v.shape[-2]
    gram = v @ v.transpose(-2, -1)
    return (gram.sum(dim=(-2, -1)) - gram.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))


@torch.no_grad()
def fleet_probe(w: dict, members: Members, cfg: RunConfig, probe_x: torch.Tensor, chars: list[str]) -> list[dict]:
    """diagnostics.probe for every member at once (the same fixed probe batch), read back in one transfer."""
    K = members.token_scale.shape[0]
    n, T = probe_x.shape
    device = members.token_scale.device
    out: dict[str, torch.Tensor] = {}
    x = _embed(w, members, cfg, probe_x.to(device).expand(K, n, T))
    out.update(_norm_distribution(x, "resid.block1_input"))
    out["cosine.block1_input_positions"] = _mean_pairwise_cosine(x.view(K, n, T, -1)).mean(1)
    wte = w["wte.weight"]
    out["cosine.token_embeddings"] = _mean_pairwise_cosine(wte)
    for name, ids in diag.class_ids(chars).items():
        out[f"tok_emb_norm.{name}"] = wte[:, ids.to(device)].float().norm(dim=-1).mean(1)
        mask = torch.isin(probe_x.reshape(-1), ids)  # on the host: the fixed probe batch's ids, as the probe reads
        if mask.any():
            out[f"block1_input_norm.{name}"] = x[:, mask.to(device)].float().norm(dim=-1).mean(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    for i in range(cfg.n_layer):
        q, k, _ = _heads(_layer_norm(x, w, f"blocks.{i}.ln_1"), w, f"blocks.{i}.attn.c_attn", cfg, T)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        out[f"attn_logit_max.block{i + 1}"] = scores.masked_fill(~causal, float("-inf")).view(K, -1).amax(1)
        x = _block(x, w, cfg, i, T)
        out.update(_norm_distribution(x, f"resid.block{i + 1}_output"))
    logits = _logits(x, w, cfg).float()
    out["out_logit.mean_abs"] = logits.abs().mean(dim=(1, 2))
    out["out_logit.max"] = logits.amax(dim=(1, 2))
    out["out_logit.mean_logz"] = torch.logsumexp(logits, dim=-1).mean(1)
    keys = list(out)
    rows = torch.stack([out[key].float() for key in keys], dim=1).cpu().tolist()
    return [dict(zip(keys, row, strict=True)) for row in rows]


# -- the batched optimizer --------------------------------------------------------------------------------

@torch.no_grad()
def adamw_(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, *, active: torch.Tensor,
           step_size: torch.Tensor, decay: torch.Tensor, bc2_sqrt: torch.Tensor, beta2: torch.Tensor,
           one_minus_beta1: torch.Tensor, one_minus_beta2: torch.Tensor, n_decay: int, eps: float = ADAM_EPS) -> None:
    """torch.optim.AdamW's update on rows of [K, P] buffers, one member per row, each with its own
    hyperparameters ([K] tensors from schedule_tables: `step_size` = lr / (1 - beta1^t), `decay` = 1 - lr *
    weight_decay, `bc2_sqrt` = sqrt(1 - beta2^t), the betas); columns [:n_decay] are weight-decayed. An inactive
    member's row of `p` is left exactly as it is (its moments are not: nothing reads them again)."""
    col = lambda t: t.unsqueeze(1)  # noqa: E731
    on = col(active)
    g = torch.where(on, g, 0.0)
    p[:, :n_decay].mul_(col(torch.where(active, decay, 1.0)))
    # torch's order of operations (lerp; value * g * g; value * m / denom), so the roundings are the same kind
    m.lerp_(g, col(one_minus_beta1))
    v.mul_(col(beta2)).add_(col(one_minus_beta2) * g * g)
    update = col(step_size) * m / (v.sqrt() / col(bc2_sqrt)).add_(eps)
    p.sub_(torch.where(on, update, 0.0))


def clip_(g: torch.Tensor, max_norm: torch.Tensor, bounds: Sequence[tuple[int, int]]) -> torch.Tensor:
    """clip_grad_norm_ per row: returns each member's total norm before clipping (K,). As torch does, the norm of
    the parameters' norms (`bounds`: each parameter's columns): one float32 sum over a whole row of ~1e6 squares
    is off by ~2e-4 relative, enough to move a clipped step and, 150 steps on, the final loss by 0.03."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g[:, a:b], dim=1) for a, b in bounds],
                                                dim=1), dim=1)
    g.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0).unsqueeze(1))
    return norm


def schedule_tables(cfgs: Sequence[RunConfig], steps: int) -> dict[str, torch.Tensor]:
    """Per-member tables (float64, [K, steps + 1], indexed by the 1-based step; zero step size past a member's
    max_iters) of AdamW's step size lr / (1 - beta1^t), decay factor 1 - lr * weight_decay and sqrt(1 - beta2^t),
    computed on the host in double as torch.optim computes them from its Python floats; and [K] beta2, 1 - betas
    and clipping norms (inf: no clipping)."""
    shape = (len(cfgs), steps + 1)
    step_size = torch.zeros(shape, dtype=torch.float64)
    decay, bc2_sqrt = torch.ones(shape, dtype=torch.float64), torch.ones(shape, dtype=torch.float64)
    for k, cfg in enumerate(cfgs):
        for s in range(1, cfg.max_iters + 1):
            lr = lr_at(cfg, s)
            step_size[k, s] = lr / (1 - cfg.beta1 ** s)
            decay[k, s] = 1 - lr * cfg.weight_decay
            bc2_sqrt[k, s] = (1 - cfg.beta2 ** s) ** 0.5
    column = lambda values: torch.tensor(values, dtype=torch.float64)  # noqa: E731
    return {"step_size": step_size, "decay": decay, "bc2_sqrt": bc2_sqrt,
            "beta2": column([c.beta2 for c in cfgs]), "one_minus_beta1": column([1 - c.beta1 for c in cfgs]),
            "one_minus_beta2": column([1 - c.beta2 for c in cfgs]),
            "max_norm": column([c.grad_clip if c.grad_clip > 0 else math.inf for c in cfgs])}


def batch_starts(cfg: RunConfig, n_train: int, steps: int) -> torch.Tensor:
    """The window starts of a member's first `steps` batches, drawn as its single run's BatchSampler draws them."""
    generator = torch.Generator().manual_seed(cfg.seed)
    high = n_train - cfg.block_size - 1
    return torch.stack([torch.randint(high, (cfg.batch_size,), generator=generator) for _ in range(steps)])


# -- one group ----------------------------------------------------------------------------------------------
