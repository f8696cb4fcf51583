"""Stability v2, H1b confirmatory (issue 16, docs/PROTOCOL.md amendment 2): where the baseline fails, does an
embedding norm buy stability, and at what accuracy cost?

    python -m embnorm_lib.analyses.h1b     # the H1b study's H1B.md (runs/<study>/), figures/stability-v2/h1b_*.png

The exploratory LR search (with and without gradient clipping, seeds 0-2) found `none` failing at peak LR 1 in
both. The H1b study repeats that regime on fresh seeds 3-7, and trains every arm at its own best LR of the search for
the **tuned cost**. Per regime (clipping on / off) at LR 1 the registered family is variant x {failures (Fisher),
spikes after the warm-up, loss of non-failed pairs, tuned cost (paired t)}, Holm within the regime; decision rule 3
judges the cost by the tuned cost. LR 0.3 and the tables pooling the search's seeds are exploratory. The analysis
returns data; `write_report` renders it."""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import stats
from ..core.cli import report_main
from ..core.errors import entry
from ..core.records.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
from ..core.records.rundir import study_dir_for
from ..publishing import plots
from ..publishing.render import PARTIAL, compact_markdown
from ..runner.results import has_index, load_runs
from ..stats import signed
from ..studies import H1B_BEST_LR, H1B_CLIPS, H1B_LRS, STUDIES
from ..studies.paper_sources import H1B
from ..studies.stability import H1B_SEARCH
from . import plots as analysis_plots
from .boundary import final_out_logits, fisher_vs_none, h1b_family, phase_table
from .stability import VARIANT_ORDER, _order

STUDY = H1B
CONFIRMATORY_LR = H1B_LRS[0]  # where none failed in the search
SEARCH = H1B_SEARCH  # the search that found each regime
REGIME_NAMES = {1.0: "clipping at 1.0", 0.0: "no clipping"}


def _is(series: pd.Series, value: float) -> pd.Series:
    return pd.Series(np.isclose(series.astype(float), value), index=series.index)


def tuned_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Every arm's runs at its own best LR of the search (clipping on): the tuned-cost cells."""
    best = runs["variant"].map(H1B_BEST_LR).astype(float)
    return runs[np.isclose(runs["cfg.lr"], best) & _is(runs["cfg.grad_clip"], 1.0)
                & ~runs["cfg.lr"].apply(lambda lr: any(np.isclose(lr, v) for v in H1B_LRS))]


def regime_runs(runs: pd.DataFrame, clip: float, lr: float) -> pd.DataFrame:
    return runs[_is(runs["cfg.grad_clip"], clip) & _is(runs["cfg.lr"], lr)]


def complete_seeds(runs: pd.DataFrame, study: str = STUDY) -> list[int]:
    """Seeds whose every registered cell has finished: the family is computed on these only, so that every
    comparison is paired over the same seeds while the sweep runs."""
    per_seed = pd.Series([c.seed for c in STUDIES[study].cells()]).value_counts()
    done = runs.groupby("seed").size()
    return sorted(int(s) for s in done.index if done[s] == per_seed.get(s, -1))


def confirmatory(runs: pd.DataFrame) -> dict[float, tuple[pd.DataFrame, dict]]:
    """Per regime (gradient clipping value): the registered family at LR 1 and decision rule 3 (amendment 2)."""
    tuned = tuned_runs(runs)
    return {clip: h1b_family(regime_runs(runs, clip, CONFIRMATORY_LR), tuned=tuned) for clip in H1B_CLIPS}


def bracket_table(fresh: pd.DataFrame, search: dict[float, pd.DataFrame]) -> pd.DataFrame:
    """Exploratory: per regime, LR (1 and 0.3) and arm, failures among the search's seeds, the fresh seeds and
    both, with Fisher's exact test of the pooled count against none's (one Holm family per regime)."""
    rows = []
    for clip in H1B_CLIPS:
        for lr in H1B_LRS:
            parts = {"search": regime_runs(search[clip], clip, lr) if clip in search else fresh.iloc[:0],
                     "fresh": regime_runs(fresh, clip, lr)}
            pooled = pd.concat(parts.values())
            for variant in [v for v in VARIANT_ORDER if v in set(pooled["variant"])]:
                row = {"regime": REGIME_NAMES[clip], "cfg.lr": lr, "variant": variant}
                for name, part in (*parts.items(), ("pooled", pooled)):
                    arm = part[part["variant"] == variant]
                    row[f"failed_{name}"] = f"{int(arm['failed'].astype(bool).sum())}/{len(arm)}"
                arm, base = pooled[pooled["variant"] == variant], pooled[pooled["variant"] == "none"]
                row["p_fisher_pooled"] = (fisher_vs_none(int(arm["failed"].astype(bool).sum()), len(arm),
                                                         int(base["failed"].astype(bool).sum()), len(base))
                                          if variant != "none" and len(arm) and len(base) else np.nan)
                rows.append(row)
    frame = pd.DataFrame(rows)
    frame["p_holm"], frame["significant"] = np.nan, False
    for _, sub in frame.groupby("regime"):
        tested = sub.index[sub["p_fisher_pooled"].notna()]
        if len(tested):
            reject, adjusted = stats.holm(frame.loc[tested, "p_fisher_pooled"].to_numpy(float))
            frame.loc[tested, "p_holm"], frame.loc[tested, "significant"] = adjusted, reject
    return frame


def regime_phase(runs: pd.DataFrame, logits: pd.DataFrame) -> pd.DataFrame:
    """The boundary study's phase table (failures, loss of non-failed runs, logit growth, clipped share) for the
    regime cells of the fresh seeds, one block per regime."""
    parts = []
    for clip in H1B_CLIPS:
        cells = runs[_is(runs["cfg.grad_clip"], clip)
                     & runs["cfg.lr"].apply(lambda lr: any(np.isclose(lr, v) for v in H1B_LRS))]
        if len(cells):
            parts.append(phase_table(cells, logits).assign(regime=REGIME_NAMES[clip]))
    if not parts:
        return pd.DataFrame()
    frame = pd.concat(parts, ignore_index=True)
    return frame[["regime", *[c for c in frame.columns if c != "regime"]]]


def analyse(out: Path, study: str = STUDY) -> dict:
    every = load_runs(study, out)
    seeds = complete_seeds(every, study)
    runs = every[every["seed"].isin(seeds)]
    search = {clip: load_runs(name, out) for clip, name in SEARCH.items() if has_index(name, out)}
    return {"every": every, "runs": runs, "seeds": seeds, "confirmatory": confirmatory(runs) if seeds else {},
            "tuned": _order(tuned_runs(runs)[["variant", "seed", "cfg.lr", "val_loss"]]),
            "bracket": bracket_table(runs, search),
            "phase": regime_phase(runs, final_out_logits(study, out)) if seeds else pd.DataFrame()}


def _family_words(family: pd.DataFrame) -> str:
    direction = {"failures": ("more failures", "fewer failures"),
                 "spike_count_post_warmup": ("more spikes", "fewer spikes"),
                 "val_loss_not_failed": ("higher loss", "lower loss"), "tuned_cost": ("costs", "gains")}
    parts = []
    for _, row in family.iterrows():
        if pd.isna(row.get("p_holm")):
            parts.append(f"`{row['variant']}` {row['endpoint']}: not tested (n = {row['n']})")
            continue
        up, down = direction[row["endpoint"]]
        word = (up if row["mean_diff"] > 0 else down) if row["significant"] else "not resolved"
        span = (f"{row['variant_value']:g} vs {row['none_value']:g} failures" if row["endpoint"] == "failures"
                else f"{signed(row['mean_diff'])} [{signed(row['ci_low'])}, {signed(row['ci_high'])}]")
        parts.append(f"`{row['variant']}` {row['endpoint']}: {span} ({word}; Holm p = {stats.p_text(row['p_holm'])})")
    return "; ".join(parts)


def _decision_words(decision: dict, mei: float) -> str:
    base = (f"the baseline is **{'unstable' if decision['baseline_unstable'] else 'stable'}** here "
            f"({decision['baseline_failures']} failure{'' if decision['baseline_failures'] == 1 else 's'}, "
            f"{decision['baseline_spikes_post_warmup']:.2f} spikes per run "
            "after the warm-up)")
    verdicts = "; ".join(f"`{variant}`: {v['verdict']} ({'fixes' if v['fixes'] else 'does not fix'} the "
                         f"instability; tuned cost's upper 95% bound {signed(v['cost_ci_high'])} vs the MEI {mei:g})"
                         for variant, v in decision["variants"].items())
    return f"Decision rule 3: {base}. {verdicts}."


def write_report(out_dir=None, figures_dir=None, study: str = STUDY, answer: list[str] | None = None) -> Path:
    """H1B.md; `answer`: the decision lines its header quotes (findings.h1b_findings, passed in by its publisher:
    findings imports this module, so this module does not import findings)."""
    out = runs_root(out_dir)
    fig_dir = Path(figures_dir or default_figures_dir(out, "stability-v2"))
    d = analyse(out, study)
    done, expected = len(d["every"]), len(STUDIES[study].cells())
    footer = f"embnorm · {study} · runs.csv {fingerprint(study_dir_for(study, out).index)}"
    if d["confirmatory"]:
        fig = analysis_plots.plot_h1b({REGIME_NAMES[c]: fam for c, (fam, _) in d["confirmatory"].items()},
                             d["bracket"][np.isclose(d["bracket"]["cfg.lr"], CONFIRMATORY_LR)])
        plots.save(fig, fig_dir / "h1b_stability_vs_cost", footer)
        plt.close(fig)
    partial = done < expected
    from ..publishing.study_header import header_lines

    lines = [f"# Stability v2: H1b, confirmatory (`{study}`)", "",
             *header_lines(study, list(answer or []) if study == STUDY else [],
                           pending="not every registered seed has finished" if study == STUDY else
                           "decision rule 3 is quoted for the registered study only"),
             f"Written by `python -m embnorm_lib.analyses.h1b` at commit {git_commit()[:12]} from `runs/{study}/runs.csv` "
             f"({done} of {expected} registered runs finished; seeds with every cell finished: "
             f"{', '.join(map(str, d['seeds'])) or 'none yet'}"
             + (PARTIAL if partial else "") + "). "
             "Figure: `figures/stability-v2/h1b_stability_vs_cost.png`.", "",
             STUDIES[study].description + " " + STUDIES[study].note, "",
             "**Confirmatory** (docs/PROTOCOL.md amendment 2): per regime at LR "
             f"{CONFIRMATORY_LR:g}, per variant vs none, one Holm family of four endpoints — failures (Fisher's exact "
             "test), loss spikes after the warm-up (paired t), the final loss of seed pairs in which neither run "
             "failed (paired t, tested with at least 2 pairs), and the tuned cost (each arm's final loss at its own "
             f"best LR of the search, {', '.join(f'{v} {lr:g}' for v, lr in H1B_BEST_LR.items())}, minus none's, "
             "paired t). Decision rule 3 adopts a variant only if the baseline is unstable, the variant fixes it "
             "(no failure, fewer spikes) and the tuned cost's upper 95% bound is within the MEI."
             + (" Interim: rerun when the sweep has finished." if partial else ""), ""]
    for clip, (family, decision) in d["confirmatory"].items():
        lines += [f"## {REGIME_NAMES[clip].capitalize()}, LR {CONFIRMATORY_LR:g}", "",
                  compact_markdown(family), "", _family_words(family) + ".", "",
                  _decision_words(decision, decision["mei"]), ""]
    if len(d["tuned"]):
        lines += ["## The tuned runs (each arm at its own best LR, clipping on)", "",
                  compact_markdown(d["tuned"].groupby(["variant", "cfg.lr"], sort=False)["val_loss"]
                                   .agg(["count", "mean", "std"]).reset_index()), ""]
    lines += ["## Exploratory: failures at the two LRs bracketing the boundary, search and fresh seeds", "",
              f"Failures out of runs among the search's seeds (0-2, from `{SEARCH[1.0]}` / `{SEARCH[0.0]}`), "
              "the fresh seeds and both; Fisher's exact test of the pooled count against none's, Holm within each "
              "regime. Exploratory: the search's seeds chose this regime.", "",
              compact_markdown(d["bracket"]), ""]
    if len(d["phase"]):
        lines += ["## Exploratory: phase table of the fresh seeds", "",
                  "Per regime, arm and LR: failures, the final loss of the runs that did not fail, the largest "
                  "attention logit of the diagnostic probes, the share of clipped steps, the last probe's largest "
                  "output logit.", "", compact_markdown(d["phase"]), ""]
    return write_text_stable(study_dir_for(study, out).root / "H1B.md", "\n".join(lines))


def main(argv=None) -> int:
    from ..runner.registry import write_own_report

    return report_main(argv, __doc__, [STUDY], lambda study, a: write_own_report(study, a.out_dir, a.figures_dir))


if __name__ == "__main__":
    sys.exit(entry(main))
