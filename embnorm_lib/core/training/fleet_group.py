"""One fleet group on one device (fleet.py): the members' stacked parameters, optimizer state, schedules and data,
the step that advances all of them at once (captured as a CUDA graph on a GPU), and the batched evaluation and
diagnostics at the host's boundaries."""
from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from types import SimpleNamespace

import torch
from torch.nn import functional as F

from ..config import RunConfig
from ..corpora.data import evenly_spaced, validation_windows
from ..device import Precision
from ..nets.model import GPT, init_parameter_
from ..nets.variants import get_variant, variant_rank
from ..scoring import diagnostics as diag
from ..scoring.evaluate import FORWARD_WINDOWS, SUM_WINDOWS, metrics_from_totals
from .fleet_ops import (
    _LAYOUT_WARNING,
    EVAL_ELEMENTS_GPU,
    GRAPH_WARMUP_STEPS,
    RING_STEPS,
    ArmNorm,
    Layout,
    Members,
    adamw_,
    batch_starts,
    clip_,
    fleet_forward,
    fleet_probe,
    schedule_tables,
)


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
        self.layout = Layout(self.templates)
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
            names = {id(p): self.layout.keys[variant][n] for n, p in template.named_parameters()}
            self.group_slots[variant] = {group: [names[id(p)] for p in params]
                                         for group, params in diag.parameter_groups(template).items()}
        norms = [ArmNorm.of(c.variant, c.bias, self.layout.keys[c.variant].__getitem__) for c in self.cfgs]
        scales = [get_variant(c.variant).token_scale(c.n_embd, c.emb_init_std) for c in self.cfgs]
        self.members = Members.build(norms, torch.tensor(scales, dtype=torch.float32, device=device))
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
        norms = template.norm_parameter_names()
        generator = torch.Generator().manual_seed(cfg.seed)
        for name, _ in template.named_parameters():
            slot = self.layout.slots[self.layout.keys[cfg.variant][name]]
            init_parameter_(row[slot.offset:slot.end].view(slot.shape), name, name in norms, cfg, generator)

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
        norms = clip_(self.grad, self.max_norm, self.layout.bounds)
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
        keys = self.layout.keys[self.cfgs[k].variant]
        copies: dict[str, torch.Tensor] = {}
        state = {}
        for name in template.state_dict():
            source = keys.get(name, "wte.weight")  # the tied head is no parameter of its own
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
