import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_COPY = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"


@pytest.fixture(scope="session")
def data_path() -> str:
    """The verified corpus: $EMBNORM_DATA (as .ci/run sets it) or the shared copy beside the repo."""
    path = Path(os.environ.get("EMBNORM_DATA") or SHARED_COPY)
    if not path.is_file():
        pytest.fail(f"tiny Shakespeare not found at {path}; set EMBNORM_DATA=/path/to/input.txt")
    return str(path)


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
