"""Glue the notebooks call, so each notebook cell stays one step of the method."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from .config import DEFAULT_PRESET, RunConfig, preset_config
from .corpora.data import Corpus
from .errors import BRIEF_ERRORS, ConfigError
from .records.io import check_out_dir, default_runs_dir, repo_root, shown_path
from .records.rundir import RunDir, check_run_tag, recorded_seconds, run_dir_for
from .records.steplog import step_log_frame
from .scoring.diagnostics import TOKEN_CLASSES, token_class

FIGURE_NOT_DRAWN = ("[run figure not drawn (figures=False): redraw it from metrics.jsonl and evals.jsonl with "
                    "plots.plot_run(notebook.run_table(run_dir), notebook.eval_table(run_dir))]")


def brief_errors() -> None:
    """In a notebook, show a user's mistake (bad parameter, busy or damaged run dir, missing data, full disk) as
    its one-line message instead of a traceback, so it is the first thing read in the output or papermill's
    error. Bugs keep their full traceback."""
    try:
        shell = get_ipython()  # noqa: F821 (defined inside IPython only)
    except NameError:
        return

    def one_line(shell, etype, value, tb, tb_offset=None):
        line = [f"{etype.__name__}: {value}"]
        shell._showtraceback(etype, value, line)
        return line

    shell.set_custom_exc(BRIEF_ERRORS, one_line)
    # trio, which the zero-shot cell's lm-eval imports, warns once that a custom handler is already installed, and
    # the warning names its own file's absolute path: it reached four executed prose notebooks (2026-12-07). Trio's
    # handler only formats exception groups; ours above is the one the notebook wants.
    warnings.filterwarnings("ignore", message="IPython detected, but you already have a custom exception handler",
                            category=RuntimeWarning)


def pin_library() -> None:
    """Pin every module of embnorm_lib to its source as it is now. A kernel imports some modules only when a cell or
    function first needs them (the last cells, scoring, reports), so a checkout edited while a long run trains would
    hand the run a mix of old and new code (two ladder runs' last cell once failed on such a mix). Each module's
    source is read now (milliseconds) and served to every later import of it, so the whole run keeps the code it
    started with without importing what it never uses (importing every module made the setup cell of a 2-step sweep
    run 6.6 s of its 15.7, beside two training lanes; pinned, 2.9 s); the commit its summary records is read when
    training starts."""
    import sys

    import embnorm_lib

    if not any(isinstance(finder, _PinnedLibrary) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PinnedLibrary(Path(embnorm_lib.__file__).parent))


class _PinnedSource(importlib.machinery.SourceFileLoader):
    """One module's source as read at pin time. Never its bytecode cache, which may hold a newer source of the same
    size and second: path_stats fails, so the pinned source is compiled."""

    def __init__(self, fullname: str, path: str, source: bytes) -> None:
        super().__init__(fullname, path)
        self.source = source

    def get_data(self, path: str) -> bytes:
        return self.source if path == self.path else super().get_data(path)

    def path_stats(self, path: str) -> dict:
        raise OSError("pinned source: no bytecode cache")


class _PinnedLibrary:
    """A meta-path finder serving embnorm_lib's modules from their source as read when it was made (a module added
    later is not served: it is imported from disk as usual, and no pinned module imports it)."""

    def __init__(self, root: Path) -> None:
        self.sources: dict[str, tuple[Path, bytes, bool]] = {}
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            package = parts[-1] == "__init__"
            self.sources[".".join(parts[:-1] if package else parts)] = (path, path.read_bytes(), package)

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.sources:
            return None
        file, source, package = self.sources[fullname]
        return importlib.util.spec_from_file_location(
            fullname, file, loader=_PinnedSource(fullname, str(file), source),
            submodule_search_locations=[str(file.parent)] if package else None)


# The committed parameters cell of notebooks/02_train.ipynb, value for value (a test holds the notebook to it). The
# README's design-card command passes only variant and seed, so every other value comes from that cell: an edit that
# JupyterLab autosaved into it (max_iters = 30) silently changed what the command trains.
TRAIN_DEFAULTS: dict[str, Any] = {
    "variant": "ln", "seed": 0, "preset": DEFAULT_PRESET, "max_iters": 0, "study": "adhoc", "out_dir": "",
    "data_path": "", "device": "auto", "overrides": {}, "run_tag": "", "progress": True, "figures": True,
    "smoke": False}
TRAIN_NOTEBOOK = Path("notebooks") / "02_train.ipynb"


def parameters_cell_values(notebook: Path) -> dict[str, Any]:
    """The literal assignments of a notebook's cell tagged `parameters` (what papermill would override)."""
    import ast
    import json

    cells = json.loads(Path(notebook).read_text(encoding="utf-8")).get("cells", [])
    cell = next((c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    source = "".join(cell["source"]) if cell and isinstance(cell["source"], list) else (cell or {}).get("source", "")
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                values[node.targets[0].id] = ast.unparse(node.value)
    return values


def check_committed_defaults(namespace: dict[str, Any], repo: Path | None = None) -> None:
    """Refuse, in one line, a run that would take a default from an edited copy of the committed training notebook.
    A value passed with papermill's -p (it differs from the edited default) or a notebook copy of one's own (lab/,
    whose edits are the point) is not refused; outside a checkout (one notebook on Kaggle) there is nothing to check."""
    notebook = (Path(repo) if repo is not None else repo_root()) / TRAIN_NOTEBOOK
    if not notebook.is_file():
        return
    try:
        on_disk = parameters_cell_values(notebook)
    except (OSError, ValueError, SyntaxError, KeyError, TypeError):
        raise ConfigError(f"{TRAIN_NOTEBOOK} cannot be read as a notebook with a parameters cell; allowed: the "
                          f"committed notebook (git checkout {TRAIN_NOTEBOOK})") from None
    used = [name for name, default in TRAIN_DEFAULTS.items() if name in on_disk and on_disk[name] != default
            and name in namespace and namespace[name] == on_disk[name]]
    if used:
        edits = ", ".join(f"{n}: {TRAIN_DEFAULTS[n]!r} -> {on_disk[n]!r}" for n in used)
        raise ConfigError(f"{TRAIN_NOTEBOOK}'s parameters cell differs from the committed one ({edits}) and this run "
                          f"would use it; allowed: the committed defaults (git checkout {TRAIN_NOTEBOOK}), the value "
                          f"passed with papermill -p, or a copy of your own (python -m embnorm_lib lab)")


RESERVED_OVERRIDES = ("variant", "seed", "preset")  # notebook parameters of their own: one value, one place


# The training notebook's `smoke=True`: a check that a run works end to end in seconds, not a result. Evaluation scores
# 64 evenly spaced validation windows instead of the whole split (summary.json then says "comparable": false); the
# interval-controlled probes and the zero-shot suite are off; max_iters applies unless the notebook sets its own. One
# torch thread: five small steps gain nothing from more, and on a busy machine OpenMP's waiting threads cost a third of
# the wall time (issue 73: 51 s -> 35 s beside two training processes on 2 cores; ~14 s of CPU either way).
SMOKE = {"max_iters": 5, "eval_windows": 64, "eval_at_init": False, "diag_interval": 0, "lm_eval": False,
         "torch_threads": 1}


def check_switches(**switches: Any) -> None:
    """The notebook's on/off parameters, each True or False: papermill's -p passes `no` or `5` as they are, and any
    of them would read as on."""
    for name, value in switches.items():
        if not isinstance(value, bool):
            raise ConfigError(f"invalid {name}={value!r}; allowed: True or False (papermill -p {name} False)")


def config_from_parameters(preset: str, variant: str, seed: int, max_iters: int = 0, device: str = "auto",
                           overrides: dict[str, Any] | None = None, smoke: bool = False,
                           data_path: str | None = None) -> RunConfig:
    """The run's config: a preset, then SMOKE when `smoke`, then the notebook's parameters (max_iters 0 keeps the
    preset's, or SMOKE's). A `data_path` that is a directory of token shards sets tokenizer=shards and the shard
    set's sha256 (shards.shard_overrides).

    Values are passed on as given: RunConfig's validation is the only gate, so `seed=3.5` or
    `seed=True` is refused there instead of being truncated here."""
    if overrides is None:
        overrides = {}
    if not isinstance(smoke, bool):
        raise ConfigError(f"invalid smoke={smoke!r}; allowed: True or False (papermill -p smoke True)")
    if not isinstance(overrides, dict):
        raise ConfigError(f"invalid overrides={overrides!r}; allowed: a mapping of config fields, e.g. "
                          f"papermill -y 'overrides: {{lr: 0.001}}' (papermill -p passes text)")
    from .corpora.shards import shard_overrides

    overrides = shard_overrides(data_path, overrides)
    reserved = [k for k in RESERVED_OVERRIDES if k in overrides]
    if reserved:
        raise ConfigError(f"invalid overrides key(s) {', '.join(reserved)}; allowed: any other config field "
                          f"(variant, seed and preset are parameters of their own)")
    # a field given both as a parameter and in overrides: one value, or a refusal naming both (never a silent winner)
    parameters = {"device": (device, "auto")}
    if not (isinstance(max_iters, int) and not isinstance(max_iters, bool) and max_iters == 0):
        parameters["max_iters"] = (max_iters, 0)  # validated by RunConfig; 0 (the default) keeps the preset's
    changes: dict[str, Any] = {**(SMOKE if smoke else {}), **dict(variant=variant, seed=seed, **overrides)}
    for name, (value, default) in parameters.items():
        if name in overrides and value != default and overrides[name] != value:
            raise ConfigError(f"conflicting {name}: parameter {name}={value!r} and overrides {name}="
                              f"{overrides[name]!r}; allowed: one of them, or the same value in both")
        if name not in overrides:  # an explicit parameter wins over SMOKE's; its default keeps SMOKE's or the preset's
            changes[name] = value if value != default else changes.get(name, value)
    return preset_config(preset, **changes)


def train_job(cfg: RunConfig, run_dir: Path, data_path=None, progress: bool = True,
              on_eval: Callable[[dict], None] | None = None, out_dir=None) -> dict:
    """Train the notebook's run and return its summary."""
    from .training.train import train

    return train(cfg, run_dir, data_path, progress=progress, on_eval=on_eval, out_dir=out_dir)


ADHOC_STUDY = "adhoc"  # the notebook's default study; a smoke run of it lands in SMOKE_STUDY, never beside a real run
SMOKE_STUDY = "adhoc-smoke"


def run_dir_from_parameters(cfg: RunConfig, study: str, out_dir: str = "", tag: str = "", smoke: bool = False) -> Path:
    """The run's directory from the notebook's parameters, each checked before anything is written: the out_dir (as
    text, a directory that can be made), and the tag against the config it names. A smoke run of the default study
    goes to its own study (the README's smoke check and design-card command once shared runs/adhoc/ln/seed3)."""
    check_out_dir(out_dir)
    study = SMOKE_STUDY if smoke is True and study == ADHOC_STUDY else study
    run_dir = run_dir_for(study, cfg.variant, cfg.seed, out_dir or None, tag=tag)
    check_run_tag(tag, cfg)
    return run_dir


def existing_run_note(cfg: RunConfig, run_dir: Path) -> str:
    """What the directory already holds, said before anything trains: "" (nothing), a finished run that will be
    shown rather than retrained, a partial one that resumes; another config's run is refused in one line."""
    from .training.checkpoint import check_same_run

    run = RunDir(Path(run_dir))
    check_same_run(run, cfg)
    if run.summary.is_file():
        return (f"{shown_path(run_dir)} has finished already: its results are shown below, nothing is trained (delete "
                f"the directory, or pass another -p study, to train it again)")
    if run.checkpoint.is_file():
        return f"{shown_path(run_dir)} holds a partial run: it resumes from its checkpoint"
    return ""


# fields compared on the raw config.json before a full training-identity check: most committed runs differ here
_QUICK_FIELDS = ("preset", "max_iters", "n_layer", "n_embd", "batch_size", "block_size", "lr")


def recorded_time_note(cfg: RunConfig, runs: Path | None = None) -> str:
    """The time this run should take, from the committed runs of the same training config (any seed): the median
    of their recorded wall time (training and evaluation), plus the zero-shot suite's when the config asks for it.
    "" when no committed run matches (nothing is guessed)."""
    import json
    import statistics

    runs = Path(runs) if runs is not None else default_runs_dir()
    want = {k: v for k, v in cfg.training_identity().items() if k != "seed"}
    raw = {k: getattr(cfg, k, None) for k in _QUICK_FIELDS}
    seconds, threads = [], set()
    for config in sorted(runs.glob(f"*/{cfg.variant}*/seed*/config.json")):
        run = RunDir(config.parent)
        try:
            written = json.loads(config.read_text())
            if any(written.get(k) != raw[k] for k in _QUICK_FIELDS) or not run.summary.is_file():
                continue
            if {k: v for k, v in RunConfig.from_dict(written).training_identity().items() if k != "seed"} != want:
                continue
            seconds.append(recorded_seconds(run, with_lm_eval=cfg.lm_eval))
            threads.add(json.loads(run.summary.read_text()).get("torch_threads"))
        except (OSError, ValueError, KeyError, TypeError, ConfigError):
            continue  # a run this estimate cannot read is left out, never guessed at
    if not seconds:
        return ""
    at = f"{threads.pop()} torch thread(s)" if len(threads) == 1 and None not in threads else "their thread counts"
    return (f"expected time: about {statistics.median(seconds) / 60:.1f} min (the median of {len(seconds)} committed "
            f"runs of this config, at {at} on this project's CPUs)")


def eval_printer(cfg: RunConfig) -> Callable[[dict], None]:
    """One line per evaluation: the notebook's only per-run output besides the final table."""
    def show(row: dict) -> None:
        print(f"step {row['step']:>5}/{cfg.max_iters}  val_loss {row['val_loss']:.4f}  "
              f"ppl {row['val_ppl']:.2f}  acc {row['val_acc']:.3f}", flush=True)
    return show


def run_table(run_dir: str | Path) -> pd.DataFrame:
    return step_log_frame(run_dir, "metrics")


def eval_table(run_dir: str | Path) -> pd.DataFrame:
    return step_log_frame(run_dir, "evals")


def char_class_table(corpus: Corpus) -> pd.DataFrame:
    """Character-class counts and shares for the whole corpus and each split."""
    rows = []
    for split, text in (("all", corpus.text), ("train", corpus.train_text), ("val", corpus.val_text)):
        counts = Counter()
        for ch, n in Counter(text).items():
            counts[token_class(ch)] += n
        for name in [*TOKEN_CLASSES, "other"]:
            n = counts[name]
            rows.append({"split": split, "class": name, "count": n, "share": n / len(text)})
    return pd.DataFrame(rows)


def corpus_facts(corpus: Corpus) -> pd.DataFrame:
    """The corpus in one small table: its file (relative to the checkout, so no machine's layout is shown), checksum,
    sizes and vocabulary (escaped, so the newline reads as \\n)."""
    import os

    try:
        where = os.path.relpath(Path(corpus.path).resolve(), repo_root().resolve())
    except ValueError:  # another drive (Windows)
        where = Path(corpus.path).name
    facts = {"file": where, "sha256": corpus.sha256, "characters": f"{len(corpus.text):,}",
             "training characters": f"{len(corpus.train):,}", "validation characters": f"{len(corpus.val):,}",
             "vocabulary size": corpus.vocab_size, "vocabulary": "".join(corpus.chars).encode("unicode_escape").decode()}
    return pd.DataFrame({"fact": list(facts), "value": list(facts.values())})
