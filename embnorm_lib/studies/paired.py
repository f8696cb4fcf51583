"""The paired studies: the seed study's protocol replicated, the registered question on more seeds and a second
regime, and the pipeline's smoke test. Each is analysed by the registered paired statistics (analyses/paired.py)."""
from __future__ import annotations

from ..runner.registry import ABC, WITH_LM_EVAL, Study, grid
from .paper_sources import FINAL, MAIN, PRELIM
from .seed_study import TABLE1_PRESET


def replication_lines(runs) -> list[str]:
    """The seed study's perplexities beside ours under runs/README.md's table (analyses/replication.py)."""
    from ..analyses.replication import replication_lines

    return replication_lines(runs)


ZEROSHOT_V2_CONFIRMATORY = (PRELIM, FINAL, MAIN)  # amendment 1, item 6: zero-shot v2 is confirmatory in these studies

ENTRIES = (
    Study(PRELIM, "The seed study's Table 1 protocol: variants none/ln/rms x seeds 0-2 x 150 iterations "
                  "of the 8-layer x 128 model (batch 16, block 128, AdamW 3e-4, warmup + cosine).", "paired",
          lambda: grid(PRELIM, TABLE1_PRESET, ABC, range(3), fixed=WITH_LM_EVAL),
          status="confirmatory", amendment=0, readme_extra=replication_lines,
          question=("Does the seed study's reported gain from a LayerNorm after the embedding replicate under its own "
                    "short protocol, and does an embedding norm change the final validation loss there?")),
    Study(FINAL, "The seed study's final plan: none/ln/rms x seeds 0-4 x 300 iterations, same model.",
          "paired", lambda: grid(FINAL, "seeds-final", ABC, range(5), fixed=WITH_LM_EVAL),
          status="confirmatory", amendment=0, headline=True, default=True,
          question=("Does a LayerNorm or RMSNorm right after the token and position embedding help or hurt a small Pre-"
                    "LN character GPT, in validation loss, calibration, zero-shot accuracy and stability?")),
    Study(MAIN, "none/ln/rms x seeds 0-9 x 300 iterations (preset seeds-final), plus the nanoGPT CPU recipe "
                "(4 x 128, block 64, 2000 iterations) for none/ln/rms x seeds 0-4: a converged regime.", "paired",
          lambda: (grid(MAIN, "seeds-final", ABC, range(10), fixed=WITH_LM_EVAL, tag_preset=True)
                   + grid(MAIN, "nanogpt-cpu", ABC, range(5), fixed=WITH_LM_EVAL, tag_preset=True)),
          note="The `seeds-final` regime's seeds 0–4 are the `seeds-final` study's runs (bitwise the same): this "
               "regime extends that study to 10 seeds and is not an independent replication of it.",
          shared_seeds={"seeds-final": "seeds 0–4 are the `seeds-final` study's runs: not an independent replication"},
          status="confirmatory", amendment=0, headline=True,
          question=("The registered question on twice the seeds and in a second, longer-trained configuration: does an "
                    "embedding norm help or hurt validation loss, calibration, zero-shot accuracy and stability?")),
)
SMOKE = (
    Study("smoke", "Smoke test for the README and CI: a tiny model, 20 iterations, none/ln/rms x seeds 0-1.", "smoke",
          lambda: grid("smoke", "tiny", ABC, range(2), fixed={"max_iters": 20}),
          status="smoke", amendment=0,
          question='Does the pipeline run end to end?'),
)
