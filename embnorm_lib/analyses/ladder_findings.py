"""The ladders' findings: per finished size each arm's difference from `none`, the trend across sizes, the subword LR
checks and the registered gradient-norm peaks, as the lines FINDINGS.md (findings.py) and each LADDER.md's header
(ladder_answer) quote."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..publishing.render import percent
from ..runner.results import arm_order, has_index, load_runs
from ..stats import p_text, signed
from ..studies import STUDIES
from ..studies.ladder import REPLICATIONS, SUBWORD_LR_CHECK_WHERE  # noqa: F401 (REPLICATIONS: read through here)
from ..studies.paper_sources import BPE_LR, BPE_SCALE, LADDER


def subword_check_paragraph(out: Path, study: str) -> str:
    """A subword LR check's README paragraph (empty until an arm's grid is complete), under its own amendment."""
    from ..analyses.ladder import SUBWORD_LR_CHECKS

    check_lines = subword_lr_findings(out, study)
    if not check_lines:
        return ""
    return (f"\n\nThe subword LR check{SUBWORD_LR_CHECK_WHERE.get(study, '')}, exploratory (docs/PROTOCOL.md "
            f"amendment {SUBWORD_LR_CHECKS[study]}; [`runs/{study}/LADDER.md`](runs/{study}/LADDER.md)); it changes no "
            "registered analysis:\n\n" + "\n".join(check_lines))


def ladder_peak_findings(out: Path, study: str) -> list[str]:
    """For a study that registered its gradient-norm peaks (ladder.CONFIRMATORY_PEAKS), once its size has finished:
    each arm's peak after the warm-up against none's on the same seed, as the geometric-mean ratio with its 95%
    interval, worded by the Holm decision of that family."""
    from ..analyses import ladder, ladder_sections
    from ..studies import registered_seeds

    if study not in ladder.CONFIRMATORY_PEAKS or not has_index(study, out):
        return []
    runs = load_runs(study, out)
    if ladder.finished(ladder.primary(ladder.rung_table(runs)), registered_seeds(study)).empty:
        return []
    peaks = ladder_sections.peak_table(runs)
    if peaks.empty:  # an index without the peak columns
        return []
    lines = []
    for (tokenizer, preset), sub in peaks.groupby(["tokenizer", "preset"], sort=False):
        parts = [f"`{r.variant}` {r.ratio:.3g} × [{r.ratio_ci_low:.3g}, {r.ratio_ci_high:.3g}] (Holm p = "
                 f"{p_text(r.p_holm)}, {'significant' if r.significant else 'direction not resolved'})"
                 for r in sub.itertuples()]
        lines.append(f"- rung {preset.split('-')[1]}, {tokenizer} tokens: peak total gradient norm after the warm-up "
                     "(before clipping) against `none`'s on the same seed, geometric-mean ratio " + "; ".join(parts)
                     + ".")
    return lines


def subword_lr_findings(out: Path, study: str = BPE_LR) -> list[str]:
    """One line per rung and tokenizer whose subword LR check is complete: each arm's best factor (two seeds)
    beside the factor the subword ladder ran at (checked on characters)."""
    from ..analyses import ladder

    if not has_index(study, out):
        return []
    check, best, at_best = ladder.check_summary(load_runs(study, out))
    lines = []
    for (tokenizer, rung), sub in (best.groupby(["tokenizer", "rung"], sort=False) if len(best) else []):
        seeds = int(check[(check["tokenizer"] == tokenizer) & (check["rung"] == rung)]["seeds"].min())
        arms = [f"`{r.variant}` best at {r.best_factor:g} × the width rule (LR {r.best_lr:.3g}"
                + ("" if r.bracketed else ", at the grid's edge") + f"; the subword ladder ran at {r.ladder_factor:g}"
                + ("" if r.best_factor == r.ladder_factor else
                   f", {r.gap_to_best:.4f} nats/token higher in mean loss") + ")"
                for r in sorted(sub.itertuples(), key=lambda r: arm_order(r.variant))]
        here = at_best[(at_best["tokenizer"] == tokenizer) & (at_best["rung"] == rung)].dropna(subset=["diff_vs_none"])
        described = [f"`{r.variant}` {signed(r.diff_vs_none)}" for r in here.itertuples()]
        lines.append(f"- rung {rung}, {tokenizer} tokens ({seeds} seeds per LR): " + "; ".join(arms) + "."
                     + (" Each arm at its own best factor, final val loss vs `none` at its own (a description, no "
                        "test): " + ", ".join(described) + " nats/char." if described else ""))
    return lines


def ladder_findings(out: Path, study: str = LADDER) -> list[str]:
    """One line per finished rung (and tokenizer) of a ladder study: each arm's LR and its paired difference from
    none in final validation loss per character (ladder.primary), worded by the Holm decision within the size."""
    from ..analyses import ladder
    from ..core.config import LADDER_RUNGS, non_embedding_params
    from ..studies import ladder_factor, ladder_lr, registered_seeds

    if not has_index(study, out):
        return []
    # a finished size: every arm run, each with all its registered seeds (ladder.finished)
    table = ladder.finished(ladder.primary(ladder.rung_table(load_runs(study, out))), registered_seeds(study))
    if table.empty:
        return []
    lines = []
    for tokenizer in sorted(set(table["tokenizer"]), key=lambda t: (t != "char", t)):
        for rung, (layers, width, _) in enumerate(LADDER_RUNGS):
            params = non_embedding_params(layers, width)
            sub = table[(table["params"] == params) & (table["tokenizer"] == tokenizer)]
            if sub.empty:
                continue
            lrs = ", ".join(f"`{v}` {ladder_lr(v, width, ladder_factor(rung, v)):g}"
                            for v in ["none", *dict.fromkeys(sub["variant"])])
            parts = [f"`{r.variant}` {signed(r.mean_diff)} [{signed(r.ci_low)}, {signed(r.ci_high)}] (Holm p = {p_text(r.p_holm)}, "
                     f"{'significant' if r.significant else 'direction not resolved'})" for r in sub.itertuples()]
            name = f"rung {rung}" + ("" if tokenizer == "char" else f", {tokenizer} tokens")
            lines.append(f"- {name} ({layers} × {width}, {params / 1e6:.2f}M non-embedding parameters, "
                         f"{int(sub['seeds'].min())} seeds; LR {lrs}): Δ final val loss vs `none` " + "; ".join(parts)
                         + " nats/char.")
    return lines


def subword_scale_findings(out: Path, study: str = BPE_SCALE) -> list[str]:
    """Once finished: each arm's difference from none (ladder_findings), then how much of ln's difference
    normalizing alone (ln_matched) and rescaling alone (scaled_unit) carry, as a share (a description)."""
    from ..analyses import ladder

    lines = ladder_findings(out, study)
    if not lines:
        return []
    runs = load_runs(study, out)
    diff = ladder.primary(ladder.rung_table(runs)).set_index("variant")["mean_diff"]
    if {"ln", "ln_matched", "scaled_unit"} <= set(diff.index) and diff["ln"] != 0:
        # the scale each arm feeds block 1 at the end, beside the shares: what the parts change
        norms = (runs.groupby("variant")["final_block1_input_norm"].mean()
                 if "final_block1_input_norm" in runs else pd.Series(dtype=float))
        scale = ", ".join(f"`{v}` {norms[v]:.2f}" for v in ("none", "ln", "ln_matched", "scaled_unit") if v in norms)
        lines.append(f"- Of `ln`'s difference, normalizing alone (`ln_matched`) carries "
                     f"{percent(diff['ln_matched'] / diff['ln'])} and rescaling alone (`scaled_unit`) "
                     f"{percent(diff['scaled_unit'] / diff['ln'])} (a description"
                     + (f"; block 1's input norm at the end of training: {scale}" if scale else "") + ").")
    return lines


def ladder_scale_findings(out: Path, study: str = LADDER) -> list[str]:
    """Once three sizes of a ladder have finished: per tokenizer and arm, whether the difference from none shrinks,
    grows or flips with size (ladder.scale_answer: exploratory, worded by what its tests resolve)."""
    from ..analyses import ladder
    from ..studies import registered_seeds

    if not has_index(study, out):
        return []
    table = ladder.rung_table(load_runs(study, out))
    if table.empty:
        return []
    answers = ladder.scale_answer(table, seeds=registered_seeds(study))
    return [f"- {ladder.scale_words(r)}" for r in answers.to_dict("records")]


def ladder_answer(out: Path, study: str) -> list[str]:
    """The lines LADDER.md's header quotes: per finished size each arm's difference, the trend across sizes (where the
    study has several), and any registered gradient-norm peaks."""
    across_sizes = len({c.preset for c in STUDIES[study].cells()}) > 1
    return (subword_scale_findings(out, study) + (ladder_scale_findings(out, study) if across_sizes else [])
            + ladder_peak_findings(out, study))
