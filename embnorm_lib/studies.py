"""The study registry: every study is one entry (its grid, what it is, how it is analysed).

A study's grid is variants x seeds x any further axes of config overrides, one `Cell` per run. Adding a
study means adding one `Study` to `STUDIES`; the sweep runs it, the index and reports describe it, and its
`analysis` kind says which report reads it ("paired": analysis.py's registered statistics, REPORT.md;
"stability": stability.py's STABILITY.md; "smoke": none)."""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import RunConfig, check_name
from .errors import ConfigError, RunDirError
from .io import runs_root
from .notebook import config_from_parameters
from .rundir import RunDir, run_dir_for
from .variants import canonical_variant, variant_names


@dataclass(frozen=True)
class Cell:
    """One run of a study: a preset, a variant, a seed, and any further config overrides."""

    study: str
    preset: str
    variant: str
    seed: int
    overrides: tuple[tuple[str, Any], ...] = ()
    tag_axes: tuple[str, ...] = ()  # which overrides name the run directory

    @property
    def tag(self) -> str:
        values = dict(self.overrides)
        return "".join(f"_{k}={values[k] if k != 'preset' else self.preset}" for k in self.tag_axes)

    def config(self) -> RunConfig:
        return config_from_parameters(self.preset, self.variant, self.seed, overrides=dict(self.overrides))

    def run_dir(self, out_dir: Path) -> Path:
        return run_dir_for(self.study, self.variant, self.seed, out_dir, tag=self.tag)

    def label(self) -> str:
        return f"{self.variant}{self.tag} seed{self.seed}"


def grid(study: str, preset: str, variants: Iterable[str], seeds: Iterable[int],
         fixed: dict[str, Any] | None = None, axes: dict[str, list] | None = None,
         tag_preset: bool = False) -> list[Cell]:
    """variants x seeds x every combination of `axes`; `fixed` overrides apply to all cells."""
    check_name("study", study)
    for kind, given in (("overrides", fixed), ("axes", axes)):
        if given is not None and not isinstance(given, dict):
            raise ConfigError(f"invalid {kind}={given!r}; allowed: a mapping of config fields")
        reserved = sorted(set(given or {}) & {"variant", "seed"})
        if reserved:
            raise ConfigError(f"invalid {kind} key(s) {', '.join(reserved)}; allowed: any other config field "
                              f"(variants and seeds are axes of their own)")
    seeds = list(seeds)
    bad = [s for s in seeds if not (isinstance(s, int) and not isinstance(s, bool) and s >= 0)]
    if bad:
        raise ConfigError(f"invalid seeds {bad!r}; allowed: integers >= 0")
    axes = axes or {}
    names = list(axes)
    cells = []
    for values in itertools.product(*(axes[n] for n in names)) if names else [()]:
        overrides = {**(fixed or {}), **dict(zip(names, values, strict=True))}
        tag_axes = (("preset",) if tag_preset else ()) + tuple(names)
        for variant in variants:
            for seed in seeds:
                cells.append(Cell(study, preset, canonical_variant(variant), seed,
                                  tuple(sorted(overrides.items())), tag_axes))
    return cells


def _seed_major(study: str, preset: str, variants, seeds, fixed: dict, axes: dict) -> list[Cell]:
    """`grid` one seed after another: a sweep stopped part-way has covered the whole grid for the first seeds."""
    return [cell for seed in seeds for cell in grid(study, preset, variants, [seed], fixed=fixed, axes=axes)]


@dataclass(frozen=True)
class Study:
    name: str
    description: str  # one paragraph for runs/README.md
    # "paired", "stability", "stability-v2", "h1b" (stability v2's confirmatory test), "ladder", "ladder-data", "smoke"
    analysis: str
    cells: Callable[[], list[Cell]]
    note: str = ""  # what a reader of its report must know about the design (REPORT.md prints it)
    shared_seeds: dict[str, str] = field(default_factory=dict)  # scope -> which runs it shares with another study
    # why a registered cell cannot run yet ("" when it can): the sweep lists such a cell and trains none of them
    waits_for: Callable[[Cell], str] = lambda cell: ""
    question: str = ""  # what the study asks, in one sentence without numbers (its report opens with it)
    # how docs/PROTOCOL.md registers it (STATUSES) and by which amendment (0: the protocol as first registered);
    # every report's header (study_header.py) states both, with the amendment's heading
    status: str = "exploratory"
    amendment: int = 0


# what a study's runs can decide: confirmatory (a registered test and decision rule), exploratory (a description or a
# search; decides nothing registered), tuning (picks a setting a confirmatory study runs at), smoke (the pipeline)
STATUSES = ("confirmatory", "exploratory", "tuning", "smoke")


ABC = variant_names()[:3]  # none, ln, rms: the study's arms A, B, C
ABCD = variant_names()[:4]  # ... and D, the scaled embedding (stability studies)
SCALE_VS_NORM = ("ln_matched", "scaled_unit")  # normalize without rescaling, rescale without normalizing
WITH_LM_EVAL = {"lm_eval": True}  # studies whose registered family includes lm_macro_acc score every run
# The evaluation plan of studies registered from now on: the learning curve on 64 evenly spaced validation windows
# (8,192 characters; for the seeds-final model the subset's mean loss has a standard error of ~0.015 nats/char
# around the whole split's, paired across arms since the windows are fixed), the final metrics on every window.
# The committed studies scored every window each time and keep that plan (it is part of their runs' identity).
INTERIM_EVAL = {"interim_eval_windows": 64}
# Stability v2's learning-rate grid: half-decade steps over [1e-4, 1], covering Wortsman et al.'s [3e-4, 3e-1]
LR_GRID_V2 = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]
LR_V2_NOTE = ("Failure (amendment 1): non-finite loss, or final validation loss above the loss at initialisation "
              "(the latter scored on the 64-window subset of the learning curve).")

# H1b's confirmatory regimes and each arm's best LR, both from the exploratory search (stability-lr-v2 and
# -noclip-v2, seeds 0-2; docs/PROTOCOL.md amendment 2)
H1B_LRS = [1.0, 0.3]  # where none failed, and the grid point below it
H1B_CLIPS = [1.0, 0.0]  # the recipe's clipping, and none
H1B_BEST_LR = {"none": 1e-2, "ln": 3e-3, "rms": 3e-3, "scaled": 3e-3}


def _h1b_cells(study: str, seeds) -> list[Cell]:
    """Seed-major: the regimes' cells, then every arm at its own best LR (clipping on), for one seed at a time."""
    fixed = {"max_iters": 1000, **INTERIM_EVAL}
    cells = []
    for seed in seeds:
        cells += grid(study, "nanogpt-cpu", ABCD, [seed], fixed=fixed, axes={"grad_clip": H1B_CLIPS, "lr": H1B_LRS})
        for variant, lr in H1B_BEST_LR.items():
            cells += grid(study, "nanogpt-cpu", [variant], [seed], fixed=fixed,
                          axes={"grad_clip": [1.0], "lr": [lr]})
    return cells


# The size ladder (issue 18; rungs, budget and LR rules in config.LADDER_RUNGS): each arm's LR at width 128 is its
# best of stability-lr-v2 (none 1e-2; ln, rms 3e-3), scaled by 128 / width (Adam's LR falls with width)
LADDER_LR_AT_128 = {"none": 1e-2, "ln": 3e-3, "rms": 3e-3}
# ladder-lr checks the rule two factors of two either side (amendment 5: at rung 0 the first grid, 0.5-2, left
# both arms' best at its edge)
LADDER_LR_FACTORS = [0.25, 0.5, 1.0, 2.0, 4.0]
# Amendment 5: a rung runs each arm at the factor ladder-lr found best there (lowest mean final validation loss,
# bracketed by the grid; `ladder.lr_check`, tested against runs/ladder-lr); rms takes ln's. A rung not in this
# table has not been checked: the ladder would run it at the rule (factor 1), and LADDER.md flags that.
LADDER_LR_CHECKED: dict[int, dict[str, float]] = {0: {"none": 0.5, "ln": 4.0}, 1: {"none": 0.5, "ln": 1.0},
                                                  2: {"none": 0.25, "ln": 1.0}, 3: {"none": 0.25, "ln": 1.0},
                                                  4: {"none": 0.125, "ln": 1.0}}
# Amendment 6: where an arm's best is at the grid's edge, its check at that rung goes on by factors of two beyond it
LADDER_LR_EXTENDED: dict[int, dict[str, list[float]]] = {0: {"ln": [8.0]}, 2: {"none": [0.125]},
                                                    4: {"none": [0.0625]}}
# Amendment 14: from rung 3 (runs of an hour and more on a CPU) the check is narrower: each arm at the rung below's
# best factor times 1/2, 1 and 2, registered here before any of the rung's check runs (amendment 6 still extends it)
LADDER_LR_NARROW_FROM = 3
LADDER_LR_GRID: dict[int, dict[str, list[float]]] = {3: {"none": [0.125, 0.25, 0.5], "ln": [0.5, 1.0, 2.0]},
                                                    4: {"none": [0.125, 0.25, 0.5], "ln": [0.5, 1.0, 2.0]}}
# the ladders' registered seeds per arm and size (amendment 4): a size is finished, and quoted, with all of them
LADDER_SEEDS = range(5)
LADDER_REP_SEEDS = range(5, 15)  # the replications (amendments 9 and 11): fresh seeds, analysed alone


def ladder_check_factors(rung: int, variant: str) -> list[float]:
    """The LR factors ladder-lr checks for an arm at a rung: the grid (amendment 5, or amendment 14's narrower one
    from rung 3) and any extension beyond its edge. A rung from 3 on whose grid is not entered yet has none: its check
    waits for the rung below's best factors."""
    grid = LADDER_LR_GRID.get(rung, {}).get(variant, LADDER_LR_FACTORS if rung < LADDER_LR_NARROW_FROM else [])
    return sorted({*grid, *LADDER_LR_EXTENDED.get(rung, {}).get(variant, [])})


def ladder_rung_waits(cell: Cell) -> str:
    """A ladder run at a rung whose LR check is not registered yet waits for it (amendment 5): until then its cell
    carries the rule's LR (factor 1), which is not the LR the rung will run at, and training it would waste hours
    on a run that the registered cell then no longer matches."""
    rung = int(cell.preset.removeprefix("ladder-"))
    if rung in LADDER_LR_CHECKED:
        return ""
    return (f"rung {rung}'s LR check (amendment 5): `sweep ladder-lr --only preset=ladder-{rung}`, then each arm's best "
            f"factor in studies.LADDER_LR_CHECKED[{rung}]")


def waits_for(cell: Cell) -> str:
    """Why a cell of a registered study cannot run yet, or "" (an ad-hoc study's cells never wait)."""
    study = STUDIES.get(cell.study)
    return study.waits_for(cell) if study else ""


# the arm whose LR (rule and checked factor) an arm takes on the ladder: rms and ln_matched are LayerNorms (ln's),
# scaled_unit has no norm (none's)
LADDER_LR_ARM = {"rms": "ln", "ln_matched": "ln", "scaled_unit": "none"}


def ladder_lr(variant: str, n_embd: int, factor: float = 1.0) -> float:
    return float(f"{LADDER_LR_AT_128[LADDER_LR_ARM.get(variant, variant)] * 128 / n_embd * factor:.3g}")


def ladder_factor(rung: int, variant: str) -> float:
    """The LR factor the ladder uses for an arm at a rung (amendment 5): ladder-lr's best, rms taking ln's."""
    return LADDER_LR_CHECKED.get(rung, {}).get(LADDER_LR_ARM.get(variant, variant), 1.0)


@functools.lru_cache(maxsize=4)
def _train_tokens(tokenizer: str) -> int:
    from .data import load_corpus

    return len(load_corpus(tokenizer=tokenizer).train)


def _ladder_cells(study: str, rungs, variants, seeds, tokenizers=("char",), factors=(1.0,)) -> list[Cell]:
    """Rung by rung (small first, so a CPU session finishes the cheap rungs), each arm at its rule LR (times each
    factor), seeds innermost. For BPE the budget cap counts the training split in that tokenizer's tokens."""
    from .config import LADDER_RUNGS, PRESETS, ladder_iters

    cells = []
    for rung in rungs:
        n_layer, n_embd, _ = LADDER_RUNGS[rung]
        for tokenizer in tokenizers:
            fixed = {"lm_eval": False}
            if tokenizer != "char":
                from .tokenizer import TOKENIZERS

                fixed.update(tokenizer=tokenizer, vocab_size=TOKENIZERS[tokenizer].bpe_vocab_size,
                             max_iters=ladder_iters(n_layer, n_embd, _train_tokens(tokenizer)))
            for variant in variants:
                checked = ladder_check_factors(rung, variant) if len(factors) > 1 else factors
                axes = {"lr": [ladder_lr(variant, n_embd, f) for f in checked]} if len(factors) > 1 else None
                over = fixed if axes else {**fixed, "lr": ladder_lr(variant, n_embd, ladder_factor(rung, variant))}
                if tokenizer != "char":
                    axes = {**(axes or {}), "tokenizer": [tokenizer]}
                    over = {k: v for k, v in over.items() if k != "tokenizer"}
                assert f"ladder-{rung}" in PRESETS
                cells += grid(study, f"ladder-{rung}", [variant], seeds, fixed=over, axes=axes, tag_preset=True)
    return cells


def _data_ladder_cells(study: str, tuning: bool) -> list[Cell]:
    """The adequate-data ladder (amendment 16), small rungs first. Tuning: none and ln on each rung's LR grid x the
    tuning seeds (a rung's grid exists once the rung below has its registered LRs). Confirmatory: none/ln/rms at
    their registered LRs (rms at ln's) x fresh seeds, for the rungs whose LRs are registered."""
    from . import ladder_data

    cells = []
    for rung in range(len(ladder_data.RUNGS)):
        preset = f"ladder-data-{rung}"
        for variant in (ladder_data.ARMS_TUNED if tuning else ABC):
            if tuning and ladder_data.grid(rung, variant):
                cells += grid(study, preset, [variant], ladder_data.TUNING_SEEDS,
                              axes={"lr": ladder_data.grid(rung, variant)}, tag_preset=True)
            elif not tuning and ladder_data.lr_of(rung, variant) is not None:
                cells += grid(study, preset, [variant], ladder_data.CONFIRMATORY_SEEDS,
                              fixed={"lr": ladder_data.lr_of(rung, variant)}, tag_preset=True)
    return cells


STUDIES: dict[str, Study] = {s.name: s for s in (
    Study("seeds-prelim", "The seed study's Table 1 protocol: variants none/ln/rms x seeds 0-2 x 150 iterations "
                          "of the 8-layer x 128 model (batch 16, block 128, AdamW 3e-4, warmup + cosine).", "paired",
          lambda: grid("seeds-prelim", "seeds-prelim", ABC, range(3), fixed=WITH_LM_EVAL),
          status="confirmatory", amendment=0,
          question=("Does the seed study's reported gain from a LayerNorm after the embedding replicate under its own "
                    "short protocol, and does an embedding norm change the final validation loss there?")),
    Study("seeds-final", "The seed study's final plan: none/ln/rms x seeds 0-4 x 300 iterations, same model.",
          "paired", lambda: grid("seeds-final", "seeds-final", ABC, range(5), fixed=WITH_LM_EVAL),
          status="confirmatory", amendment=0,
          question=("Does a LayerNorm or RMSNorm right after the token and position embedding help or hurt a small Pre-"
                    "LN character GPT, in validation loss, calibration, zero-shot accuracy and stability?")),
    Study("main", "none/ln/rms x seeds 0-9 x 300 iterations (preset seeds-final), plus the nanoGPT CPU recipe "
                  "(4 x 128, block 64, 2000 iterations) for none/ln/rms x seeds 0-4: a converged regime.", "paired",
          lambda: (grid("main", "seeds-final", ABC, range(10), fixed=WITH_LM_EVAL, tag_preset=True)
                   + grid("main", "nanogpt-cpu", ABC, range(5), fixed=WITH_LM_EVAL, tag_preset=True)),
          note="The `seeds-final` regime's seeds 0–4 are the `seeds-final` study's runs (bitwise the same): this "
               "regime extends that study to 10 seeds and is not an independent replication of it.",
          shared_seeds={"seeds-final": "seeds 0–4 are the `seeds-final` study's runs: not an independent replication"},
          status="confirmatory", amendment=0,
          question=("The registered question on twice the seeds and in a second, longer-trained configuration: does an "
                    "embedding norm help or hurt validation loss, calibration, zero-shot accuracy and stability?")),
    # -- stability (docs/PROTOCOL.md "Stability"; budgets chosen to fit about an hour here) ------------------
    # LR sensitivity (Wortsman et al. 2023)
    Study("stability-lr", "LR sensitivity: nanoGPT CPU model (4 x 128), 300 iterations, none/ln/rms x seeds 0-2 x "
                          "peak LR in {1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2}.", "stability",
          lambda: grid("stability-lr", "nanogpt-cpu", ABC, range(3), fixed={"max_iters": 300},
                       axes={"lr": [1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2]}),
          status="exploratory", amendment=1,
          question='Does an embedding norm make the final loss less sensitive to the peak learning rate?'),
    # GPT-2's N(0, 0.02) vs PyTorch's N(0, 1)
    Study("stability-init", "Embedding-init scale: the 8 x 128 model at 150 iterations, none/ln/rms/scaled x seeds "
                            "0-2 x emb_init_std in {0.02, 1.0}.", "stability",
          lambda: grid("stability-init", "seeds-prelim", ABCD, range(3), axes={"emb_init_std": [0.02, 1.0]}),
          status="exploratory", amendment=1,
          question=("Does the embedding's init scale (GPT-2's small one against PyTorch's unit one) decide whether an "
                    "embedding norm helps or hurts?")),
    Study("stability-stress", "Stress: 16 layers x 128, lr 1e-2, no warmup, 150 iterations, none/ln/rms/scaled x "
                              "seeds 0-2.", "stability",
          lambda: grid("stability-stress", "stress-deep", ABCD, range(3)),
          status="exploratory", amendment=1,
          question=("In a deep model trained hard without warm-up, is the baseline unstable, and does an embedding norm"
                    " steady it?")),
    Study("stability-budget", "Budgets: nanoGPT CPU model at 150, 300 and 2000 iterations, none/ln/rms x seeds 0-2.",
          "stability", lambda: grid("stability-budget", "nanogpt-cpu", ABC, range(3),
                                    axes={"max_iters": [150, 300, 2000]}),
          status="exploratory", amendment=1,
          question="Does an embedding norm's cost in validation loss change with the training budget?"),
    # -- stability v2 (docs/PROTOCOL.md amendment 1: the search for an unstable baseline is exploratory) ------
    Study("stability-lr-v2", "LR boundary: nanoGPT CPU model (4 x 128, block 64, batch 12), 1000 iterations "
                             "(50 of warm-up, then cosine), none/ln/rms/scaled x seeds 0-2 x peak LR in half-decade "
                             "steps {1e-4, 3e-4, ..., 3e-1, 1} (9 points); learning curve on 64 validation windows, "
                             "final metrics on the whole split.", "stability-v2",
          lambda: _seed_major("stability-lr-v2", "nanogpt-cpu", ABCD, range(3), {"max_iters": 1000, **INTERIM_EVAL},
                              {"lr": LR_GRID_V2}),
          note=LR_V2_NOTE,
          status="exploratory", amendment=1,
          question=("At which peak learning rate does each arm start to fail, and does an embedding norm move that "
                    "boundary?")),
    # what moves the boundary (issue 16, item 2): the upper half of the LR grid, one change at a time
    Study("stability-noclip-v2", "LR boundary without gradient clipping: stability-lr-v2's model and budget, "
                                 "grad_clip 0, none/ln/rms/scaled x seeds 0-2 x peak LR {3e-2, 1e-1, 3e-1, 1}.",
          "stability-v2", lambda: _seed_major("stability-noclip-v2", "nanogpt-cpu", ABCD, range(3),
                                              {"max_iters": 1000, "grad_clip": 0.0, **INTERIM_EVAL},
                                              {"lr": LR_GRID_V2[5:]}),
          note=LR_V2_NOTE,
          status="exploratory", amendment=1,
          question='Without gradient clipping, does the failure boundary move, and does an embedding norm move it?'),
    Study("stability-bf16-v2", "LR boundary in bf16 autocast (BLOOM's authors suspected bf16 removes the need for "
                               "the embedding norm they needed in fp16): stability-lr-v2's model and budget, "
                               "precision bf16, none/ln/rms/scaled x seeds 0-2 x peak LR {3e-2, 1e-1, 3e-1, 1}.",
          "stability-v2", lambda: _seed_major("stability-bf16-v2", "nanogpt-cpu", ABCD, range(3),
                                              {"max_iters": 1000, "precision": "bf16", **INTERIM_EVAL},
                                              {"lr": LR_GRID_V2[5:]}),
          note=LR_V2_NOTE + " Affordable on a CPU with AVX-512 BF16 instructions, where bf16 autocast costs about "
                            "what fp32 does; on a CPU without them it is an order of magnitude slower, GPU work "
                            "(`python -m embnorm_lib.bench --precision --preset nanogpt-cpu` prints the ratio on "
                            "this machine). These runs are CPU autocast: matmuls in bf16, parameters and optimizer "
                            "in fp32. fp16 with loss scaling is CUDA-only here.",
          status="exploratory", amendment=1,
          question='In bf16 autocast, does the failure boundary move, and does an embedding norm move it?'),
    Study("stability-deep-v2", "LR boundary of a deeper model: stability-lr-v2's setup with 16 layers, "
                               "none/ln/rms/scaled x seeds 0-2 x peak LR {1e-3, 3e-3, ..., 3e-1, 1} (7 points).",
          "stability-v2", lambda: _seed_major("stability-deep-v2", "nanogpt-cpu", ABCD, range(3),
                                              {"max_iters": 1000, "n_layer": 16, **INTERIM_EVAL},
                                              {"lr": LR_GRID_V2[2:]}),
          note=LR_V2_NOTE + " Registered with peak LR {1e-2, ..., 3e-1}; after seed 0 (the search is exploratory, "
                            "amendment 1) LR 1 was added because no arm failed on that grid and the 4-layer model "
                            "fails only at LR 1, and LR 1e-3 and 3e-3 because every arm's best LR was the grid's "
                            "lowest. 32 layers: `stability-deep32-v2`.",
          status="exploratory", amendment=1,
          question='In a deeper model, does the failure boundary move, and does an embedding norm move it?'),
    Study("stability-deep32-v2", "LR boundary of a 32-layer model: stability-lr-v2's setup with 32 layers, "
                                 "none/ln/rms/scaled x seeds 0-2 x peak LR {0.3, 1}, the two LRs around the 16-layer "
                                 "boundary.", "stability-v2",
          lambda: _seed_major("stability-deep32-v2", "nanogpt-cpu", ABCD, range(3),
                              {"max_iters": 1000, "n_layer": 32, **INTERIM_EVAL}, {"lr": LR_GRID_V2[-2:]}),
          note=LR_V2_NOTE + " Registered after stability-deep-v2 (exploratory, amendment 1): at 16 layers every arm "
                            "failed at LR 1 and none below, so the question at 32 layers is whether depth moves "
                            "any arm's failures down to 0.3; a 32-layer run costs about twice a 16-layer one, so "
                            "only the two LRs around the 16-layer boundary are run.",
          status="exploratory", amendment=1,
          question="Does doubling the depth again move any arm's failures down to a lower learning rate?"),
    # H1b, confirmatory (docs/PROTOCOL.md amendment 2): fresh seeds in the regime the search found
    Study("stability-h1b-v2", "H1b, confirmatory: stability-lr-v2's model and budget, fresh seeds 3-7, "
                              "none/ln/rms/scaled x gradient clipping {1.0, off} x peak LR {1, 0.3}, plus every arm "
                              "at its own best LR of stability-lr-v2 (none 1e-2; ln, rms, scaled 3e-3; clipping on).",
          "h1b", lambda: _h1b_cells("stability-h1b-v2", range(3, 8)),
          note=LR_V2_NOTE + " Confirmatory endpoints, family and decision rule: docs/PROTOCOL.md amendment 2.",
          status="confirmatory", amendment=2,
          question=("H1b: where the baseline fails, does an embedding norm remove the failures, and what does it cost "
                    "at each arm's own best learning rate?")),
    Study("stability-scale-v2", "Scale vs normalization: the 8 x 128 model at 150 iterations, none/ln/rms/scaled "
                                "plus ln_matched (LayerNorm whose gain starts at block 1's input norm of none) and "
                                "scaled_unit (token embedding at unit RMS) x seeds 0-2 x emb_init_std in {0.02, 1.0} x "
                                "output head tied / untied.", "stability-v2",
          lambda: grid("stability-scale-v2", "seeds-prelim", ABCD + SCALE_VS_NORM, range(3),
                       axes={"emb_init_std": [1.0, 0.02], "tie_embeddings": [False, True]}),
          note="stability-init's evaluation plan (every window at every evaluation), so its tied none/ln/rms/scaled "
               "runs are copied, not retrained. Cells run std 1.0 before 0.02 and untied before tied (the "
               "question's deciding cells first, so a sweep stopped part-way has them).",
          status="exploratory", amendment=1,
          question=("Which half of LayerNorm carries its effect, normalizing or rescaling what enters block 1, and does"
                    " that depend on the embedding's init scale and a tied output head?")),
    Study("stability-budget-v2", "Budget trend: the nanoGPT CPU model at 4000 and 8000 iterations (stability-budget "
                                 "has 150, 300 and 2000), none/ln/rms x seeds 0-2.", "stability-v2",
          lambda: grid("stability-budget-v2", "nanogpt-cpu", ABC, range(3), axes={"max_iters": [4000, 8000]}),
          note="Every evaluation scores the whole validation split (not studies.INTERIM_EVAL): the trend reports the "
               "best validation loss as well as the final one, on the same windows as stability-budget.",
          status="exploratory", amendment=1,
          question="Does an embedding norm's cost shrink, vanish or flip when the model trains much longer?"),
    # -- the size ladder (issue 18; docs/PROTOCOL.md amendment 1: per size the paired family, the trend exploratory)
    Study("ladder-lr", "Ladder LR check: rungs 0-4 (0.1M-14M non-embedding parameters, char, block 128, batch 32, "
                       "the ladder's budget), none and ln at 1/4, 1/2, 1, 2 and 4 times the width rule's LR x seeds 0-1 "
                       "(amendment 5; from rung 3, the rung below's best factor times 1/2, 1 and 2, amendment 14), "
                       "and on by factors of two where an arm's best sits at the grid's edge (amendment 6).",
          "ladder", lambda: _ladder_cells("ladder-lr", range(5), ["none", "ln"], range(2), factors=LADDER_LR_FACTORS),
          note="Checks the LR rule: each arm's best factor at a rung becomes that rung's LR in the ladder "
               "(studies.LADDER_LR_CHECKED, docs/PROTOCOL.md amendment 5).",
          status="tuning", amendment=5,
          question=("Is the width rule's learning rate each arm's best at every size of the ladder, and if not, which "
                    "factor is?")),
    Study("ladder", "Size ladder: rungs 0-4 (0.1M-14M non-embedding parameters; char, block 128, batch 32; 20 "
                    "tokens per parameter capped at 10 epochs), none/ln/rms x seeds 0-4, each arm at the width "
                    "rule's LR times the factor ladder-lr found best at its rung (amendment 5; rms at ln's). Rungs 3-4 "
                    "train on a CPU across sessions (amendments 14-15; minutes per run: the budget table); on a GPU, "
                    "sweep --pack on.", "ladder",
          lambda: _ladder_cells("ladder", range(5), ABC, LADDER_SEEDS), waits_for=ladder_rung_waits,
          status="confirmatory", amendment=4,
          question=("Does an embedding norm's effect on validation loss change with model size, at each arm's checked "
                    "learning rate?")),
    Study("ladder-bpe", "Subword ladder: the ladder's rungs 1-3 with BPE tokens (bpe-512, bpe-4096; the budget cap "
                        "in each tokenizer's tokens), none/ln/rms x seeds 0-4; loss reported per character and per "
                        "token. Rung 3 trains on a CPU across sessions (amendment 15; minutes per run: the budget "
                        "table); on a GPU, sweep --pack on.", "ladder",
          lambda: _ladder_cells("ladder-bpe", range(1, 4), ABC, LADDER_SEEDS, tokenizers=("bpe-512", "bpe-4096")),
          note="Each arm runs at the character ladder's LR for its rung (ladder_factor): ladder-lr checked the LR "
               "on characters only and no subword LR check is registered, so a subword difference may partly "
               "reflect an LR tuned for another tokenization. `ladder-bpe-lr` (exploratory, amendment 8) checks "
               "the LR on subwords at rung 1.", waits_for=ladder_rung_waits,
          status="confirmatory", amendment=7,
          question=("With subword tokens instead of characters, does an embedding norm change the validation loss per "
                    "character at each size?")),
    Study("ladder-bpe-lr", "Subword LR check, exploratory (amendment 8): rung 1 with BPE tokens (bpe-4096 first, "
                           "then bpe-512), none and ln at 1/4, 1/2, 1, 2 and 4 times the width rule's LR x seeds 0-1, "
                           "at ladder-bpe's budget.", "ladder",
          lambda: _ladder_cells("ladder-bpe-lr", [1], ["none", "ln"], range(2), tokenizers=("bpe-4096", "bpe-512"),
                                factors=LADDER_LR_FACTORS),
          note="Asks whether the LR checked on characters (the factor ladder-bpe runs at) is also best on subwords; "
               "it does not change ladder-bpe's registered analysis (amendment 7).",
          status="exploratory", amendment=8,
          question='Is the learning rate checked on characters also the best one on subword tokens?'),
    Study("ladder-bpe-lr2", "Subword LR check at rung 2, exploratory (amendment 13): rung 2 with bpe-4096 tokens, "
                            "none and ln at the character check's factors there (1/4 to 4 times the width rule's LR, "
                            "and 1/8 for none) x seeds 0-1, at ladder-bpe's budget.", "ladder",
          lambda: _ladder_cells("ladder-bpe-lr2", [2], ["none", "ln"], range(2), tokenizers=("bpe-4096",),
                                factors=LADDER_LR_FACTORS),
          note="Asks whether the LR checked on characters (the factor ladder-bpe and ladder-bpe-rep2 run at) is also "
               "best on subwords at rung 2, where ladder-bpe-rep2 resolved a cost of both norms; it changes no "
               "registered analysis (amendment 13).",
          status="exploratory", amendment=13,
          question='At the next size, is the learning rate checked on characters also the best one on subword tokens?'),
    Study("ladder-bpe-rep", "Subword replication, confirmatory (amendment 9): rung 1 with bpe-4096 tokens, "
                            "none/ln/rms at ladder-bpe's LRs and budget, fresh seeds 5-14.", "ladder",
          lambda: _ladder_cells("ladder-bpe-rep", [1], ABC, LADDER_REP_SEEDS, tokenizers=("bpe-4096",)),
          note="Asks again, on ten seeds that did not prompt the question, whether an embedding norm changes the "
               "final loss per character where ladder-bpe's five seeds split into two levels (amendment 9); "
               "analysed alone, seeds 0-4 not pooled in.", waits_for=ladder_rung_waits,
          status="confirmatory", amendment=9,
          question=("On fresh seeds, does an embedding norm change the validation loss per character where the subword "
                    "ladder's seeds split?")),
    Study("ladder-bpe-rep2", "Subword replication at rung 2, confirmatory (amendment 11): rung 2 with bpe-4096 "
                             "tokens, none/ln/rms at ladder-bpe's LRs and budget, fresh seeds 5-14.", "ladder",
          lambda: _ladder_cells("ladder-bpe-rep2", [2], ABC, LADDER_REP_SEEDS, tokenizers=("bpe-4096",)),
          note="Asks again, on ten seeds that did not prompt the question, whether an embedding norm changes the "
               "final loss per character at the size where ladder-bpe's rung-1 gain turned into an unresolved "
               "cost, and whether it raises the peak gradient norm after the warm-up (the exploratory reading that "
               "prompted it; amendment 11 makes it confirmatory here); analysed alone, seeds 0-4 not pooled in.",
          waits_for=ladder_rung_waits,
          status="confirmatory", amendment=11,
          question=("On fresh seeds at the next size, does an embedding norm cost validation loss per character, and "
                    "does it raise the gradient-norm peak after the warm-up?")),
    Study("ladder-bpe-scale", "Scale vs normalization on subwords, exploratory (amendment 10): rung 1 with bpe-4096 "
                              "tokens, none/ln/ln_matched/scaled_unit at ladder-bpe's LRs (ln_matched at ln's, "
                              "scaled_unit at none's) and budget, seeds 5-9.", "ladder",
          lambda: _ladder_cells("ladder-bpe-scale", [1], ["none", "ln", *SCALE_VS_NORM], range(5, 10),
                                tokenizers=("bpe-4096",)),
          note="Where ladder-bpe-rep found both norms lowering the loss, asks which part carries it: normalizing "
               "(ln_matched: LayerNorm whose gain starts so that block 1's input norm at init is none's) or "
               "rescaling (scaled_unit: the token embedding at unit RMS, no norm). Its none and ln runs are "
               "ladder-bpe-rep's seeds 5-9, copied bitwise.", waits_for=ladder_rung_waits,
          status="exploratory", amendment=10,
          question='On subwords, which half of LayerNorm carries its gain, normalizing or rescaling the embedding?'),
    # -- the adequate-data ladder (issue 76; docs/PROTOCOL.md amendment 16): ~57M training characters of open English
    Study("ladder-data-lr", "Adequate-data ladder, LR tuning (amendment 16): rungs 2x64, 3x96, 4x128, 6x160 "
                            "(0.1M-1.8M non-embedding parameters) on the open-English corpus, 20 tokens per "
                            "parameter (at most 4 passes); none and ln on a sqrt(2) LR grid x tuning seeds "
                            "100-102, a grid extended past any edge where the best sits.", "ladder-data",
          lambda: _data_ladder_cells("ladder-data-lr", tuning=True),
          note="Tuning seeds are never confirmatory seeds. A rung's grid is centred on the rung below's "
               "registered LR scaled by width (ladder_data.centre).",
          status="tuning", amendment=16,
          question="Which learning rate is each arm's best at each size of the adequate-data ladder?"),
    Study("ladder-data", "Adequate-data ladder, confirmatory (amendment 16): none/ln/rms x fresh seeds 0-4 per "
                         "rung, each arm at its tuned LR (rms at ln's), on the open-English corpus.", "ladder-data",
          lambda: _data_ladder_cells("ladder-data", tuning=False),
          note="Per rung: paired differences, 95% t intervals, Holm within the rung; the trend across rungs is "
               "exploratory and covers only rungs that pass the data-bound check.",
          status="confirmatory", amendment=16,
          question=("On a corpus large enough that the models are not data-bound, does an embedding norm's effect on "
                    "validation loss change with size?")),
    Study("smoke", "Smoke test for the README and CI: a tiny model, 20 iterations, none/ln/rms x seeds 0-1.", "smoke",
          lambda: grid("smoke", "tiny", ABC, range(2), fixed={"max_iters": 20}),
          status="smoke", amendment=0,
          question='Does the pipeline run end to end?'),
)}


def registered_seeds(name: str) -> int:
    """How many seeds a study registers per cell: a ladder size is finished, and quoted, with all of them."""
    return len({c.seed for c in study_cells(name)})


def studies_of(analysis: str) -> list[str]:
    """The registered studies analysed one way ("paired", "stability"), in registry order."""
    return [s.name for s in STUDIES.values() if s.analysis == analysis]


# analyses whose reports say how many registered runs have finished (a study still training is reported as partial)
PARTIAL_REPORTS = ("stability-v2", "h1b", "ladder", "ladder-data")


class MissingRunsError(RunDirError):
    """A registered run of a study that must be complete is missing or unfinished."""


def unfinished_runs(name: str, out_dir: Path | None = None) -> list[Path]:
    """The run directories the registry expects of a study (its grid x seeds) that hold no finished run; [] for a
    study outside the registry."""
    if name not in STUDIES:
        return []
    return [d for d in (c.run_dir(runs_root(out_dir)) for c in STUDIES[name].cells())
            if not RunDir(d).summary.is_file()]


def check_registered_runs(name: str, out_dir: Path | None = None) -> None:
    """Before a study is analysed: the runs it must have come from the registry, not from what is on disk, so a
    missing run is refused in one line and a smaller n is never analysed. A study whose report counts its finished
    runs (PARTIAL_REPORTS) may be partial."""
    if name not in STUDIES or STUDIES[name].analysis in PARTIAL_REPORTS:
        return
    missing = unfinished_runs(name, out_dir)
    if missing:
        root = runs_root(out_dir) / name
        shown = ", ".join(str(d.relative_to(root)) for d in missing[:4]) + (", ..." if len(missing) > 4 else "")
        raise MissingRunsError(f"study {name}: {len(missing)} of {len(STUDIES[name].cells())} registered runs are "
                               f"missing or unfinished ({shown}); allowed: every registered run finished (`python -m "
                               f"embnorm_lib.sweep {name}` trains what is missing)")


def study_cells(name: str) -> list[Cell]:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; allowed: {', '.join(STUDIES)} (or give --preset for a grid)")
    return STUDIES[name].cells()
