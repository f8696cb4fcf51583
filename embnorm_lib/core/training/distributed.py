"""Data parallelism over torch.distributed, as launched by torchrun.

    torchrun --nproc_per_node 2 -m embnorm_lib.train_cli --preset nanogpt-cpu --variant ln --seed 0

Every rank draws the same seeded global batch and keeps its own disjoint slice, so the global batch
(per-rank micro-batch x world size x gradient accumulation) and the data order are those of a single
process. Rank 0 alone writes the run directory; io.atomic_write_bytes refuses writes from other ranks."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def setup(device_type: str) -> DistContext:
    """Join the process group torchrun describes in the environment; a single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def current_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def mean_across_ranks(values: list[float], ctx: DistContext) -> list[float]:
    if not ctx.active:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return (t / ctx.world_size).tolist()


def rank_slice(x: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """This rank's disjoint share of a global batch (rows rank*n ... rank*n + n - 1)."""
    n = x.shape[0] // ctx.world_size
    return x[ctx.rank * n:(ctx.rank + 1) * n]


def micro_batch_size(global_batch: int, world_size: int, grad_accum: int) -> int:
    per_step = world_size * grad_accum
    if global_batch % per_step:
        raise ValueError(f"invalid batch_size={global_batch}; allowed: a multiple of world size x grad_accum "
                         f"= {world_size} x {grad_accum} = {per_step}")
    return global_batch // per_step


def cleanup(ctx: DistContext) -> None:
    if ctx.active and dist.is_initialized():
        dist.destroy_process_group()
