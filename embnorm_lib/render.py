"""Renderers: tables (data frames) in, markdown or LaTeX text out. Nothing rendered here is read back.

The study's numbers live in data files (runs.csv, family.csv, decision.json); reports are rendered from them."""
from __future__ import annotations

import numpy as np
import pandas as pd


def to_markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    sep = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def to_latex(frame: pd.DataFrame) -> str:
    return frame.to_latex(index=False, escape=True)


def compact_markdown(frame: pd.DataFrame) -> str:
    """A markdown table with floats at 4 decimals (3 significant digits below 0.01) and '–' for non-finite."""
    def fmt(v):
        if isinstance(v, float):
            return "–" if not np.isfinite(v) else (f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.4f}")
        return v
    return to_markdown(frame.map(fmt))


def fmt_mean_sd(mean: float, sd: float, digits: int = 4) -> str:
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if pd.notna(sd) else f"{mean:.{digits}f}"


def markdown_arm_table(table: pd.DataFrame, metrics=("val_loss", "val_ppl", "val_acc", "ece_equal_width")) -> str:
    """report.arm_table as markdown: mean ± SD per metric, with run and divergence counts."""
    head = "| arm | runs | diverged | " + " | ".join(metrics) + " |"
    sep = "|---" * (3 + len(metrics)) + "|"
    lines = [head, sep]
    for arm, row in table.iterrows():
        cells = [fmt_mean_sd(row[f"{m}_mean"], row[f"{m}_std"], 2 if m == "val_ppl" else 4) for m in metrics]
        lines.append(f"| {arm} | {int(row['runs'])} | {int(row['diverged'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def replication_markdown(rep: pd.DataFrame) -> str:
    lines = ["| variant | seed study PPL | our PPL (mean ± SD) | seed study final grad norm | our final grad norm "
             "| seed study embedding norm | our block-1 input norm |", "|---|---|---|---|---|---|---|"]
    for v, r in rep.iterrows():
        lines.append(f"| {v} | {r.seed_study_val_ppl:.2f} | {r.our_val_ppl:.2f} ± {r.our_val_ppl_sd:.2f} "
                     f"| {r.seed_study_final_grad_norm:.4f} | {r.our_final_grad_norm:.4f} "
                     f"| {r.seed_study_embedding_norm:.2f} | {r.our_block1_input_norm:.2f} |")
    return "\n".join(lines)
