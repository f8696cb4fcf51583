"""The package's shape: imports flow one way, and each output file kind has one writing module."""
from __future__ import annotations

import ast
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
    assert "embnorm_lib.io" in internal_imports(PACKAGE / "rundir.py")


# Which module writes each kind of output file (every write goes through io's temp-file writer).
OWNERS = {
    "runs.csv": "embnorm_lib.results",
    "summary.json": "embnorm_lib.train",
    "calibration.json": "embnorm_lib.train",
    "positions.json": "embnorm_lib.train",
    "config.json": "embnorm_lib.checkpoint",
    "metrics.jsonl": "embnorm_lib.checkpoint",
    "evals.jsonl": "embnorm_lib.checkpoint",
    "diagnostics.jsonl": "embnorm_lib.checkpoint",
    "metrics.parquet": "embnorm_lib.steplog",  # a finished run's logs (checkpoint.Logs.write(final=True))
    "diagnostics.parquet": "embnorm_lib.steplog",
    "ckpt.pt": "embnorm_lib.checkpoint",
    "model.pt": "embnorm_lib.train",
    "lm_eval.json": "embnorm_lib.lm_eval_adapter",
    "lm_eval_v2.json": "embnorm_lib.lm_eval_adapter",
    "reused_from.json": "embnorm_lib.reuse",
    "manifest.json": "embnorm_lib.seal",
    "sweeps.jsonl": "embnorm_lib.sweep",
    "README.md": "embnorm_lib.report",
    "REPORT.md": "embnorm_lib.analysis",
    "STABILITY.md": "embnorm_lib.stability",
    "BOUNDARY.md": "embnorm_lib.boundary",
    "SCALE.md": "embnorm_lib.scale_vs_norm",
    "BUDGET.md": "embnorm_lib.budget_trend",
    "H1B.md": "embnorm_lib.h1b",
    "LENGTH.md": "embnorm_lib.length",
    "ZEROSHOT.md": "embnorm_lib.zeroshot",
    "LADDER.md": "embnorm_lib.ladder",
    "throughput.json": "embnorm_lib.throughput",
}


def check_owners(seen: dict[str, set[str]]) -> None:
    wrong = {name: mods for name, mods in seen.items() if name in OWNERS and mods != {OWNERS[name]}}
    assert not wrong, f"written by another module than its owner: {wrong}"


def test_training_scoring_and_indexing_write_only_their_own_files(writers, tmp_path, data_path, monkeypatch):
    from embnorm_lib import lm_eval_adapter
    from embnorm_lib.config import preset_config
    from embnorm_lib.results import build_index
    from embnorm_lib.rundir import run_dir_for
    from embnorm_lib.train import train

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


def test_a_packed_job_writes_each_members_files_through_the_same_owners(writers, tmp_path, data_path):
    from embnorm_lib.config import preset_config
    from embnorm_lib.packed import pack_configs, train_packed

    cfgs = pack_configs(preset_config("tiny", variant="ln", max_iters=4, eval_interval=2, checkpoint_interval=2,
                                      eval_windows=8), [0, 1])
    dirs = [tmp_path / "ln" / f"seed{c.seed}" for c in cfgs]
    train_packed(cfgs, dirs, data_path, until_step=2, progress=False)
    train_packed(cfgs, dirs, data_path, progress=False)
    assert {"ckpt.pt", "summary.json", "config.json", "metrics.jsonl", "model.pt"} <= set(writers)
    check_owners(writers)


def test_the_owner_check_fails_on_a_second_writer():
    with pytest.raises(AssertionError, match="runs.csv"):
        check_owners({"runs.csv": {"embnorm_lib.results", "embnorm_lib.sweep"}})
