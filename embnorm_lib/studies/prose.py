"""The prose ladder (issue 112; docs/PROTOCOL.md amendment 17): three sizes x two embedding recipes x three arms on
the open-prose corpus in byte-level BPE tokens, every arm of every recipe at its own LR tuned on a sqrt(2) grid with
3 tuning seeds that are never confirmatory seeds, plus a budget control (the smallest size on 4x the tokens).

Everything registered lives here as data. The tables that the tuning runs fill in by the registered rule
(`EXTENSIONS`, `BEST_LR`, `SEEDS_ADDED`) start empty and are held to the committed runs by tests, so none can be typed
by hand."""
from __future__ import annotations

import math

from ..core.presets import PROSE_BUDGET_FACTORS, PROSE_RUNGS, PROSE_TOKENS_PER_ITER, prose_iters, prose_params  # noqa: F401
from ..core.recipes import RECIPES
from ..runner import registry

RECIPE_NAMES = tuple(RECIPES)  # gpt2, speedrun
ARMS = ("none", "ln", "rms")  # every arm tuned, rms too
LR_STEP = math.sqrt(2)
# A level is a size at one budget, named as its preset's suffix. Amendment 17 registered "0", "1", "2" at 20 tokens
# per non-embedding parameter; amendment 19, after every tuned arm of size 0 ended above the count bigram, moved the
# confirmatory ladder to MAIN_LEVELS: size 0 on 4x its tokens ("0-x4", its own tuning), sizes 1 and 2 on 20 tokens per
# parameter counting the embeddings (presets.prose_params). Size 0 at amendment 17's budget stays as the budget
# control: the same model on a quarter of the tokens, each arm at the LR tuned for that budget.
LEVELS = ("0", "0-x4", "1", "2")  # in tuning order: a level's grid is centred on the level before's registered LR
MAIN_LEVELS = ("0-x4", "1", "2")
BUDGET_LEVEL = "0"
# level "0"'s grid centre for every arm and recipe: the open-English ladder's tuned LRs at the same 2 x 64 shape
# (none 0.00707, ln 0.006; ladder_data.BEST_LR[0]) rounded to one value, 5 points either way covering 4x
RUNG0_CENTRE = 0.0065
GRID_HALF_WIDTH = {"0": 2, "0-x4": 1, "1": 1, "2": 1}  # points either side of the centre: 5, 3, 3, 3
TUNING_SEEDS = (100, 101, 102)
CONFIRMATORY_SEEDS = (0, 1, 2, 3, 4, 5)
EXTRA_SEEDS = (6, 7, 8, 9)  # added to a cell whose MDE at seeds 0-5 exceeds MDE_LIMIT (amendment 17 item 6)
MDE_LIMIT = 0.01
# recipe -> levels given EXTRA_SEEDS by the rule. Amendment 20: suite v3's pilot (lmtasks/pilot_v3.json) puts the
# macro accuracy's MDE at 6 seeds above MDE_LIMIT at both presets piloted from item sampling alone, a floor of the
# suite (its items are bounded by the validation split) that no size escapes. The compute allows them at sizes 0-x4
# and 1; size 2 gets them only if, once its LRs are registered, the projection with them stays within
# COMPUTE_LIMIT_HOURS (prose_setup estimate), decided before its first confirmatory run.
SEEDS_ADDED: dict[str, tuple[str, ...]] = {recipe: ("0-x4", "1") for recipe in RECIPE_NAMES}
COMPUTE_LIMIT_HOURS = 200  # issue 112: the whole study within ~200 core-hours on this CPU
SCORED_STUDIES = ("prose", "prose-budget")  # scored on suite v3 after training (lm_eval=True; amendment 20)
TUNING_STUDY = "prose-lr"
CONFIRM_STUDY, BUDGET_STUDY = SCORED_STUDIES  # the budget control is read beside the confirmatory size 0-x4
PROSE_KIND = "prose"  # the analysis kind the studies here are read as (analyses/plugins.py registers it)
# Amendment 21 (exploratory): the confirmatory cells of size 1 again with the token and position tables not decayed,
# read beside the confirmatory runs of the same seeds, which decay them as every matrix (nanoGPT's convention).
EMB_DECAY_STUDY, EMB_DECAY_LEVEL, EMB_DECAY_OFF = "prose-embdecay", "1", 0.0

# Filled in by the registered rule as tuning runs land (tested against the runs):
# (recipe, level) -> arm -> extra LRs beyond an edge where the best sat; and -> arm -> the bracketed best LR.
EXTENSIONS: dict[tuple[str, str], dict[str, list[float]]] = {
    # gpt2, size 0: every arm's best sat at the grid's low edge, 0.00325 (means 2.272 / 2.261 / 2.267 bits per byte
    # for none / ln / rms over seeds 100-102; runs/prose-lr/PROSE.md)
    ("gpt2", "0"): {"none": [0.0023], "ln": [0.0023], "rms": [0.0023]},
    # gpt2, size 0 at 1,920 steps: none's best sat at the grid's high edge, 0.0046 (mean 1.924 bits per byte over
    # seeds 100-102; runner-up 0.00325 by 0.034 ± 0.005 nats/token; runs/prose-lr/PROSE.md)
    # ... and again at the extension, 0.00651 (mean 1.920; runner-up 0.0046 by 0.0094 ± 0.0061 nats/token); ln's best at
    # its grid's high edge, 0.0046 (mean 1.919; runner-up 0.00325 by 0.034 ± 0.0075 nats/token; runs/prose-lr/PROSE.md)
    # ... and at the second extension, 0.00921 (mean 1.920; runner-up 0.00651 by 0.0005 ± 0.0166 nats/token: a flat
    # top, but the rule extends an edge best); ln's best now bracketed at 0.0046 (runner-up 0.00651 by 0.0026 ± 0.0269)
    # rms's best sat at its grid's high edge, 0.0046 (mean 1.918; runner-up 0.00325 by 0.040 ± 0.0055 nats/token)
    # ... and again at the extension, 0.00651 (mean 1.917; runner-up 0.0046 by 0.0038 ± 0.0103 nats/token)
    # ... and again at the second extension, 0.00921 (mean 1.915; runner-up 0.00651 by 0.0029 ± 0.0238 nats/token)
    ("gpt2", "0-x4"): {"none": [0.00651, 0.00921, 0.013], "ln": [0.00651], "rms": [0.00651, 0.00921, 0.013]},
    # speedrun, size 0 at 1,920 steps: none's best sat at the grid's high edge, 0.00919 (mean 1.931 bits per byte over
    # seeds 100-102; runner-up 0.0065 by 0.0683 ± 0.0036 nats/token; runs/prose-lr/PROSE.md)
    # ... and again at the extension, 0.013 (mean 1.914; runner-up 0.00919 by 0.0401 ± 0.0218 nats/token); ln's best
    # at its grid's high edge, 0.00651 (mean 1.967; runner-up 0.0046 by 0.0859 ± 0.0059); rms's at its high edge,
    # 0.00919 (mean 1.938; runner-up 0.0065 by 0.0758 ± 0.0102; runs/prose-lr/PROSE.md)
    # ... ln's best at the extension, 0.00921, at its edge again (mean 1.933; runner-up 0.00651 by 0.0823 ± 0.0064);
    # rms's at its extension, 0.013, at its edge again (mean 1.925; runner-up 0.00919 by 0.0311 ± 0.0311)
    # ... ln's best at its second extension, 0.013, at its edge again (mean 1.918; runner-up 0.00921 by
    # 0.0363 ± 0.0027; runs/prose-lr/PROSE.md)
    ("speedrun", "0-x4"): {"none": [0.013, 0.0184], "ln": [0.00921, 0.013, 0.0184], "rms": [0.013, 0.0184]},
    # gpt2, size 1: none's best sat at its grid's high edge, 0.00868 (mean 1.750 bits per byte over seeds 100-102;
    # runner-up 0.00614 by 0.0336 ± 0.0173 nats/token); ln's at its high edge, 0.00434 (mean 1.751; runner-up 0.00307
    # by 0.0212 ± 0.0243; runs/prose-lr/PROSE.md)
    # ... and ln's again at the extension, 0.00614 (mean 1.747; runner-up 0.00434 by 0.0101 ± 0.0127 nats/token:
    # runs/prose-lr/PROSE.md)
    ("gpt2", "1"): {"none": [0.0123], "ln": [0.00614, 0.00868]},
}
BEST_LR: dict[tuple[str, str], dict[str, float]] = {
    # speedrun, size 0: none's best 0.0065 is bracketed (mean 2.294 bits per byte over seeds 100-102; runner-up 0.0046
    # by 0.091 ± 0.013 nats/token; runs/prose-lr/PROSE.md)
    ("speedrun", "0"): {"none": 0.0065, "ln": 0.0046, "rms": 0.0065},
    # gpt2, size 0: after the extension to 0.0023, every arm's best stays 0.00325, bracketed (runs/prose-lr/PROSE.md)
    ("gpt2", "0"): {"none": 0.00325, "ln": 0.00325, "rms": 0.00325},
    # gpt2, size 0 at 1,920 steps: ln's best 0.0046 is bracketed after the extension to 0.00651 (mean 1.919 bits per
    # byte over seeds 100-102; runner-up 0.00651 by 0.0026 ± 0.0269 nats/token; runs/prose-lr/PROSE.md); none's best
    # 0.00921 is bracketed after the extension to 0.013 (mean 1.920 against 1.938 there; runner-up 0.00651 by
    # 0.0005 ± 0.0166 nats/token, a flat top; runs/prose-lr/PROSE.md)
    # rms's best 0.00921 is bracketed after the extension to 0.013 (mean 1.915 against 1.930 there; runner-up 0.00651
    # by 0.0029 ± 0.0238 nats/token; runs/prose-lr/PROSE.md)
    ("gpt2", "0-x4"): {"ln": 0.0046, "none": 0.00921, "rms": 0.00921},
    # speedrun, size 0 at 1,920 steps: none's best 0.013 is bracketed after the extension to 0.0184 (mean 1.914 bits per
    # byte against 1.930 there; runner-up 0.0184 by 0.0388 ± 0.0401 nats/token; runs/prose-lr/PROSE.md)
    # rms's best 0.013 is bracketed after the extension to 0.0184 (mean 1.925 bits per byte against 1.944 there;
    # runner-up 0.00919 by 0.0311 ± 0.0311 nats/token; runs/prose-lr/PROSE.md)
    # ln's best 0.013 is bracketed after its third extension, to 0.0184 (mean 1.918 bits per byte against 2.006 there;
    # runner-up 0.00921 by 0.0363 ± 0.0027 nats/token; runs/prose-lr/PROSE.md)
    ("speedrun", "0-x4"): {"none": 0.013, "rms": 0.013, "ln": 0.013},
    # gpt2, size 1: none's best 0.00868 is bracketed after the extension to 0.0123 (mean 1.750 bits per byte against
    # 1.760 there over seeds 100-102; runner-up 0.0123 by 0.0251 ± 0.0127 nats/token; runs/prose-lr/PROSE.md)
    # ln's best 0.00614 is bracketed after its second extension, to 0.00868 (mean 1.747 bits per byte against 1.748
    # there; runner-up 0.00868 by 0.0042 ± 0.0173 nats/token, a flat top; runs/prose-lr/PROSE.md)
    # rms's best 0.00614 is bracketed on its grid (mean 1.739 bits per byte over seeds 100-102, against 1.748 at
    # 0.00434 and 1.751 at 0.00868; runner-up 0.00434 by 0.0234 ± 0.0135 nats/token; runs/prose-lr/PROSE.md)
    ("gpt2", "1"): {"none": 0.00868, "ln": 0.00614, "rms": 0.00614},
}


def rung_of(level: str) -> int:
    return int(level.split("-")[0])


def preset_name(recipe: str, level: str) -> str:
    return f"prose-{recipe}-{level}"


def non_embedding_params(rung: int) -> int:
    n_layer, n_embd, _ = PROSE_RUNGS[rung]
    return 12 * n_layer * n_embd ** 2


def _snap(lr: float) -> float:
    return float(f"{lr:.3g}")


def centre(recipe: str, level: str, arm: str) -> float | None:
    """Level "0": RUNG0_CENTRE. After it: the level before's registered LR for this recipe and arm times the width
    ratio (Adam's LR falls as 1/width; 1 between the two budgets of size 0); None while that level has none."""
    if level == LEVELS[0]:
        return RUNG0_CENTRE
    before = LEVELS[LEVELS.index(level) - 1]
    below = BEST_LR.get((recipe, before), {}).get(arm)
    return None if below is None else below * PROSE_RUNGS[rung_of(before)][1] / PROSE_RUNGS[rung_of(level)][1]


def grid(recipe: str, level: str, arm: str) -> list[float]:
    """The centre times sqrt(2)^k for |k| <= the level's half-width, then any registered extension."""
    c = centre(recipe, level, arm)
    if c is None:
        return []
    k = GRID_HALF_WIDTH[level]
    points = {_snap(c * LR_STEP ** j) for j in range(-k, k + 1)}
    return sorted(points | set(EXTENSIONS.get((recipe, level), {}).get(arm, [])))


def confirmatory_seeds(recipe: str, level: str) -> tuple[int, ...]:
    return CONFIRMATORY_SEEDS + (EXTRA_SEEDS if level in SEEDS_ADDED.get(recipe, ()) else ())


def best_lrs(runs, recipe: str, level: str) -> dict[str, dict]:
    """From the tuning runs (a runs.csv frame) of one recipe and level: per arm, the mean final validation loss per
    LR over the tuning seeds, the best LR (one with a failed or missing run never wins), whether it is bracketed, the
    runner-up, and the LR one sqrt(2) step beyond the edge when the best is not bracketed."""
    out = {}
    rows = runs[runs["cfg.preset"] == preset_name(recipe, level)]
    for arm in ARMS:
        lrs, sub = grid(recipe, level, arm), rows[rows["cfg.variant"] == arm]
        means, complete = {}, True
        for lr in lrs:
            at = sub[((sub["cfg.lr"] - lr).abs() < 1e-12) & sub["cfg.seed"].isin(TUNING_SEEDS)]
            if at["cfg.seed"].nunique() < len(TUNING_SEEDS):
                complete = False
                continue
            means[lr] = math.inf if at["failed"].astype(bool).any() else float(at["val_loss"].mean())
        if not complete or not means:
            out[arm] = {"complete": False, "means": means}
            continue
        ranked = sorted(means, key=means.get)
        best = ranked[0]
        edge = best in (min(lrs), max(lrs))
        beyond = None
        if edge and math.isfinite(means[best]):
            beyond = _snap(best / LR_STEP) if best == min(lrs) else _snap(best * LR_STEP)
        out[arm] = {"complete": True, "means": means, "best": best, "bracketed": not edge, "extend_to": beyond,
                    "runner_up": ranked[1] if len(ranked) > 1 else None}
    return out


def lr_of(recipe: str, level: str, arm: str) -> float | None:
    return BEST_LR.get((recipe, level), {}).get(arm)


# which levels each kind of study trains, and which study is which kind (the tuning study aside)
KIND_LEVELS = {"tuning": LEVELS, "confirmatory": MAIN_LEVELS, "budget": (BUDGET_LEVEL,), "embdecay": (EMB_DECAY_LEVEL,)}
SCORED_KINDS = {CONFIRM_STUDY: "confirmatory", BUDGET_STUDY: "budget", EMB_DECAY_STUDY: "embdecay"}


def _seeds(kind: str, recipe: str, level: str) -> tuple[int, ...]:
    return confirmatory_seeds(recipe, level) if kind == "confirmatory" else CONFIRMATORY_SEEDS


def design_runs(study: str) -> int | None:
    """A scored study's whole registered design, in runs: every recipe x arm of its levels x its seeds. Its cells
    register size by size as the LRs are tuned, so `cells()` holds fewer until the last size is tuned; a page says
    "k of N" against this N, which moves only with a registered change (SEEDS_ADDED). None for the tuning study,
    whose grids grow by the registered extension rule."""
    kind = SCORED_KINDS.get(study)
    if kind is None:
        return None
    return sum(len(ARMS) * len(_seeds(kind, recipe, level)) for level in KIND_LEVELS[kind] for recipe in RECIPE_NAMES)


def _cells(study: str, kind: str) -> list[registry.Cell]:
    """tuning: every recipe x arm on each level's grid x the tuning seeds (a level's grid exists once the level
    before has its registered LRs). confirmatory: every recipe x arm of MAIN_LEVELS at its registered LR x fresh
    seeds. budget: the same at BUDGET_LEVEL, size 0 on a quarter of its confirmatory tokens. embdecay: the confirmatory
    cells of EMB_DECAY_LEVEL at seeds 0-5 with the embedding tables not decayed (emb_weight_decay=0)."""
    cells = []
    for level in KIND_LEVELS[kind]:
        for recipe in RECIPE_NAMES:
            for arm in ARMS:
                if kind == "tuning" and grid(recipe, level, arm):
                    cells += registry.grid(study, preset_name(recipe, level), [arm], TUNING_SEEDS,
                                           axes={"lr": grid(recipe, level, arm)}, tag_preset=True)
                elif kind != "tuning" and lr_of(recipe, level, arm) is not None:
                    axes = {"emb_weight_decay": [EMB_DECAY_OFF]} if kind == "embdecay" else None
                    cells += registry.grid(study, preset_name(recipe, level), [arm], _seeds(kind, recipe, level),
                                           tag_preset=True, fixed={"lr": lr_of(recipe, level, arm), "lm_eval": True},
                                           axes=axes)
    return cells


_WHAT = ("three sizes (2x64, 3x96, 4x128; 0.1M-0.8M non-embedding parameters) x two embedding recipes (GPT-2: "
         "N(0, 0.02), tied head; speedrun: N(0, 1), untied zero-init head) x none/ln/rms, on ~100M characters of "
         "open prose in byte-level BPE-4096 tokens; budgets (amendment 19): 2x64 on 1,920 iterations (7.9M tokens), "
         "3x96 and 4x128 on 20 tokens per parameter counting the embeddings (3,600 and 6,480 iterations)")
ENTRIES = (
    registry.Study("prose-lr", f"Prose ladder, LR tuning (amendments 17 and 19): {_WHAT}; every arm on a sqrt(2) LR "
                               "grid x tuning seeds 100-102, extended past any edge where the best sits; 2x64 is "
                               "tuned at both its budgets (480 iterations for the budget control).", PROSE_KIND,
                   lambda: _cells("prose-lr", "tuning"),
                   note="Tuning seeds are never confirmatory seeds. A level's grid is centred on the level before's "
                        "registered LR for the same recipe and arm, scaled by width (prose.centre).",
                   status="tuning", amendment=19,
                   question="Which learning rate is each arm's best for each recipe and size of the prose ladder?"),
    registry.Study("prose", f"Prose ladder, confirmatory (amendments 17, 19 and 20): {_WHAT}; fresh seeds 0-9 per "
                            "cell (6-9 added by the MDE rule), each arm at its tuned LR, each run scored on the "
                            "zero-shot prose suite v3 after training.", PROSE_KIND,
                   lambda: _cells("prose", "confirmatory"),
                   note="Per recipe and size: paired differences in bits per byte and in zero-shot macro accuracy, "
                        "95% t intervals, Holm, TOST against +-0.01, the compute multiplier.",
                   status="confirmatory", amendment=20, design_runs=lambda: design_runs(CONFIRM_STUDY),
                   question=("With each arm tuned and a compute-optimal budget on natural prose, does a norm after "
                             "the embedding help or hurt under either of today's embedding recipes?")),
    registry.Study("prose-budget", "Prose ladder, budget control (amendment 19): the 2x64 size on a quarter of its "
                                   "confirmatory tokens (480 iterations, 20 per non-embedding parameter), both "
                                   "recipes x none/ln/rms x seeds 0-5, each arm at the LR tuned for that budget, "
                                   "scored on suite v3 after training (amendment 20).",
                   PROSE_KIND, lambda: _cells("prose-budget", "budget"),
                   note="Tells a change with size from a change with budget: the same model, only the tokens differ "
                        "(4x), each arm tuned at each budget.",
                   status="exploratory", amendment=20,  # amendment 19 item 5: exploratory whatever its level
                   design_runs=lambda: design_runs(BUDGET_STUDY),
                   question="Does the arms' difference at the smallest size change when only the budget grows?"),
    registry.Study(EMB_DECAY_STUDY, "Prose ladder, embedding decay (amendment 21): the 3x96 size's confirmatory "
                                    "cells (both recipes x none/ln/rms, each arm at its tuned LR, seeds 0-5, scored "
                                    "on suite v3) with the token and position tables not weight-decayed "
                                    "(emb_weight_decay=0; a tied head is the token table), read beside the "
                                    "confirmatory runs of the same seeds, which decay them at 0.1.",
                   PROSE_KIND, lambda: _cells(EMB_DECAY_STUDY, "embdecay"),
                   note="With a norm right after the embedding, decay on the tables mostly changes their effective "
                        "LR; without a norm it shrinks what enters block 1. Exploratory: each arm keeps the LR tuned "
                        "with the tables decayed.",
                   status="exploratory", amendment=21, design_runs=lambda: design_runs(EMB_DECAY_STUDY),
                   question=("Does the norm's effect change when the embedding tables are not weight-decayed "
                             "(minGPT's convention) instead of decayed like every matrix (nanoGPT's)?")),
)
