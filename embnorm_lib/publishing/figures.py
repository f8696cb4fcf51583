"""The static figure set of a study: a registry of named figures, each built from the run files.

    render_study("<study>")  ->  figures/<study>/<name>.png and .pdf
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ..core.records.io import default_figures_dir, fingerprint
from ..core.records.rundir import study_dir_for
from ..runner.results import load_calibration, load_series
from . import plots


class StudyData:
    """Lazily loaded frames of one study (optionally only the arms matching a regex)."""

    def __init__(self, study: str, out_dir=None, arms: str = ""):
        self.study, self.out_dir = study, out_dir
        self.arm_filter = (lambda a: re.search(arms, a) is not None) if arms else None
        self._cache: dict[str, object] = {}

    def _get(self, key: str, load: Callable):
        if key not in self._cache:
            self._cache[key] = load()
        return self._cache[key]

    def series(self, log: str) -> pd.DataFrame:
        return self._get(log, lambda: load_series(self.study, log, self.out_dir, self.arm_filter))

    @property
    def calibration(self) -> pd.DataFrame:
        return self._get("calibration", lambda: load_calibration(self.study, self.out_dir, self.arm_filter))

    def final_diagnostics(self) -> pd.DataFrame:
        diag = self.series("diagnostics")
        return diag.loc[diag.groupby(["arm", "seed"])["step"].idxmax()]

    @property
    def n_layer(self) -> int:
        cols = [c for c in self.series("diagnostics").columns if c.startswith("attn_logit_max.block")]
        return max(int(c.rsplit("block", 1)[1]) for c in cols)


CLASSES = ["upper", "lower", "digit", "punct", "space", "newline"]


def _groups(d: StudyData) -> list[str]:
    L = d.n_layer
    return [f"grad_norm.{g}" for g in ("tok_emb", "pos_emb", "emb_norm", "block1.attn", "block1.mlp",
                                        f"block{L}.attn", f"block{L}.mlp", "final_norm")]


FIGURES: dict[str, Callable[[StudyData], plt.Figure]] = {
    "train_loss": lambda d: plots.plot_study_metric(d.series("metrics"), "train_loss",
                                                    "train loss per step (batch)"),
    "val_loss": lambda d: plots.plot_study_metric(d.series("evals"), "val_loss",
                                                  "validation loss (whole split, nats/char)"),
    "grad_norm_total": lambda d: plots.plot_study_metric(d.series("metrics"), "grad_norm_total",
                                                         "total gradient norm before clipping", log=True),
    "grad_norm_groups": lambda d: plots.plot_study_panels(d.series("diagnostics"), _groups(d),
                                                          "gradient norm per parameter group", log=True),
    "block1_input_norm": lambda d: plots.plot_study_metric(d.series("metrics"), "block1_input_norm",
                                                           "mean L2 norm of the block-1 input"),
    "embedding_norm_by_class": lambda d: plots.plot_profile(
        d.final_diagnostics(), [f"tok_emb_norm.{c}" for c in CLASSES if f"tok_emb_norm.{c}" in d.final_diagnostics()],
        [c for c in CLASSES if f"tok_emb_norm.{c}" in d.final_diagnostics()],
        "token-embedding norm by character class (final)", "mean L2 norm"),
    "block1_input_norm_by_class": lambda d: plots.plot_profile(
        d.final_diagnostics(),
        [f"block1_input_norm.{c}" for c in CLASSES if f"block1_input_norm.{c}" in d.final_diagnostics()],
        [c for c in CLASSES if f"block1_input_norm.{c}" in d.final_diagnostics()],
        "block-1 input norm by character class (final, probe batch)", "mean L2 norm"),
    "cosine_similarity": lambda d: plots.plot_study_panels(
        d.series("diagnostics"), ["cosine.token_embeddings", "cosine.block1_input_positions"],
        "mean pairwise cosine similarity (oversmoothing)", ncols=2),
    "residual_norm_by_depth": lambda d: plots.plot_profile(
        d.final_diagnostics(), ["resid.block1_input.mean"] + [f"resid.block{i}_output.mean" for i in
                                                               range(1, d.n_layer + 1)],
        ["input"] + [f"b{i}" for i in range(1, d.n_layer + 1)], "residual-stream norm by depth (final)",
        "mean L2 norm"),
    "attention_logit_max": lambda d: plots.plot_study_panels(
        d.series("diagnostics"), [f"attn_logit_max.block{i}" for i in range(1, d.n_layer + 1)],
        "max attention logit per layer", ncols=4),
    "output_logits": lambda d: plots.plot_study_panels(
        d.series("diagnostics"), ["out_logit.mean_abs", "out_logit.max", "out_logit.mean_logz"],
        "output logit growth"),
    "reliability_equal_width": lambda d: plots.plot_reliability(d.calibration, "equal_width"),
    "reliability_equal_mass": lambda d: plots.plot_reliability(d.calibration, "equal_mass"),
    "temperature_nll": lambda d: plots.plot_temperature(d.calibration),
}


def study_stamp(study: str, out_dir=None) -> str:
    """A figure's footer: the study and the fingerprint of the index it was drawn from."""
    index = study_dir_for(study, out_dir).index
    return f"embnorm · {study} · runs.csv {fingerprint(index)}" if index.is_file() else f"embnorm · {study}"


def render_study(study: str, out_dir=None, figures_dir=None, arms: str = "", names=None) -> dict[str, list[Path]]:
    data = StudyData(study, out_dir, arms)
    target = Path(figures_dir or default_figures_dir(out_dir, study))
    footer = study_stamp(study, out_dir)
    written = {}
    for name in names or FIGURES:
        fig = FIGURES[name](data)
        written[name] = plots.save(fig, target / name, footer)
        plt.close(fig)
    return written
