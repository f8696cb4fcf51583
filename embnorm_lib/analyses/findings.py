"""The findings: one paragraph per study's result, grouped by the question it answers (studies/findings_groups.py),
from the committed analysis files. FINDINGS.md and the findings a job prints are written from here; the README's
first screen is analyses/answer.py."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..analyses.stability import recommendation_for
from ..core.records.io import runs_root
from ..publishing.render import percent
from ..runner.results import has_index, load_runs
from ..stats import p_text, signed
from ..stats.metrics import METRICS
from ..studies import STUDIES, headline_studies
from ..studies.findings_groups import FINDINGS_GROUPS
from ..studies.paper_sources import BPE_REP, LADDER, LADDER_BPE, LADDER_DATA, PRELIM
from .ladder_findings import (
    REPLICATIONS,
    ladder_findings,
    ladder_peak_findings,
    ladder_scale_findings,
    subword_check_paragraph,
    subword_scale_findings,
)
from .replication import replication_sentence, replication_table

V2_REPORTS = ("BOUNDARY.md", "SCALE.md", "BUDGET.md", "H1B.md", "LENGTH.md", "ZEROSHOT.md", "LADDER.md", "LADDER-DATA.md")


FINDINGS_STUDIES = headline_studies()  # the README's headline: the main job's study, then the large one


def _direction(r) -> str:
    """'raises it by 0.120' only where the Holm-corrected test resolves the sign, else 'changes it by +0.003
    (direction not resolved)'."""
    if r.significant:
        return f"{'raises' if r.mean_diff > 0 else 'lowers'} it by {abs(r.mean_diff):.3f}"
    return f"changes it by {signed(r.mean_diff)} (direction not resolved)"


def scope_sentence(study: str, scope: str, out: Path, several: bool) -> str:
    """One sentence per training regime: the primary difference of each variant and the decision."""
    root = out / study / "analysis" / scope
    family = pd.read_csv(root / "family.csv")
    decision = json.loads((root / "decision.json").read_text())
    prim = family[family["metric"] == "val_loss"].set_index("variant")
    parts = [f"`{v}` {_direction(r)} "
             f"(95% t CI [{signed(r.ci_low)}, {signed(r.ci_high)}], Holm p = {p_text(r.p_holm)})" for v, r in prim.iterrows()]
    return (f"In {_where(study, scope, several)} ({int(prim['n'].iloc[0])} seeds, paired), against a final validation "
            f"loss of {prim['baseline_mean'].iloc[0]:.3f} nats/char without an embedding norm, " + " and ".join(parts)
            + f"; the registered decision rule (on validation loss) says: **{decision['overall']}**.")


def _where(study: str, scope: str, several: bool) -> str:
    where = f"[`{study}`](runs/{study}/REPORT.md)" + (f", regime `{scope}`" if several else "")
    overlap = STUDIES[study].shared_seeds.get(scope) if study in STUDIES else None
    return where + (f" ({overlap})" if overlap else "")


SECONDARY_WORDS = {name: m.finding_words for name, m in METRICS.items() if m.finding_words}


def secondary_sentence(study: str, scope: str, out: Path, several: bool, metrics: tuple[str, ...]) -> str:
    """One regime's secondary metrics from its registered family (family.csv), worded by the Holm decision."""
    family = pd.read_csv(out / study / "analysis" / scope / "family.csv")
    parts = []
    for metric in metrics:
        rows = family[family["metric"] == metric]
        if not len(rows):
            continue
        name, up, down = SECONDARY_WORDS[metric]
        parts.append(f"{name}: " + ", ".join(
            f"`{r.variant}` {r.mean_diff:+.4f} (95% t CI [{r.ci_low:+.4f}, {r.ci_high:+.4f}], Holm p = "
            f"{p_text(r.p_holm)}, {(up if r.mean_diff > 0 else down) if r.significant else 'not resolved'})"
            for r in rows.itertuples()))
    if not parts:
        return ""
    return f"In {_where(study, scope, several)} ({int(family['n'].iloc[0])} seeds, paired), " + "; ".join(parts) + "."


def _scopes(out: Path, studies) -> list[tuple[str, str, bool]]:
    found = []
    for study in studies:
        root = out / study / "analysis"
        if root.is_dir():
            scopes = sorted(p.name for p in root.iterdir() if (p / "family.csv").is_file())
            found += [(study, scope, len(scopes) > 1) for scope in scopes]
    return found


def findings_groups(out_dir=None, studies=FINDINGS_STUDIES) -> dict[str, list[str]]:
    """The findings, as paragraphs per group (FINDINGS_GROUPS), each built from the committed analysis files."""
    out = runs_root(out_dir)
    groups: dict[str, list[str]] = {g: [] for g in FINDINGS_GROUPS}
    scopes = _scopes(out, studies)
    lines = [f"- {scope_sentence(study, scope, out, several)}" for study, scope, several in scopes]
    if has_index(PRELIM, out):
        lines.append("- " + replication_sentence(replication_table(load_runs(PRELIM, out))))
    if lines:
        groups["accuracy"].append("\n".join(lines))
    budget_line = budget_finding(out)
    if budget_line:
        groups["accuracy"].append("Budget trend, exploratory (3 seeds; "
                                  "[`runs/stability-budget-v2/BUDGET.md`](runs/stability-budget-v2/BUDGET.md)):\n\n"
                                  + budget_line)
    calibration = [s for s in (secondary_sentence(study, scope, out, several, ("ece_equal_width", "brier"))
                               for study, scope, several in scopes) if s]
    if calibration:
        groups["calibration"].append("\n".join(f"- {s}" for s in calibration))
    groups["zero-shot"] += zeroshot_paragraphs(out, scopes)
    verdict = [line for line in (recommendation_for(out) or "").splitlines() if line.startswith("- ")]
    if verdict:
        groups["stability"].append("Stability v1, exploratory (3 seeds; [`runs/STABILITY.md`](runs/STABILITY.md)):"
                                   "\n\n" + "\n".join(verdict))
    from ..analyses.boundary import BOUNDARY_STUDIES, search_finding

    searches = [line for line in (search_finding(study, out) for study in BOUNDARY_STUDIES) if line]
    if searches:
        groups["stability"].append("Where each arm fails, exploratory (failure: non-finite loss, or final validation "
                                   "loss above the loss at init; each search's BOUNDARY.md):\n\n" + "\n".join(searches))
    h1b_lines = h1b_findings(out)
    if h1b_lines:
        groups["stability"].append("Where the baseline fails, confirmatory (H1b, docs/PROTOCOL.md amendment 2; "
                                   "[`runs/stability-h1b-v2/H1B.md`](runs/stability-h1b-v2/H1B.md)):\n\n"
                                   + "\n".join(h1b_lines))
    from .prose import findings_paragraphs as prose_paragraphs

    groups["scale"] += ladder_paragraphs(out) + prose_paragraphs(out)
    scale_line = scale_finding(out)
    if scale_line:
        groups["mechanism"].append("Scale vs normalization, exploratory (3 seeds; "
                                   "[`runs/stability-scale-v2/SCALE.md`](runs/stability-scale-v2/SCALE.md)):\n\n"
                                   + scale_line)
    scale_vs_norm = subword_scale_findings(out)
    if scale_vs_norm:
        groups["mechanism"].append("Scale vs normalization on subwords, exploratory (docs/PROTOCOL.md amendment 10; "
                                   "[`runs/ladder-bpe-scale/LADDER.md`](runs/ladder-bpe-scale/LADDER.md)):\n\n"
                                   + "\n".join(scale_vs_norm))
    return groups


def data_bound_caveat(out: Path, study: str) -> list[str]:
    """For the 1 MB character ladder: the line runs over sizes where the baseline no longer improves with size (the
    answer's data-bound rule), so it says little about size there, and its extrapolation less."""
    from ..publishing.templating import millions
    from .answer import size_data
    from .answer_words import size_words
    from .ladder import LE_SCAO_PARAMS

    if study != LADDER:
        return []
    words = size_words(size_data(out))
    if not words["plateau_params"]:
        return []
    return [f"- These lines include the sizes from {millions(words['plateau_params'])} up, where the baseline's loss "
            "stops falling with size (data-bound: [the answer in detail](#the-answer-in-detail)), so there they "
            f"measure over-fitting and learning rate as much as size, and the extrapolation to {LE_SCAO_PARAMS / 1e9:.1f}B has "
            "no support."]


def ladder_paragraphs(out: Path) -> list[str]:
    """The size ladders, their trends, the subword replications and LR checks, in the order they were registered."""
    paragraphs = []
    for study, what, amendments in ((LADDER, "The size ladder", "amendments 4-6"),
                                    (LADDER_BPE, "The subword ladder (BPE tokens, at the LR checked on characters)",
                                     "amendments 4 and 7")):
        ladder_lines = ladder_findings(out, study)
        scale_lines = ladder_scale_findings(out, study)
        if ladder_lines:
            paragraphs.append(f"{what}, per finished size (docs/PROTOCOL.md {amendments}; "
                              f"[`runs/{study}/LADDER.md`](runs/{study}/LADDER.md))"
                              + ("" if scale_lines else "; no trend across sizes until three have finished")
                              + ":\n\n" + "\n".join(ladder_lines))
        if scale_lines:
            paragraphs.append("Across its finished sizes, exploratory (does the difference shrink, grow or flip as "
                              "the model grows?):\n\n" + "\n".join(scale_lines + data_bound_caveat(out, study)))
    from ..analyses.ladder import SUBWORD_LR_CHECKS

    # the rung-1 check beside the subword ladder; a later one after the replication whose LRs it checks
    first_check, *later_checks = SUBWORD_LR_CHECKS
    paragraphs.append(subword_check_paragraph(out, first_check))
    for study, amendment, what in REPLICATIONS:
        replication = ladder_findings(out, study) + ladder_peak_findings(out, study)
        if replication:
            paragraphs.append(f"The subword replication{what}, confirmatory (docs/PROTOCOL.md amendment {amendment}; "
                              f"[`runs/{study}/LADDER.md`](runs/{study}/LADDER.md)): "
                              + ("the size where the subword ladder's seeds split" if study == BPE_REP else
                                 "the size where the subword ladder's rung-1 gain turned into an unresolved cost")
                              + ", on fresh seeds, analysed alone:\n\n" + "\n".join(replication))
    paragraphs += [subword_check_paragraph(out, study) for study in later_checks]
    paragraphs.append(data_ladder_paragraph(out))
    return [p for p in paragraphs if p]


def data_ladder_paragraph(out: Path) -> str:
    """The adequate-data ladder (amendment 16): each size once all its registered runs are in (quoted_lines)."""
    from ..core.corpora.opencorpus import dictionary_share
    from ..core.presets import DATA_TOKENS_PER_PARAM
    from ..studies.ladder_data import corpus_record
    from . import ladder
    from . import ladder_data_words as analysis

    study = LADDER_DATA
    lines = analysis.quoted_lines(load_runs(study, out)) if has_index(study, out) else []
    if not lines:
        return ""
    return (f"The adequate-data ladder, confirmatory (docs/PROTOCOL.md amendment 16; "
            f"[`runs/{study}/LADDER-DATA.md`](runs/{study}/LADDER-DATA.md)): {corpus_record()['characters'] / 1e6:.1f}M "
            f"characters of open English ({dictionary_share(corpus_record()):.0%} of them dictionary and glossary "
            f"entries, the rest quotations and tiny Shakespeare), {DATA_TOKENS_PER_PARAM} tokens per non-embedding parameter (under one pass), "
            "`none` and `ln` each "
            "at its own tuned LR and `rms` at `ln`'s, Holm within each size; a size is quoted once all its registered "
            f"runs are in, and the trend once {ladder.TREND_MIN_SIZES} sizes pass the data-bound check:\n\n"
            + "\n".join(lines))


def zeroshot_paragraphs(out: Path, scopes) -> list[str]:
    """Suite v2 (the registered endpoint) per regime, then suite v1 beside it with why it is superseded, in one
    place: whoever reads either reads how they relate."""
    from ..analyses import zeroshot

    v2 = zeroshot_findings(out)
    v1 = [s for s in (secondary_sentence(study, scope, out, several, ("lm_macro_acc",))
                      for study, scope, several in scopes) if s]
    paragraphs = []
    if v2:
        paragraphs.append("Suite v2, confirmatory (docs/PROTOCOL.md amendments 1 and 3):\n\n" + "\n".join(v2))
    breakdown = zeroshot.task_breakdown_lines(out)
    if breakdown:
        paragraphs.append("Per task (suite v2, the largest regime scored), the share of the macro difference each "
                          "task carries:\n\n" + "\n".join(breakdown))
    if v1:
        paragraphs.append(zeroshot.reconciliation(out) + "\n\n" + "\n".join(f"- {s}" for s in v1))
    return paragraphs


def findings_text(out_dir=None, studies=FINDINGS_STUDIES) -> str:
    """The findings page's body: per group (FINDINGS_GROUPS) its title, the sentence of what it means and its
    paragraphs, built from the analysis files, the replication table and the stability reports."""
    out = runs_root(out_dir)
    parts = []
    for key, paragraphs in findings_groups(out, studies).items():
        if paragraphs:
            title, meaning = FINDINGS_GROUPS[key]
            reading = _group_reading(key, out, studies)
            parts.append(f"### {title}\n\n*{meaning}{(' ' + reading) if reading else ''}*\n\n"
                         + "\n\n".join(paragraphs))
    return "\n\n".join(parts)


def _group_reading(key: str, out: Path, studies) -> str:
    """A group's computed reading, where its own registered results decide it (else nothing)."""
    scopes = _scopes(out, studies)
    if key == "accuracy" and scopes:
        verdicts = {json.loads((out / s / "analysis" / c / "decision.json").read_text())["overall"]
                    for s, c, _ in scopes}
        return (f"Every registered regime's decision rule says: {verdicts.pop()}." if len(verdicts) == 1 else
                f"The registered regimes' decisions differ: {', '.join(sorted(verdicts))}.")
    if key == "calibration" and scopes:
        family = pd.concat([pd.read_csv(out / s / "analysis" / c / "family.csv") for s, c, _ in scopes])
        rows = family[family["metric"].isin(["ece_equal_width", "brier"])]
        worse, better = int((rows["significant"] & (rows["mean_diff"] > 0)).sum()), int(
            (rows["significant"] & (rows["mean_diff"] < 0)).sum())
        return (f"Of {len(rows)} registered comparisons, {worse} resolve a worse and {better} a better calibration "
                "with the norm.")
    if key == "zero-shot":
        from ..analyses import zeroshot

        d = zeroshot.largest_regime(FINDINGS_STUDIES[-1], out) if has_index(FINDINGS_STUDIES[-1], out) else None
        if d is not None and len(d["family"]):
            shares = zeroshot.task_shares(d)
            macro = d["family"][d["family"]["task"] == "macro"].iloc[0]
            top = shares[shares["variant"] == macro["variant"]].sort_values("share").iloc[-1]
            word = ("lowers" if macro["mean_diff"] < 0 else "raises") if macro["significant"] else "does not resolve"
            return (f"On suite v2 `{macro['variant']}` {word} macro accuracy ({signed(macro['mean_diff'])} in the "
                    f"largest regime), {percent(top['share'])} of it through one task, `{top['task']}`.")
    if key == "stability":
        h1b_lines = h1b_findings(out)
        if h1b_lines:
            removed = sum(line.count("(removes the failures") for line in h1b_lines)
            return ("In the registered test where `none` fails, " + ("no norm removes the failures." if not removed
                                                                       else f"{removed} arm(s) remove them."))
    return ""


def scale_finding(out: Path) -> str:
    """How much of LayerNorm's difference normalizing alone carries, once every registered run has finished."""
    from ..analyses import scale as svn

    if not has_index(svn.STUDY, out):
        return ""
    runs = load_runs(svn.STUDY, out)
    if len(runs) < len(STUDIES[svn.STUDY].cells()):
        return ""
    shares = svn.normalizing_share(svn.regime_table(runs, svn.init_input_norms(svn.STUDY, out)), runs)
    if shares.empty:
        return ""

    def gap(r, half: str) -> str:
        return (f"{signed(getattr(r, half + '_vs_ln'))} [{signed(getattr(r, half + '_vs_ln_low'))}, "
                f"{signed(getattr(r, half + '_vs_ln_high'))}] from `ln`")

    parts = [f"std {r.emb_init_std:g} {r.head} head: `ln` {signed(r.ln_delta)} (block 1's input norm at init "
             f"{r.none_input_norm:.2f} → {r.ln_input_norm:.2f}), `ln_matched` {signed(r.ln_matched_delta)}, "
             f"{gap(r, 'ln_matched')}" + (f"; `scaled_unit` {signed(r.scaled_unit_delta)}, {gap(r, 'scaled_unit')} "
                                          f"(input norm {r.scaled_unit_input_norm:.2f})" if "scale_share" in shares else "")
             for r in shares.itertuples()]
    return (f"- In the {len(shares)} embedding-init regimes where LayerNorm's difference in final validation loss from "
            "`none` is resolved, each half of it against LayerNorm itself (final validation loss minus `ln`'s, paired "
            "by seed, 95% t interval): normalizing alone (`ln_matched`, gain starting at `none`'s input norm)"
            + (" and rescaling alone (`scaled_unit`: the token embedding at unit RMS, not normalized)"
               if "scale_share" in shares else "") + ", each beside its difference from `none`: " + "; ".join(parts)
            + ".")


def budget_finding(out: Path) -> str:
    """LayerNorm's cost per budget and whether it is still there at the largest, once every registered run of the
    budget study has finished."""
    from ..analyses import budget as budget_trend
    from ..core.corpora.data import load_corpus

    done, registered = budget_trend.finished(out)
    if done < registered:
        return ""
    table = budget_trend.budget_table(budget_trend.load_budget_runs(out), len(load_corpus().train))
    return (f"- LayerNorm's difference in final validation loss from `none`, by budget: "
            f"{budget_trend.trend_words(table)}. At the largest budget, {budget_trend.largest_budget_words(table)}.")


def zeroshot_findings(out: Path) -> list[str]:
    """Suite v2's macro endpoint, one line per regime, on the largest paired study it has scored (the registered
    study contains the first regime's earlier seeds)."""
    from ..analyses import zeroshot

    for study in reversed(FINDINGS_STUDIES):
        lines = [f"- {zeroshot.findings_line(d)}" for d in zeroshot.analyse(study, out, bootstrap=False).values()
                 if len(d["family"])]
        if lines:
            return lines
    return []


def h1b_findings(out: Path) -> list[str]:
    """One line per regime of the H1b study's decision rule 3, once every registered seed has finished."""
    from ..analyses import h1b

    if not has_index(h1b.STUDY, out):
        return []
    runs = load_runs(h1b.STUDY, out)
    seeds = h1b.complete_seeds(runs)
    if len(seeds) < len({c.seed for c in STUDIES[h1b.STUDY].cells()}):
        return []
    lines, tuned_by_regime = [], []
    for clip, (family, decision) in h1b.confirmatory(runs).items():
        tuned = family[family["endpoint"] == "tuned_cost"].set_index("variant")
        tuned_by_regime.append(tuned["mean_diff"].round(9).to_dict())
        arms = "; ".join(f"`{v}`: {d['verdict']} ({'removes' if d['fixes'] else 'does not remove'} the failures; "
                         f"tuned cost {signed(tuned.loc[v, 'mean_diff'])} [{signed(tuned.loc[v, 'ci_low'])}, "
                         f"{signed(tuned.loc[v, 'ci_high'])}] nats/char)" for v, d in decision["variants"].items())
        lines.append(f"- {h1b.REGIME_NAMES[clip].capitalize()}, peak LR {h1b.CONFIRMATORY_LR:g}, seeds "
                     f"{seeds[0]}–{seeds[-1]}: `none` failed {decision['baseline_failures']} of {len(seeds)}; {arms}.")
    if len(tuned_by_regime) > 1 and all(t == tuned_by_regime[0] for t in tuned_by_regime):
        lines.append("- The tuned cost is the same in both regimes: it comes from one set of tuned runs, each arm at its "
                     "own best LR of the search with clipping on (H1B.md), not from runs without clipping.")
    return lines
