"""The studies the README's first screen and FINDINGS.md's answer quote, by the role each plays (analyses/answer*.py
read them from here; the paper's roles are paper_sources.py's, reused where the role is the same)."""
from __future__ import annotations

from .paper_sources import BOUNDARY_KEYS, H1B, LADDER, LADDER_DATA, LADDER_DATA_LR, MAIN, REGIMES, SCALE
from .stability import BUDGET_SERIES

BUDGET = BUDGET_SERIES  # the budget series, v1 and its longer budgets
# the studies the answer quotes (the figure's footer names each one's runs.csv by sha256), in this order
STUDIES_QUOTED = (MAIN, *BUDGET, SCALE, BOUNDARY_KEYS["clip"], H1B, LADDER, LADDER_DATA)
DATA_LADDER = (LADDER_DATA_LR, LADDER_DATA)  # the adequate-data ladder (issue 76): tuning, then confirmatory
__all__ = ["BUDGET", "DATA_LADDER", "REGIMES", "STUDIES_QUOTED"]
