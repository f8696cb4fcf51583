"""The learning-rate schedule, and the step-log columns a run's config determines.

`lr` at a step is a pure function of the run's config (`lr_at`). Step logs of format 3 (steplog_legacy) stored
such a column as nulls plus a digest of the values (`derived` in their metadata), and reading computes it again here
(`fill_derived`); format 4 stores the values, which plain Parquet readers need. A platform whose math library rounds
`cos` otherwise would get values off in the last bit, and an edited config.json other values: the digest catches
either, and the reader warns."""
from __future__ import annotations

import hashlib
import math
import os
import struct
import warnings
from collections.abc import Callable
from pathlib import Path

from ..config import RunConfig

CONFIG_NAME = "config.json"  # beside a step log in its run directory: what derived columns are computed from


def lr_at(cfg: RunConfig, step: int) -> float:
    """Learning rate for optimizer update `step` (1-based): linear warmup, then cosine to min_lr."""
    min_lr = cfg.lr * cfg.min_lr_ratio
    if step <= cfg.warmup_iters:
        return cfg.lr * step / max(1, cfg.warmup_iters)
    progress = (step - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))) * (cfg.lr - min_lr)


DERIVED: dict[str, Callable[[RunConfig, int], float]] = {"lr": lr_at}  # step-log key -> its value at a step


def _float64_bytes(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def digest(values: list[float]) -> str:
    """A derived column's check: sha256 (16 hex digits) of its values as little-endian float64."""
    return hashlib.sha256(_float64_bytes(values)).hexdigest()[:16]


def fill_derived(rows: list[dict], derived: dict[str, str], config_of: Callable[[], RunConfig | None] | None
                 ) -> list[dict]:
    """`rows` (as decoded: None where a derived key is held) with each derived column computed again from the run's
    config; ValueError without a config, RuntimeWarning where the values' digest differs from the stored one."""
    if not derived:
        return rows
    config = None if config_of is None else config_of()
    if config is None:
        raise ValueError(f"column(s) {', '.join(derived)} are stored as their recipe and need the run's {CONFIG_NAME}")
    for key, stored in derived.items():
        if key not in DERIVED:
            raise ValueError(f"derived column {key!r} is not one this library computes ({', '.join(DERIVED)})")
        held = [row for row in rows if key in row]
        for row in held:
            row[key] = DERIVED[key](config, row["step"])
        if digest([row[key] for row in held]) != stored:
            warnings.warn(f"step log column {key!r} recomputed from {CONFIG_NAME} differs from the values the run "
                          f"logged (digest {stored}): either {CONFIG_NAME} is not the one the run was trained with "
                          f"(`python -m embnorm_lib seal STUDY --check` verifies its runs), or this platform's math "
                          f"library rounds the schedule differently (values off in the last bits)", RuntimeWarning,
                          stacklevel=4)
    return rows


def config_beside(path: str | os.PathLike) -> RunConfig | None:
    """The RunConfig of the run directory that holds the step log at `path` (its config.json), or None without one."""
    config = Path(path).parent / CONFIG_NAME
    return RunConfig.load(config) if config.is_file() else None
