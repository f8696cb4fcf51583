"""Engine v3 (issue 75): many whole runs trained as one batched fleet in one process.

A study's runs that share tensor shapes (layers, width, heads, block, batch, vocabulary, tying, bias and the
validation plan) form one group; everything else may differ per member and is held as a [K] tensor: seed, arm,
learning rate, warm-up, max_iters, betas, weight decay, clipping, init scales. Per group:

- the members' parameters live permanently in one flat [K, P] buffer (gradients in another), built from each
  member's own seeded init (bitwise its single run's initial values); each parameter is a leaf view of it, the
  tied head the same view as the token embedding;
- one explicit batched forward (baddbmm for the linears, attention with the members folded into its batch,
  gather for the embedding, the embedding norm per contiguous segment of members of one arm) gives every
  member's loss without a Python loop over members;
- clipping and AdamW run over the flat buffer with per-member hyperparameters (torch.optim takes one learning
  rate per parameter group); the learning-rate schedule and bias corrections are tables on the device;
- each member's batches come from a table of window starts replayed from its own generator (bitwise the
  batches of its single run), gathered on the device inside the step;
- the step makes no host sync: its readings go to a ring buffer on the device that the host copies at
  evaluation and diagnostics boundaries, so on CUDA the step is captured once as a CUDA graph and replayed.
  A member whose loss or gradient norm stops being finite is frozen (its updates masked to zero) and its run
  ends there; nothing reduces across members, so the others' numbers do not change.

Every member still writes its whole run directory as a single run does (config.json with `execution: fleet`,
metrics/evals/diagnostics, calibration, positions, model.pt, summary.json), so the index, the analysis and the
reports read it unchanged. Numbers follow the single runs to float rounding, not bit for bit (batched matmuls
sum in another order). A fleet is not checkpointed: it takes seconds on a GPU, and an interrupted fleet trains
its unfinished members again from step 0. Metrics rows' `step_ms` is the fleet's mean step time between two
host syncs (the members share it), `eval_s` the time of the batched evaluation pass the member was part of."""
from __future__ import annotations

import bisect
import concurrent.futures
import contextlib
import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn
from torch.nn import functional as F

from . import diagnostics as diag
from .checkpoint import Logs, check_same_run, cpu_changed, holding, write_config
from .config import RunConfig
from .data import evenly_spaced, load_corpus, validation_windows
from .device import Precision, resolve_precision, select_device
from .errors import ConfigError
from .evaluate import FORWARD_WINDOWS, SUM_WINDOWS, metrics_from_totals
from .io import cpu_info, git_commit, read_json
from .model import GPT, init_parameter_
from .rundir import RunDir
from .train import _finish, check_fits_data, lr_at
from .variants import RMSNorm, get_variant, variant_rank

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


class Layout:
    """The union of the arms' parameters in one row: weight-decayed ones (matrices, embeddings) first, so the
    decay is one slice; an arm's norm that another arm lacks has a slot that stays at its constant there."""

    def __init__(self, templates: Sequence[GPT]):
        names: list[str] = []
        shapes: dict[str, tuple[int, ...]] = {}
        for template in templates:
            at = -1
            for name, p in template.named_parameters():
                if name not in shapes:
                    names.insert(at + 1, name)
                    shapes[name] = tuple(p.shape)
                at = names.index(name)
        ordered = [n for n in names if len(shapes[n]) >= 2] + [n for n in names if len(shapes[n]) < 2]
        self.slots: dict[str, Slot] = {}
        offset = 0
        for name in ordered:
            self.slots[name] = Slot(name, shapes[name], offset)
            offset += self.slots[name].numel
        self.size = offset
        self.n_decay = sum(s.numel for s in self.slots.values() if len(s.shape) >= 2)


def norm_kind(module: nn.Module) -> tuple[str, float]:
    if isinstance(module, nn.LayerNorm):
        return "ln", module.eps
    if isinstance(module, RMSNorm):
        return "rms", module.eps
    if isinstance(module, nn.Identity):
        return "none", 0.0
    raise ConfigError(f"invalid embedding norm {type(module).__name__} in a fleet; allowed: LayerNorm, RMSNorm, "
                      f"Identity")


@dataclass
class Members:
    """Per-member constants of the forward, in fleet order (members of one arm are contiguous)."""

    kinds: list[tuple[str, float]]
    token_scale: torch.Tensor  # [K]
    segments: list[tuple[str, float, int, int]]  # (norm kind, eps, first, end): one per run of equal kinds

    @classmethod
    def build(cls, kinds: list[tuple[str, float]], token_scale: torch.Tensor) -> Members:
        segments = []
        for k, kind in enumerate(kinds):
            if segments and segments[-1][:2] == kind:
                segments[-1] = (*kind, segments[-1][2], k + 1)
            else:
                segments.append((*kind, k, k + 1))
        return cls(kinds, token_scale, segments)

    def subset(self, index: list[int]) -> Members:
        return Members.build([self.kinds[i] for i in index],
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
    """Each arm's norm on its own contiguous segment of members: as many calls as segments, not members."""
    parts = []
    for kind, eps, a, b in members.segments:
        part = x if len(members.segments) == 1 else x[a:b]
        if kind == "ln":
            sub = {k: v if len(members.segments) == 1 else v[a:b] for k, v in w.items() if k.startswith("emb_norm.")}
            part = _layer_norm(part, sub, "emb_norm", eps)
        elif kind == "rms":
            weight = w["emb_norm.weight"] if len(members.segments) == 1 else w["emb_norm.weight"][a:b]
            part = F.rms_norm(part, (x.shape[-1],), eps=eps) * weight.unsqueeze(1)
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


def clip_(g: torch.Tensor, max_norm: torch.Tensor) -> torch.Tensor:
    """clip_grad_norm_ per row: returns each member's total norm before clipping (K,)."""
    norm = torch.linalg.vector_norm(g, dim=1)
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

class Fleet:
    """One group of members on one device: their stacked parameters, optimizer state, schedules and data, and
    the step that advances all of them at once."""

    def __init__(self, cfgs: Sequence[RunConfig], corpus, device: torch.device, precision: Precision,
                 cuda_graph: bool = True):
        order = sorted(range(len(cfgs)), key=lambda i: variant_rank(cfgs[i].variant))  # arms contiguous
        self.positions = order  # fleet member k is cfgs[order[k]]
        self.cfgs = [cfgs[i] for i in order]
        self.cfg = self.cfgs[0]  # the shape every member shares
        self.device, self.precision, self.corpus = device, precision, corpus
        K = self.K = len(self.cfgs)
        self.templates: dict[str, GPT] = {}  # one module per arm, on the host: names, shapes, sizes, groups
        for cfg in self.cfgs:
            if cfg.variant not in self.templates:
                self.templates[cfg.variant] = GPT(cfg.replace(seed=0))
        self.layout = Layout(list(self.templates.values()))
        flat = torch.zeros(K, self.layout.size)
        for k, cfg in enumerate(self.cfgs):
            self._init_row(flat[k], cfg)
        self.flat = flat.to(device)
        self.grad = torch.zeros_like(self.flat)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.params = {}
        for slot in self.layout.slots.values():
            leaf = self.flat[:, slot.offset:slot.end].view(K, *slot.shape).requires_grad_()
            leaf.grad = self.grad[:, slot.offset:slot.end].view(K, *slot.shape)
            self.params[slot.name] = leaf
        self.sizes = {v: (t.num_params(), t.flops_per_token()) for v, t in self.templates.items()}
        self.group_slots = {}  # arm -> diagnostics group -> its parameters' names (diagnostics.parameter_groups)
        for variant, template in self.templates.items():
            names = {id(p): n for n, p in template.named_parameters()}
            self.group_slots[variant] = {group: [names[id(p)] for p in params]
                                         for group, params in diag.parameter_groups(template).items()}
        kinds = [norm_kind(self.templates[c.variant].emb_norm) for c in self.cfgs]
        scales = [get_variant(c.variant).token_scale(c.n_embd, c.emb_init_std) for c in self.cfgs]
        self.members = Members.build(kinds, torch.tensor(scales, dtype=torch.float32, device=device))
        self._schedules(device)
        self.data = corpus.train.to(device)
        starts = torch.zeros(K, self.steps, self.cfg.batch_size, dtype=torch.int64)
        for k, cfg in enumerate(self.cfgs):
            starts[k, :cfg.max_iters] = batch_starts(cfg, len(corpus.train), cfg.max_iters)
        self.starts = starts.to(device)
        self.offsets = torch.arange(self.cfg.block_size + 1, device=device)
        self.ring = torch.zeros(RING_STEPS, K, 3, device=device)  # train_loss, grad_norm_total, block1_input_norm
        self.step_t = torch.zeros((), dtype=torch.int64, device=device)
        self.alive = torch.ones(K, dtype=torch.bool, device=device)
        self.use_graph = cuda_graph and device.type == "cuda"
        self.graph, self.graph_error, self._eager = None, "", 0
        self.val_x, self.val_y = validation_windows(corpus.val, self.cfg.block_size, self.cfg.eval_windows)
        keep = evenly_spaced(len(self.val_x), self.cfg.interim_eval_windows)
        self.interim_x, self.interim_y = self.val_x[keep], self.val_y[keep]

    def _init_row(self, row: torch.Tensor, cfg: RunConfig) -> None:
        """The member's own seeded init, drawn in its single run's order into views of its row: bitwise equal."""
        template = self.templates[cfg.variant]
        variant = get_variant(cfg.variant)
        gain = variant.gain_init(cfg.emb_init_std) if variant.gain_init else 1.0
        norms = template.norm_parameter_names()
        generator = torch.Generator().manual_seed(cfg.seed)
        for name, _ in template.named_parameters():
            slot = self.layout.slots[name]
            init_parameter_(row[slot.offset:slot.end].view(slot.shape), name, name in norms, cfg, gain, generator)

    def _schedules(self, device: torch.device) -> None:
        self.steps = max(c.max_iters for c in self.cfgs)
        tables = schedule_tables(self.cfgs, self.steps)
        to = lambda t: t.to(device=device, dtype=torch.float32)  # noqa: E731
        self.step_size, self.decay, self.bc2_sqrt = (to(tables[k]) for k in ("step_size", "decay", "bc2_sqrt"))
        self.betas = {k: to(tables[k]) for k in ("beta2", "one_minus_beta1", "one_minus_beta2")}
        self.max_norm = to(tables["max_norm"])
        self.max_iters = torch.tensor([c.max_iters for c in self.cfgs], device=device)

    # -- the step --------------------------------------------------------------------------------------------

    def _step(self) -> None:
        """One training step of every member; nothing in it reads a value back to the host."""
        self.step_t += 1
        s = self.step_t.view(1)
        starts = self.starts.index_select(1, s - 1).squeeze(1)  # (K, B)
        windows = self.data[starts.unsqueeze(-1) + self.offsets]  # (K, B, T + 1)
        self.grad.zero_()
        with self.precision.autocast() if self.device.type != "cuda" else torch.autocast(
                "cuda", dtype=torch.bfloat16, enabled=self.precision.name == "bf16", cache_enabled=False):
            _, losses, b1 = fleet_forward(self.params, self.members, self.cfg, windows[..., :-1], windows[..., 1:])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_LAYOUT_WARNING)
            losses.sum().backward()  # members share no parameter: each gets the gradient of its own loss
        norms = clip_(self.grad, self.max_norm)
        active = self.alive & (s <= self.max_iters)
        col = lambda t: t.index_select(1, s).squeeze(1)  # noqa: E731
        adamw_(self.flat, self.grad, self.exp_avg, self.exp_avg_sq, active=active, step_size=col(self.step_size),
               decay=col(self.decay), bc2_sqrt=col(self.bc2_sqrt), **self.betas, n_decay=self.layout.n_decay)
        losses = losses.detach().float()
        self.ring.index_copy_(0, (s - 1) % RING_STEPS, torch.stack([losses, norms, b1.float()], dim=1).unsqueeze(0))
        # a single run stops at its first non-finite loss or gradient norm (a result: diverged)
        self.alive &= ~active | (torch.isfinite(losses) & torch.isfinite(norms))

    def step(self) -> None:
        """One step: eagerly, or on CUDA through a graph captured after a few eager steps on a side stream."""
        if self.graph is not None:
            self.graph.replay()
            return
        if not self.use_graph:
            self._step()
            return
        if self._eager < GRAPH_WARMUP_STEPS:
            self._eager += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._step()
            torch.cuda.current_stream().wait_stream(side)
            return
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):  # recorded, not run: the replay below is this step
                self._step()
        except RuntimeError as e:  # an op that cannot be captured: the fleet goes on eagerly and says why
            self.use_graph, self.graph_error = False, f"{type(e).__name__}: {e}".splitlines()[0][:300]
            torch.cuda.synchronize()
            self._step()
            return
        self.graph = graph
        graph.replay()

    def readings(self, first: int, last: int) -> torch.Tensor:
        """Ring rows of steps first..last (at most RING_STEPS of them) on the host: (steps, K, 3). A host sync."""
        slots = torch.arange(first - 1, last, device=self.device) % RING_STEPS
        return self.ring.index_select(0, slots).cpu()

    # -- one member's weights (finishing its run) ------------------------------------------------------

    def member_weights(self, k: int) -> SimpleNamespace:
        """What finishing a run reads of its model: the single run's state_dict (a tied head shares the token
        embedding's tensor, as there) and its sizes. A copy of its own, so members can be finished concurrently."""
        template = self.templates[self.cfgs[k].variant]
        copies: dict[str, torch.Tensor] = {}
        state = {}
        for name in template.state_dict():
            source = name if name in self.params else "wte.weight"  # the tied head
            if source not in copies:
                copies[source] = self.params[source][k].detach().clone()
            state[name] = copies[source]
        n_params, flops = self.sizes[self.cfgs[k].variant]
        return SimpleNamespace(state_dict=lambda: state, num_params=lambda: n_params, flops_per_token=lambda: flops)

    def subset(self, index: list[int]) -> tuple[dict, Members]:
        """The parameters (copies) and constants of members `index`, for a pass over some of them."""
        if index == list(range(self.K)):
            return self.params, self.members
        return {n: p[index] for n, p in self.params.items()}, self.members.subset(index)

    @torch.no_grad()
    def probe(self, index: list[int]) -> list[dict]:
        w, members = self.subset(index)
        return fleet_probe(w, members, self.cfg, self.val_x[:8], self.corpus.chars)

    # -- evaluation ------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def evaluate(self, index: list[int], final: bool) -> tuple[list[dict], list[torch.Tensor | None], float]:
        """The validation pass of members `index` in one batched forward per chunk of windows: every window when
        `final` (with each member's logits kept for calibration), else the interim subset."""
        t = time.perf_counter()
        x, y = (self.val_x, self.val_y) if final else (self.interim_x, self.interim_y)
        w, members = self.subset(index)
        K, T, V = len(index), self.cfg.block_size, self.cfg.vocab_size
        windows = FORWARD_WINDOWS if self.device.type == "cpu" else max(1, EVAL_ELEMENTS_GPU // (K * T * V))
        total = torch.zeros(K, dtype=torch.float64, device=self.device)
        correct = torch.zeros(K, dtype=torch.int64, device=self.device)
        kept: list[list[torch.Tensor]] = [[] for _ in index]
        for i in range(0, len(x), SUM_WINDOWS):  # sums over groups of SUM_WINDOWS windows, as evaluate() does
            xg, yg = x[i:i + SUM_WINDOWS].to(self.device), y[i:i + SUM_WINDOWS].to(self.device)
            group = torch.zeros(K, device=self.device)
            for j in range(0, len(xg), windows):
                xc, yc = xg[j:j + windows], yg[j:j + windows]
                with self.precision.autocast():
                    logits = fleet_forward(w, members, self.cfg, xc.expand(K, *xc.shape))[0]
                flat = logits.float()
                nll = F.cross_entropy(flat.reshape(-1, V), yc.reshape(1, -1).expand(K, -1).reshape(-1),
                                      reduction="none")
                group += nll.view(K, -1).sum(dim=1)
                correct += (flat.argmax(-1) == yc.reshape(1, -1)).sum(dim=1)
                if final:  # kept where calibration will run: the device on CUDA, else the host
                    held = flat.view(K, len(xc), T, V)
                    held = held.clone() if self.device.type == "cuda" else held.cpu()
                    for n in range(K):
                        kept[n].append(held[n])
            total += group.double()
        totals, hits = total.tolist(), correct.tolist()
        char_lengths = self.corpus.char_lengths
        rows = [metrics_from_totals(totals[n], hits[n], y.numel(), y, char_lengths) for n in range(K)]
        logits = [torch.cat(parts) if final else None for parts in kept]
        return rows, logits, time.perf_counter() - t

    # -- diagnostics -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def slot_stats(self, before: torch.Tensor) -> dict[str, list[list[float]]]:
        """Per member and slot, read back in one transfer: sums of squares of the (clipped) gradient, of the
        step's change and of the parameters before it, and the sum and max of Adam's second moment."""
        rows = {"grad": [], "delta": [], "base": [], "v_sum": [], "v_max": []}
        for slot in self.layout.slots.values():
            cols = slice(slot.offset, slot.end)
            rows["grad"].append(self.grad[:, cols].float().square().sum(1))
            rows["delta"].append((self.flat[:, cols] - before[:, cols]).float().square().sum(1))
            rows["base"].append(before[:, cols].float().square().sum(1))
            rows["v_sum"].append(self.exp_avg_sq[:, cols].double().sum(1).float())
            rows["v_max"].append(self.exp_avg_sq[:, cols].amax(1))
        stacked = torch.stack([torch.stack(v, dim=1) for v in rows.values()]).cpu()  # (5, K, slots)
        return dict(zip(rows, stacked.tolist(), strict=True))

    def diagnostics_rows(self, index: list[int], step: int, before: torch.Tensor) -> list[dict]:
        """diagnostics.py's rows for members `index` after a step (gradient norms after clipping, update ratios,
        Adam's second moments, the probe), from batched per-slot sums and one batched probe."""
        stats = self.slot_stats(before)
        slot_index = {name: i for i, name in enumerate(self.layout.slots)}
        rows = []
        for k, probed in zip(index, self.probe(index), strict=True):
            grad, update, adam = {}, {}, {}
            for group, names in self.group_slots[self.cfgs[k].variant].items():
                slots = [slot_index[n] for n in names]
                total = lambda key, slots=slots, k=k: sum(stats[key][k][i] for i in slots)  # noqa: E731
                grad[f"grad_norm.{group}"] = math.sqrt(total("grad"))
                base = math.sqrt(total("base"))
                update[f"update_ratio.{group}"] = math.sqrt(total("delta")) / base if base > 0 else float("nan")
                adam[f"adam_v_mean.{group}"] = total("v_sum") / sum(self.layout.slots[n].numel for n in names)
                adam[f"adam_v_max.{group}"] = max(stats["v_max"][k][i] for i in slots)
            rows.append({"step": step, **grad, **update, **adam, **probed})
        return rows


# -- a fleet's whole runs ------------------------------------------------------------------------------------

def _due(interval: int, step: int) -> bool:
    return bool(interval) and step % interval == 0


@dataclass
class MemberRun:
    cfg: RunConfig
    run: RunDir
    logs: Logs
    diverged_step: int | None = None
    final_logits: torch.Tensor | None = None
    finished_at: float | None = None  # fleet seconds when the member's last step (and evaluation) was done

    def done(self, step: int) -> bool:
        return self.diverged_step is not None or step >= self.cfg.max_iters


def _train_group(fleet: Fleet, runs: list[RunDir], echo) -> list[dict]:
    """The host loop: chunks of graph-replayed steps between boundaries (evaluations, diagnostics, the ring's
    size), one read of the ring per chunk, then the boundary's batched work. Returns summaries in fleet order."""
    K = fleet.K
    members = [MemberRun(cfg, run, Logs()) for cfg, run in zip(fleet.cfgs, runs, strict=True)]
    cpu_model, commit = cpu_info()["cpu_model"], git_commit()
    for m in members:  # every check has passed: only now does a directory say which run it holds
        write_config(m.run, m.cfg)
    t0 = time.perf_counter()
    elapsed = lambda: time.perf_counter() - t0  # noqa: E731
    at_init = [k for k, m in enumerate(members) if m.cfg.eval_at_init]
    _evaluate(fleet, members, at_init, 0)
    for k, probed in zip(at_init, fleet.probe(at_init) if at_init else [], strict=True):
        members[k].logs.diagnostics.append({"step": 0, **probed})
    timing = {"steps_s": 0.0, "eval_s": 0.0, "diag_s": 0.0}
    boundaries = sorted({s for m in members for s in range(1, m.cfg.max_iters + 1)
                         if s == m.cfg.max_iters or _due(m.cfg.eval_interval, s) or _due(m.cfg.diag_interval, s)})
    step = 0
    while step < fleet.steps and not all(m.done(step) for m in members):
        running = [k for k, m in enumerate(members) if not m.done(step)]
        stop = min(boundaries[bisect.bisect_right(boundaries, step)], step + RING_STEPS)
        diag_due = [k for k in running if _due(members[k].cfg.diag_interval, stop) and stop <= members[k].cfg.max_iters]
        t = time.perf_counter()
        for _ in range(stop - step - (1 if diag_due else 0)):
            fleet.step()
        before = fleet.flat.clone() if diag_due else None
        if diag_due:
            fleet.step()
        readings = fleet.readings(step + 1, stop).tolist()  # the chunk's one host sync
        chunk_s = time.perf_counter() - t
        timing["steps_s"] += chunk_s
        step_ms, wall = chunk_s / (stop - step) * 1e3, elapsed()
        for k in running:
            m = members[k]
            for j, s in enumerate(range(step + 1, min(stop, m.cfg.max_iters) + 1)):
                loss, norm, b1 = readings[j][k]
                lr = lr_at(m.cfg, s)
                max_norm = m.cfg.grad_clip if m.cfg.grad_clip > 0 else float("inf")
                m.logs.metrics.append({"step": s, "tokens": s * m.cfg.tokens_per_iter, "lr": lr, "train_loss": loss,
                                       "grad_norm_total": norm, "clipped": bool(norm > max_norm),
                                       "block1_input_norm": b1, "step_ms": step_ms,
                                       "wall_s": wall - (stop - s) * step_ms / 1e3})
                if not (math.isfinite(loss) and math.isfinite(norm)):
                    m.diverged_step, m.finished_at = s, wall
                    break
        step = stop
        t = time.perf_counter()
        diag_now = [k for k in diag_due if members[k].diverged_step is None]
        if diag_now:
            for k, row in zip(diag_now, fleet.diagnostics_rows(diag_now, step, before), strict=True):
                members[k].logs.diagnostics.append(row)
        timing["diag_s"] += time.perf_counter() - t
        t = time.perf_counter()
        due = [k for k in running if members[k].diverged_step is None and step <= members[k].cfg.max_iters
               and (_due(members[k].cfg.eval_interval, step) or step == members[k].cfg.max_iters)]
        _evaluate(fleet, members, due, step)
        timing["eval_s"] += time.perf_counter() - t
        for k in due:
            if step == members[k].cfg.max_iters:
                members[k].finished_at = elapsed()
    train_s = elapsed()
    t = time.perf_counter()
    extra = {"git_commit": commit, "trained_on": [{"from_step": 0, "cpu_model": cpu_model}],
             "execution": "fleet", "fleet_members": K, "fleet_cuda_graph": fleet.graph is not None}
    extra["cpu_changed_on_resume"] = cpu_changed(extra["trained_on"])
    val_y = fleet.val_y.to(fleet.device)
    threads = torch.get_num_threads()

    def finish(k: int) -> dict:
        torch.set_num_threads(threads)  # a new thread starts with the library's default, not this process's
        m = members[k]
        state = SimpleNamespace(logs=m.logs, model=fleet.member_weights(k))
        wall = m.finished_at if m.finished_at is not None else train_s
        try:
            summary = _finish(m.cfg, m.run, state, SimpleNamespace(final_logits=m.final_logits, val_y=val_y),
                              fleet.corpus, fleet.device, fleet.precision, m.diverged_step, wall, 1, extra)
        except RuntimeError:  # calibration on the device failed: the host computes it as a single run does
            if m.final_logits is None or m.final_logits.device.type == "cpu":
                raise
            host = SimpleNamespace(final_logits=m.final_logits.cpu(), val_y=fleet.val_y)
            summary = _finish(m.cfg, m.run, state, host, fleet.corpus, fleet.device, fleet.precision,
                              m.diverged_step, wall, 1, extra)
        m.final_logits = None
        return summary

    # calibration and the files are per member: threads overlap their host work (numpy, scipy, writes)
    workers = min(FINISH_THREADS, os.cpu_count() or 1, K)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        summaries = list(pool.map(finish, range(K)))
    timing.update(train_loop_s=train_s, finish_s=time.perf_counter() - t, cuda_graph=fleet.graph is not None,
                  graph_error=fleet.graph_error)
    if echo:
        echo(f"fleet of {K} ({fleet.cfg.n_layer} x {fleet.cfg.n_embd}, {fleet.steps} steps) on {fleet.device}: "
             + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in timing.items()))
    fleet.timing = timing
    return summaries


def _evaluate(fleet: Fleet, members: list[MemberRun], due: list[int], step: int) -> None:
    """One batched pass per kind over the due members: final (a member's last step: every window, logits kept
    for calibration) and interim (the subset)."""
    for final in (False, True):
        index = [k for k in due if (step == members[k].cfg.max_iters) == final]
        if not index:
            continue
        rows, logits, seconds = fleet.evaluate(index, final)
        for k, row, kept in zip(index, rows, logits, strict=True):
            m = members[k]
            m.logs.evals.append({"step": step, "tokens": step * m.cfg.tokens_per_iter, **row, "eval_s": seconds})
            if final:
                m.final_logits = kept


def train_fleet(cfgs: Sequence[RunConfig], run_dirs: Sequence[str | os.PathLike], data_path=None, *,
                echo=None, cuda_graph: bool = True, timings: list | None = None) -> list[dict]:
    """Train runs as fleets (one per shape group), each into its own run directory; return their summaries in
    order. Finished members are not retrained; a member with a checkpoint (a partial single or packed run) is
    refused, naming what to do. Every check happens before any directory is written; the job holds every
    member's lock. `timings` (a list) receives each group's split of its wall time."""
    cfgs = list(cfgs)
    if len(run_dirs) != len(cfgs):
        raise ValueError(f"got {len(run_dirs)} run directories for {len(cfgs)} members")
    check_fleet_configs(cfgs)
    runs = [RunDir(Path(d)) for d in run_dirs]
    if len({r.root.resolve() for r in runs}) != len(runs):
        raise ConfigError("invalid fleet: two members share a run directory; allowed: one directory per run")
    partial = [r.root for r in runs if r.checkpoint.is_file() and not r.summary.is_file()]
    if partial:
        raise ConfigError(f"invalid fleet member {partial[0]}: it holds a checkpoint of a partial run; allowed: runs "
                          f"without one (resume that run in its own mode, without --fleet)")
    groups = groups_of(cfgs)
    corpora = {}
    for group in groups:
        cfg = cfgs[group[0]]
        key = (cfg.tokenizer, cfg.corpus_sha256, cfg.train_chars)  # the split point is part of the data (issue 76)
        corpora.setdefault(key, load_corpus(data_path, cfg.tokenizer, cfg.corpus_sha256, cfg.train_chars))
        check_fits_data(cfg, corpora[key])
    threads_before = torch.get_num_threads()
    try:
        with contextlib.ExitStack() as locks:
            for run, cfg in zip(runs, cfgs, strict=True):
                locks.enter_context(holding(run, True))
                check_same_run(run, cfg)
            done = {i: read_json(r.summary) for i, r in enumerate(runs) if r.summary.is_file()}
            for group in groups:
                todo = [i for i in group if i not in done]
                if not todo:
                    continue
                cfg = cfgs[todo[0]]
                if cfg.torch_threads:
                    torch.set_num_threads(cfg.torch_threads)
                device = select_device(cfg.device)
                precision = Precision(resolve_precision(cfg.precision, device), device)
                t = time.perf_counter()
                fleet = Fleet([cfgs[i] for i in todo], corpora[(cfg.tokenizer, cfg.corpus_sha256, cfg.train_chars)], device, precision,
                              cuda_graph)
                setup_s = time.perf_counter() - t
                summaries = _train_group(fleet, [runs[todo[p]] for p in fleet.positions], echo)
                for position, summary in zip(fleet.positions, summaries, strict=True):
                    done[todo[position]] = summary
                if timings is not None:
                    timings.append({"members": fleet.K, "steps": fleet.steps, "shape": f"{cfg.n_layer}x{cfg.n_embd}",
                                    "setup_s": setup_s, **fleet.timing})
            return [done[i] for i in range(len(cfgs))]
    finally:
        torch.set_num_threads(threads_before)
