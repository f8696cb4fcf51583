"""The adequate-data ladder (issue 76; docs/PROTOCOL.md amendment 16): four character-level sizes on the ~57M
training characters of the open-English corpus (opencorpus.py), each trained on 20 tokens per non-embedding
parameter and never more than 4 passes, each arm at its own learning rate tuned on a sqrt(2) grid with 3 tuning
seeds that are never confirmatory seeds.

Everything registered lives here as data: the rungs, the budget rule, the grid rule, the seeds, and the two tables
that the tuning runs fill in by the registered rule (`EXTENSIONS`: grid points added where a best sat at an edge;
`BEST_LR`: each arm's registered LR per rung). `tests/test_ladder_data.py` holds both tables equal to what the
committed runs give, so neither can be typed by hand."""
from __future__ import annotations

import math

from ..core.errors import entry
from ..core.presets import (  # noqa: F401 (CORPUS_RECORD, corpus_record: read through this module too)
    CORPUS_RECORD,
    DATA_MAX_PASSES,
    DATA_RUNGS,
    DATA_TOKENS_PER_ITER,
    DATA_TOKENS_PER_PARAM,
    corpus_record,
    data_ladder_iters,
    data_ladder_preset,
)
from ..runner import registry
from .paper_sources import LADDER_DATA, LADDER_DATA_LR

DATA_LADDER_KIND = "ladder-data"  # the analysis kind both studies here are read as (analyses/plugins.py registers it)

# the shapes, the budget rule and the corpus record are presets (core/presets.py), read here under these names
RUNGS, TOKENS_PER_ITER, TOKENS_PER_PARAM = DATA_RUNGS, DATA_TOKENS_PER_ITER, DATA_TOKENS_PER_PARAM
MAX_PASSES = DATA_MAX_PASSES
ARMS_TUNED = ("none", "ln")  # rms runs at ln's LR (both are LayerNorms)
LR_STEP = math.sqrt(2)
# rung 0's grid centres: the 1 MB ladder's checked LRs for the same 2 x 64 shape (runs/ladder-lr, LADDER_LR_CHECKED)
RUNG0_CENTRE = {"none": 0.01, "ln": 0.024}
GRID_HALF_WIDTH = {0: 2, 1: 2, 2: 1, 3: 1}  # points either side of the centre: 5, 5, 3, 3
TUNING_SEEDS = (100, 101, 102)
CONFIRMATORY_SEEDS = (0, 1, 2, 3, 4)
CONFIRMATORY_ARMS = ("none", "ln", "rms")
# item 6: a rung whose MDE at seeds 0-4 exceeds MDE_LIMIT gets seeds 5-9 before its analysis is published (a decision
# on the variance, not on the effect); SEEDS_ADDED lists those rungs, filled in by the rule as the runs land and
# tested against them (tests/test_ladder_data.py), like EXTENSIONS and BEST_LR below
EXTRA_SEEDS = (5, 6, 7, 8, 9)
MDE_LIMIT = 0.01
SEEDS_ADDED: tuple[int, ...] = (0, 1, 2, 3)  # rungs 0-3: MDE at seeds 0-4 above the limit (LADDER-DATA.md)


def confirmatory_seeds(rung: int) -> tuple[int, ...]:
    """A rung's confirmatory seeds: 0-4, and 5-9 where item 6's rule added them."""
    return CONFIRMATORY_SEEDS + (EXTRA_SEEDS if rung in SEEDS_ADDED else ())


def confirmatory_runs_planned() -> int:
    """The confirmatory design's size (every rung x arm x fresh seed, with the seeds item 6 added): its cells are
    registered rung by rung as the LRs are tuned, so the registry holds fewer until the last rung's LRs are known."""
    return sum(len(CONFIRMATORY_ARMS) * len(confirmatory_seeds(rung)) for rung in range(len(RUNGS)))

# Filled in by the registered rule as tuning runs land (tested against the runs): rung -> arm -> extra LRs, and
# rung -> arm -> the LR with the lowest mean final validation loss over the tuning seeds, bracketed.
EXTENSIONS: dict[int, dict[str, list[float]]] = {
    0: {"ln": [0.00424, 0.006, 0.00849]},  # rung 0: ln's best sat at the low edge three times (0.012, 0.00849, 0.006)
    2: {"none": [0.0025]},  # rung 2: none's best, 0.00354 (mean 1.4483 over seeds 100-102), sat at the low edge
    3: {"none": [0.00567]},  # rung 3: none's best, 0.00401 (mean 1.2514 over seeds 100-102), sat at the high edge
}
BEST_LR: dict[int, dict[str, float]] = {
    0: {"none": 0.00707,  # rung 0: lowest mean over seeds 100-102 of the 5-point grid, bracketed (LADDER-DATA.md)
        "ln": 0.006},  # rung 0: lowest mean over seeds 100-102, bracketed by 0.00424 and 0.00849 (three extensions)
    1: {"none": 0.00667,  # rung 1: lowest mean over seeds 100-102 of the 5-point grid, bracketed (LADDER-DATA.md)
        "ln": 0.00566},  # rung 1: lowest mean over seeds 100-102 of the 5-point grid, bracketed (LADDER-DATA.md)
    2: {"none": 0.00354,  # rung 2: lowest mean over seeds 100-102 (1.4483), bracketed by 0.0025 and 0.005
        "ln": 0.00425},  # rung 2: lowest mean over seeds 100-102 (1.4447), bracketed by 0.003 and 0.006
    3: {"none": 0.00401,  # rung 3: lowest mean over seeds 100-102 (1.2514), bracketed by 0.00283 and 0.00567
        "ln": 0.0034},  # rung 3: lowest mean over seeds 100-102 (1.2495), bracketed by 0.0024 and 0.00481
}


def non_embedding_params(rung: int) -> int:
    n_layer, n_embd, _ = RUNGS[rung]
    return 12 * n_layer * n_embd ** 2


def iters(rung: int, train_chars: int | None = None) -> int:
    """20 tokens per non-embedding parameter, capped at MAX_PASSES over the training split."""
    return data_ladder_iters(rung, train_chars)


def passes(rung: int) -> float:
    return iters(rung) * TOKENS_PER_ITER / corpus_record()["train_chars"]


def preset(rung: int) -> dict:
    """The rung's preset (config.PRESETS['ladder-data-<rung>'])."""
    return data_ladder_preset(rung)


def _snap(lr: float) -> float:
    return float(f"{lr:.3g}")


def centre(rung: int, arm: str) -> float | None:
    """Rung 0: RUNG0_CENTRE. Above: the rung below's registered LR times its width over this width (Adam's LR
    falls as 1/width); None while the rung below has no registered LR."""
    if rung == 0:
        return RUNG0_CENTRE[arm]
    below = BEST_LR.get(rung - 1, {}).get(arm)
    return None if below is None else below * RUNGS[rung - 1][1] / RUNGS[rung][1]


def grid(rung: int, arm: str) -> list[float]:
    """The LRs tuned for an arm at a rung: the centre times sqrt(2)^k, |k| <= the rung's half-width, then any
    registered extension (one sqrt(2) step beyond an edge where the best sat)."""
    c = centre(rung, arm)
    if c is None:
        return []
    k = GRID_HALF_WIDTH[rung]
    return sorted({_snap(c * LR_STEP ** j) for j in range(-k, k + 1)} | set(EXTENSIONS.get(rung, {}).get(arm, [])))


def lr_of(rung: int, variant: str) -> float | None:
    return BEST_LR.get(rung, {}).get("ln" if variant == "rms" else variant)


def best_lrs(runs, rung: int) -> dict[str, dict]:
    """From the tuning runs of one rung (a runs.csv frame): per arm, the mean final validation loss per LR over the
    tuning seeds, the best LR (a LR with a failed or missing run never wins), whether it is bracketed, and the LR
    one sqrt(2) step beyond the edge when it is not (the registered extension)."""
    out = {}
    rows = runs[runs["cfg.preset"] == f"ladder-data-{rung}"]
    for arm in ARMS_TUNED:
        lrs = grid(rung, arm)
        sub = rows[rows["cfg.variant"] == arm]
        means, complete = {}, True
        for lr in lrs:
            at = sub[(sub["cfg.lr"] - lr).abs() < 1e-12]
            finished = at[at["cfg.seed"].isin(TUNING_SEEDS)]
            if finished["cfg.seed"].nunique() < len(TUNING_SEEDS):  # distinct seeds: a duplicate hides no gap
                complete = False
                continue
            failed = finished["failed"].astype(bool).any()  # amendment 1: non-finite, or worse than at init
            means[lr] = math.inf if failed else float(finished["val_loss"].mean())
        if not complete or not means:
            out[arm] = {"complete": False, "means": means}
            continue
        best = min(means, key=means.get)
        edge = best in (min(lrs), max(lrs))
        beyond = None
        if edge and math.isfinite(means[best]):
            beyond = _snap(best / LR_STEP) if best == min(lrs) else _snap(best * LR_STEP)
        out[arm] = {"complete": True, "means": means, "best": best, "bracketed": not edge, "extend_to": beyond}
    return out


def estimate_hours(ms_per_iter) -> dict[int, float]:
    """Run-hours per rung (tuning + confirmatory), given a function rung -> ms per iteration on one thread."""
    hours = {}
    for rung in range(len(RUNGS)):
        runs = sum(len(range(-GRID_HALF_WIDTH[rung], GRID_HALF_WIDTH[rung] + 1)) * len(TUNING_SEEDS)
                   for _ in ARMS_TUNED) + 3 * len(CONFIRMATORY_SEEDS)
        hours[rung] = runs * iters(rung) * ms_per_iter(rung) / 3.6e6
    return hours


def committed_ms_per_iter(rung: int) -> float:
    """One-thread ms per iteration at this rung's size, interpolated (log-log in non-embedding parameters) between
    the median step times of the committed 1 MB ladder's one-thread runs (runs/ladder/runs.csv)."""
    import numpy as np

    from ..runner.results import load_runs

    runs = load_runs("ladder")
    runs = runs[runs["cfg.torch_threads"] == 1]
    size = 12 * runs["cfg.n_layer"] * runs["cfg.n_embd"] ** 2
    table = runs.assign(size=size).groupby("size")["train_ms_per_iter"].median().sort_index()
    return float(np.exp(np.interp(np.log(non_embedding_params(rung)), np.log(table.index), np.log(table.values))))


def _data_ladder_cells(study: str, tuning: bool) -> list[registry.Cell]:
    """The adequate-data ladder (amendment 16), small rungs first. Tuning: none and ln on each rung's LR grid x the
    tuning seeds (a rung's grid exists once the rung below has its registered LRs). Confirmatory: none/ln/rms at
    their registered LRs (rms at ln's) x fresh seeds, for the rungs whose LRs are registered."""
    cells = []
    for rung in range(len(RUNGS)):
        preset = f"ladder-data-{rung}"
        for variant in (ARMS_TUNED if tuning else registry.ABC):
            if tuning and grid(rung, variant):
                cells += registry.grid(study, preset, [variant], TUNING_SEEDS,
                              axes={"lr": grid(rung, variant)}, tag_preset=True)
            elif not tuning and lr_of(rung, variant) is not None:
                cells += registry.grid(study, preset, [variant], confirmatory_seeds(rung),
                              fixed={"lr": lr_of(rung, variant)}, tag_preset=True)
    return cells


ENTRIES = (
    # -- the adequate-data ladder (issue 76; docs/PROTOCOL.md amendment 16): ~57M training characters of open English
    registry.Study(LADDER_DATA_LR, "Adequate-data ladder, LR tuning (amendment 16): rungs 2x64, 3x96, 4x128, 6x160 "
                            "(0.1M-1.8M non-embedding parameters) on the open-English corpus, 20 tokens per "
                            "parameter (at most 4 passes); none and ln on a sqrt(2) LR grid x tuning seeds "
                            "100-102, a grid extended past any edge where the best sits.", DATA_LADDER_KIND,
          lambda: _data_ladder_cells(LADDER_DATA_LR, tuning=True),
          note="Tuning seeds are never confirmatory seeds. A rung's grid is centred on the rung below's "
               "registered LR scaled by width (ladder_data.centre).",
          status="tuning", amendment=16,
          question="Which learning rate is each arm's best at each size of the adequate-data ladder?"),
    registry.Study(LADDER_DATA, "Adequate-data ladder, confirmatory (amendment 16): none/ln/rms x fresh seeds 0-4 per "
                         "rung (5-9 added where item 6's rule asks), each arm at its tuned LR (rms at ln's), on the "
                         "open-English corpus.", DATA_LADDER_KIND,
          lambda: _data_ladder_cells(LADDER_DATA, tuning=False),
          note="Per rung: paired differences, 95% t intervals, Holm within the rung; the trend across rungs is "
               "exploratory and covers only rungs that pass the data-bound check.",
          status="confirmatory", amendment=16, design_runs=confirmatory_runs_planned,
          question=("On a corpus large enough that the models are not data-bound, does an embedding norm's effect on "
                    "validation loss change with size?")),
)


def main(argv=None) -> int:
    if argv:
        raise ValueError(f"invalid argument {argv[0]!r}; allowed: none (this prints the ladder's registered plan)")
    hours = estimate_hours(committed_ms_per_iter)
    for rung, (n_layer, n_embd, _) in enumerate(RUNGS):
        print(f"rung {rung}: {n_layer} x {n_embd}, {non_embedding_params(rung):,} non-embedding parameters, "
              f"{iters(rung):,} iterations ({passes(rung):.2f} passes), ~{committed_ms_per_iter(rung):.0f} ms/iter "
              f"on one thread, {hours[rung]:.1f} run-hours (tuning {len(ARMS_TUNED)} arms x "
              f"{2 * GRID_HALF_WIDTH[rung] + 1} LRs x {len(TUNING_SEEDS)} seeds + 3 arms x "
              f"{len(CONFIRMATORY_SEEDS)} seeds)")
    print(f"total {sum(hours.values()):.1f} run-hours before any grid extension")
    return 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
