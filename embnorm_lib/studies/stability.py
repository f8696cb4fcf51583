"""The stability studies: v1 (LR sensitivity, init scale, stress, budgets; analysed together into STABILITY.md), the
v2 search for an unstable baseline (docs/PROTOCOL.md amendment 1), its confirmatory test H1b (amendment 2), and the
scale-vs-normalization and budget-trend studies."""
from __future__ import annotations

from ..runner.registry import ABC, ABCD, INTERIM_EVAL, Cell, Study, grid, seed_major
from .paper_sources import BOUNDARY_KEYS, H1B, SCALE

# The v1 stability studies, analysed together (analyses/stability.py reads each by its role)
STABILITY_LR, STABILITY_INIT = "stability-lr", "stability-init"
STABILITY_STRESS, STABILITY_BUDGET = "stability-stress", "stability-budget"
STABILITY_BUDGET_V2 = "stability-budget-v2"  # the budget trend: STABILITY_BUDGET's series at longer budgets
BUDGET_SERIES = (STABILITY_BUDGET, STABILITY_BUDGET_V2)  # analysed together into the latter's BUDGET.md
SCALE_VS_NORM = ("ln_matched", "scaled_unit")  # normalize without rescaling, rescale without normalizing
# Stability v2's learning-rate grid: half-decade steps over [1e-4, 1], covering Wortsman et al.'s [3e-4, 3e-1]
LR_GRID_V2 = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]
LR_V2_NOTE = ("Failure (amendment 1): non-finite loss, or final validation loss above the loss at initialisation "
              "(the latter scored on the 64-window subset of the learning curve).")

# H1b's confirmatory regimes and each arm's best LR, both from the exploratory search (stability-lr-v2 and
# -noclip-v2, seeds 0-2; docs/PROTOCOL.md amendment 2)
H1B_LRS = [1.0, 0.3]  # where none failed, and the grid point below it
H1B_CLIPS = [1.0, 0.0]  # the recipe's clipping, and none
H1B_BEST_LR = {"none": 1e-2, "ln": 3e-3, "rms": 3e-3, "scaled": 3e-3}
H1B_SEARCH = {1.0: BOUNDARY_KEYS["clip"], 0.0: BOUNDARY_KEYS["noclip"]}  # by grad_clip: the search that found it


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


ENTRIES = (
    # -- stability (docs/PROTOCOL.md "Stability"; budgets chosen to fit about an hour here) ------------------
    # LR sensitivity (Wortsman et al. 2023)
    Study(STABILITY_LR, "LR sensitivity: nanoGPT CPU model (4 x 128), 300 iterations, none/ln/rms x seeds 0-2 x "
                          "peak LR in {1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2}.", "stability",
          lambda: grid("stability-lr", "nanogpt-cpu", ABC, range(3), fixed={"max_iters": 300},
                       axes={"lr": [1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2]}),
          status="exploratory", amendment=1,
          question='Does an embedding norm make the final loss less sensitive to the peak learning rate?'),
    # GPT-2's N(0, 0.02) vs PyTorch's N(0, 1)
    Study(STABILITY_INIT, "Embedding-init scale: the 8 x 128 model at 150 iterations, none/ln/rms/scaled x seeds "
                            "0-2 x emb_init_std in {0.02, 1.0}.", "stability",
          lambda: grid("stability-init", "seeds-prelim", ABCD, range(3), axes={"emb_init_std": [0.02, 1.0]}),
          status="exploratory", amendment=1,
          question=("Does the embedding's init scale (GPT-2's small one against PyTorch's unit one) decide whether an "
                    "embedding norm helps or hurts?")),
    Study(STABILITY_STRESS, "Stress: 16 layers x 128, lr 1e-2, no warmup, 150 iterations, none/ln/rms/scaled x "
                              "seeds 0-2.", "stability",
          lambda: grid("stability-stress", "stress-deep", ABCD, range(3)),
          status="exploratory", amendment=1,
          question=("In a deep model trained hard without warm-up, is the baseline unstable, and does an embedding norm"
                    " steady it?")),
    Study(STABILITY_BUDGET, "Budgets: nanoGPT CPU model at 150, 300 and 2000 iterations, none/ln/rms x seeds 0-2.",
          "stability", lambda: grid("stability-budget", "nanogpt-cpu", ABC, range(3),
                                    axes={"max_iters": [150, 300, 2000]}),
          status="exploratory", amendment=1,
          question="Does an embedding norm's cost in validation loss change with the training budget?"),
    # -- stability v2 (docs/PROTOCOL.md amendment 1: the search for an unstable baseline is exploratory) ------
    Study("stability-lr-v2", "LR boundary: nanoGPT CPU model (4 x 128, block 64, batch 12), 1000 iterations "
                             "(50 of warm-up, then cosine), none/ln/rms/scaled x seeds 0-2 x peak LR in half-decade "
                             "steps {1e-4, 3e-4, ..., 3e-1, 1} (9 points); learning curve on 64 validation windows, "
                             "final metrics on the whole split.", "boundary",
          lambda: seed_major("stability-lr-v2", "nanogpt-cpu", ABCD, range(3), {"max_iters": 1000, **INTERIM_EVAL},
                              {"lr": LR_GRID_V2}),
          note=LR_V2_NOTE,
          status="exploratory", amendment=1,
          question=("At which peak learning rate does each arm start to fail, and does an embedding norm move that "
                    "boundary?")),
    # what moves the boundary (issue 16, item 2): the upper half of the LR grid, one change at a time
    Study("stability-noclip-v2", "LR boundary without gradient clipping: stability-lr-v2's model and budget, "
                                 "grad_clip 0, none/ln/rms/scaled x seeds 0-2 x peak LR {3e-2, 1e-1, 3e-1, 1}.",
          "boundary", lambda: seed_major("stability-noclip-v2", "nanogpt-cpu", ABCD, range(3),
                                              {"max_iters": 1000, "grad_clip": 0.0, **INTERIM_EVAL},
                                              {"lr": LR_GRID_V2[5:]}),
          note=LR_V2_NOTE,
          status="exploratory", amendment=1,
          question='Without gradient clipping, does the failure boundary move, and does an embedding norm move it?'),
    Study("stability-bf16-v2", "LR boundary in bf16 autocast (BLOOM's authors suspected bf16 removes the need for "
                               "the embedding norm they needed in fp16): stability-lr-v2's model and budget, "
                               "precision bf16, none/ln/rms/scaled x seeds 0-2 x peak LR {3e-2, 1e-1, 3e-1, 1}.",
          "boundary", lambda: seed_major("stability-bf16-v2", "nanogpt-cpu", ABCD, range(3),
                                              {"max_iters": 1000, "precision": "bf16", **INTERIM_EVAL},
                                              {"lr": LR_GRID_V2[5:]}),
          note=LR_V2_NOTE + " Affordable on a CPU with AVX-512 BF16 instructions, where bf16 autocast costs about "
                            "what fp32 does; on a CPU without them it is an order of magnitude slower, GPU work "
                            "(`python -m embnorm_lib bench --precision --preset nanogpt-cpu` prints the ratio on "
                            "this machine). These runs are CPU autocast: matmuls in bf16, parameters and optimizer "
                            "in fp32. fp16 with loss scaling is CUDA-only here.",
          status="exploratory", amendment=1,
          question='In bf16 autocast, does the failure boundary move, and does an embedding norm move it?'),
    Study("stability-deep-v2", "LR boundary of a deeper model: stability-lr-v2's setup with 16 layers, "
                               "none/ln/rms/scaled x seeds 0-2 x peak LR {1e-3, 3e-3, ..., 3e-1, 1} (7 points).",
          "boundary", lambda: seed_major("stability-deep-v2", "nanogpt-cpu", ABCD, range(3),
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
                                 "boundary.", "boundary",
          lambda: seed_major("stability-deep32-v2", "nanogpt-cpu", ABCD, range(3),
                              {"max_iters": 1000, "n_layer": 32, **INTERIM_EVAL}, {"lr": LR_GRID_V2[-2:]}),
          note=LR_V2_NOTE + " Registered after stability-deep-v2 (exploratory, amendment 1): at 16 layers every arm "
                            "failed at LR 1 and none below, so the question at 32 layers is whether depth moves "
                            "any arm's failures down to 0.3; a 32-layer run costs about twice a 16-layer one, so "
                            "only the two LRs around the 16-layer boundary are run.",
          status="exploratory", amendment=1,
          question="Does doubling the depth again move any arm's failures down to a lower learning rate?"),
    # H1b, confirmatory (docs/PROTOCOL.md amendment 2): fresh seeds in the regime the search found
    Study(H1B, "H1b, confirmatory: stability-lr-v2's model and budget, fresh seeds 3-7, "
               "none/ln/rms/scaled x gradient clipping {1.0, off} x peak LR {1, 0.3}, plus every arm "
               "at its own best LR of stability-lr-v2 (none 1e-2; ln, rms, scaled 3e-3; clipping on).",
          "h1b", lambda: _h1b_cells(H1B, range(3, 8)),
          note=LR_V2_NOTE + " Confirmatory endpoints, family and decision rule: docs/PROTOCOL.md amendment 2.",
          status="confirmatory", amendment=2,
          question=("H1b: where the baseline fails, does an embedding norm remove the failures, and what does it cost "
                    "at each arm's own best learning rate?")),
    Study(SCALE, "Scale vs normalization: the 8 x 128 model at 150 iterations, none/ln/rms/scaled "
                 "plus ln_matched (LayerNorm whose gain starts at block 1's input norm of none) and "
                 "scaled_unit (token embedding at unit RMS) x seeds 0-2 x emb_init_std in {0.02, 1.0} x "
                 "output head tied / untied.", "scale",
          lambda: grid(SCALE, "seeds-prelim", ABCD + SCALE_VS_NORM, range(3),
                       axes={"emb_init_std": [1.0, 0.02], "tie_embeddings": [False, True]}),
          note="stability-init's evaluation plan (every window at every evaluation), so its tied none/ln/rms/scaled "
               "runs are copied, not retrained. Cells run std 1.0 before 0.02 and untied before tied (the "
               "question's deciding cells first, so a sweep stopped part-way has them).",
          status="exploratory", amendment=1,
          question=("Which half of LayerNorm carries its effect, normalizing or rescaling what enters block 1, and does"
                    " that depend on the embedding's init scale and a tied output head?")),
    Study(STABILITY_BUDGET_V2, "Budget trend: the nanoGPT CPU model at 4000 and 8000 iterations (stability-budget "
                               "has 150, 300 and 2000), none/ln/rms x seeds 0-2.", "budget",
          lambda: grid(STABILITY_BUDGET_V2, "nanogpt-cpu", ABC, range(3), axes={"max_iters": [4000, 8000]}),
          note="Every evaluation scores the whole validation split (not studies.INTERIM_EVAL): the trend reports the "
               "best validation loss as well as the final one, on the same windows as stability-budget.",
          status="exploratory", amendment=1,
          question="Does an embedding norm's cost shrink, vanish or flip when the model trains much longer?"),
)
