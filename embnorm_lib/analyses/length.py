"""Length brittleness (issue 17, item 4): validation loss by position in the window, per arm, and each arm's paired
difference from `none` at every position (exploratory, descriptive: one interval per position, no test).

Reads positions.json (the final pass's loss at each position 1..T; runs trained since it exists)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ..core.nets.variants import arm_variant
from ..studies.paper_sources import BOUNDARY_KEYS


def position_deltas(positions: pd.DataFrame, variant_of=arm_variant) -> pd.DataFrame:
    """Per arm and position: mean loss over seeds; for arms other than none, the mean paired difference from none
    (same seed, same position) with its 95% t interval. Positions of seeds without a none run are left out."""
    frame = positions.assign(variant=positions["arm"].map(variant_of))
    base = frame[frame["variant"] == "none"][["seed", "position", "val_loss"]].rename(columns={"val_loss": "none"})
    rows = []
    for variant, sub in frame.groupby("variant", sort=False):
        paired = sub.merge(base, on=["seed", "position"])
        for position, at in paired.groupby("position"):
            row = {"variant": variant, "position": int(position), "seeds": len(at), "val_loss": at["val_loss"].mean()}
            if variant != "none" and len(at) > 1:
                diff = (at["val_loss"] - at["none"]).to_numpy()
                half = scipy_stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
                row.update({"delta_vs_none": diff.mean(), "ci_low": diff.mean() - half, "ci_high": diff.mean() + half})
            rows.append(row)
    return pd.DataFrame(rows)


# -- the report: each arm at its own tuned LR (the H1b study's tuned runs, 5 fresh seeds) ---------------------------
SHOWN_POSITIONS = (1, 2, 4, 8, 16, 32, 64)
EARLY, LATE = (1, 8), (33, 64)  # the first characters of a window, and its second half (block 64)


def tuned_positions(out) -> pd.DataFrame:
    """positions.json of the H1b study's tuned runs (every arm at its own best LR, clipping on), seeds complete."""
    from ..runner.results import load_positions, load_runs
    from .h1b import STUDY, complete_seeds, tuned_runs

    runs = load_runs(STUDY, out)
    tuned = tuned_runs(runs[runs["seed"].isin(complete_seeds(runs))])
    keep = set(tuned["run_dir"].str.rsplit("/", n=1).str[0])
    positions = load_positions(STUDY, out)
    return positions[positions["arm"].isin(keep) & positions["seed"].isin(set(tuned["seed"]))]


def band_summary(deltas: pd.DataFrame, early=EARLY, late=LATE) -> pd.DataFrame:
    """Per variant: the mean paired difference over the early and the late positions of the window (a description:
    the positions of one window are not independent)."""
    rows = []
    for variant, sub in deltas.dropna(subset=["delta_vs_none"]).groupby("variant", sort=False):
        row = {"variant": variant}
        for lo, hi in (early, late):
            row[f"delta_positions_{lo}_{hi}"] = sub.loc[sub["position"].between(lo, hi), "delta_vs_none"].mean()
        rows.append(row)
    return pd.DataFrame(rows)


QUESTION = ("With each arm at its own best learning rate, does an embedding norm change the loss early in the window "
            "(little context) differently from late in it?")


def band_lines(bands: pd.DataFrame) -> list[str]:
    """`band_summary` as one sentence per variant (a description: no test)."""
    lo, hi = EARLY, LATE
    return [f"`{r['variant']}` vs `none`, mean paired difference in validation loss: {r[f'delta_positions_{lo[0]}_{lo[1]}']:+.4f} "
            f"nats/char at positions {lo[0]}–{lo[1]}, {r[f'delta_positions_{hi[0]}_{hi[1]}']:+.4f} at {hi[0]}–{hi[1]} "
            "(a description, no test)." for _, r in bands.iterrows()]


def write_report(out_dir=None, figures_dir=None) -> Path:
    """runs/stability-h1b-v2/LENGTH.md and figures/stability-v2/length_tuned.png (exploratory, descriptive)."""
    import matplotlib.pyplot as plt

    from ..core.records.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
    from ..core.records.rundir import study_dir_for
    from ..publishing import plots
    from ..publishing.render import compact_markdown
    from . import plots as analysis_plots
    from .h1b import STUDY

    out = runs_root(out_dir)
    positions = tuned_positions(out)
    from ..core.nets.variants import variant_rank

    deltas = position_deltas(positions)
    deltas = deltas.sort_values(["variant", "position"], key=lambda c: c.map(variant_rank) if c.name == "variant"
                                else c, kind="stable").reset_index(drop=True)
    fig = analysis_plots.plot_position_deltas(deltas)
    plots.save(fig, Path(figures_dir or default_figures_dir(out, "stability-v2")) / "length_tuned",
               f"embnorm · {STUDY} · runs.csv {fingerprint(study_dir_for(STUDY, out).index)}")
    plt.close(fig)
    shown = deltas[deltas["position"].isin(SHOWN_POSITIONS)]
    from ..publishing.study_header import header_lines

    lines = ["# Length brittleness: loss by position in the window (exploratory)", "",
             *header_lines(STUDY, band_lines(band_summary(deltas)), question=QUESTION,
                           status="**Exploratory** (a description of the confirmatory study's tuned runs; no test)"),
             f"Written by `python -m embnorm_lib.analyses.length` at commit {git_commit()[:12]} from the positions.json of "
             f"`{STUDY}`'s tuned runs (every arm at its own best LR of `{BOUNDARY_KEYS['clip']}`, clipping on; seeds "
             f"{', '.join(map(str, sorted(positions['seed'].unique())))}). Figure: "
             "`figures/stability-v2/length_tuned.png`.", "",
             "Each position p is the final validation pass's loss of predicting the p-th character of a window from "
             "the p − 1 before it, so position p is the loss at context length p − 1 up to the block size. Per "
             "variant, the mean paired difference from `none` (same seed, same position) with a 95% t interval at "
             "each position: a description, no test (the positions of one window are not independent).", "",
             compact_markdown(shown), "",
             "Mean difference over the early and the late positions of the window:", "",
             compact_markdown(band_summary(deltas)), ""]
    return write_text_stable(study_dir_for(STUDY, out).root / "LENGTH.md", "\n".join(lines))


def main(argv=None) -> int:
    from ..core.cli import report_main
    from .h1b import STUDY

    return report_main(argv, __doc__, [STUDY], lambda study, a: write_report(a.out_dir, a.figures_dir))


if __name__ == "__main__":
    import sys

    from ..core.errors import entry

    sys.exit(entry(main))
