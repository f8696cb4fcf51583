"""Renderers: tables (data frames) in, markdown or LaTeX text out. Nothing rendered here is read back.

The study's numbers live in data files (runs.csv, family.csv, decision.json); reports are rendered from them."""
from __future__ import annotations

import numpy as np
import pandas as pd

# what a report of a study with registered runs still missing says beside its run count
PARTIAL = "; **partial**: registered runs are still missing (resume with the sweep), numbers will change"


def to_markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    sep = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, sep, *body])


class WideTable:
    """A table for a notebook that scrolls sideways instead of wrapping its cells: a 14-column results table in
    JupyterLab wrapped "2.4843 ± 0.0045" over three lines and ran off the output's edge. HTML where a front end shows
    it (the style is inline: an untrusted notebook keeps it); its repr, where no front end does, is Markdown."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame

    def _repr_html_(self) -> str:
        table = self.frame.to_html(index=False, border=0, escape=True)
        cells = table.replace("<th>", '<th style="white-space: nowrap">').replace("<td>", '<td style="white-space: '
                                                                                   'nowrap">')
        return f'<div style="overflow-x: auto; max-width: 100%">{cells}</div>'

    def __repr__(self) -> str:
        return to_markdown(self.frame)


def to_latex(frame: pd.DataFrame) -> str:
    return frame.to_latex(index=False, escape=True)


def compact_markdown(frame: pd.DataFrame, places: dict[str, int] | None = None) -> str:
    """A markdown table with '–' for non-finite floats and the others at 4 decimals (3 significant digits below
    0.01), or at `places[column]` decimals for the columns `places` names."""
    places = places or {}

    def fmt(v, digits):
        if not isinstance(v, float):
            return v
        if not np.isfinite(v):
            return "–"
        if digits is not None:
            return f"{v:.{digits}f}"
        return f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.4f}"
    return to_markdown(frame.apply(lambda column: column.map(lambda v: fmt(v, places.get(column.name)))))


def layouts_text(layouts) -> str:
    """'2 worker(s) x 1 thread(s)' for each (workers, threads) a sweep log recorded, '' for none."""
    return " or ".join(f"{w} worker(s) x {t} thread(s)" for w, t in sorted({tuple(x) for x in layouts}))


def percent(share: float) -> str:
    """A share as a whole percent; one that rounds to 0 is "0%", never "-0%" (a direction the number does not have)."""
    return f"{round(share, 2) + 0.0:.0%}"


def fmt_mean_sd(mean: float, sd: float, digits: int = 4) -> str:
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if pd.notna(sd) else f"{mean:.{digits}f}"


def markdown_arm_table(table: pd.DataFrame, metrics=("val_loss", "val_ppl", "val_acc", "ece_equal_width")) -> str:
    """report.arm_table as markdown: mean ± SD per metric (PPL at 2 decimals), with run and divergence counts."""
    frame = pd.DataFrame({"arm": table.index, "runs": table["runs"].astype(int).values,
                          "diverged": table["diverged"].astype(int).values})
    for m in metrics:
        frame[m] = [fmt_mean_sd(mean, sd, 2 if m == "val_ppl" else 4)
                    for mean, sd in zip(table[f"{m}_mean"], table[f"{m}_std"])]
    return to_markdown(frame)


def replication_markdown(rep: pd.DataFrame) -> str:
    """analyses.replication.replication_table as markdown: the seed study's Table 1 beside our runs."""
    return to_markdown(pd.DataFrame({
        "variant": rep.index,
        "seed study PPL": [f"{v:.2f}" for v in rep["seed_study_val_ppl"]],
        "our PPL (mean ± SD)": [f"{m:.2f} ± {sd:.2f}" for m, sd in zip(rep["our_val_ppl"], rep["our_val_ppl_sd"])],
        "seed study final grad norm": [f"{v:.4f}" for v in rep["seed_study_final_grad_norm"]],
        "our final grad norm": [f"{v:.4f}" for v in rep["our_final_grad_norm"]],
        "seed study embedding norm": [f"{v:.2f}" for v in rep["seed_study_embedding_norm"]],
        "our block-1 input norm": [f"{v:.2f}" for v in rep["our_block1_input_norm"]],
    }))
