"""The seed study's replication (its Table 1 beside our runs of its protocol): the table, the sentence that says
whether its claimed gain replicates, and the lines runs/README.md adds under the study (studies/paired.py names
`replication_lines` as the study's readme_extra)."""
from __future__ import annotations

import pandas as pd

from ..publishing.render import replication_markdown
from ..studies.paper_sources import PRELIM
from ..studies.seed_study import SEED_STUDY_TABLE1


def replication_table(prelim: pd.DataFrame) -> pd.DataFrame:
    """Seed study Table 1 beside our replication of its protocol (paper_sources.PRELIM; mean ± SD over our seeds)."""
    rows = []
    for variant, theirs in SEED_STUDY_TABLE1.items():
        ours = prelim[prelim["variant"] == variant]
        rows.append({
            "variant": variant, "seeds": len(ours),
            "seed_study_val_ppl": theirs["val_ppl"], "our_val_ppl": ours["val_ppl"].mean(),
            "our_val_ppl_sd": ours["val_ppl"].std(),
            "seed_study_final_grad_norm": theirs["final_grad_norm"], "our_final_grad_norm": ours["final_grad_norm"].mean(),
            "seed_study_embedding_norm": theirs["embedding_norm"],
            "our_block1_input_norm": ours["final_block1_input_norm"].mean(),
        })
    return pd.DataFrame(rows).set_index("variant")


def relative_change(table: pd.DataFrame, column: str, variant: str = "ln", baseline: str = "none") -> float:
    return table.loc[variant, column] / table.loc[baseline, column] - 1.0


def replication_lines(runs: pd.DataFrame) -> list[str]:
    """Under the seed study's replication in runs/README.md: Table 1 beside our runs, and what it says."""
    rep = replication_table(runs)
    return ["### Replication of the seed study's Table 1", "",
            "Seed-study figures are quoted from its Table 1; ours are means over our seeds "
            "(± SD). Our embedding-norm column is the mean L2 norm of the tensor entering block 1 "
            "at the last step.", "", replication_markdown(rep), "", replication_sentence(rep), ""]


def replication_sentence(rep: pd.DataFrame) -> str:
    theirs = relative_change(rep, "seed_study_val_ppl")
    ours = relative_change(rep, "our_val_ppl")
    verdict = ("replicates" if ours < 0 and abs(ours) >= 0.5 * abs(theirs)
               else "does not replicate")
    return (f"The seed study reports a {abs(theirs):.1%} lower validation perplexity with LayerNorm than without; "
            f"in our {PRELIM} runs LayerNorm changes it by {ours:+.1%}, so the claimed gain {verdict} "
            f"under our defaults (GPT-2 init, N(0, 0.02) embeddings).")
