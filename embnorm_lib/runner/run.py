"""Train one run from the command line; the entry point for torchrun.

    python -m embnorm_lib run --preset nanogpt-cpu --variant ln --seed 0 [--study adhoc] [--set lr=1e-3]
    torchrun --standalone --nproc_per_node 2 -m embnorm_lib run --preset tiny --variant ln --seed 0
    torchrun --nnodes 2 --node_rank 0 --rdzv_backend c10d --rdzv_endpoint HOST:29500 --nproc_per_node 8 \\
        -m embnorm_lib run --preset gpt-small --variant ln --seed 0

The run directory is runs/<study>/<variant>/seed<k> as for the notebook; under torchrun rank 0 writes it."""
from __future__ import annotations

import argparse
import json
import sys

from ..core.cli import parse_overrides
from ..core.config import DEFAULT_PRESET
from ..core.errors import ConfigError, entry
from ..core.notebook import config_from_parameters, run_dir_from_parameters
from ..core.scoring.lm_eval_adapter import score_if_asked
from ..core.training.train import train
from .design import DesignError, check_registered_cell


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--variant", default="none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--study", default="adhoc")
    p.add_argument("--out-dir", default="")
    p.add_argument("--data-path", default=None)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--until-step", type=int, default=None, help="stop (resumably) after this step")
    p.add_argument("--progress", action="store_true")
    args = p.parse_args(argv)
    try:
        overrides = parse_overrides(args.set)
        if args.until_step is not None and args.until_step < 1:
            raise ConfigError(f"invalid --until-step {args.until_step}; allowed: a step >= 1 (leave it out to train to "
                              "the end)")
        cfg = config_from_parameters(args.preset, args.variant, args.seed, overrides=overrides,
                                     data_path=args.data_path)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    run_dir = run_dir_from_parameters(cfg, args.study, args.out_dir)
    try:
        check_registered_cell(args.study, cfg, run_dir, args.out_dir or None)
    except DesignError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = train(cfg, run_dir, args.data_path, until_step=args.until_step, progress=args.progress,
                   out_dir=args.out_dir)
    if result.get("rank", 0) == 0 and result.get("finished", True):
        score_if_asked(cfg, run_dir, args.data_path)  # the stage after training, on the main rank
    if result.get("rank", 0) == 0:
        keys = ("variant", "seed", "steps", "val_loss", "val_ppl", "diverged", "wall_s")
        print(json.dumps({k: result.get(k) for k in keys} if "val_loss" in result else result))
    return 0


if __name__ == "__main__":
    sys.exit(entry(main, trains=True))
