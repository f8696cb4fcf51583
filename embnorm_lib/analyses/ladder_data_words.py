"""The adequate-data ladder's report in words: each quoted rung's registered comparison (direction, the MEI, why a
difference is not resolved), the pending runs, and LADDER-DATA.md itself; ladder_data.py computes the tables."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import stats
from ..studies import ladder_data
from ..studies.paper_sources import LADDER_DATA_LR
from .ladder_data import (
    FAMILY_ALPHA,
    compute_table,
    confirmatory_table,
    data_bound_table,
    endpoint_note,
    one_step_off,
    quoted_table,
    runner_up_margin,
    seed_rule_table,
    shift_summary,
    spend_table,
    trend_rungs,
    trend_table,
    tuning_table,
)


def quoted_lines(runs: pd.DataFrame) -> list[str]:
    """One bullet per quoted rung (quoted_table): its regime and each norm's registered comparison, then the
    exploratory trend once it is fitted."""
    table = quoted_table(runs)
    lines = []
    for rung, part in (table.groupby("rung") if len(table) else []):
        first = part.iloc[0]
        lrs = ", ".join(f"`{r['variant']}` {r['lr']:g}" for _, r in part.iterrows())
        lines.append(f"- rung {rung} ({first['shape']}, {first['params'] / 1e6:.2f}M non-embedding parameters, "
                     f"{first['iters']:,} iterations = {first['passes']:.2f} passes, {first['seeds']} seeds; LR `none` "
                     f"{first['lr_none']:g}, {lrs}): final val loss vs `none` "
                     + "; ".join(_words(r) for _, r in part.iterrows()) + "."
                     + why_not_resolved([r for _, r in part.iterrows()]))
    if not lines:
        return lines
    # the 4-rung line includes rung 0, which is not trained; the line without it stands beside it (issue 113)
    return (lines + trend_bullets(trend_table(runs), "trend (exploratory), ")
            + trend_bullets(trend_table(runs, checked_only=True), "trend without rung 0 (not trained; exploratory), "))


MEI_WORDS = f"within the MEI (±{stats.MEI:g})"  # FINDINGS quotes these words without defining the MEI


def inside_mei(r) -> bool:
    """The whole interval lies within ±MEI (amendment 16 item 6: the one case where "within the MEI" is said)."""
    return -stats.MEI <= r["ci_low"] and r["ci_high"] <= stats.MEI


def _within_mei(r) -> bool:
    """A test Holm does not pass whose whole interval lies within ±MEI: no difference of interest."""
    return not r["significant"] and inside_mei(r)


def direction_words(r) -> str:
    """Amendment 16 item 6's words for one test: a direction only where Holm resolves it, "within the MEI" where the
    whole interval lies inside ±MEI, both where both hold (a resolved difference too small to be of interest)."""
    direction = ("costs" if r["mean_diff"] > 0 else "helps") if r["significant"] else "not resolved"
    if not inside_mei(r):
        return direction
    return f"{direction}, {MEI_WORDS}" if r["significant"] else MEI_WORDS


def _unresolved_off_zero(r) -> bool:
    """An interval that excludes 0 (and leaves the MEI) whose test Holm does not pass: said why (amendment 1 item 2)."""
    return not r["significant"] and not _within_mei(r) and (r["ci_low"] > 0 or r["ci_high"] < 0)


def _words(r) -> str:
    return (f"`{r['variant']}` {r['mean_diff']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] (Holm p = "
            f"{stats.p_text(r['p_holm'])}; {direction_words(r)}; MDE {r['mde_80']:.4f})")


def why_not_resolved(rows: list) -> str:
    """One sentence for a rung's tests whose interval excludes 0 but Holm does not pass them: each p against its Holm
    level, once for the rung rather than once per arm ("" when there are none)."""
    missed = [r for r in rows if _unresolved_off_zero(r)]
    if not missed:
        return ""
    return _why_not_resolved(missed) + (_repeated_endpoint_words() if all(
        r.get("endpoints_repeat", False) for r in missed) else "")


def _repeated_endpoint_words() -> str:
    """Said beside a test Holm misses where the rung's family counts one test twice (endpoint_note)."""
    return (f" Each test counts twice in this family of 4 (best = final validation loss in every run); with 2 tests, "
            f"Holm's levels would be {stats.ALPHA / 2:g} and {stats.ALPHA:g} (not the registered reading).")


def _why_not_resolved(missed: list) -> str:
    if len(missed) == 1:
        r = missed[0]
        return f" `{r['variant']}`'s interval excludes 0, but {stats.holm_miss_reason(r['p_t'], r['alpha_holm'])}."
    if all(r["p_t"] > r["alpha_holm"] for r in missed):
        arms = " and ".join(f"`{r['variant']}`" for r in missed)
        ps = " and ".join(stats.p_text(r["p_t"], 2, r["alpha_holm"]) for r in missed)
        levels = " and ".join(f"{r['alpha_holm']:.4g}" for r in missed)
        return f" The {arms} intervals exclude 0, but p = {ps} are above their Holm levels {levels}."
    return " " + "; ".join(f"`{r['variant']}`'s interval excludes 0, but {stats.holm_miss_reason(r['p_t'], r['alpha_holm'])}"
                           for r in missed) + "."


def rung_lines(runs: pd.DataFrame) -> list[str]:
    """One bullet per finished rung (confirmatory_table): each norm's registered comparison on the primary endpoint."""
    table = confirmatory_table(runs)
    lines = []
    for rung, part in (table[table["metric"] == "val_loss"].groupby("rung") if len(table) else []):
        rows = [r for _, r in part.iterrows()]
        lines.append(f"- rung {rung} ({ladder_data.non_embedding_params(rung):,} non-embedding parameters), final "
                     "validation loss vs `none`: " + "; ".join(_words(r) for r in rows) + "." + why_not_resolved(rows)
                     + failed_pair_words(rung, rows))
    return lines


def failed_pair_words(rung: int, rows: list) -> str:
    """Said where a failed run left its seed pair out of a rung's comparison (failed_pairs); "" where none did."""
    registered = len(ladder_data.confirmatory_seeds(rung))
    missing = [f"`{r['variant']}` over {r['seeds']} of {registered} seed pairs (a run failed at seed"
               + ("s" if "," in r["failed_pairs"] else "") + f" {r['failed_pairs']})" for r in rows if r["failed_pairs"]]
    if not missing:
        return ""
    return (" Compared " + "; ".join(missing) + ": a failed run (amendment 1: a non-finite loss, or a final loss "
            "above the initial one) leaves its seed pair out (amendment 16's clarification).")


def pending_lines(runs: pd.DataFrame, cells) -> list[str]:
    """One bullet per rung with registered runs still to finish: an answer that lists only the finished rungs must
    not read as the whole ladder."""
    table = compute_table(runs, cells)
    return [f"- rung {r.rung} ({ladder_data.non_embedding_params(r.rung):,} non-embedding parameters): not quoted "
            f"yet; {r.runs_finished} of {r.runs_finished + r.runs_left} registered runs finished."
            for r in (table.itertuples() if len(table) else []) if r.runs_left > 0]


def write_report(study: str, out_dir=None, figures_dir=None) -> Path:
    from ..core.records.io import fingerprint, git_commit, runs_root, write_text_stable
    from ..core.records.rundir import study_dir_for
    from ..publishing.render import compact_markdown
    from ..runner.registry import planned_runs
    from ..runner.results import load_runs
    from ..studies import STUDIES

    out = runs_root(out_dir)
    runs = load_runs(study, out)
    planned = planned_runs(study)  # the whole confirmatory design, not only the rungs whose LRs are tuned yet
    record = ladder_data.corpus_record()
    from ..publishing.study_header import header_lines

    if study == LADDER_DATA_LR:
        answer = [line for line in tuning_lines(runs) if line.startswith("- ")]
    else:
        answer = rung_lines(runs) + pending_lines(runs, STUDIES[study].cells())
    lines = [f"# The adequate-data ladder (`{study}`)", "", *header_lines(study, answer),
             f"Written by `python -m embnorm_lib publish {study}` at commit {git_commit()[:12]} from "
             f"`runs/{study}/runs.csv` (sha256 {fingerprint(study_dir_for(study, out).index)}; {len(runs)} of {planned} "
             f"{'registered' if study == LADDER_DATA_LR else 'designed (amendment 16)'} runs finished"
             + ("; **partial**" if len(runs) < planned else "") + "). Registered in docs/PROTOCOL.md amendment 16.",
             "", " ".join(filter(None, [STUDIES[study].description, STUDIES[study].note])), "",
             f"Corpus: open English (`python -m embnorm_lib opencorpus`), {record['train_chars']:,} training and "
             f"{record['val_chars']:,} validation characters (whole documents), sha256 {record['sha256'][:12]}.", "",
             "| rung | shape | non-embedding parameters | iterations | passes |", "|---|---|---|---|---|"]
    lines += [f"| {r} | {n_layer} x {n_embd} | {ladder_data.non_embedding_params(r):,} | {ladder_data.iters(r):,} | "
              f"{ladder_data.passes(r):.2f} |" for r, (n_layer, n_embd, _) in enumerate(ladder_data.RUNGS)]
    lines.append("")
    if study == LADDER_DATA_LR:
        table = tuning_table(runs)
        lines += ["## LR tuning per rung", ""] + tuning_lines(runs) + [""]
        shown = table[table["seeds"] > 0] if len(table) else table
        lines += [compact_markdown(shown) if len(shown) else "No tuning run has finished yet.", ""]
    else:
        table = confirmatory_table(runs)
        lines += ["## Per rung (confirmatory; Holm within each rung)", ""]
        if len(table):
            lines += rung_lines(runs) + [
                "", compact_markdown(table.drop(columns=["endpoints_repeat", "failed_pairs"])), "",
                f"`mde_80` and `seeds_at_mei` (seeds for 80% power at the MEI, {stats.MEI:g}) are at alpha "
                f"{FAMILY_ALPHA:g}, the family's strictest Holm level (item 6); `mde_80_unadjusted` at alpha "
                f"{stats.ALPHA:g}; `alpha_holm` is the level of each test's rank in Holm's step-down (alpha / (m - "
                "rank + 1)): the procedure stops at the first p above its level, and no later test is significant "
                "even where its p is below its own level.",
                "", endpoint_note(runs), ""]
        else:
            lines += ["No rung has all its registered runs yet.", ""]
        lines += ["## Seeds added (item 6)", "", f"A rung whose MDE at seeds 0-4 exceeds {ladder_data.MDE_LIMIT:g} "
                  "nats/char gets seeds 5-9 before its comparison is quoted.", ""]
        lines += (seed_rule_lines(runs) or ["No rung has finished seeds 0-4 in every arm yet."]) + [""]
        bound = data_bound_table(runs)
        lines += ["## Data-bound check", "", "A rung enters the trend only if `none`'s mean final validation loss "
                  "falls from the rung below by more than the larger of the two rungs' seed SDs.", ""]
        lines += [compact_markdown(bound) if len(bound) else "No rung has `none` runs yet.", ""]
        lines += trend_lines(runs)
    cells = STUDIES[study].cells()
    spent = compute_table(runs, cells)  # the compute section and, for the confirmatory study, the core-hours one
    lines += compute_lines(runs, cells, spent)
    if study != LADDER_DATA_LR:
        tuning = load_runs(LADDER_DATA_LR, out)
        lines += lr_margin_lines(tuning) + spend_lines(runs, tuning, cells, spent)
    return write_text_stable(study_dir_for(study, out).root / "LADDER-DATA.md", "\n".join(lines).rstrip("\n") + "\n")


def runner_up_words(runs: pd.DataFrame, rung: int, arm: str, found: dict) -> str:
    m = runner_up_margin(runs, rung, arm, found)
    if m is None:
        return ""
    return (f" Next best {m['lr']:g}, {m['margin']:+.4f} nats/char behind (paired over {m['seeds']} tuning seeds, SE "
            f"{m['se']:.4f}; exploratory).")


def lr_margin_lines(tuning: pd.DataFrame) -> list[str]:
    """For the confirmatory report: per rung, how far each tuned arm's registered LR led the next best in tuning
    (runner_up_margin), beside which the differences between arms read in context."""
    lines = []
    for rung in range(len(ladder_data.RUNGS)):
        found = ladder_data.best_lrs(tuning, rung) if len(tuning) else {}
        margins = {arm: runner_up_margin(tuning, rung, arm, got) for arm, got in found.items()
                   if got.get("complete") and got.get("bracketed")}
        words = [f"`{arm}` {m['margin']:+.4f} (SE {m['se']:.4f})" for arm, m in margins.items() if m]
        if words:
            lines.append(f"- rung {rung}: " + ", ".join(words) + ".")
    if not lines:
        return []
    return ["## How sharply the LRs were chosen (exploratory)", "",
            f"Each tuned arm's registered LR led the next best on its grid in tuning (`{LADDER_DATA_LR}`) by this much "
            f"final validation loss (nats/char, paired over the {len(ladder_data.TUNING_SEEDS)} tuning seeds): a "
            "difference between arms of about this size may partly reflect where each arm's LR fell on its grid.",
            "", *lines, "", *one_step_off_lines(tuning)]


def one_step_off_lines(tuning: pd.DataFrame) -> list[str]:
    """The difference between arms recomputed in tuning with either arm one sqrt(2) step off its registered LR
    (one_step_off): how much of a size's result rests on where the grid put each LR."""
    cells, flips = [], []
    columns = (("neither", 0), ("ln", -1), ("ln", 1), ("none", -1), ("none", 1))
    for rung in range(len(ladder_data.RUNGS)):
        shifted = one_step_off(tuning, rung)
        if shifted.empty:
            continue
        got = {(r.moved, r.step): f"{r.mean_diff:+.4f} ({r.se:.4f})" for r in shifted.itertuples()}
        cells.append(f"| {rung} | " + " | ".join(got.get(c, "–") for c in columns) + " |")
        summary = shift_summary(shifted)
        if summary and summary["sign_changes"]:
            flips.append(f"{summary['sign_changes']} of {summary['moves']} moves at rung {rung}")
    if not cells:
        return []
    flip_words = ", ".join(flips) if flips else "none of the moves"
    return ["`ln` minus `none` in tuning (nats/char, mean and SE over the tuning seeds), with both arms at their "
            "registered LR and with one arm moved one √2 step down (÷) or up (×) its grid, the other at its own "
            "(`rms` was not tuned: it runs at `ln`'s LR). The sign differs from the one at the registered LRs in "
            f"{flip_words}.", "",
            "| rung | both at registered LR | `ln` ÷√2 | `ln` ×√2 | `none` ÷√2 | `none` ×√2 |",
            "|---|---|---|---|---|---|", *cells, ""]


def tuning_lines(runs: pd.DataFrame) -> list[str]:
    lines = []
    for rung in range(len(ladder_data.RUNGS)):
        found = ladder_data.best_lrs(runs, rung) if len(runs) else {}
        for arm in ladder_data.ARMS_TUNED:
            grid = ladder_data.grid(rung, arm)
            if not grid:
                lines.append(f"- rung {rung} `{arm}`: waits for rung {rung - 1}'s registered LR (its grid's centre).")
                continue
            got = found.get(arm, {})
            registered = ladder_data.BEST_LR.get(rung, {}).get(arm)
            if not got.get("complete"):
                lines.append(f"- rung {rung} `{arm}`: tuning in progress ({len(got.get('means', {}))} of {len(grid)} "
                             f"LRs have all {len(ladder_data.TUNING_SEEDS)} tuning seeds).")
            elif got["bracketed"]:
                lines.append(f"- rung {rung} `{arm}`: best LR {got['best']:g} (mean final validation loss "
                             f"{got['means'][got['best']]:.4f} nats/char), bracketed; "
                             + (f"registered ({registered:g})." if registered else "not registered yet.")
                             + runner_up_words(runs, rung, arm, got))
            else:
                lines.append(f"- rung {rung} `{arm}`: best LR {got['best']:g} sits at the grid's edge: the rule "
                             f"extends the grid to {got['extend_to']:g} (not bracketed yet).")
    return lines


def seed_rule_lines(runs: pd.DataFrame) -> list[str]:
    return [f"- rung {r.rung}: MDE at seeds 0-4 {r.mde_80_at_5_seeds:.4f} nats/char, "
            + ("above" if r.above_limit else "within") + f" the {ladder_data.MDE_LIMIT:g} limit; seeds 5-9 "
            + (("added and finished: its comparison above is at 10 seeds." if r.all_seeds_finished else
                "added: its comparison is quoted once they finish.") if r.seeds_5_9_added else "not added.")
            for r in seed_rule_table(runs).itertuples()]


def compute_lines(runs: pd.DataFrame, cells, table: pd.DataFrame | None = None) -> list[str]:
    from ..publishing.render import compact_markdown

    table = compute_table(runs, cells) if table is None else table
    if not len(table):
        return []
    places = {"run_hours": 2, "hours_left": 2, "ms_per_iter": 0, "ms_per_iter_estimated": 0}
    return ["## Compute", "", "Run time of the finished runs per rung (training and evaluation; one thread each, "
            "so run-hours are core-hours; a resumed run's time is summed over its resumes), the measured median "
            "train-loop ms per iteration beside amendment 16's estimate, and what the registered runs not yet "
            "finished need at the rung's median run time (at the estimate where none has finished).", "",
            compact_markdown(table, places), "", f"Total: {table['run_hours'].sum():.2f} run-hours spent, "
            f"{table['hours_left'].sum():.2f} left for the runs registered so far.", ""]


def spend_lines(runs: pd.DataFrame, tuning: pd.DataFrame, cells, confirmatory: pd.DataFrame | None = None
                ) -> list[str]:
    from ..publishing.render import compact_markdown

    table = spend_table(runs, tuning, cells, confirmatory)
    if not len(table):
        return []
    places = {c: 2 for c in table.columns if "hours" in c} | {"ratio": 1}
    total, estimate = table["total_hours"].sum(), table["estimated_hours"].sum()
    return ["## Core-hours against the estimate", "",
            f"The whole ladder per rung: LR tuning (`{LADDER_DATA_LR}`, with its grid extensions), the confirmatory "
            "runs spent and still needed (seeds 5-9 included where item 6 added them), and amendment 16 item 8's "
            "estimate (one-thread step times of the 1 MB ladder, tuning before any extension, 5 confirmatory seeds).",
            "",
            compact_markdown(table, places), "",
            f"Total: {total:.1f} core-hours ({table['tuning_hours'].sum():.1f} tuning, "
            f"{table['confirmatory_hours'].sum():.1f} confirmatory spent, {table['confirmatory_hours_left'].sum():.1f} "
            f"still needed) against {estimate:.1f} estimated ({total / estimate:.1f}x). The issue's subword (BPE) "
            "version of this ladder, to follow \"if the budget allows\", is not registered in amendment 16 and has "
            "not been run.", ""]


def trend_lines(runs: pd.DataFrame) -> list[str]:
    from ..publishing.render import compact_markdown
    from . import ladder

    fits = trend_table(runs)
    head = ["## Trend across rungs (exploratory)", "", "Per variant, the line of each quoted rung's difference on "
            "log10 non-embedding parameters, over the rungs that pass the data-bound check; no extrapolation beyond "
            "the largest rung.", ""]
    if not len(fits):
        return head + [f"Needs {ladder.TREND_MIN_SIZES} rungs quoted with every seed and passing the data-bound check.",
                       ""]
    checked = trend_table(runs, checked_only=True)
    without_lowest = (["", "The same fit without rung 0, the lowest rung, which enters by definition because no rung "
                       "below can check it (exploratory):", ""] + trend_bullets(checked)) if len(checked) else []
    return (head + trend_bullets(fits) + without_lowest
            + ["", compact_markdown(fits), "", budget_confound_line(runs), ""])


def trend_bullets(fits: pd.DataFrame, prefix: str = "") -> list[str]:
    """One bullet per variant's fitted trend (trend_table): its reading and slope with its interval."""
    from . import ladder

    return [f"- {prefix}`{r['variant']}`: {ladder.trend_words(r)} (slope {r['slope_per_decade']:+.4f} "
            f"[{r['slope_ci_low']:+.4f}, {r['slope_ci_high']:+.4f}] nats/char per decade, {r['rungs']} rungs)."
            for _, r in fits.iterrows()]


def budget_confound_line(runs: pd.DataFrame) -> str:
    """Why the trend is not a pure size effect: at a fixed number of tokens per parameter the budget grows with size,
    and on the 1 MB study's budget grid (exploratory) the cost at GPT-2 init was smaller at longer budgets."""
    rungs = trend_rungs(runs)
    first, last = ladder_data.iters(rungs[0]), ladder_data.iters(rungs[-1])
    return (f"Size and budget grow together on this ladder ({ladder_data.TOKENS_PER_PARAM} tokens per parameter: "
            f"{first:,} to {last:,} iterations over these rungs, {last / first:.1f}x), so the line mixes the two; on "
            "1 MB of text the cost at GPT-2 init was smaller at longer budgets (the budget grid, exploratory: two budgets "
            "described, no trend tested). What the line "
            "shows is not separated into size and budget.")
