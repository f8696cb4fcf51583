"""The cells a sweep's command line names: a registered study's (some seeds or run directories of it, where asked)
or an ad-hoc grid, each refused in one line before anything runs when it cannot be what the user meant."""
from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import replace
from pathlib import Path

from ..core.cli import parse_axes, parse_overrides, parse_seeds
from ..core.corpora.shards import shard_overrides
from ..core.errors import ConfigError
from ..core.records.io import shown_path
from .registry import ABC, STUDIES, Cell, grid, study_cells


def only_cells(cells: list[Cell], text: str, out: Path) -> list[Cell]:
    """The cells whose run directory (relative to the study's directory, written with a trailing '/') contains
    `text`; all of them for ''. The trailing '/' lets a seed be named exactly: 'seed1/' is seed 1, not seeds 10-19."""
    if not text:
        return cells
    kept = [c for c in cells if text in f"{c.run_dir(out).relative_to(out / c.study)}/"]
    if not kept:
        arms = sorted({str(c.run_dir(out).parent.relative_to(out / c.study)) for c in cells})
        raise ConfigError(f"invalid --only {text!r}: no cell's run directory contains it; allowed: text from one of "
                          f"{', '.join(arms[:6])}{', ...' if len(arms) > 6 else ''}")
    return kept


def seed_cells(cells: list[Cell], seeds: list[int]) -> list[Cell]:
    """The cells of these seeds; a seed no cell has is refused, naming the seeds the study registers."""
    have = sorted({c.seed for c in cells})
    missing = sorted(set(seeds) - set(have))
    if missing:
        raise ConfigError(f"invalid --seeds: seed {missing[0]} is not registered here; allowed: "
                          f"{', '.join(map(str, have))}")
    return [c for c in cells if c.seed in seeds]


def cells_of(args: argparse.Namespace, out: Path) -> list[Cell]:
    """The cells the command line names: a registered study's (only some seeds, or cells, where asked) or an ad-hoc
    grid, each validated before any runs."""
    if args.preset:
        if args.study in STUDIES:  # its run directories hold the registered runs: a grid of other configs would fail
            raise ConfigError(f"invalid study {args.study!r} for an ad-hoc grid: it is a registered study; allowed: a "
                              f"name no registered study has (`python -m embnorm_lib sweep --help` lists them)")
        fixed = shard_overrides(args.data_path, parse_overrides(args.set))  # a shard directory: tokenizer=shards
        axes = parse_axes(args.axis, fixed)
        # only a flag left out means the default arms: `--variants ''` is a name given, refused as one
        variants = (args.variants if args.variants is not None else ",".join(ABC)).split(",")
        cells = grid(args.study, args.preset, variants, parse_seeds(args.seeds if args.seeds is not None else "0-2"),
                     fixed, axes)
    else:
        grid_flags = [flag for flag, given in (("--set", args.set), ("--axis", args.axis),
                                               ("--variants", args.variants is not None)) if given]
        if grid_flags:  # a registered study's cells are fixed by the registry: the flags would be silently ignored
            raise ConfigError(f"invalid {grid_flags[0]} for the registered study {args.study!r}: its cells are fixed "
                              "by the registry; allowed: --seeds or --only to pick some of them, or --preset with a "
                              "new study name for a grid of your own")
        cells = study_cells(args.study)
        if args.seeds is not None:
            cells = seed_cells(cells, parse_seeds(args.seeds))
    if args.lm_eval:
        cells = [replace(c, overrides=tuple(sorted({**dict(c.overrides), "lm_eval": True}.items()))) for c in cells]
    for text in args.only:
        cells = only_cells(cells, text, out)
    for c in cells:
        c.config()  # validate every cell before running any
    by_dir = Counter(c.run_dir(out) for c in cells)
    if (twice := next((d for d, n in by_dir.items() if n > 1), None)) is not None:
        # a seed or variant named twice (or a variant and its alias) makes two cells of one run directory
        raise ConfigError(f"invalid grid: two cells would train into {shown_path(twice)}; allowed: each seed and "
                          "variant once (--seeds, --variants)")
    if args.data_path is not None and not Path(args.data_path).is_file() and not (
            Path(args.data_path).is_dir() and all(c.config().tokenizer == "shards" for c in cells)):
        raise ConfigError(f"invalid --data-path {args.data_path!r}: not a file; allowed: a readable UTF-8 text file, "
                          "or for a grid of your own (--preset) a directory of token shards")
    return cells
