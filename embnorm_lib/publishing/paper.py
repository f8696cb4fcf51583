"""The paper's build (issue 19): paper/data.json and its figures from the data the study layer gathers, then
paper/paper.pdf through typst (the `typst` package bundles its compiler: no system TeX) and a LaTeX export through
pandoc. The paper's prose (paper/paper.typ) types no number: every number comes through data.json. What the data
and figures are is the study layer's (analyses/paper.py, runner.registry.Site.paper)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ..core.records.io import published, stable_svg, write_bytes_if_changed, write_figure_if_changed

PAPER_DIR = "paper"


def json_safe(value: object) -> object:
    """JSON-safe: numpy scalars to Python, NaN to None."""
    if isinstance(value, (np.floating, float)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value


def json_records(frame, columns: list[str]) -> list[dict]:
    """Rows of a table's `columns` as JSON-safe records (json_safe on every value)."""
    return [{k: json_safe(v) for k, v in r.items()} for r in frame[columns].to_dict("records")]


def data_json(data: dict) -> bytes:
    """paper/data.json's bytes: every float rounded to io.PUBLISHED_DIGITS significant digits, so the file is the
    same whichever CPU's vector kernels computed it."""
    return (json.dumps(published(data), indent=1, sort_keys=True) + "\n").encode()


def write_paper_inputs(paper_dir: Path, data: dict, figures: dict[str, Callable[[dict], plt.Figure]]) -> dict:
    """paper/data.json and the paper's figures (SVG for typst, PDF for the LaTeX export), each drawn from `data`."""
    import io

    write_bytes_if_changed(paper_dir / "data.json", data_json(data))
    for name, draw in figures.items():
        fig = draw(data)
        buffer = io.BytesIO()
        with plt.rc_context({"svg.hashsalt": "embnorm"}):  # fixed element ids: rebuilds are byte-identical
            fig.savefig(buffer, format="svg", metadata={"Date": None})
        write_bytes_if_changed(paper_dir / "figures" / f"{name}.svg", stable_svg(buffer.getvalue()))
        buffer = io.BytesIO()  # the same figure as vector PDF, for the LaTeX export
        fig.savefig(buffer, format="pdf", metadata={"CreationDate": None, "Producer": None, "Creator": None})
        write_figure_if_changed(paper_dir / "latex" / "figures" / f"{name}.pdf", buffer.getvalue())
        plt.close(fig)
    return data


def latex_export(paper_dir: Path) -> Path:
    """paper/latex/paper.tex (+ its figures as PDF) for a venue that wants LaTeX: typst renders the paper to HTML,
    every number already in place, and pandoc (pypandoc_binary bundles it) converts that to LaTeX; each embedded
    figure becomes \\includegraphics of the same figure saved as PDF. The typst PDF stays the reference layout."""
    import base64
    import re

    import pypandoc
    import typst

    html = typst.compile(str(paper_dir / "paper.typ"), root=str(paper_dir), format="html").decode()
    svgs = {path.read_bytes(): path.stem for path in sorted((paper_dir / "figures").glob("*.svg"))}
    latex_dir = paper_dir / "latex"

    def to_pdf_figure(match: re.Match) -> str:
        name = svgs[base64.b64decode(match.group(1))]
        width = re.search(r"width: (\d+)%", match.group(0))  # the width the typst source gives, as a share
        return f'<img src="figures/{name}.pdf" style="width: {width.group(1) if width else 100}%">'

    html = re.sub(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"[^>]*>', to_pdf_figure, html)
    tex = pypandoc.convert_text(html, "latex", format="html", extra_args=["--standalone"])
    return write_bytes_if_changed(latex_dir / "paper.tex", tex.encode())


def compile_paper(paper_dir: Path, data: dict, figures: dict[str, Callable[[dict], plt.Figure]],
                  pages_png: str | None = None) -> Path:
    """data.json and figures, then paper.pdf (and, for looking at, one PNG per page) and the LaTeX export."""
    import typst

    write_paper_inputs(paper_dir, data, figures)
    pdf = typst.compile(str(paper_dir / "paper.typ"), root=str(paper_dir))
    write_bytes_if_changed(paper_dir / "paper.pdf", pdf)
    latex_export(paper_dir)
    if pages_png:
        typst.compile(str(paper_dir / "paper.typ"), output=pages_png, format="png", ppi=80, root=str(paper_dir))
    return paper_dir / "paper.pdf"
