"""The flat module names of embnorm_lib before the layers had folders (issue 74), kept importable and runnable.

`import embnorm_lib.sweep`, `from embnorm_lib.results import load_runs` and `python -m embnorm_lib.publish readme`
keep working: each old name is an alias of the module where the code lives now (the same module object, so a
monkeypatch through either name reaches the code). One table instead of one shim file per old name: the package's
top level shows the layers, and every moved file stays a pure rename in git, so a branch that edited the old file
merges into the new one."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

# old name -> where it lives now (both relative to embnorm_lib)
MOVED = {
    # core: one training run, its data, its files
    "errors": "core.errors", "io": "core.io", "device": "core.device", "distributed": "core.distributed",
    "variants": "core.variants", "config": "core.config", "tokenizer": "core.tokenizer", "data": "core.data",
    "model": "core.model", "evaluate": "core.evaluate", "calibration": "core.calibration",
    "diagnostics": "core.diagnostics", "rundir": "core.rundir", "seal": "core.seal", "checkpoint": "core.checkpoint",
    "train": "core.train", "packed": "core.packed", "fleet": "core.fleet", "notebook": "core.notebook",
    "lm_eval_adapter": "core.lm_eval_adapter", "corpus": "core.corpus", "opencorpus": "core.opencorpus",
    "quickstart": "core.quickstart", "cli": "core.cli", "steplog": "core.steplog",
    "fleet_lmeval": "core.fleet_lmeval",
    # runner: many runs (a study's grid) trained, reused and indexed
    "run": "runner.run", "sweep": "runner.sweep", "reuse": "runner.reuse",
    "results": "runner.results",
    # tools: commands built on the runner and publishing
    "job": "tools.job", "rescore": "tools.rescore", "bench": "tools.bench", "bench_gpu": "tools.bench_gpu",
    "bench_fleet": "tools.bench_fleet", "throughput": "tools.throughput", "compact_logs": "tools.compact_logs",
    # publishing: tables, figures, reports and pages from analysed data
    "publish": "publishing.publish", "render": "publishing.render", "plots": "analyses.plots",
    "figures": "publishing.figures", "explore": "publishing.explore", "study_header": "publishing.study_header",
    "readme": "analyses.site", "report": "publishing.report", "paper": "analyses.paper",
    # the study layer: registry data and one analysis plugin per kind
    "seed_study": "studies.seed_study", "findings_groups": "studies.findings_groups",
    "ladder_data": "studies.ladder_data",
    "analysis": "analyses.paired", "stability": "analyses.stability", "boundary": "analyses.boundary",
    "h1b": "analyses.h1b", "length": "analyses.length", "zeroshot": "analyses.zeroshot",
    "ladder": "analyses.ladder", "answer": "analyses.answer", "budget_trend": "analyses.budget",
    "scale_vs_norm": "analyses.scale", "ladder_data_report": "analyses.ladder_data",
}
PACKAGE = __name__.rsplit(".", 1)[0]


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module it moved to; `python -m <old name>` runs the new module as __main__."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.real_spec = None

    def create_module(self, spec):  # noqa: ANN201 (the importlib protocol)
        module = importlib.import_module(self.target)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.real_spec  # importlib set the alias's spec on the shared module object

    def get_code(self, fullname: str):  # noqa: ANN201 (runpy's protocol)
        return compile(f"import runpy\nrunpy.run_module({self.target!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{fullname}: moved to {self.target}>", "exec")

    def is_package(self, fullname: str) -> bool:
        return False


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN201 (the importlib protocol)
        old = fullname.removeprefix(PACKAGE + ".")
        if fullname.startswith(PACKAGE + ".") and old in MOVED:
            return importlib.machinery.ModuleSpec(fullname, _Alias(f"{PACKAGE}.{MOVED[old]}"))
        return None


def install() -> None:
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    # right after the path finder: a module that exists under its own name is found first, and an old name is
    # resolved here before any other finder (an editable install of another checkout) could answer for it
    path_finder = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder), None)
    sys.meta_path.insert(len(sys.meta_path) if path_finder is None else path_finder + 1, _Finder())
