from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """A copy of the code without the committed run directories (scripts/code_only.sh, a lent GPU's transfer)
    skips the tests that read them; a full checkout runs them all."""
    if (REPO / "runs" / "main" / "runs.csv").exists():
        return
    skip = pytest.mark.skip(reason="the committed studies are not in this copy (scripts/code_only.sh)")
    for item in items:
        if item.get_closest_marker("committed"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def data_path() -> str:
    """The verified corpus, found by the library's own rule (data.resolve_data_path)."""
    from embnorm_lib.data import resolve_data_path
    from embnorm_lib.errors import DataError

    try:
        return str(resolve_data_path())
    except DataError as e:
        pytest.fail(f"tiny Shakespeare not found ({e})")


@pytest.fixture(scope="session")
def corpus(data_path):
    from embnorm_lib.data import load_corpus

    return load_corpus(data_path)


def tiny(**overrides):
    from embnorm_lib.config import preset_config

    return preset_config("tiny", **overrides)


def strip_timing(rows):
    """Metrics rows without wall-clock fields, for exact comparisons between runs."""
    return [{k: v for k, v in r.items() if k not in ("step_ms", "wall_s", "eval_s")} for r in rows]


@pytest.fixture
def writers(monkeypatch):
    """Records (file name -> writing modules) for every file the library writes during a test: every write goes
    through io's temp-file writer, and the first caller outside io is the writer."""
    import inspect

    from embnorm_lib import io as io_module

    seen: dict[str, set[str]] = {}
    original = io_module._write_through_temp

    def recording(path, write):
        caller = next(f for f in inspect.stack()[1:] if f.frame.f_globals.get("__name__") != "embnorm_lib.io")
        seen.setdefault(Path(path).name, set()).add(caller.frame.f_globals.get("__name__"))
        return original(path, write)

    monkeypatch.setattr(io_module, "_write_through_temp", recording)
    return seen
