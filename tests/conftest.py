import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/ from what the code renders now (tests/test_golden.py), then review "
                          "the diff and commit it")


def pytest_configure(config):
    """One torch thread per test process. The suite runs one worker per core (pytest-xdist), so a second intra-op
    thread per worker only contends for a core: on the tiny models the tests train it spins rather than computes
    (measured: a 150-step run and its lm-eval took 54 CPU s with two threads, 13 s with one, beside other load).
    A test about thread counts sets its own (torch_threads, or torch.set_num_threads inside the test)."""
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """A copy of the code without the committed run directories (scripts/code_only.sh, a lent GPU's transfer)
    skips the tests that read them; a full checkout runs them all."""
    if (REPO / "runs" / "main" / "runs.csv").exists():
        return
    skip = pytest.mark.skip(reason="the committed studies are not in this copy (scripts/code_only.sh)")
    for item in items:
        if item.get_closest_marker("committed"):
            item.add_marker(skip)


# What a user's shell may export that changes what the library does: where the corpus is found, Hugging Face's
# online/offline switches and caches, thread counts, numpy/OpenBLAS kernel choices, torchrun's variables, the commit a
# copied tree names. The suite must pass with and without them (issue 73): each test starts without any of them.
USER_ENVIRONMENT = ("EMBNORM_DATA", "EMBNORM_CACHE", "EMBNORM_SOURCE_COMMIT", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "TORCH_NUM_THREADS", "NPY_DISABLE_CPU_FEATURES",
                    "NPY_ENABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                    "MASTER_PORT", "TQDM_DISABLE", "MPLBACKEND", "PYTHONHASHSEED")
USER_ENVIRONMENT_PREFIXES = ("HF_", "TRANSFORMERS_", "HUGGINGFACE_")


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory) -> Path:
    """A cache directory of this test session's own, holding tiny Shakespeare where the library looks first: found
    once by the user's environment, then every test (and the notebooks it runs) finds it by the library's own rule
    without reading that environment."""
    from embnorm_lib.core.corpora.data import DataError, cache_path, resolve_data_path

    root = tmp_path_factory.mktemp("embnorm-cache")
    try:
        found = resolve_data_path()
    except DataError:
        return root  # tests that need the corpus fail with their own message
    old = os.environ.get("EMBNORM_CACHE")
    os.environ["EMBNORM_CACHE"] = str(root)
    try:
        cache_path().parent.mkdir(parents=True)
        cache_path().symlink_to(found.resolve())
    finally:
        os.environ.pop("EMBNORM_CACHE") if old is None else os.environ.__setitem__("EMBNORM_CACHE", old)
    return root


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch, corpus_cache):
    for key in list(os.environ):
        if key in USER_ENVIRONMENT or key.startswith(USER_ENVIRONMENT_PREFIXES):
            monkeypatch.delenv(key)
    monkeypatch.setenv("EMBNORM_CACHE", str(corpus_cache))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # figures render off screen whatever the user's backend
    for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(key, "1")  # as lm_eval_adapter sets them on import: no test reaches the Hub


@pytest.fixture(scope="session")
def data_path() -> str:
    """The verified corpus, found by the library's own rule (data.resolve_data_path)."""
    from embnorm_lib.core.corpora.data import resolve_data_path
    from embnorm_lib.core.errors import DataError

    try:
        return str(resolve_data_path())
    except DataError as e:
        pytest.fail(f"tiny Shakespeare not found ({e})")


@pytest.fixture(scope="session")
def corpus(data_path):
    from embnorm_lib.core.corpora.data import load_corpus

    return load_corpus(data_path)


def tiny(**overrides):
    from embnorm_lib.core.config import preset_config

    return preset_config("tiny", **overrides)


def strip_timing(rows):
    """Metrics rows without wall-clock fields, for exact comparisons between runs."""
    return [{k: v for k, v in r.items() if k not in ("step_ms", "wall_s", "eval_s")} for r in rows]


@pytest.fixture
def writers(monkeypatch):
    """Records (file name -> writing modules) for every file the library writes during a test: every write goes
    through writes' temp-file writer, and the first caller outside io and writes is the writer."""
    import sys

    from embnorm_lib.core.records import writes

    seen: dict[str, set[str]] = {}
    original = writes._write_through_temp
    plumbing = ("embnorm_lib.core.records.io", "embnorm_lib.core.records.writes")

    def recording(path, write):
        frame = sys._getframe(1)  # walked, not inspect.stack(): that reads every frame's source on each write
        while frame.f_globals.get("__name__") in plumbing:
            frame = frame.f_back
        seen.setdefault(Path(path).name, set()).add(frame.f_globals.get("__name__"))
        return original(path, write)

    monkeypatch.setattr(writes, "_write_through_temp", recording)
    return seen
