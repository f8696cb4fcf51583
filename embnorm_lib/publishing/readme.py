"""The frames of the pages that quote every study (issue 71): the README's marked blocks, FINDINGS.md's page and the
figure index. What they say is the study layer's (runner.registry.Site.readme writes them through these)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

ANSWER_START, ANSWER_END = "<!-- answer:start -->", "<!-- answer:end -->"
FINDINGS_PAGE = "FINDINGS.md"


def findings_page(findings: str, detail: list[str] = ()) -> str:
    """FINDINGS.md: the answer in detail (the README TL;DR's lines with their designs and intervals), then every
    generated finding (`findings`), grouped by the question it answers."""
    return ("# Findings\n\nWritten by `python -m embnorm_lib publish` from the committed runs; every number comes from "
            "`runs/`. The answer on one screen: [README.md](README.md). Each group opens with what it measures and, "
            "where its registered results decide it, what they say. Registered (confirmatory) results follow "
            "[`docs/PROTOCOL.md`](docs/PROTOCOL.md); everything labelled exploratory is a description.\n\n"
            + ("## The answer in detail\n\n" + "\n".join(detail) + "\n\n## Every finding\n\n" if detail else "")
            + findings + "\n")


def replace_block(content: str, start: str, end: str, text: str, where: str) -> str:
    if start not in content or end not in content:
        raise ValueError(f"{where} has no {start} ... {end} block; allowed: a file holding both markers")
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{text}\n{end}{tail}"


def figure_index(figures_dir: Path, describe: Callable[[str], tuple[str, str, str]]) -> str:
    """figures/README.md: one line per figure (PNG; each has a PDF beside it): what it shows, its study, its finding."""
    rows = [(p.relative_to(figures_dir).as_posix(), *describe(p.relative_to(figures_dir).as_posix()))
            for p in sorted(figures_dir.rglob("*.png"))]
    lines = ["# Figures", "", "Written by `python -m embnorm_lib publish` (one line per figure; a vector PDF of the "
             "same name lies beside each PNG). Findings groups: [FINDINGS.md](../FINDINGS.md).", "",
             "| figure | what it shows | study | finding |", "|---|---|---|---|"]
    lines += [f"| [{rel}]({rel}) | {what} | {study} | {group} |" for rel, what, study, group in rows]
    return "\n".join(lines) + "\n"
