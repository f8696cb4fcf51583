"""Stability v2, the budget trend (issue 16, item 5): does the cost of an embedding norm vanish with training?

    python -m embnorm_lib.analyses.budget      # the v2 budget study's BUDGET.md, figures/stability-v2/budget_trend.png

Exploratory (docs/PROTOCOL.md amendment 1). The nanoGPT CPU model at 150, 300, 2000 (the v1 budget study), 4000 and
8000 (its v2 extension) iterations: per budget, each arm's paired difference from `none` in final and in best
validation loss (95% t interval over seeds; one Holm family per loss over the whole table), with the epochs of
the training split seen (tiny Shakespeare repeats after about one epoch)."""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from .. import stats
from ..core.cli import report_main
from ..core.corpora.data import load_corpus
from ..core.errors import entry
from ..core.records.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
from ..core.records.rundir import study_dir_for
from ..publishing import plots
from ..publishing.render import PARTIAL, compact_markdown
from ..runner.results import has_index, load_runs
from ..stats import signed
from ..studies import STUDIES as REGISTRY
from ..studies.stability import BUDGET_SERIES, STABILITY_BUDGET_V2
from . import plots as analysis_plots
from .stability import VARIANT_ORDER

STUDIES = BUDGET_SERIES
REPORT_STUDY = STABILITY_BUDGET_V2


def budget_table(runs: pd.DataFrame, train_chars: int) -> pd.DataFrame:
    """Per budget (max_iters) and arm: epochs seen, mean final and best val loss, and the paired difference of
    each from none's; Holm across the table, separately for the final and the best loss."""
    rows = []
    for budget, sub in runs.groupby("cfg.max_iters"):
        for variant in [v for v in VARIANT_ORDER if v in set(sub["variant"]) and v != "none"]:
            row = {"max_iters": int(budget), "epochs": sub["tokens"].mean() / train_chars, "variant": variant,
                   "seeds": int((sub["variant"] == variant).sum())}
            for metric, label in (("val_loss", "final"), ("best_val_loss", "best")):
                c = stats.compare(sub, metric, variant)
                row.update({f"none_{label}": c.baseline_mean, f"delta_{label}": c.mean_diff,
                            f"ci_low_{label}": c.ci_low, f"ci_high_{label}": c.ci_high, f"p_t_{label}": c.p_t})
            rows.append(row)
    table = pd.DataFrame(rows)
    for label in ("final", "best"):
        if len(table):
            reject, adjusted = stats.holm(table[f"p_t_{label}"].to_numpy(float))
            table[f"p_holm_{label}"], table[f"significant_{label}"] = adjusted, reject
    return table


def _difference_words(r, label: str) -> str:
    """'+0.029 [+0.014, +0.044] (costs)' for the final or best loss of a budget_table row; a direction only where
    Holm resolves it."""
    verdict = ("costs" if r[f"delta_{label}"] > 0 else "gains") if r[f"significant_{label}"] else "not resolved"
    return (f"{signed(r[f'delta_{label}'])} [{signed(r[f'ci_low_{label}'])}, {signed(r[f'ci_high_{label}'])}] "
            f"({verdict})")


def trend_words(table: pd.DataFrame, variant: str = "ln") -> str:
    """The final-loss difference of `variant` at each budget."""
    return "; ".join(f"{r['max_iters']} iterations ({r['epochs']:.2f} epochs): {_difference_words(r, 'final')}"
                     for _, r in table[table["variant"] == variant].iterrows())


def largest_budget_words(table: pd.DataFrame) -> str:
    """Whether each arm's cost is still there at the largest budget, in final and in best validation loss."""
    if table.empty:
        return "no budget has a paired comparison yet"
    top = table[table["max_iters"] == table["max_iters"].max()]
    parts = [f"`{r['variant']}` {label} {_difference_words(r, label)}" for _, r in top.iterrows()
             for label in ("final", "best")]
    return f"{int(top['max_iters'].iloc[0])} iterations ({top['epochs'].iloc[0]:.2f} epochs): " + "; ".join(parts)


def finished(out: Path) -> tuple[int, int]:
    """(finished, registered) runs of the report's study."""
    done = len(load_runs(REPORT_STUDY, out)) if has_index(REPORT_STUDY, out) else 0
    return done, len(REGISTRY[REPORT_STUDY].cells())


def load_budget_runs(out: Path) -> pd.DataFrame:
    frames = [load_runs(s, out).assign(study=s) for s in STUDIES if has_index(s, out)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write_report(out_dir=None, data_path=None, figures_dir=None) -> Path:
    out = runs_root(out_dir)
    runs = load_budget_runs(out)
    table = budget_table(runs, len(load_corpus(data_path).train))
    present = [s for s in STUDIES if has_index(s, out)]
    done, registered = finished(out)
    fig = analysis_plots.plot_budget_trend(table)
    plots.save(fig, Path(figures_dir or default_figures_dir(out, "stability-v2")) / "budget_trend",
               "embnorm · budget trend · runs.csv " + " ".join(fingerprint(study_dir_for(s, out).index)
                                                              for s in present))
    plt.close(fig)
    from ..publishing.study_header import header_lines

    answer = [f"LayerNorm's final-loss difference by budget: {trend_words(table)}.",
              f"At the largest budget, {largest_budget_words(table)}."] if done >= registered else []
    lines = ["# Stability v2: the budget trend", "",
             *header_lines(present, answer, question=REGISTRY[REPORT_STUDY].question),
             f"Written by `python -m embnorm_lib.analyses.budget` at commit {git_commit()[:12]} from the `runs.csv` of "
             f"{', '.join(f'`{s}`' for s in present)} ({done} of {registered} registered runs of `{REPORT_STUDY}` "
             "finished" + ("" if done == registered else PARTIAL) + "). "
             "Figure: `figures/stability-v2/budget_trend.png`.", "",
             "**Exploratory** (docs/PROTOCOL.md amendment 1). Paired differences from none in nats/char (95% t "
             "interval over seeds); Holm across the table, separately for the final and the best validation loss; "
             "a direction is stated only where Holm resolves it. `epochs` is the training split seen (the windows "
             "are drawn at random, so an epoch is a count of characters, not a pass in order); past about one epoch "
             "the best validation loss can come before the last step, so the best loss is the fairer comparison "
             "of what each arm can reach.", "",
             compact_markdown(table), "",
             "LayerNorm's final-loss difference by budget: " + trend_words(table) + ".", "",
             "At the largest budget, " + largest_budget_words(table) + ".", ""]
    return write_text_stable(study_dir_for(REPORT_STUDY, out).root / "BUDGET.md", "\n".join(lines))


def main(argv=None) -> int:
    return report_main(argv, __doc__, [REPORT_STUDY], lambda study, a: write_report(a.out_dir, a.data_path, a.figures_dir),
                       options=("--data-path", "--figures-dir"))


if __name__ == "__main__":
    sys.exit(entry(main))
