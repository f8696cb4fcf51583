"""Holm's step-down correction, the one every registered family uses (each study's Holm family, each family's TOSTs)."""
from __future__ import annotations

import gc

import numpy as np

ALPHA = 0.05


def holm(p_values, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """(reject, adjusted p) by Holm–Bonferroni; NaN p-values are left out of the family."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p_values, dtype=float)
    adjusted = np.full_like(p, np.nan)
    reject = np.zeros(len(p), dtype=bool)
    ok = ~np.isnan(p)
    if ok.any():
        # statsmodels' Holm branch ends with a full gc.collect(), 0.15 s per family once a study's frames are
        # in memory (2.7 s of the paper's data); objects frozen before the call are not scanned by it. A caller's
        # own frozen objects stay frozen: unfreeze() thaws everything, so it runs only if we did the freezing.
        ours = gc.get_freeze_count() == 0
        if ours:
            gc.freeze()
        try:
            r, adj, _, _ = multipletests(p[ok], alpha=alpha, method="holm")
        finally:
            if ours:
                gc.unfreeze()
        adjusted[ok], reject[ok] = adj, r
    return reject, adjusted


def holm_alphas(p_values, alpha: float = ALPHA) -> np.ndarray:
    """The level of each p's rank in Holm's step-down procedure: α / (m − rank + 1), rank 1 the smallest p (NaN
    p-values are left out of the family, as in `holm`). The procedure stops at the first p above its level, so a
    later p is not significant even where it is below its own level (`holm_miss_reason`)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")], start=1):
        out[i] = alpha / (m - rank + 1)
    return out
