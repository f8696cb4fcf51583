"""Analyse a finished study end to end: diagnostics and statistics notebooks, report.html, runs/README.md, and
(for the committed runs directory) the README findings and the paper.

    python -m embnorm_lib.publish seeds-final         # a paired study
    python -m embnorm_lib.publish stability           # the v1 stability studies -> STABILITY.md
    python -m embnorm_lib.publish stability-h1b-v2    # a stability v2 study -> its BOUNDARY/SCALE/BUDGET/H1B.md
    python -m embnorm_lib.publish paper               # paper/paper.pdf alone
    python -m embnorm_lib.publish readme              # README's first screen, FINDINGS.md, figures/ index alone

Executed notebooks land in runs/<study>/ (without timestamps or machine paths); the statistics notebook is
rendered to runs/<study>/report.html with nbconvert, outputs only. Publishing unchanged runs rewrites nothing."""
from __future__ import annotations

import argparse
import html
import multiprocessing
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from . import h1b, length, paper, stability
from .analysis import check_complete, study_family
from .config import check_name
from .errors import BRIEF_ERRORS, entry
from .io import default_runs_dir, repo_root, runs_root, transaction, uncommitted_indexes, write_bytes_if_changed
from .readme import update_readme
from .report import FINDINGS_STUDIES, write_runs_readme
from .results import build_index, load_positions
from .studies import check_registered_runs

ANALYSIS_NOTEBOOKS = ("03_diagnostics", "04_statistics")


NOTEBOOK_TIMEOUT_S = 1800  # per cell: a hung kernel fails the step instead of blocking it forever


VOLATILE_NB_KEYS = ("start_time", "end_time", "duration", "input_path", "output_path", "environment_variables")


def stable_notebook(nb) -> None:
    """Drop what changes between identical executions (timestamps, durations, this machine's paths), so an
    executed notebook is a function of its inputs and re-publishing unchanged runs leaves it byte-identical."""
    for key in VOLATILE_NB_KEYS:
        nb.metadata.get("papermill", {}).pop(key, None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.id = "injected-parameters"  # papermill gives it a random id on every run
        cell.metadata.pop("execution", None)
        for key in VOLATILE_NB_KEYS:
            cell.metadata.get("papermill", {}).pop(key, None)


def report_html(nb) -> str:
    """The statistics notebook as a report: outputs only (no code, no prompts, no stderr such as warnings)."""
    import copy

    from nbconvert import HTMLExporter

    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    # the basic template: the cells' HTML without nbconvert's ~8,000 lines of embedded JupyterLab CSS
    exporter = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nb)
    title = nb.cells[0].source.splitlines()[0].lstrip("# ") if nb.cells else "report"
    return REPORT_PAGE.format(title=html.escape(title), body=body)


REPORT_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }}
table {{ border-collapse: collapse; font-size: 0.9rem; margin: 0.5rem 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }}
img {{ max-width: 100%; }} pre {{ white-space: pre-wrap; }} .anchor-link {{ display: none; }}
</style></head>
<body>
{body}
</body></html>
"""


def _execute_notebook(source: str, executed: str, cwd: str, params: dict) -> str:
    import papermill as pm

    pm.execute_notebook(source, executed, kernel_name="python3", progress_bar=False, cwd=cwd, parameters=params,
                        execution_timeout=NOTEBOOK_TIMEOUT_S)
    return executed


def publish(study: str, out_dir=None, figures_dir=None) -> dict[str, Path]:
    """A paired study's index, notebooks, report.html and what quotes them, as one transaction (io.transaction):
    when any step fails, every file it wrote is put back as it was."""
    check_name("study", study)
    out = runs_root(out_dir).resolve()
    with transaction(out):
        return _publish(study, out, figures_dir)


def _publish(study: str, out: Path, figures_dir) -> dict[str, Path]:
    import shutil
    import tempfile

    import nbformat

    check_registered_runs(study, out)  # every run the registry expects is there...
    runs = build_index(study, out)  # ...and every finished run matches its seal
    check_complete(study, runs, study_family(study, runs))  # before any notebook runs: one line, not a traceback
    default_out = out == default_runs_dir().resolve()
    notebooks = repo_root() / "notebooks"
    written = {}
    scratch = Path(tempfile.mkdtemp(prefix=".publish.", dir=out / study))  # hidden: never indexed or committed
    try:
        jobs = {}
        for name in ANALYSIS_NOTEBOOKS:
            # defaults stay "" so the executed notebook names no path of this machine
            params = dict(study=study, out_dir="" if default_out else str(out),
                          figures_dir=str(Path(figures_dir).resolve()) if figures_dir else "")
            if name == "03_diagnostics":
                params["interactive"] = False
            jobs[name] = (str(notebooks / f"{name}.ipynb"), str(scratch / f"{name}.ipynb"), str(notebooks), params)
        # the two notebooks read the index and write different files: run them side by side, in processes
        # (papermill in threads is unsafe: the working directory is process-wide, papermill #473)
        with ProcessPoolExecutor(max_workers=len(jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
            done = {name: pool.submit(_execute_notebook, *job) for name, job in jobs.items()}
            executed = {name: Path(future.result()) for name, future in done.items()}
        for name in ANALYSIS_NOTEBOOKS:
            nb = nbformat.read(executed[name], as_version=4)
            stable_notebook(nb)
            written[name] = write_bytes_if_changed(out / study / f"{name}.ipynb", nbformat.writes(nb).encode())
            if name == "04_statistics":
                written["report.html"] = write_bytes_if_changed(out / study / "report.html", report_html(nb).encode())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    written.update(_zeroshot_report(study, out))
    written.update(_quoting_readmes(out, refresh_findings=study in FINDINGS_STUDIES and default_out))
    return written


def publish_stability(out_dir=None, figures_dir=None) -> dict[str, Path]:
    """runs/STABILITY.md and figures/stability/ from the stability studies, then what quotes them (one transaction)."""
    out = runs_root(out_dir).resolve()
    with transaction(out):
        return _publish_stability(out, figures_dir)


def _publish_stability(out: Path, figures_dir) -> dict[str, Path]:
    for study in stability.STUDIES:
        if (out / study).is_dir():
            check_registered_runs(study, out)
            build_index(study, out)
    written = {"STABILITY.md": stability.write_report(out, figures_dir)}
    written.update(_quoting_readmes(out, refresh_findings=out == default_runs_dir().resolve()))
    return written


def _quoting_readmes(out: Path, refresh_findings: bool) -> dict[str, Path]:
    """runs/README.md; and for the committed runs directory the README's first screen, FINDINGS.md, the figure index
    and the paper, which quote it."""
    written = {"runs/README.md": write_runs_readme(out)}
    if refresh_findings:
        written.update({path.relative_to(repo_root()).as_posix(): path for path in update_readme(out)})
        written["paper.pdf"] = paper.build(out)
    return written


def _zeroshot_report(study: str, out: Path) -> dict[str, Path]:
    """ZEROSHOT.md where some of the study's runs were scored with suite v2 (`embnorm_lib.rescore`)."""
    from . import zeroshot

    if zeroshot.scored_runs(study, out).empty:
        return {}
    return {"ZEROSHOT.md": zeroshot.write_report(study, out)}


def v2_report_writer(study: str) -> Callable[[Path, Path | None], Path]:
    """The report a stability v2 study or the H1b study is analysed into (each module owns its file)."""
    from . import boundary, budget_trend, h1b, ladder, report, scale_vs_norm
    from .studies import studies_of

    if study in boundary.BOUNDARY_STUDIES:
        return lambda out, figures: boundary.write_report(out, figures, study)
    if study in studies_of("ladder"):
        return lambda out, figures: ladder.write_report(study, out, figures, answer=report.ladder_answer(out, study))
    if study in studies_of("ladder-data"):
        from . import ladder_data_report

        return lambda out, figures: ladder_data_report.write_report(study, out, figures)
    writers = {scale_vs_norm.STUDY: lambda out, figures: scale_vs_norm.write_report(
                   out, answer=[line for line in [report.scale_finding(out)] if line]),
               budget_trend.REPORT_STUDY: lambda out, figures: budget_trend.write_report(out, figures_dir=figures),
               h1b.STUDY: lambda out, figures: h1b.write_report(out, figures, answer=report.h1b_findings(out))}
    if study not in writers:
        raise ValueError(f"no v2 report for study {study!r}; allowed: "
                         f"{', '.join([*boundary.BOUNDARY_STUDIES, *writers])}")
    return writers[study]


def publish_v2(study: str, out_dir=None, figures_dir=None) -> dict[str, Path]:
    """A stability v2, H1b or ladder study: its index, its report, then what quotes them (runs/README.md, the
    paper), as one transaction."""
    out = runs_root(out_dir).resolve()
    with transaction(out):
        return _publish_v2(study, out, figures_dir)


def _publish_v2(study: str, out: Path, figures_dir) -> dict[str, Path]:
    build_index(study, out)
    figures = Path(figures_dir) if figures_dir else None
    report = v2_report_writer(study)(out, figures)
    written = {report.name: report}
    if study == h1b.STUDY and not load_positions(study, out).empty:  # its tuned runs also carry the length analysis
        written["LENGTH.md"] = length.write_report(out, figures)
    written.update(_zeroshot_report(study, out))
    written.update(_quoting_readmes(out, refresh_findings=out == default_runs_dir().resolve()))
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", help="a study of the registry, 'stability' for all v1 stability studies together, or "
                                 "'paper' for the paper alone, 'readme' for the README's first screen, FINDINGS.md and the figure index")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--figures-dir", default=None)
    args = p.parse_args(argv)
    from .studies import STUDIES

    try:
        if args.study == "paper":
            with transaction(runs_root(args.out_dir)):
                written = {"paper.pdf": paper.build(args.out_dir)}
        elif args.study == "readme":
            with transaction(runs_root(args.out_dir)):
                written = {path.name: path for path in update_readme(args.out_dir)}
        elif args.study == "stability":
            written = publish_stability(args.out_dir, args.figures_dir)
        elif args.study in STUDIES and STUDIES[args.study].analysis in ("stability-v2", "h1b", "ladder", "ladder-data"):
            written = publish_v2(args.study, args.out_dir, args.figures_dir)
        else:
            written = publish(args.study, args.out_dir, args.figures_dir)
    except (*BRIEF_ERRORS, OSError) as e:  # nothing of the publication was kept (a transaction)
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, path in written.items():
        print(f"{name:16s} {path}")
    if runs_root(args.out_dir).resolve() == default_runs_dir().resolve():
        for index in uncommitted_indexes(default_runs_dir()):
            print(f"note: {index} is not committed; commit it with what was published from it (README, "
                  f"runs/README.md, paper/), or a clean clone disagrees", file=sys.stderr)
    report = runs_root(args.out_dir) / args.study / "REPORT.md"
    if report.is_file():
        print(report.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
