"""The adequate-data ladder's report in words: each quoted rung's registered comparison (direction, the MEI, why a
difference is not resolved), the pending runs, and LADDER-DATA.md itself; ladder_data.py computes the tables."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import stats
from ..studies import ladder_data
from .ladder_data import (
    FAMILY_ALPHA,
    compute_lines,
    compute_table,
    confirmatory_table,
    data_bound_table,
    endpoint_note,
    lr_margin_lines,
    quoted_table,
    seed_rule_lines,
    spend_lines,
    trend_bullets,
    trend_lines,
    trend_table,
    tuning_lines,
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
    return lines + trend_bullets(trend_table(runs), "trend (exploratory), ") if lines else lines


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
    from ..core.io import fingerprint, git_commit, runs_root, write_text_stable
    from ..core.rundir import study_dir_for
    from ..publishing.render import compact_markdown
    from ..runner.results import load_runs
    from ..studies import STUDIES

    out = runs_root(out_dir)
    runs = load_runs(study, out)
    planned = len(STUDIES[study].cells())
    if study != "ladder-data-lr":  # the whole confirmatory design, not only the rungs whose LRs are tuned yet
        planned = max(planned, ladder_data.confirmatory_runs_planned())
    record = ladder_data.corpus_record()
    from ..publishing.study_header import header_lines

    if study == "ladder-data-lr":
        answer = [line for line in tuning_lines(runs) if line.startswith("- ")]
    else:
        answer = rung_lines(runs) + pending_lines(runs, STUDIES[study].cells())
    lines = [f"# The adequate-data ladder (`{study}`)", "", *header_lines(study, answer),
             f"Written by `python -m embnorm_lib publish {study}` at commit {git_commit()[:12]} from "
             f"`runs/{study}/runs.csv` (sha256 {fingerprint(study_dir_for(study, out).index)}; {len(runs)} of {planned} "
             f"{'registered' if study == 'ladder-data-lr' else 'designed (amendment 16)'} runs finished"
             + ("; **partial**" if len(runs) < planned else "") + "). Registered in docs/PROTOCOL.md amendment 16.",
             "", " ".join(filter(None, [STUDIES[study].description, STUDIES[study].note])), "",
             f"Corpus: open English (`python -m embnorm_lib opencorpus`), {record['train_chars']:,} training and "
             f"{record['val_chars']:,} validation characters (whole documents), sha256 {record['sha256'][:12]}.", "",
             "| rung | shape | non-embedding parameters | iterations | passes |", "|---|---|---|---|---|"]
    lines += [f"| {r} | {n_layer} x {n_embd} | {ladder_data.non_embedding_params(r):,} | {ladder_data.iters(r):,} | "
              f"{ladder_data.passes(r):.2f} |" for r, (n_layer, n_embd, _) in enumerate(ladder_data.RUNGS)]
    lines.append("")
    if study == "ladder-data-lr":
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
    if study != "ladder-data-lr":
        tuning = load_runs("ladder-data-lr", out)
        lines += lr_margin_lines(tuning) + spend_lines(runs, tuning, cells, spent)
    return write_text_stable(study_dir_for(study, out).root / "LADDER-DATA.md", "\n".join(lines).rstrip("\n") + "\n")
