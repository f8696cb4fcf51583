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

`train_packed` is the packed job: each member is a whole run (run directory, logs, diagnostics, evaluations,
checkpoint, summary; `execution: packed` in its config), resumed bitwise from its own checkpoint.

Dropout is refused: a single run draws its dropout masks from the global generator in its own order, which a
packed step cannot reproduce per member."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.nn import functional as F

from .checkpoint import holding_all
from .config import RunConfig
from .data import load_corpus
from .device import Precision, resolve_precision, select_device
from .errors import ConfigError
from .model import GPT
from .rundir import RunDir
from .train import (
    check_fits_data,
    progress_bar,
    raise_if_stopped,
    seed_global_generators,
    start_run,
    stop_on_interrupt,
)
from .variants import RMSNorm


def check_packable(models: Sequence[GPT]) -> None:
    """Members must differ in their seed alone, and run without dropout."""
    check_pack_configs([m.cfg for m in models])


def check_pack_configs(cfgs: Sequence[RunConfig]) -> None:
    if not cfgs:
        raise ConfigError("invalid pack of 0 runs; allowed: one or more runs of one architecture")
    shape = {k: v for k, v in cfgs[0].training_identity().items() if k != "seed"}
    for cfg in cfgs[1:]:
        other = {k: v for k, v in cfg.training_identity().items() if k != "seed"}
        if other != shape:
            diff = sorted(k for k in shape if shape[k] != other.get(k))
            raise ConfigError(f"invalid pack: members differ in {', '.join(diff)}; allowed: runs that differ in "
                              f"their seed only")
    seeds = [cfg.seed for cfg in cfgs]
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"invalid pack seeds {seeds}; allowed: distinct seeds (each member is its own run)")
    if cfgs[0].dropout:
        raise ConfigError(f"invalid pack with dropout={cfgs[0].dropout}; allowed: dropout 0 (each single run "
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
    wte = _stack(models, "wte.weight")  # (K, V, C)
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
    head = wte if cfg.tie_embeddings else _stack(models, "lm_head.weight")
    logits = torch.bmm(_norm(x, models, "ln_f"), head.transpose(1, 2)).view(K, B, T, -1)
    loss = None
    if targets is not None:
        flat = logits.float().reshape(K, B * T, -1)
        loss = torch.stack([F.cross_entropy(flat[j], targets[j].reshape(-1)) for j in range(K)])
    return logits, loss, block1_input_norm



def pack_configs(cfg: RunConfig, seeds: Sequence[int]) -> list[RunConfig]:
    """The members of a packed job: `cfg` once per seed, marked as packed."""
    return [cfg.replace(seed=seed, execution="packed") for seed in seeds]


def train_packed(cfgs: Sequence[RunConfig], run_dirs: Sequence[str | os.PathLike], data_path=None, *,
                 until_step: int | None = None, progress: bool = True,
                 on_eval: Callable[[dict], None] | None = None, out_dir=None) -> list[dict]:
    """Train runs that differ in their seed alone as one job, each into its own run directory; return their
    summaries in order (or {"finished": False, "step": s} for a member stopped by `until_step`, resumable).

    Finished members are not retrained; partial ones resume from their own checkpoints (a member that got further
    than the others before an interruption waits until the pack reaches its step). Every check happens before any
    directory is written; the job holds every member's lock. `on_eval` gets each evaluation row with its member's
    seed added."""
    cfgs = list(cfgs)
    if len(run_dirs) != len(cfgs):
        raise ValueError(f"got {len(run_dirs)} run directories for {len(cfgs)} members")
    check_pack_configs(cfgs)
    bad = [c.execution for c in cfgs if c.execution != "packed"]
    if bad:
        raise ConfigError(f"invalid execution={bad[0]!r} for a member of a packed job; allowed: packed "
                          f"(packed.pack_configs marks them)")
    if cfgs[0].grad_accum != 1:
        raise ConfigError(f"invalid grad_accum={cfgs[0].grad_accum} for a packed job; allowed: 1")
    runs = [RunDir(Path(d)) for d in run_dirs]
    if len({r.root.resolve() for r in runs}) != len(runs):
        raise ConfigError("invalid pack: two members share a run directory; allowed: one directory per seed")
    corpus = load_corpus(data_path, cfgs[0].tokenizer, cfgs[0].corpus_sha256, cfgs[0].train_chars, out_dir)
    check_fits_data(cfgs[0], corpus)
    if corpus.tokenizer == "shards":
        raise ConfigError("invalid tokenizer='shards' here; allowed: one run at a time (`run`, the notebook, a "
                          "sweep without --fleet or pack_seeds): packed and fleet runs hold the ids in memory")
    device = select_device(cfgs[0].device)
    threads_before = torch.get_num_threads()
    try:
        with holding_all(runs, cfgs) as done:
            todo = [i for i in range(len(cfgs)) if i not in done]
            if todo:
                done.update(_train_pack([cfgs[i] for i in todo], [runs[i] for i in todo], todo, corpus, device,
                                        until_step, progress, on_eval, [c.seed for c in cfgs]))
            return [done[i] for i in range(len(cfgs))]
    finally:
        torch.set_num_threads(threads_before)


def _train_pack(cfgs, runs, positions, corpus, device, until_step, progress, on_eval, job_seeds) -> dict:
    cfg = cfgs[0]
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    precision = Precision(resolve_precision(cfg.precision, device), device)
    seed_global_generators(cfg.seed)  # nothing in a packed step draws from it (no dropout); set for the record
    members = []
    for member_cfg, run in zip(cfgs, runs, strict=True):
        shown = (lambda row, seed=member_cfg.seed: on_eval({**row, "seed": seed})) if on_eval else None
        members.append(start_run(member_cfg, run, corpus, device, precision, shown))
    last = min(until_step if until_step is not None else cfg.max_iters, cfg.max_iters)
    bar = progress_bar(cfg.replace(seed=cfgs[0].seed), min(m.state.step for m in members), progress)
    if bar is not None:
        bar.set_description(f"{cfg.variant} seeds {','.join(str(c.seed) for c in cfgs)} (packed)")
    with stop_on_interrupt() as stop_requested:  # Ctrl-C: every member checkpoints the last whole step
        while True:
            waiting = [m for m in members if not m.finished]
            step = min((m.state.step for m in waiting), default=last)
            if step >= last or stop_requested():
                break
            pack = [m for m in waiting if m.state.step == step]  # members ahead (an interrupted save) wait here
            step += 1
            lr = 0.0
            for m in pack:
                m.state.step = step
                lr = m.set_lr(step)
            batches = [m.state.sampler.next_batch() for m in pack]
            x = torch.stack([b[0] for b in batches]).to(device, non_blocking=True)
            y = torch.stack([b[1] for b in batches]).to(device, non_blocking=True)
            t_step = time.perf_counter()
            with precision.autocast():
                _, losses, block1_input_norms = packed_forward([m.state.model for m in pack], x, y)
            # members share no parameter: the gradient of the sum is each member's gradient of its own loss
            torch.stack([m.state.scaler.scale(losses[j]) for j, m in enumerate(pack)]).sum().backward()
            norms = torch.stack([m.clip_gradients().float() for m in pack])
            # the step's one host transfer: what the members' logs need
            train_losses, grad_norms, b1_norms = torch.stack([losses.detach().float(), norms,
                                                              block1_input_norms.float()]).tolist()
            for j, m in enumerate(pack):
                if not m.update(step, lr, train_losses[j], grad_norms[j], b1_norms[j], t_step):
                    m.after_update(step)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        extra = {"execution": "packed", "pack_seeds": list(job_seeds)}
        summaries = {i: m.finish(corpus, device, extra=extra) for i, m in zip(positions, members, strict=True)}
        raise_if_stopped(stop_requested(), members)
    return summaries
