"""Publish what a study's runs say: its analysis kind's plugin (registered by analyses/) writes the study's
report(s), then what quotes every study is rewritten: runs/README.md and, for the committed runs directory, the
README's first screen, FINDINGS.md, the figure index and the paper. One transaction: a failed step puts back every
file it wrote.

    python -m embnorm_lib publish <study>     # a registered study by its analysis kind (a grid run ad hoc: paired)
    python -m embnorm_lib publish <group>     # the studies an analysis kind publishes together (its `group`)
    python -m embnorm_lib publish paper       # paper/paper.pdf alone
    python -m embnorm_lib publish readme      # README's first screen, FINDINGS.md, figures/ index alone

A paired study's notebooks run here (`run_analysis_notebooks`): executed notebooks land in runs/<study>/ (without
timestamps or machine paths); the statistics notebook is rendered to runs/<study>/report.html with nbconvert, outputs
only. Publishing unchanged runs rewrites nothing."""
from __future__ import annotations

import argparse
import html
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..core.config import check_name
from ..core.errors import BRIEF_ERRORS, ConfigError, DataError, RunDirError, entry
from ..core.records.io import (
    default_runs_dir,
    directory_option,
    repo_root,
    runs_root,
    shown_path,
    transaction,
    uncommitted_indexes,
    write_bytes_if_changed,
)
from ..runner.design import check_design
from ..runner.kernels import execute_notebook
from ..runner.registry import ANALYSES, analysis_of, headline_studies, site
from .recipe_table import write_recipes
from .report import write_runs_readme

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


KERNEL_NOISE = ("ERROR:tornado.general", "Uncaught exception in ZMQStream")  # the kernel channel's, not the analysis's


def check_no_kernel_noise(nb, name: str) -> None:
    """Refuse an executed notebook whose stderr caught a Jupyter messaging error (seen under CPU contention: 'DELIM
    not in msg_list'): it would be committed as if the analysis had printed it."""
    for number, cell in enumerate(nb.cells, start=1):
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("name") == "stderr" else ""
            if any(mark in text for mark in KERNEL_NOISE):
                line = next(x for x in text.splitlines() if any(mark in x for mark in KERNEL_NOISE))
                raise RunDirError(f"invalid executed {name}.ipynb: cell {number} caught a Jupyter messaging error in "
                                  f"its stderr ({line.strip()[:80]}); nothing was published; allowed: a clean "
                                  "execution (publish again: the error is the kernel channel's, not the analysis's)")


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
    execute_notebook(source, executed, progress_bar=False, cwd=cwd, parameters=params,
                     execution_timeout=NOTEBOOK_TIMEOUT_S)
    return executed


def run_analysis_notebooks(study: str, out: Path, figures_dir) -> dict[str, Path]:
    """The diagnostics and statistics notebooks executed on a study's index (side by side, in processes), kept
    without what changes between identical executions, and the statistics notebook as report.html."""
    import shutil
    import tempfile

    import nbformat

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
        nbs = {name: nbformat.read(executed[name], as_version=4) for name in ANALYSIS_NOTEBOOKS}
        for name, nb in nbs.items():  # every notebook checked before either is written
            check_no_kernel_noise(nb, name)
        for name, nb in nbs.items():
            stable_notebook(nb)
            written[name] = write_bytes_if_changed(out / study / f"{name}.ipynb", nbformat.writes(nb).encode())
            if name == "04_statistics":
                written["report.html"] = write_bytes_if_changed(out / study / "report.html", report_html(nb).encode())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return written


def publish(study: str, out_dir=None, figures_dir=None) -> dict[str, Path]:
    """A study (or an analysis kind's group of studies) published by its kind's plugin, then what quotes it, as one
    transaction (io.transaction): when any step fails, every file it wrote is put back as it was."""
    check_name("study", study)
    out = runs_root(out_dir).resolve()
    figures = directory_option(figures_dir, "--figures-dir") if figures_dir else None
    groups = {a.group: a for a in ANALYSES.values() if a.group}
    if study not in groups and not (out / study / "runs.csv").is_file():
        raise ConfigError(f"no runs of study {study!r} to publish (no {shown_path(out / study / 'runs.csv')}); allowed: "
                          f"{publishable_names(out, groups)}")
    with transaction(out):
        if study in groups:
            written = groups[study].publish_group(out, figures)
            pages = True
        else:
            plugin = analysis_of(study)
            check_design(study, out, publishing=True)  # exactly the registered design, no sweep holding it
            try:
                written = plugin.publish(study, out, figures)
            except (ConfigError, RunDirError, DataError) as e:
                if not plugin.group:
                    raise
                # the hint first: a command line keeps the first 500 characters of the one line, and the check that
                # failed (say, 7 LRs per variant and seed) is about publishing the member alone, not about its runs
                raise type(e)(f"study {study} is published with the other {plugin.kind} studies: `python -m "
                              f"embnorm_lib publish {plugin.group}` (published alone, it fails: {e})") from e
            pages = study in headline_studies() if plugin.headline_only else True
        written.update(quoting_pages(out, refresh=pages and out == default_runs_dir().resolve()))
        return written


def publishable_names(out: Path, groups: dict) -> str:
    """What `publish` takes here, for the line that refuses anything else: the studies with an index under `out`,
    the analysis kinds' groups, and the two page sets."""
    studies = sorted(p.parent.name for p in out.glob("*/runs.csv"))
    shown = ", ".join(studies[:12]) + (f" and {len(studies) - 12} more" if len(studies) > 12 else "")
    return (f"a study with runs ({shown or 'none yet: run a sweep first'}), a group ({', '.join(sorted(groups))}), "
            "'paper' or 'readme'")


def quoting_pages(out: Path, refresh: bool) -> dict[str, Path]:
    """runs/README.md and runs/RECIPES.md; and for the committed runs directory the README's first screen, FINDINGS.md, the figure index
    and the paper, which quote it."""
    written = {"runs/README.md": write_runs_readme(out), "runs/RECIPES.md": write_recipes(out)}
    if refresh:
        written.update({path.relative_to(repo_root()).as_posix(): path for path in site().readme(out)})
        written["paper.pdf"] = site().paper(out)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", help="a study of the registry, a group of studies (an analysis kind's, e.g. all v1 "
                                 "stability studies), or 'paper' for the paper alone, 'readme' for the README's first "
                                 "screen, FINDINGS.md and the figure index")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--figures-dir", default=None)
    args = p.parse_args(argv)
    if args.study in ("paper", "readme") and (args.figures_dir or args.out_dir and
                                              runs_root(args.out_dir).resolve() != default_runs_dir().resolve()):
        # these pages are the checkout's own (README.md, FINDINGS.md, figures/, paper/): built from scratch runs they
        # would overwrite what the committed runs say
        print(f"error: publish {args.study} writes the checkout's pages from the committed runs directory, so it "
              f"takes no --out-dir or --figures-dir (got {args.out_dir or args.figures_dir!r}); allowed: "
              f"`python -m embnorm_lib publish {args.study}` alone", file=sys.stderr)
        return 2
    try:
        if args.study in ("paper", "readme"):
            with transaction(runs_root(args.out_dir)):
                if args.study == "paper":
                    written = {"paper.pdf": site().paper(args.out_dir)}
                else:
                    written = {path.name: path for path in site().readme(args.out_dir)}
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
