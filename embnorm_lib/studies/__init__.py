"""The study registry's entries: every study is one declarative `Study` (its grid, what it asks, how it was
registered, which analysis kind reads it), in a module per family. Adding a study of an existing kind is one entry
in one of these files; the engine (runner/registry.py) reads this package the first time the registry is read.

The order here is the registry's order, which the README, FINDINGS.md and runs/README.md list studies in."""
from __future__ import annotations

from ..runner.registry import (  # noqa: F401 (the registry's names, importable from here as before)
    ABC,
    ABCD,
    INTERIM_EVAL,
    STATUSES,
    STUDIES,
    WITH_LM_EVAL,
    Cell,
    MissingRunsError,
    Study,
    check_registered_runs,
    grid,
    headline_studies,
    registered_seeds,
    seed_major,
    studies_of,
    study_cells,
    unfinished_runs,
    waits_for,
)
from . import ladder, ladder_data, paired, prose, stability
from .ladder import (  # noqa: F401 (the ladders' registered rules, importable from here as before)
    LADDER_LR_ARM,
    LADDER_LR_AT_128,
    LADDER_LR_CHECKED,
    LADDER_LR_EXTENDED,
    LADDER_LR_FACTORS,
    LADDER_LR_GRID,
    LADDER_LR_NARROW_FROM,
    LADDER_REP_SEEDS,
    LADDER_SEEDS,
    ladder_check_factors,
    ladder_factor,
    ladder_lr,
    ladder_rung_waits,
)
from .stability import H1B_BEST_LR, H1B_CLIPS, H1B_LRS, LR_GRID_V2, LR_V2_NOTE, SCALE_VS_NORM  # noqa: F401

STUDIES.register(*paired.ENTRIES, *stability.ENTRIES, *ladder.ENTRIES, *ladder_data.ENTRIES, *prose.ENTRIES,
                 *paired.SMOKE)
