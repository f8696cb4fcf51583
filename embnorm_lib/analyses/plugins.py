"""The study layer's plugins: one per kind of analysis. Each study's registry entry names its kind; the table
below says how a study of that kind is published (analyses/publishers.py), whether it may be published while it still
trains, and where runs/README.md lists it. The site (the pages that quote every study, and the paper) is registered
here too. Plugins are functions; the site's three import their modules (matplotlib, typst) only when called, so
reading the registry stays cheap."""
from __future__ import annotations

from pathlib import Path

from ..publishing.report import listed_entry, reused_entry
from ..runner.registry import ANALYSES, Analysis, Section, Site, register_site
from ..studies.ladder import LADDER_KIND
from ..studies.ladder_data import DATA_LADDER_KIND
from ..studies.prose import PROSE_KIND
from . import publishers


def update_readme(out_dir) -> list[Path]:
    """The README's first screen, FINDINGS.md and the figure index (analyses/site.py)."""
    from .site import update_readme

    return update_readme(out_dir)


def findings_text(out_dir, studies) -> str:
    """The findings of the given studies (analyses/findings.py)."""
    from .findings import findings_text

    return findings_text(out_dir, studies)


def build_paper(out_dir) -> Path:
    """paper/paper.pdf from its data (analyses/paper.py)."""
    from .paper import build

    return build(out_dir)


ANALYSES.register(
    Analysis("paired", publish=publishers.paired, section="paired", headline_only=True),
    Analysis("smoke", publish=publishers.paired, headline_only=True),
    # a v1 stability study alone is published as a paired one; all of them together into STABILITY.md
    Analysis("stability", publish=publishers.paired, section="stability", headline_only=True,
             group="stability", publish_group=publishers.stability_v1),
    Analysis("boundary", publish=publishers.boundary, partial=True, section="listed"),
    Analysis("scale", publish=publishers.scale, partial=True, section="listed"),
    Analysis("budget", publish=publishers.budget, partial=True, section="listed"),
    Analysis("h1b", publish=publishers.h1b, partial=True, section="listed"),
    Analysis(LADDER_KIND, publish=publishers.ladder, partial=True, section="listed"),
    Analysis(DATA_LADDER_KIND, publish=publishers.ladder_data, partial=True, section="listed"),
    Analysis(PROSE_KIND, publish=publishers.prose, partial=True, section="listed"),
)

register_site(Site(
    sections=(
        Section("paired", entry=publishers.paired_entry),
        Section("stability", entry=reused_entry, heading=(
            "## Stability studies", "",
            "Analysed together by `python -m embnorm_lib.analyses.stability` into [`STABILITY.md`](STABILITY.md) "
            "(figures in `figures/stability/`). A cell identical to a finished run of another study is copied "
            "from it (`reused_from.json`, column `reused_from` in runs.csv) instead of being trained twice.", "")),
        Section("listed", entry=listed_entry, heading=(
            "## Stability v2 studies (issue 16; exploratory searches, docs/PROTOCOL.md amendment 1; "
            "the confirmatory H1b study, amendment 2) and the size ladder (issue 18)", ""),
            links=("BOUNDARY.md", "SCALE.md", "BUDGET.md", "H1B.md", "LENGTH.md", "ZEROSHOT.md", "LADDER.md",
                   "LADDER-DATA.md")),
    ),
    readme=update_readme,
    findings=findings_text,
    paper=build_paper,
    default_kind="paired",
))
