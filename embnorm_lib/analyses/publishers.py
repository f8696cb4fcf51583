"""How a study of each analysis kind is published (the functions analyses/plugins.py registers): its index checked
and built, its report written, and the reports that go with it (zero-shot suite v2 where runs were re-scored, the
length analysis where runs recorded per-position losses). The engine's publish command wraps each in a transaction
and rewrites what quotes the study afterwards."""
from __future__ import annotations

from pathlib import Path

from ..publishing.publish import run_analysis_notebooks
from ..publishing.render import markdown_arm_table
from ..publishing.report import arm_table, layouts
from ..runner.registry import Section, check_registered_runs, planned_runs
from ..runner.results import build_index, has_index, load_positions, load_runs, study_provenance
from ..studies import STUDIES


def zeroshot_report(study: str, out: Path) -> dict[str, Path]:
    """ZEROSHOT.md where some of the study's runs were scored with suite v2 (`embnorm_lib.tools.rescore`)."""
    from . import zeroshot

    if zeroshot.scored_runs(study, out).empty:
        return {}
    return {"ZEROSHOT.md": zeroshot.write_report(study, out)}


def paired(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    """Every registered run present and sealed, the registered family complete, then the analysis notebooks."""
    from .paired import check_complete, check_paired, study_family

    check_registered_runs(study, out)  # every run the registry expects is there...
    runs = build_index(study, out)  # ...and every finished run matches its seal
    check_complete(study, runs, study_family(study, runs))  # before any notebook runs: one line, not a traceback
    check_paired(study, runs)
    written = run_analysis_notebooks(study, out, figures)
    written.update(zeroshot_report(study, out))
    return written


def stability_v1(out: Path, figures: Path | None) -> dict[str, Path]:
    """The v1 stability studies together: each one present checked and indexed, then STABILITY.md."""
    from . import stability

    for study in stability.STUDIES:
        if (out / study).is_dir():
            check_registered_runs(study, out)
            build_index(study, out)
    return {"STABILITY.md": stability.write_report(out, figures)}


def _report(study: str, out: Path, write) -> dict[str, Path]:
    """A study whose report counts its finished runs: its index, its report, and zero-shot v2 where scored."""
    build_index(study, out)
    report = write()
    written = {report.name: report}
    written.update(zeroshot_report(study, out))
    return written


def boundary(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    from . import boundary as analysis

    return _report(study, out, lambda: analysis.write_report(out, figures, study))


def scale(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    from . import findings
    from . import scale as analysis

    return _report(study, out, lambda: analysis.write_report(
        out, study=study, answer=[line for line in [findings.scale_finding(out)] if line]))


def budget(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    from . import budget as analysis

    return _report(study, out, lambda: analysis.write_report(out, figures_dir=figures))


def h1b(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    """H1B.md; its tuned runs also carry the length analysis (LENGTH.md) where they recorded positions."""
    from . import findings, length
    from . import h1b as analysis

    build_index(study, out)
    report = analysis.write_report(out, figures, study, answer=findings.h1b_findings(out))
    written = {report.name: report}
    if not load_positions(study, out).empty:
        written["LENGTH.md"] = length.write_report(out, figures)
    written.update(zeroshot_report(study, out))
    return written


def ladder(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    from . import ladder_findings
    from . import ladder_report as analysis

    # an LR check's report is its table of LRs; the size findings (one run per arm and seed) are the ladder's own
    answer = None if study in analysis.LR_CHECKS else (lambda: ladder_findings.ladder_answer(out, study))
    return _report(study, out, lambda: analysis.write_report(study, out, figures, answer=answer and answer()))


def ladder_data(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    from . import ladder_data_words as analysis

    return _report(study, out, lambda: analysis.write_report(study, out, figures))


def prose(study: str, out: Path, figures: Path | None) -> dict[str, Path]:
    from . import prose as analysis

    return _report(study, out, lambda: analysis.write_report(study, out, figures))


def paired_entry(study: str, out: Path, section: Section) -> list[str]:
    """A paired study in runs/README.md: its description and provenance, the per-arm table (per preset where it has
    several), links to its statistics and zero-shot reports, and any lines its registry entry adds."""
    text = STUDIES[study].description
    if not has_index(study, out):
        return [f"## {study}", "", text, "", f"Not run yet: `python -m embnorm_lib sweep {study}`.", ""]
    runs = load_runs(study, out)
    prov = study_provenance(study, out)
    parts = [f"## {study}", "", text, "",
             f"Produced by `python -m embnorm_lib sweep {study}` at commit(s) "
             f"{', '.join(c[:12] for c in prov['commits'])}; {prov['runs']} of {planned_runs(study)} runs finished, "
             f"{prov['sweep_wall_s'] / 60:.1f} min of sweep wall time ({layouts(prov)}).", ""]
    if "cfg.preset" in runs.columns and runs["cfg.preset"].nunique() > 1:
        for preset, sub in runs.groupby("cfg.preset"):
            parts += [f"Preset `{preset}`:", "", markdown_arm_table(arm_table(sub.assign(arm=sub["variant"]))), ""]
    else:
        parts += [markdown_arm_table(arm_table(runs)), ""]
    if (out / study / "REPORT.md").is_file():
        parts += [f"Statistics and the decision: [`{study}/REPORT.md`]({study}/REPORT.md) "
                  f"(rendered notebook: `{study}/report.html`).", ""]
    if (out / study / "ZEROSHOT.md").is_file():
        parts += _zeroshot_paragraph(study, out)
    if STUDIES[study].readme_extra:
        parts += STUDIES[study].readme_extra(runs)
    return parts


def _zeroshot_paragraph(study: str, out: Path) -> list[str]:
    from .zeroshot import prints_suite_v1

    return [f"Zero-shot suite v2 (its runs re-scored, `python -m embnorm_lib rescore {study} --suite v2`): "
            f"[`{study}/ZEROSHOT.md`]({study}/ZEROSHOT.md)."
            + (" Suite v2 is the registered zero-shot endpoint (docs/PROTOCOL.md amendment 3) and supersedes "
               "suite v1, whose macro accuracy REPORT.md still prints in the registered family; both pages "
               "say why, from these runs (v1's tasks against chance and ceiling, and each suite's minimum "
               "detectable difference)." if prints_suite_v1(study, out) else ""), ""]
