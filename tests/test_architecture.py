"""The package's shape: imports flow one way, and each output file kind has one writing module."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import embnorm_lib

PACKAGE = Path(embnorm_lib.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path) -> set[str]:
    """Every module of the package this file imports, at any depth (imports inside functions included)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("embnorm_lib"):
                continue
            names = [f"{target}.{a.name}" for a in node.names]
            found |= {n for n in names if n in MODULES} or {target}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("embnorm_lib")}
    return {m for m in found if m in MODULES and m != me}


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): internal_imports(p) for p in PACKAGE.rglob("*.py")}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import(tmp_path):
    # the detector itself must be able to fail: a two-module cycle hidden inside a function
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert "embnorm_lib.core.records.io" in internal_imports(PACKAGE / "core" / "records" / "rundir.py")


# Which module writes each kind of output file (every write goes through core/records/writes.py's temp-file writer).
OWNERS = {
    "runs.csv": "embnorm_lib.runner.results",
    "summary.json": "embnorm_lib.core.training.train",
    "calibration.json": "embnorm_lib.core.training.train",
    "positions.json": "embnorm_lib.core.training.train",
    "config.json": "embnorm_lib.core.training.checkpoint",
    "metrics.jsonl": "embnorm_lib.core.training.checkpoint",
    "evals.jsonl": "embnorm_lib.core.training.checkpoint",
    "diagnostics.jsonl": "embnorm_lib.core.training.checkpoint",
    "metrics.parquet": "embnorm_lib.core.records.steplog",  # a finished run's logs (checkpoint.Logs.write(final=True))
    "diagnostics.parquet": "embnorm_lib.core.records.steplog",
    "ckpt.pt": "embnorm_lib.core.training.checkpoint",
    "model.pt": "embnorm_lib.core.training.train",
    "lm_eval.json": "embnorm_lib.core.scoring.lm_eval_adapter",
    "lm_eval_v2.json": "embnorm_lib.core.scoring.lm_eval_adapter",
    "reused_from.json": "embnorm_lib.runner.reuse",
    "manifest.json": "embnorm_lib.core.records.seal",
    "sweeps.jsonl": "embnorm_lib.runner.sweep",
    "README.md": "embnorm_lib.publishing.report",
    "RECIPES.md": "embnorm_lib.publishing.recipe_table",
    "REPORT.md": "embnorm_lib.analyses.paired",
    "STABILITY.md": "embnorm_lib.analyses.stability",
    "BOUNDARY.md": "embnorm_lib.analyses.boundary",
    "SCALE.md": "embnorm_lib.analyses.scale",
    "BUDGET.md": "embnorm_lib.analyses.budget",
    "H1B.md": "embnorm_lib.analyses.h1b",
    "LENGTH.md": "embnorm_lib.analyses.length",
    "ZEROSHOT.md": "embnorm_lib.analyses.zeroshot",
    "LADDER.md": "embnorm_lib.analyses.ladder_report",
    "throughput.json": "embnorm_lib.tools.throughput",
}


def check_owners(seen: dict[str, set[str]]) -> None:
    wrong = {name: mods for name, mods in seen.items() if name in OWNERS and mods != {OWNERS[name]}}
    assert not wrong, f"written by another module than its owner: {wrong}"


def test_training_scoring_and_indexing_write_only_their_own_files(writers, tmp_path, data_path, monkeypatch):
    from embnorm_lib.core.config import preset_config
    from embnorm_lib.core.records.rundir import run_dir_for
    from embnorm_lib.core.scoring import lm_eval_adapter
    from embnorm_lib.core.training.train import train
    from embnorm_lib.runner.results import build_index

    cfg = preset_config("tiny", variant="ln", seed=0, max_iters=4, eval_interval=2, checkpoint_interval=2,
                        lm_eval=True)
    run = run_dir_for("owners", "ln", 0, tmp_path)
    train(cfg, run, data_path, until_step=2, progress=False)  # a checkpoint, then the rest
    train(cfg, run, data_path, progress=False)
    fake = {"macro": {"0shot": {"acc": 0.5, "acc_norm": 0.5}}, "tasks": {"t": {"0shot": {"acc": 0.5}}},
            "seconds": 1.0}
    monkeypatch.setattr(lm_eval_adapter, "evaluate_lm", lambda *a, **k: fake)  # the suite itself is tested elsewhere
    lm_eval_adapter.score_if_asked(cfg, run, data_path)
    table = build_index("owners", tmp_path)
    assert table.loc[0, "lm_macro_acc"] == 0.5  # runs.csv takes lm_eval.json's scalars; summary.json is untouched
    assert "lm_macro_acc" not in (run / "summary.json").read_text()
    assert {"ckpt.pt", "summary.json", "lm_eval.json", "runs.csv", "config.json"} <= set(writers)
    check_owners(writers)


def test_the_owner_check_fails_on_a_second_writer():
    with pytest.raises(AssertionError, match="runs.csv"):
        check_owners({"runs.csv": {"embnorm_lib.runner.results", "embnorm_lib.runner.sweep"}})


# -- the two layers (issue 74) ----------------------------------------------------------------------------------------
# The engine names no study: it trains runs (core), sweeps and indexes grids (runner), tests (stats), renders and
# publishes (publishing) and times (tools). The study layer (studies: registry entries, analyses: one plugin per kind)
# registers into it and is never imported by it.
ENGINE = ("core", "runner", "stats", "publishing", "tools")
STUDY_LAYER = ("studies", "analyses")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def engine_files() -> list[Path]:
    return sorted(p for name in ENGINE for p in (PACKAGE / name).rglob("*.py"))


def closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_registry_sits_below_the_engine_it_registers_for():
    """No engine module reaches the study layer, at any depth (the registry reads studies/ and analyses/ by name,
    the first time it is read); core reaches nothing above it."""
    graph = import_graph()
    for module in graph:
        if layer(module) in ENGINE:
            above = sorted(m for m in closure(graph, module) if layer(m) in STUDY_LAYER)
            assert not above, f"{module} imports the study layer: {above}"
        if layer(module) == "core":
            above = sorted(m for m in closure(graph, module) if layer(m) in ENGINE and layer(m) != "core")
            assert not above, f"{module} imports above core: {above}"


def literals(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module (docstrings and f-strings' text included), with its line."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def names_a_study(text: str, name: str) -> bool:
    """A hyphenated study name anywhere in the text as a whole word; a one-word name (also an English word: "main",
    "ladder") as the whole literal or as a path under runs/."""
    if "-" in name:
        return re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w-])", text) is not None
    return text.strip() == name or re.search(rf"runs/{re.escape(name)}(?![\w-])", text) is not None


def study_names_in(files: list[Path], names) -> list[str]:
    from embnorm_lib.core.presets import PRESETS
    from embnorm_lib.runner.registry import STATUSES

    found = []
    for path in files:
        for line, text in literals(path):
            for name in names:
                # a study named after its preset may appear where presets are defined; a status is vocabulary
                if (name in PRESETS and path.name == "presets.py") or name in STATUSES:
                    continue
                if names_a_study(text, name):
                    where = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path.name
                    found.append(f"{where}:{line}: {name}")
    return found


def test_the_engine_names_no_study():
    from embnorm_lib.runner.registry import STUDIES

    assert len(STUDIES) > 20
    assert study_names_in(engine_files(), STUDIES) == []


def test_the_study_name_check_sees_a_study_in_the_engine(tmp_path):
    engine = tmp_path / "core.py"
    engine.write_text('"""Example: python -m embnorm_lib sweep seeds-final."""\nSTUDY = "main"\nX = "the main job"\n')
    found = study_names_in([engine], ["seeds-final", "main"])
    assert [f.split(": ")[1] for f in found] == ["seeds-final", "main"]  # "the main job" is English


def test_no_analysis_names_a_study():
    """Issue 114: study names live in studies/ (the Study entries and the role tables the analyses read: paper_sources,
    answer_sources, figure_sources, ...); no module under analyses/ names one, in code, f-strings or docstrings."""
    from embnorm_lib.runner.registry import STUDIES

    files = sorted((PACKAGE / "analyses").rglob("*.py"))
    found = study_names_in(files, STUDIES)
    assert not found, f"study names outside studies/ (move them to a role constant there): {found}"


def test_engine_modules_and_functions_stay_small():
    """nanoGPT-readable: an engine module fits in one read (<= 400 lines), a function on one screen (<= 60)."""
    long_modules, long_functions = [], []
    for path in engine_files():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{path.relative_to(PACKAGE)} {len(text.splitlines())}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(PACKAGE)}:{node.name} {length}")
    assert long_modules == [] and long_functions == []


def test_the_readme_layout_names_every_folder_and_module_of_the_library():
    """README's Layout section is the map of the tree: every layer folder and every module in it is named there."""
    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    folders = sorted(p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")
                     if p.parent != PACKAGE and "__pycache__" not in p.parts)
    missing = [f"{f}/" for f in folders if f"`{f.rsplit('/', 1)[-1]}/`" not in layout]
    missing += [p.relative_to(PACKAGE).as_posix() for f in ENGINE + STUDY_LAYER for p in sorted((PACKAGE / f).rglob("*.py"))
                if p.name != "__init__.py" and f"`{p.name}`" not in layout]
    assert missing == [], f"README's Layout does not name: {missing}"


def test_arms_are_named_not_taken_by_registry_position():
    """Inserting a variant second once turned seeds-final into none/new/ln: study arms are names, and an arm's
    colour and style are its longest variant prefix (`ln_matched_lr=1` is ln_matched's, not ln's)."""
    from embnorm_lib.publishing.plots import arm_color, variant_style
    from embnorm_lib.runner.registry import ABC, ABCD

    assert ABC == ("none", "ln", "rms") and ABCD == ("none", "ln", "rms", "scaled")
    package = Path(__file__).resolve().parents[1] / "embnorm_lib"
    sliced = [str(f) for f in package.rglob("*.py") if "variant_names()[" in f.read_text()]
    assert not sliced, sliced
    assert arm_color("ln_matched_lr=1") == arm_color("ln_matched") != arm_color("ln")
    assert arm_color("scaled_unit") != arm_color("scaled") and variant_style("scaled_unit") != variant_style("scaled")


def test_no_module_of_the_package_is_over_400_lines():
    """Issue 114: the study layer too reads in one sitting; a module that grows past the limit is split by role
    (tables, sections, the page's writer), not trimmed by squeezing lines."""
    over = [f"{p.relative_to(PACKAGE)} {n}" for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert over == []


def test_every_plugin_is_a_function_not_a_name():
    """Issue 114 item 5: a plugin is referenced by its object, so renaming or moving it breaks at import, not when a
    page is published; reading the registry still imports neither matplotlib nor the paper's typst."""
    import subprocess
    import sys

    from embnorm_lib.runner.registry import ANALYSES, STUDIES, site

    for analysis in ANALYSES.values():
        assert callable(analysis.publish) and (analysis.publish_group is None or callable(analysis.publish_group))
    assert all(callable(s.entry) for s in site().sections)
    assert callable(site().readme) and callable(site().findings) and callable(site().paper)
    assert all(s.readme_extra is None or callable(s.readme_extra) for s in STUDIES.values())
    loaded = subprocess.run([sys.executable, "-c", "import sys; from embnorm_lib.runner.registry import ANALYSES, site;"
                             "len(ANALYSES); site(); print(sorted(m for m in ('matplotlib', 'typst') if m in sys.modules))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_paths_an_engine_module_takes_from_its_own_file_point_into_the_package():
    """Moving core/'s modules into folders left two `parents[1]` one level short (the lm-eval tasks and the checkout
    were not found): each path a module derives from __file__ is checked here."""
    from embnorm_lib.core.records import io
    from embnorm_lib.core.scoring import lm_eval_adapter

    assert io.PACKAGE_DIR == PACKAGE and (lm_eval_adapter.TASK_DIR / "manifest.json").is_file()
