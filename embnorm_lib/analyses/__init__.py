"""The study layer's analyses: one plugin per kind of analysis. Each study's registry entry names its kind; the table
below says how a study of that kind is published (analyses/publishers.py), whether it may be published while it still
trains, and where runs/README.md lists it. The site (the pages that quote every study, and the paper) is registered
here too. Functions are named "module:function" and imported only when the engine calls them."""
from __future__ import annotations

from ..runner.registry import ANALYSES, Analysis, Section, Site, register_site
from ..studies.ladder import LADDER_KIND
from ..studies.ladder_data import DATA_LADDER_KIND
from ..studies.prose import PROSE_KIND

ANALYSES.register(
    Analysis("paired", publish="analyses.publishers:paired", section="paired", headline_only=True),
    Analysis("smoke", publish="analyses.publishers:paired", headline_only=True),
    # a v1 stability study alone is published as a paired one; all of them together into STABILITY.md
    Analysis("stability", publish="analyses.publishers:paired", section="stability", headline_only=True,
             group="stability", publish_group="analyses.publishers:stability_v1"),
    Analysis("boundary", publish="analyses.publishers:boundary", partial=True, section="listed"),
    Analysis("scale", publish="analyses.publishers:scale", partial=True, section="listed"),
    Analysis("budget", publish="analyses.publishers:budget", partial=True, section="listed"),
    Analysis("h1b", publish="analyses.publishers:h1b", partial=True, section="listed"),
    Analysis(LADDER_KIND, publish="analyses.publishers:ladder", partial=True, section="listed"),
    Analysis(DATA_LADDER_KIND, publish="analyses.publishers:ladder_data", partial=True, section="listed"),
    Analysis(PROSE_KIND, publish="analyses.publishers:prose", partial=True, section="listed"),
)

register_site(Site(
    sections=(
        Section("paired", entry="analyses.publishers:paired_entry"),
        Section("stability", entry="publishing.report:reused_entry", heading=(
            "## Stability studies", "",
            "Analysed together by `python -m embnorm_lib.analyses.stability` into [`STABILITY.md`](STABILITY.md) "
            "(figures in `figures/stability/`). A cell identical to a finished run of another study is copied "
            "from it (`reused_from.json`, column `reused_from` in runs.csv) instead of being trained twice.", "")),
        Section("listed", entry="publishing.report:listed_entry", heading=(
            "## Stability v2 studies (issue 16; exploratory searches, docs/PROTOCOL.md amendment 1; "
            "the confirmatory H1b study, amendment 2) and the size ladder (issue 18)", ""),
            links=("BOUNDARY.md", "SCALE.md", "BUDGET.md", "H1B.md", "LENGTH.md", "ZEROSHOT.md", "LADDER.md",
                   "LADDER-DATA.md")),
    ),
    readme="analyses.site:update_readme",
    findings="analyses.findings:findings_text",
    paper="analyses.paper:build",
    default_kind="paired",
))
