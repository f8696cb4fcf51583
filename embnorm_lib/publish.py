"""Analyse a finished study end to end: diagnostics and statistics notebooks, report.html, runs/README.md.

    python -m embnorm_lib.publish seeds-final

Executed notebooks land in runs/<study>/; the statistics notebook is rendered to
runs/<study>/report.html with nbconvert."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import BRIEF_ERRORS
from .io import atomic_write_text, default_runs_dir, repo_root
from .report import FINDINGS_STUDIES, findings_text, runs_readme, update_readme_findings
from .sweep import build_index

ANALYSIS_NOTEBOOKS = ("03_diagnostics", "04_statistics")


NOTEBOOK_TIMEOUT_S = 1800  # per cell: a hung kernel fails the step instead of blocking it forever


def publish(study: str, out_dir=None, figures_dir=None) -> dict[str, Path]:
    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    from .analysis import check_complete, study_family

    out = Path(out_dir or default_runs_dir()).resolve()
    runs = build_index(study, out)
    check_complete(study, runs, study_family(study, runs))  # before any notebook runs: one line, not a traceback
    notebooks = repo_root() / "notebooks"
    written = {}
    for name in ANALYSIS_NOTEBOOKS:
        executed = out / study / f"{name}.ipynb"
        params = dict(study=study, out_dir=str(out), figures_dir=figures_dir or "")
        if name == "03_diagnostics":
            params["interactive"] = False
        pm.execute_notebook(str(notebooks / f"{name}.ipynb"), str(executed), kernel_name="python3",
                            progress_bar=False, cwd=str(notebooks), parameters=params,
                            execution_timeout=NOTEBOOK_TIMEOUT_S)
        written[name] = executed
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(written["04_statistics"], as_version=4))
    written["report.html"] = atomic_write_text(out / study / "report.html", body)
    written["runs/README.md"] = atomic_write_text(out / "README.md", runs_readme(out) + "\n")
    if study in FINDINGS_STUDIES and out == default_runs_dir().resolve():
        update_readme_findings(repo_root() / "README.md", findings_text(out))
        written["README.md findings"] = repo_root() / "README.md"
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--figures-dir", default=None)
    args = p.parse_args(argv)
    try:
        written = publish(args.study, args.out_dir, args.figures_dir)
    except BRIEF_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, path in written.items():
        print(f"{name:16s} {path}")
    report = Path(args.out_dir or default_runs_dir()) / args.study / "REPORT.md"
    if report.is_file():
        print(report.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
