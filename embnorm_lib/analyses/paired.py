"""A study's statistical analysis, as registered in docs/PROTOCOL.md, and the files it produces.

    python -m embnorm_lib.analyses.paired <study>            # tables, figures, decision, REPORT.md

Per scope (one preset/training regime of the study): paired comparisons of every variant with
`none`, Holm-adjusted across (variant x metric); the results table (markdown + LaTeX); a forest
plot and per-seed paired lines; the power table; the decision. REPORT.md states the answer."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import stats
from ..core.errors import RunDirError, entry
from ..core.nets.variants import variant_names
from ..core.records.io import (
    atomic_write_text,
    default_figures_dir,
    directory_option,
    git_commit,
    published_csv,
    runs_root,
    write_published_json,
    write_text_stable,
)
from ..publishing import plots
from ..publishing.figures import study_stamp
from ..publishing.render import to_latex, to_markdown
from ..runner.results import load_runs
from ..studies import STUDIES, study_cells
from .stability import recommendation_for

# the registered family (docs/PROTOCOL.md, amendment 1: stability metrics after the warm-up)
DEFAULT_METRICS = ["val_loss", "val_acc", "ece_equal_width", "brier", "lm_macro_acc", "final_grad_norm",
                   "peak_grad_norm_post_warmup", "spike_count_post_warmup"]


@dataclass
class ScopeAnalysis:
    study: str
    scope: str  # preset name
    runs: pd.DataFrame
    family: pd.DataFrame
    decision: dict

    @property
    def label(self) -> str:
        return f"{self.study} / {self.scope}"

    @property
    def heading(self) -> str:
        """The label as a notebook heads a section: a study of one scope named after it is named once."""
        return self.study if self.scope == self.study else self.label


def scopes(runs: pd.DataFrame) -> list[str]:
    return sorted(runs["cfg.preset"].dropna().unique()) if "cfg.preset" in runs else ["all"]


LM_METRICS = ("lm_macro_acc",)  # in a study's family only when the study asks for the lm-eval suite


class IncompleteStudyError(RunDirError):
    """A run of the study lacks a metric of the registered family: the analysis would use fewer seeds."""


def study_family(study: str, runs: pd.DataFrame, metrics: list[str] | None = None) -> list[str]:
    """The registered family for this study: the protocol's metrics, with the zero/few-shot ones only when
    the study asks for lm-eval (the study registry says so, or a run's config did)."""
    metrics = list(metrics or DEFAULT_METRICS)
    asked = bool(runs.get("cfg.lm_eval", pd.Series(dtype=bool)).fillna(False).astype(bool).any())
    if study in STUDIES:
        asked = asked or any(c.config().lm_eval for c in study_cells(study))
    return [m for m in metrics if asked or m not in LM_METRICS]


def missing_metrics(runs: pd.DataFrame, metrics: list[str]) -> list[tuple[str, str]]:
    """(run, metric) pairs the analysis would silently drop. A diverged run has no final metrics to give."""
    missing = []
    for _, row in runs.iterrows():
        if bool(row.get("diverged", False)):
            continue
        for m in metrics:
            if m not in runs.columns or pd.isna(row[m]):
                missing.append((str(row["run_dir"]), m))
    return missing


def check_complete(study: str, runs: pd.DataFrame, metrics: list[str]) -> None:
    """The completeness gate: refuse, in one line, to analyse a study in which any run lacks a family metric."""
    missing = missing_metrics(runs, metrics)
    if missing:
        listed = "; ".join(f"{run}: {m}" for run, m in missing[:12]) + (f"; … {len(missing) - 12} more"
                                                                           if len(missing) > 12 else "")
        raise IncompleteStudyError(f"study {study} is incomplete: {len(missing)} (run, metric) pair(s) missing "
                                   f"({listed}); allowed: every run with every metric of the registered family "
                                   f"(complete it with `python -m embnorm_lib sweep {study}`)")


class UnpairedStudyError(RunDirError):
    """The study's runs cannot be paired seed by seed: an arm with no run to pair, or two runs of one arm and seed."""


def check_paired(study: str, runs: pd.DataFrame, baseline: str = "none") -> None:
    """The pairing gate, per regime (preset): each variant has one run per seed, and the baseline and every variant
    have a run that did not diverge (a diverged run has no final metrics; docs/PROTOCOL.md amendment 1 counts it as
    failed, which the stability reports test). Refused in one line, naming the runs, instead of an empty or
    mis-paired comparison."""
    for name in scopes(runs):
        scope = runs[runs["cfg.preset"] == name] if name != "all" else runs
        for (variant, seed), group in scope.groupby(["variant", "seed"]):
            if len(group) > 1:
                differ = [c for c in group.columns if c.startswith("cfg.") and c != "cfg.seed"
                          and group[c].astype(str).nunique() > 1]
                raise UnpairedStudyError(
                    f"study {study} ({name}): {len(group)} runs of `{variant}` seed {seed} "
                    f"({', '.join(map(str, group['run_dir']))}; they differ in {', '.join(differ) or 'their tag'}); "
                    f"allowed: one run per variant and seed in each preset (the analysis pairs by seed): give each "
                    f"value of an extra --axis a study of its own")
        arms = [baseline, *sorted(set(scope["variant"]) - {baseline})]
        for variant in arms:
            arm = scope[scope["variant"] == variant]
            finished = arm[~arm["diverged"].astype(bool)] if "diverged" in arm else arm
            if finished.empty:
                what = (f"has no `{baseline}` (baseline) run" if arm.empty else
                        f"every `{variant}` run diverged ({len(arm)} of {len(arm)}: a non-finite loss leaves no final "
                        f"metric to pair)")
                raise UnpairedStudyError(
                    f"study {study} ({name}) {what}; allowed: a baseline and each variant with at least one run that "
                    f"did not diverge (the stability reports count failures: python -m embnorm_lib publish stability)")


def analyse(study: str, metrics: list[str] | None = None, out_dir=None, scope: str | None = None,
            baseline: str = "none") -> list[ScopeAnalysis]:
    runs_all = load_runs(study, out_dir)
    metrics = study_family(study, runs_all, metrics)
    check_complete(study, runs_all, metrics)
    check_paired(study, runs_all, baseline)
    results = []
    for name in ([scope] if scope else scopes(runs_all)):
        runs = runs_all[runs_all["cfg.preset"] == name] if name != "all" else runs_all
        family = stats.comparison_family(runs, metrics, baseline=baseline)
        results.append(ScopeAnalysis(study, name, runs, family, stats.decide(family, runs, baseline)))
    return results


# -- tables --------------------------------------------------------------------------------------

def _fmt(x: float, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    return f"{x:.{digits}g}" if abs(x) >= 1e4 or (x != 0 and abs(x) < 1e-3) else f"{x:.{digits}f}"


def results_table(a: ScopeAnalysis) -> pd.DataFrame:
    """One row per (metric, variant): per-arm mean ± SD, paired Δ with 95% CI, p raw/Holm, g_z."""
    rows = []
    for _, c in a.family.iterrows():
        # the means over the paired seeds only, so that they differ by the Δ shown beside them (issue 117 #3)
        pairs = stats.paired_differences(a.runs, c.metric, c.variant, c.baseline)
        base, var = pairs["baseline"], pairs["variant"]
        rows.append({
            "metric": c.metric, "variant": c.variant, "seeds": int(c.n),
            f"{c.baseline} mean ± SD": f"{_fmt(base.mean())} ± {_fmt(base.std())}",
            "variant mean ± SD": f"{_fmt(var.mean())} ± {_fmt(var.std())}",
            "Δ (variant − none)": _fmt(c.mean_diff),
            f"95% CI ({c.interval_method})": f"[{_fmt(c.ci_low)}, {_fmt(c.ci_high)}]",
            "p (t)": _fmt(c.p_t, 3), "Holm α": _fmt(c.alpha_holm, 3), "p (Holm)": _fmt(c.p_holm, 3),
            "p (Wilcoxon) / smallest possible": f"{_fmt(c.p_wilcoxon, 3)} / {_fmt(c.p_wilcoxon_min, 3)}",
            "g_z": _fmt(c.g_z, 2), "P(improve)": _fmt(c.prob_improvement, 2),
            "sig.": "yes" if c.significant else "no",
        })
    return pd.DataFrame(rows)


def power_table(a: ScopeAnalysis) -> pd.DataFrame:
    """Per comparison, in the metric's own units: the effect these seeds detect with 80% power at the level Holm
    applies to that test (and, for comparison, at the unadjusted α), and the seeds 80% power at the MEI needs."""
    seeds = lambda v: "–" if not np.isfinite(v) else f"{int(v)}"
    f = a.family
    return pd.DataFrame({"metric": f["metric"], "variant": f["variant"], "seeds": f["n"],
                         "paired SD": f["sd_diff"].map(_fmt), "Holm α": f["alpha_holm"].map(lambda v: _fmt(v, 3)),
                         "MDE at 80% power, Holm α": f["mde_80_holm"].map(_fmt),
                         "MDE at 80% power, α = 0.05": f["mde_80"].map(_fmt),
                         f"seeds for 80% power at {stats.MEI} (val loss), Holm α": [
                             seeds(v) if m == stats.PRIMARY else "–"
                             for m, v in zip(f["metric"], f["seeds_for_80_at_mei_holm"])]})


# -- figures -------------------------------------------------------------------------------------

# -- the report ----------------------------------------------------------------------------------

def _change(c, noun: str) -> str:
    """'raises NOUN by 0.12' / 'lowers …' where the Holm-corrected test resolves the direction, else
    'changes NOUN by -0.0047 (direction not resolved)'."""
    if c.significant:
        return f"{'raises' if c.mean_diff > 0 else 'lowers'} {noun} by {abs(c.mean_diff):.4f}"
    return f"changes {noun} by {c.mean_diff:+.4f} (direction not resolved)"


def _evidence(c) -> str:
    """The interval and the Holm decision, with why an interval that excludes 0 can still be not significant."""
    verdict = "significant after Holm" if c.significant else "not significant after Holm"
    if not c.significant and (c.ci_low > 0 or c.ci_high < 0):
        verdict += f": {stats.holm_miss_reason(c.p_t, c.alpha_holm)}"  # the ladder's reports say it in these words
    return (f"95% {c.interval_method} CI [{c.ci_low:+.4f}, {c.ci_high:+.4f}], {verdict}, Holm p = {stats.p_text(c.p_holm, 3)}")


def confound_words(runs: pd.DataFrame) -> list[str]:
    """What differs between the arms besides the embedding norm, and the all-steps stability figures that measure
    the initialisation transient (descriptive, outside the registered family)."""
    by_arm = runs.groupby("variant", sort=False)
    order = [v for v in variant_names() if v in by_arm.groups]
    lines = []
    if "clipped_frac" in runs:
        clipped = by_arm["clipped_frac"].mean()
        lines.append("- Confound: gradient clipping (at `grad_clip`) is active on " + ", ".join(
            f"{clipped[v]:.0%} of `{v}`'s steps" for v in order) + ", so the arms' effective optimisers differ.")
    if {"peak_grad_norm", "peak_grad_norm_post_warmup"} <= set(runs.columns):
        peak, later = by_arm["peak_grad_norm"].mean(), by_arm["peak_grad_norm_post_warmup"].mean()
        lines.append("- Descriptive, all steps (dominated by the warm-up transient): peak gradient norm " + ", ".join(
            f"`{v}` {peak[v]:.2f} ({later[v]:.2f} after the warm-up)" for v in order) + ".")
    return lines


def plain_words(a: ScopeAnalysis) -> list[str]:
    """The answer for one scope, in sentences built from the computed numbers."""
    lines = []
    prim = a.family[a.family["metric"] == stats.PRIMARY]
    for _, c in prim.iterrows():
        lines.append(f"- `{c.variant}` {_change(c, 'the final validation loss')} nats/char ({c.baseline_mean:.4f} → "
                     f"{c.variant_mean:.4f}; {_evidence(c)}; better on {c.prob_improvement:.0%} of {int(c.n)} seeds).")
    for _, c in a.family[a.family["metric"] == "lm_macro_acc"].iterrows():
        lines.append(f"- Zero-shot macro accuracy, suite v1 (superseded by suite v2: the section on the two suites "
                     f"below; {int(c.n)} seeds): `{c.variant}` {_change(c, 'it')} "
                     f"({c.baseline_mean:.4f} → {c.variant_mean:.4f}; {_evidence(c)}).")
    for _, c in a.family[a.family["metric"] == "ece_equal_width"].iterrows():
        lines.append(f"- Calibration: `{c.variant}` {_change(c, 'top-label ECE')} ({_evidence(c)}).")
    base = a.decision["baseline_stability"]
    # stats.stability counts `failed` where runs.csv has it, divergences alone in a table made before it: say which
    counted, defined = (("failed", "failed = non-finite loss or final loss above the loss at init") if "failed" in a.runs
                        else ("diverged", "diverged = non-finite loss; this index predates the failure count"))
    lines.append(f"- Stability (after the warm-up; {defined}): "
                 f"baseline {base['diverged']} {counted} of {base['runs']}, {base['mean_spikes']:.2f} loss spikes per "
                 f"run; " + "; ".join(f"`{v}` {d['stability']['diverged']} {counted}, {d['stability']['mean_spikes']:.2f} "
                                      f"spikes/run" for v, d in a.decision["variants"].items()) + ".")
    lines += confound_words(a.runs)
    lines.append(f"- **Decision ({'baseline unstable' if a.decision['baseline_unstable'] else 'baseline stable'}): "
                 f"{a.decision['overall']}.** " + " ".join(
                     f"{v}: {d['verdict']} (rule {d['rule']}: {d['reason']})." for v, d in a.decision["variants"].items()))
    return lines


def seed_count_words(runs: pd.DataFrame) -> str:
    """The seeds every arm has (the paired set the comparisons use), and any run outside it named: a seed count
    over the union of arms would overstate n in an unbalanced study (issue 117 #3)."""
    seeds_by_arm = runs.groupby("variant")["seed"].apply(set)
    paired = set.intersection(*seeds_by_arm) if len(seeds_by_arm) else set()
    words = f"{len(paired)} seeds"
    unpaired = runs[~runs["seed"].isin(paired)].sort_values(["variant", "seed"])
    if not unpaired.empty:
        words = f"{len(paired)} paired seeds; unpaired, left out: " + ", ".join(
            f"`{r.variant}` seed {r.seed}" for r in unpaired.itertuples())
    return words


def answer_lines(analyses: list[ScopeAnalysis]) -> list[str]:
    """Per scope, the decision rule's verdict and each variant's primary difference, worded by its Holm decision."""
    lines = []
    for a in analyses:
        prim = a.family[a.family["metric"] == stats.PRIMARY]
        parts = [f"`{c.variant}` {_change(c, 'the final validation loss')} nats/char (95% {c.interval_method} CI "
                 f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}], Holm p = {stats.p_text(c.p_holm, 3)})" for _, c in prim.iterrows()]
        lines.append(f"- `{a.scope}` ({seed_count_words(a.runs)}): the registered decision rule says "
                     f"**{a.decision['overall']}**; " + "; ".join(parts) + ".")
    return lines


def zeroshot_lines(study: str, out_dir=None) -> list[str]:
    """Where the study's family prints suite v1 and its runs were re-scored with suite v2: how the two relate, with
    suite v2's macro result (its ZEROSHOT.md has the tables)."""
    from . import zeroshot

    out = runs_root(out_dir)
    if not zeroshot.prints_suite_v1(study, out) or zeroshot.scored_runs(study, out).empty:
        return []
    found = zeroshot.analyse(study, out, bootstrap=False)
    largest = max(found.values(), key=lambda d: len(d["seeds"]))  # zeroshot.largest_regime, without a second pass
    return ["## Zero-shot: suite v1 and suite v2", "", zeroshot.reconciliation_words(out, study, largest), "",
            "Suite v2 (the registered endpoint; tables in [`ZEROSHOT.md`](ZEROSHOT.md)), per regime:", "",
            *[f"- {line}" for line in zeroshot.macro_lines(found)], ""]


def write_outputs(analyses: list[ScopeAnalysis], out_dir=None, figures_dir=None) -> Path:
    from ..publishing.study_header import header_lines, protocol_words

    study = analyses[0].study
    study_root = runs_root(out_dir) / study
    fig_root = Path(figures_dir or default_figures_dir(out_dir, study))
    commit = git_commit()
    sections = [f"# {study}: does an embedding norm help or hurt?", "", *header_lines(study, answer_lines(analyses)),
                f"Analysis per `docs/PROTOCOL.md` ({protocol_words()}); produced by "
                f"`python -m embnorm_lib.analyses.paired {study}` at commit {commit[:12]} from `runs/{study}/runs.csv`. "
                f"Intervals are 95% paired t intervals; a direction is stated only where the Holm-corrected test "
                f"resolves it.", ""]
    if study in STUDIES and STUDIES[study].note:
        sections += [STUDIES[study].note, ""]
    for a in analyses:
        target = study_root / "analysis" / a.scope
        table = results_table(a)
        atomic_write_text(target / "results.md", to_markdown(table) + "\n")
        atomic_write_text(target / "results.tex", to_latex(table))
        atomic_write_text(target / "family.csv", published_csv(a.family))
        atomic_write_text(target / "power.md", to_markdown(power_table(a)) + "\n")
        write_published_json(target / "decision.json", a.decision)
        for name, make in (("forest", lambda a: plots.plot_forest(a.family, a.label, stats.PRIMARY, stats.MEI)),
                           ("paired_lines", lambda a: plots.plot_paired_lines(a.runs, a.label))):
            fig = make(a)
            plots.save(fig, fig_root / f"{name}_{a.scope}", study_stamp(study, out_dir))
            plt.close(fig)
        sections += [f"## {a.scope} ({len(a.runs)} runs, seeds {sorted(a.runs['seed'].unique().tolist())})", "",
                     *plain_words(a), "",
                     f"Full table: [`analysis/{a.scope}/results.md`](analysis/{a.scope}/results.md) "
                     f"(LaTeX: `results.tex`); power: [`analysis/{a.scope}/power.md`](analysis/{a.scope}/power.md); "
                     f"figures: `figures/{study}/forest_{a.scope}.png`, `paired_lines_{a.scope}.png`.", "",
                     to_markdown(table[table["metric"] == stats.PRIMARY]), ""]
    sections += zeroshot_lines(study, out_dir)
    stability_words = recommendation_for(out_dir)
    if stability_words:
        sections += ["## Stability (all stability studies; exploratory)", "",
                     "Exploratory under docs/PROTOCOL.md amendment 1 (3 seeds, grids chosen after the first results); "
                     "directions and rankings are stated only where the paired tests resolve them (Holm within each "
                     "table).", "",
                     "Computed from the stability studies' `runs.csv`; their tables and figures are in "
                     "[`runs/STABILITY.md`](../STABILITY.md) (`python -m embnorm_lib publish stability`):", "",
                     stability_words, ""]
    write_text_stable(study_root / "REPORT.md", "\n".join(sections))
    return study_root / "REPORT.md"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study")
    p.add_argument("--metrics", default=",".join(DEFAULT_METRICS))
    p.add_argument("--out-dir", default=None)
    p.add_argument("--figures-dir", default=None)
    args = p.parse_args(argv)
    if args.figures_dir:
        directory_option(args.figures_dir, "--figures-dir")
    analyses = analyse(args.study, args.metrics.split(","), args.out_dir)
    path = write_outputs(analyses, args.out_dir, args.figures_dir)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
