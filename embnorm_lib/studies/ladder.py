"""The size ladders on tiny Shakespeare (issue 18; docs/PROTOCOL.md amendments 4-15): the LR check, the character
ladder, the subword ladder with its LR checks, replications and scale-vs-normalization arms. Every registered LR rule
and table lives here as data; analyses/ladder.py reads the runs."""
from __future__ import annotations

from ..runner.registry import ABC, Cell, Study, grid
from .paper_sources import BPE_LR, BPE_LR2, BPE_REP, BPE_REP2, BPE_SCALE, LADDER, LADDER_BPE, LADDER_LR
from .stability import SCALE_VS_NORM

LADDER_KIND = "ladder"  # the analysis kind every study here is read as (analyses/plugins.py registers its plugin)
# the ladders' studies by role, as the analyses read them (their names: paper_sources.py)
SUBWORD_LR_CHECKS = {BPE_LR: 8, BPE_LR2: 13}  # the exploratory subword LR checks, each with its amendment
LR_CHECKS = (LADDER_LR, *SUBWORD_LR_CHECKS)  # the studies that check the LR rule (on characters, on subwords)
SUBWORD_LR_CHECK_WHERE = {BPE_LR2: " at rung 2"}  # how the README names a subword LR check beyond the first
# the confirmatory replications of a ladder size on fresh seeds: study, its amendment, how the README names it
REPLICATIONS = ((BPE_REP, 9, ""), (BPE_REP2, 11, " at rung 2"))
# the studies whose gradient-norm peaks are a registered test (docs/PROTOCOL.md, by amendment); in every other
# ladder report the peak table is an exploratory reading beside the registered loss comparison
CONFIRMATORY_PEAKS = {BPE_REP2: 11}

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


# scaled_unit has no norm (none's)
LADDER_LR_ARM = {"rms": "ln", "ln_matched": "ln", "scaled_unit": "none"}


def ladder_lr(variant: str, n_embd: int, factor: float = 1.0) -> float:
    return float(f"{LADDER_LR_AT_128[LADDER_LR_ARM.get(variant, variant)] * 128 / n_embd * factor:.3g}")


def ladder_factor(rung: int, variant: str) -> float:
    """The LR factor the ladder uses for an arm at a rung (amendment 5): ladder-lr's best, rms taking ln's."""
    return LADDER_LR_CHECKED.get(rung, {}).get(LADDER_LR_ARM.get(variant, variant), 1.0)


# tiny Shakespeare's training split in each subword tokenizer's tokens, as the committed tokenizers
# (runs/tokenizers/) count it: registered numbers, so listing the ladder's cells tokenizes nothing
# (tests/test_ladder.py recounts them)
TRAIN_TOKENS = {"bpe-512": 435_279, "bpe-4096": 265_466}


def _train_tokens(tokenizer: str) -> int:
    return TRAIN_TOKENS[tokenizer]


def _ladder_cells(study: str, rungs, variants, seeds, tokenizers=("char",), factors=(1.0,)) -> list[Cell]:
    """Rung by rung (small first, so a CPU session finishes the cheap rungs), each arm at its rule LR (times each
    factor), seeds innermost. For BPE the budget cap counts the training split in that tokenizer's tokens."""
    from ..core.config import LADDER_RUNGS, PRESETS, ladder_iters

    cells = []
    for rung in rungs:
        n_layer, n_embd, _ = LADDER_RUNGS[rung]
        for tokenizer in tokenizers:
            fixed = {"lm_eval": False}
            if tokenizer != "char":
                from ..core.corpora.tokenizer import TOKENIZERS

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



ENTRIES = (
    # -- the size ladder (issue 18; docs/PROTOCOL.md amendment 1: per size the paired family, the trend exploratory)
    Study(LADDER_LR, "Ladder LR check: rungs 0-4 (0.1M-14M non-embedding parameters, char, block 128, batch 32, "
                     "the ladder's budget), none and ln at 1/4, 1/2, 1, 2 and 4 times the width rule's LR x seeds 0-1 "
                     "(amendment 5; from rung 3, the rung below's best factor times 1/2, 1 and 2, amendment 14), "
                     "and on by factors of two where an arm's best sits at the grid's edge (amendment 6).",
          LADDER_KIND, lambda: _ladder_cells(LADDER_LR, range(5), ["none", "ln"], range(2), factors=LADDER_LR_FACTORS),
          note="Checks the LR rule: each arm's best factor at a rung becomes that rung's LR in the ladder "
               "(studies.LADDER_LR_CHECKED, docs/PROTOCOL.md amendment 5).",
          status="tuning", amendment=5,
          question=("Is the width rule's learning rate each arm's best at every size of the ladder, and if not, which "
                    "factor is?")),
    Study(LADDER, "Size ladder: rungs 0-4 (0.1M-14M non-embedding parameters; char, block 128, batch 32; 20 "
                  "tokens per parameter capped at 10 epochs), none/ln/rms x seeds 0-4, each arm at the width "
                  "rule's LR times the factor ladder-lr found best at its rung (amendment 5; rms at ln's). Rungs 3-4 "
                  "train on a CPU across sessions (amendments 14-15; minutes per run: the budget table); on a GPU, "
                  "sweep --fleet.", LADDER_KIND,
          lambda: _ladder_cells(LADDER, range(5), ABC, LADDER_SEEDS), waits_for=ladder_rung_waits,
          status="confirmatory", amendment=4,
          question=("Does an embedding norm's effect on validation loss change with model size, at each arm's checked "
                    "learning rate?")),
    Study(LADDER_BPE, "Subword ladder: the ladder's rungs 1-3 with BPE tokens (bpe-512, bpe-4096; the budget cap "
                      "in each tokenizer's tokens), none/ln/rms x seeds 0-4; loss reported per character and per "
                      "token. Rung 3 trains on a CPU across sessions (amendment 15; minutes per run: the budget "
                      "table); on a GPU, sweep --fleet.", LADDER_KIND,
          lambda: _ladder_cells(LADDER_BPE, range(1, 4), ABC, LADDER_SEEDS, tokenizers=("bpe-512", "bpe-4096")),
          note="Each arm runs at the character ladder's LR for its rung (ladder_factor): ladder-lr checked the LR "
               "on characters only and no subword LR check is registered, so a subword difference may partly "
               "reflect an LR tuned for another tokenization. `ladder-bpe-lr` (exploratory, amendment 8) checks "
               "the LR on subwords at rung 1.", waits_for=ladder_rung_waits,
          status="confirmatory", amendment=7,
          question=("With subword tokens instead of characters, does an embedding norm change the validation loss per "
                    "character at each size?")),
    Study(BPE_LR, "Subword LR check, exploratory (amendment 8): rung 1 with BPE tokens (bpe-4096 first, "
                  "then bpe-512), none and ln at 1/4, 1/2, 1, 2 and 4 times the width rule's LR x seeds 0-1, "
                  "at ladder-bpe's budget.", LADDER_KIND,
          lambda: _ladder_cells(BPE_LR, [1], ["none", "ln"], range(2), tokenizers=("bpe-4096", "bpe-512"),
                                factors=LADDER_LR_FACTORS),
          note="Asks whether the LR checked on characters (the factor ladder-bpe runs at) is also best on subwords; "
               "it does not change ladder-bpe's registered analysis (amendment 7).",
          status="exploratory", amendment=8,
          question='Is the learning rate checked on characters also the best one on subword tokens?'),
    Study(BPE_LR2, "Subword LR check at rung 2, exploratory (amendment 13): rung 2 with bpe-4096 tokens, "
                   "none and ln at the character check's factors there (1/4 to 4 times the width rule's LR, "
                   "and 1/8 for none) x seeds 0-1, at ladder-bpe's budget.", LADDER_KIND,
          lambda: _ladder_cells(BPE_LR2, [2], ["none", "ln"], range(2), tokenizers=("bpe-4096",),
                                factors=LADDER_LR_FACTORS),
          note="Asks whether the LR checked on characters (the factor ladder-bpe and ladder-bpe-rep2 run at) is also "
               "best on subwords at rung 2, where ladder-bpe-rep2 resolved a cost of both norms; it changes no "
               "registered analysis (amendment 13).",
          status="exploratory", amendment=13,
          question='At the next size, is the learning rate checked on characters also the best one on subword tokens?'),
    Study(BPE_REP, "Subword replication, confirmatory (amendment 9): rung 1 with bpe-4096 tokens, "
                   "none/ln/rms at ladder-bpe's LRs and budget, fresh seeds 5-14.", LADDER_KIND,
          lambda: _ladder_cells(BPE_REP, [1], ABC, LADDER_REP_SEEDS, tokenizers=("bpe-4096",)),
          note="Asks again, on ten seeds that did not prompt the question, whether an embedding norm changes the "
               "final loss per character where ladder-bpe's five seeds split into two levels (amendment 9); "
               "analysed alone, seeds 0-4 not pooled in.", waits_for=ladder_rung_waits,
          status="confirmatory", amendment=9,
          question=("On fresh seeds, does an embedding norm change the validation loss per character where the subword "
                    "ladder's seeds split?")),
    Study(BPE_REP2, "Subword replication at rung 2, confirmatory (amendment 11): rung 2 with bpe-4096 "
                    "tokens, none/ln/rms at ladder-bpe's LRs and budget, fresh seeds 5-14.", LADDER_KIND,
          lambda: _ladder_cells(BPE_REP2, [2], ABC, LADDER_REP_SEEDS, tokenizers=("bpe-4096",)),
          note="Asks again, on ten seeds that did not prompt the question, whether an embedding norm changes the "
               "final loss per character at the size where ladder-bpe's rung-1 gain turned into an unresolved "
               "cost, and whether it raises the peak gradient norm after the warm-up (the exploratory reading that "
               "prompted it; amendment 11 makes it confirmatory here); analysed alone, seeds 0-4 not pooled in.",
          waits_for=ladder_rung_waits,
          status="confirmatory", amendment=11,
          question=("On fresh seeds at the next size, does an embedding norm cost validation loss per character, and "
                    "does it raise the gradient-norm peak after the warm-up?")),
    Study(BPE_SCALE, "Scale vs normalization on subwords, exploratory (amendment 10): rung 1 with bpe-4096 "
                     "tokens, none/ln/ln_matched/scaled_unit at ladder-bpe's LRs (ln_matched at ln's, "
                     "scaled_unit at none's) and budget, seeds 5-9.", LADDER_KIND,
          lambda: _ladder_cells(BPE_SCALE, [1], ["none", "ln", *SCALE_VS_NORM], range(5, 10),
                                tokenizers=("bpe-4096",)),
          note="Where ladder-bpe-rep found both norms lowering the loss, asks which part carries it: normalizing "
               "(ln_matched: LayerNorm whose gain starts so that block 1's input norm at init is none's) or "
               "rescaling (scaled_unit: the token embedding at unit RMS, no norm). Its none and ln runs are "
               "ladder-bpe-rep's seeds 5-9, copied bitwise.", waits_for=ladder_rung_waits,
          status="exploratory", amendment=10,
          question='On subwords, which half of LayerNorm carries its gain, normalizing or rescaling the embedding?'),
)
