"""LADDER.md, the size ladder's report (the only writer of that file), and its LR checks' reports.

    python -m embnorm_lib publish <study>   # a ladder study: the registered comparison per size, the trend;
                                            # one of its LR checks (characters, subwords): that check's report

ladder.py computes the tables and the trend, ladder_sections.py the exploratory sections; this module places them
under the study's header and writes the page and its figures."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from ..core.cli import report_main
from ..core.errors import entry
from ..stats import signed
from ..studies.figure_sources import LADDER_FOLDER
from ..studies.ladder import LADDER_KIND
from ..studies.paper_sources import LADDER, LADDER_LR
from .ladder import (
    LE_SCAO_PARAMS,
    LR_CHECKS,
    SUBWORD_LR_CHECKS,
    best_factors,
    check_summary,
    finished,
    lr_check,
    primary,
    rung_of,
    rung_table,
    scale_answer,
    scale_words,
    trend,
    trend_words,
)
from .ladder_sections import budget_section, fit_section, norm_loss_section, peak_section, per_seed_section


def unchecked_rungs(runs: pd.DataFrame) -> list[tuple[int, str]]:
    """(rung, arm) of each arm a study ran at the width rule's LR before its check completed, per arm: a rung's check
    completes arm by arm, and an arm without its own check (rms, ln_matched, scaled_unit) runs at its LR family's
    factor (studies.LADDER_LR_ARM)."""
    from ..runner.results import arm_order
    from ..studies import LADDER_LR_ARM, LADDER_LR_CHECKED

    return sorted({(rung_of(p), v) for p, v in zip(runs.get("cfg.preset", []), runs.get("variant", []), strict=True)
                   if LADDER_LR_ARM.get(v, v) not in LADDER_LR_CHECKED.get(rung_of(p), {})},
                  key=lambda rv: (rv[0], arm_order(rv[1])))



def write_report(study: str = LADDER, out_dir=None, figures_dir=None, answer: list[str] | None = None) -> Path:
    """LADDER.md; `answer`: the lines its header quotes (ladder_findings.ladder_answer, passed in by its publisher:
    ladder_findings imports this module, so this module does not import it)."""
    import matplotlib.pyplot as plt

    from ..core.records.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
    from ..core.records.rundir import study_dir_for
    from ..publishing import plots
    from ..publishing.render import compact_markdown
    from ..runner.results import load_runs
    from ..studies import STUDIES, registered_seeds
    from . import plots as analysis_plots

    out = runs_root(out_dir)
    runs = load_runs(study, out)
    figures = Path(figures_dir or default_figures_dir(out, LADDER_FOLDER))
    footer = f"embnorm · {study} · runs.csv {fingerprint(study_dir_for(study, out).index)}"
    if study in LR_CHECKS:
        if len(runs):
            check = lr_check(runs)
            fig = analysis_plots.plot_lr_check(check, best_factors(check))
            plots.save(fig, figures / f"{study}_lr_curves", footer)
            plt.close(fig)
        return write_text_stable(study_dir_for(study, out).root / "LADDER.md", lr_check_report(runs, study))
    every_size = rung_table(runs)
    seeds = registered_seeds(study)
    # amendment 4: a size's comparison is quoted (table, figure, trend) only once every arm has its registered seeds
    table = finished(every_size, seeds)
    cells = STUDIES[study].cells()
    across_sizes = len({c.preset for c in cells}) > 1  # a one-size study has no trend or figure
    lines_trend = trend(table, seeds=seeds) if len(table) else pd.DataFrame()
    axes = {"params": "params", "train_flops": "compute"} if len(table) and across_sizes else {}
    for x, name in axes.items():
        if table[x].isna().any():  # compute is not drawn from a guess (train_compute's NaN)
            continue
        fig = analysis_plots.plot_ladder(primary(table), x)
        plots.save(fig, figures / f"{study}_delta_vs_{name}", footer)
        plt.close(fig)
    done, planned = len(runs), len(cells)
    from ..publishing.study_header import header_lines

    # per finished size each arm's difference (and, with the scale-vs-norm arms, the share each half carries), then
    # the trend across sizes and any registered gradient-norm peaks
    answer = list(answer or [])
    lines = [f"# {'The size ladder' if across_sizes else 'One size of the ladder'} (`{study}`)", "",
             *header_lines(study, answer, pending="no size has all its registered seeds yet (amendment 4)"),
             f"Written by `python -m embnorm_lib publish {study}` at commit {git_commit()[:12]} from `runs/{study}/runs.csv` "
             f"({done} of {planned} registered runs finished" + ("; **partial**" if done < planned else "") + ")."
             + (f" Figures: `figures/ladder/{study}_delta_vs_params.png`, and against training compute "
                f"(`train_flops`: 6 x (non-embedding parameters + output head) x training tokens) "
                f"`figures/ladder/{study}_delta_vs_compute.png`." if across_sizes else ""), "",
             " ".join(filter(None, [STUDIES[study].description, STUDIES[study].note])), "",
             "## Per size (the registered paired comparison, Holm within each size)", "",
             compact_markdown(_display(table)) if len(table) else "No size has finished yet.", ""]
    lines += in_progress_lines(every_size, table, seeds, arms={c.variant for c in cells} - {"none"})
    if len(runs):
        lines += per_seed_section(runs)
    lines += budget_section(runs) + fit_section(runs) + peak_section(runs, study) + norm_loss_section(runs)
    unchecked = unchecked_rungs(runs)
    lines += [f"- **rung {r} ran `{v}` at the width rule's LR without a completed check** (amendment 5 asks for "
              f"`{LADDER_LR}` at that rung first)." for r, v in unchecked] + ([""] if unchecked else [])
    if not across_sizes:
        return write_text_stable(study_dir_for(study, out).root / "LADDER.md", "\n".join(lines).rstrip("\n") + "\n")
    lines += ["## Trend across sizes (exploratory)", "",
             "Weighted least squares of each size's mean difference in final validation loss per character (for BPE "
             "runs `val_loss_per_char`, not the per-token loss) on log10(non-embedding parameters); the value at "
             f"{LE_SCAO_PARAMS:.2g} parameters is an **extrapolation** far beyond the largest rung, shown beside Le Scao "
             "et al.'s finding that an embedding LayerNorm hurts zero-shot accuracy at that size.", ""]
    if len(lines_trend):
        lines += [compact_markdown(lines_trend.assign(at_params=[f"{v:.2g}" for v in lines_trend["at_params"]])), ""]
        lines += [f"- `{r['variant']}` ({r['tokenizer']}): {trend_words(r)} (slope {signed(r['slope_per_decade'])} "
                  f"[{signed(r['slope_ci_low'])}, {signed(r['slope_ci_high'])}] nats/char per decade)."
                  for _, r in lines_trend.iterrows()]
        lines += ["", "The intervals use the larger of the sizes' own standard errors and their scatter about the "
                  "line (`scale`, the residual variance in units of those errors, floored at 1; docs/PROTOCOL.md "
                  "amendment 12), so three sizes that happen to fall near a line do not make a narrow interval.", "",
                  "Does the difference shrink, grow or flip with size? `flips` needs finished sizes whose Holm "
                  "decisions resolve both signs; `shrinks` / `grows` a slope whose interval excludes zero; "
                  "`crosses zero` such a slope whose line changes sign within the sizes; otherwise no change is "
                  "resolved.", ""]
        lines += [f"- {scale_words(r)}" for r in scale_answer(table, lines_trend, seeds).to_dict("records")]
    else:
        lines += ["Fewer than three sizes have finished (all their registered seeds): no trend is fitted."]
    return write_text_stable(study_dir_for(study, out).root / "LADDER.md", "\n".join(lines) + "\n")



def in_progress_lines(every_size: pd.DataFrame, quoted: pd.DataFrame, seeds: int | None = None,
                      arms=()) -> list[str]:
    """The sizes with some finished runs that are not quoted yet (`finished`): per arm, how many of its registered
    seeds have finished, and no difference, interval or test, since a size is read only as a whole (amendment 4).
    A registered arm (`arms`, none aside) with no finished run at such a size is counted as 0, not left out."""
    from ..runner.results import arm_order
    from ..studies import LADDER_SEEDS

    wanted = len(LADDER_SEEDS) if seeds is None else seeds
    waiting = every_size.drop(index=quoted.index)  # `finished` keeps rung_table's row labels
    if waiting.empty:
        return []
    lines = [f"Not quoted yet (docs/PROTOCOL.md amendment 4: a size is compared once every arm has its {wanted} "
             "registered seeds; its finished runs are in the per-seed tables below):", ""]
    for (tokenizer, preset), sub in primary(waiting).groupby(["tokenizer", "preset"], sort=False):
        counts = {v: 0 for v in arms} | dict(zip(sub["variant"], sub["seeds"].astype(int), strict=True))
        counted = ", ".join(f"`{v}` {counts[v]}" for v in sorted(counts, key=arm_order))
        lines.append(f"- {preset} ({tokenizer}): seeds finished with a paired `none` run: {counted} of {wanted}.")
    return lines + [""]



def _display(table: pd.DataFrame) -> pd.DataFrame:
    """Token counts as integers and FLOPs in scientific notation, for the markdown table; a row outside the Holm
    family (a subword run's per-token loss) has no decision of its own."""
    return table.assign(train_tokens=[f"{v:.0f}" if pd.notna(v) else "–" for v in table["train_tokens"]],
                        train_flops=[f"{v:.3g}" if pd.notna(v) else "–" for v in table["train_flops"]],
                        significant=[str(bool(s)) if pd.notna(p) else "–"
                                     for s, p in zip(table["significant"], table["p_holm"], strict=True)])



def _unfinished_rungs(study: str, runs: pd.DataFrame) -> str:
    """The registered runs a study still lacks, per preset ('ladder-4 (4 runs)'), from its cells and its index."""
    from collections import Counter

    from ..studies import STUDIES

    planned = Counter(c.preset for c in STUDIES[study].cells())
    done = runs["cfg.preset"].value_counts() if len(runs) else {}
    left = [(preset, n - int(done.get(preset, 0))) for preset, n in sorted(planned.items())]
    return ", ".join(f"{preset} ({n} run{'s' if n != 1 else ''})" for preset, n in left if n > 0) or "none"



def lr_check_report(runs: pd.DataFrame, study: str = LADDER_LR) -> str:
    """The character ladder's LR check registers each arm's best factor for the ladder (amendment 5); the subword
    checks (at rungs 1 and 2) are exploratory and only say whether the subword ladder's factor, checked on
    characters, is also best on subwords."""
    from ..core.records.io import git_commit
    from ..publishing.render import compact_markdown
    from ..publishing.study_header import header_lines
    from ..studies import LADDER_LR_CHECKED, STUDIES

    check, best, at_best = check_summary(runs)
    done, planned = len(runs), len(STUDIES[study].cells())
    amendment = SUBWORD_LR_CHECKS.get(study)
    subword = amendment is not None
    title = ("The subword learning-rate check, exploratory" if subword else "The ladder's learning-rate check")
    use = (f"Amendment {amendment}: exploratory; the subword ladder keeps the factor checked on characters (amendment 7), and "
           "this check only says whether that factor is also best on subwords." if subword else
           "Amendment 5: the ladder runs each arm at its best factor (rms at ln's).")
    best_lines = []
    for r in best.itertuples():
        where = f"rung {r.rung}" + ("" if r.tokenizer == "char" else f", {r.tokenizer}")
        if subword:
            used = r.ladder_factor
            state = (f"the subword ladder's factor {used:g} (checked on characters) is also best here"
                     if used == r.best_factor else
                     f"**the subword ladder ran at {used:g}** (checked on characters), where the mean loss is "
                     f"{r.gap_to_best:.4f} higher ({r.ladder_factor_val_loss:.4f}; per token)")
        else:
            registered = LADDER_LR_CHECKED.get(r.rung, {}).get(r.variant)
            state = ("registered for the ladder" if registered == r.best_factor else
                     "**not yet registered** in studies.LADDER_LR_CHECKED" if registered is None else
                     f"**differs from the registered factor {registered:g}**")
        best_lines.append(f"- {where}, `{r.variant}`: best factor {r.best_factor:g} (LR {r.best_lr:.3g})"
                          + ("" if r.bracketed else ", at the grid's edge") + f"; {state}.")
    lines = [f"# {title} (`{study}`)", "", *header_lines(study, best_lines, pending="no rung has all its check runs yet"),
             f"Written by `python -m embnorm_lib publish {study}` at commit {git_commit()[:12]} from "
             f"`runs/{study}/runs.csv` ({done} of {planned} registered runs finished"
             + ("; **partial**" + ("" if subword else f": still to finish {_unfinished_rungs(study, runs)}; rungs 3 "
                                          "and 4 train on a CPU across sessions (amendments 14-15)")
                if done < planned else "")
             + f"). Figure: `figures/ladder/{study}_lr_curves.png` (each arm's loss against its LR factor, the best "
             "of a complete grid filled).", "",
             " ".join(filter(None, [STUDIES[study].description, STUDIES[study].note])), "",
             "## Final validation loss by LR factor (factor 1 = the width rule; per token for BPE)", "",
             compact_markdown(check), "",
             "## Best factor per rung and arm", "",
             "The factor with the lowest mean final validation loss over the check's seeds; `bracketed` is false "
             "where it is the grid's smallest or largest factor (the optimum may lie beyond). " + use, "",
             (compact_markdown(best.drop(columns=["ladder_factor", "ladder_factor_val_loss", "gap_to_best"]))
              if len(best) else "No rung has all its check runs yet."), ""]
    lines += best_lines
    if subword and len(best):
        lines += ["", "## Each arm at its own best factor (a description, not a test)", "",
                  "Final validation loss per character, mean over the check's seeds, each arm at the factor above; "
                  "`diff_vs_none` pairs the seeds with `none` at its own best factor. Two seeds give no interval: "
                  f"amendment {amendment} makes any comparison at subword-checked LRs exploratory.", "",
                  compact_markdown(at_best)]
    lines += [""] + budget_section(runs) + fit_section(runs)
    return "\n".join(lines).rstrip("\n") + "\n"



def main(argv=None) -> int:
    from ..runner.registry import write_own_report
    from ..studies import studies_of

    # every study the registry analyses as a ladder, the size ladder itself the default
    return report_main(argv, __doc__, sorted(studies_of(LADDER_KIND), key=lambda s: s != LADDER),
                       lambda study, a: write_own_report(study, a.out_dir, a.figures_dir))


if __name__ == "__main__":
    sys.exit(entry(main))
