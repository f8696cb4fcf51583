"""The run directory: where a run lives and the name of every file in it. The one place these names are spelled.

    runs/<study>/<variant>[<tag>]/seed<k>/
        config.json  metrics.jsonl  evals.jsonl  diagnostics.jsonl  calibration.json  positions.json
        summary.json  lm_eval.json  lm_eval_v2.json  lm_eval_v3.json  reused_from.json  02_train.ipynb  manifest.json
        (ckpt.pt, model.pt: not committed)

A finished run keeps metrics and diagnostics as `<log>.parquet` instead of `<log>.jsonl` (steplog.py, which reads
either form: `read_step_log`); the names below are the live run's.

`summary.json` marks a run finished and `manifest.json`, written after it, seals it (seal.py); `.lock` is held while a process trains or writes the run, `.cell.lock`
while a sweep owns the cell (its executed notebook and status)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig, check_name
from ..errors import ConfigError
from ..nets.variants import canonical_variant
from .io import RunLock, runs_root, shown_path

LOCK_FILES = (".lock", ".cell.lock")


@dataclass(frozen=True)
class RunDir:
    root: Path

    config = property(lambda self: self.root / "config.json")
    metrics = property(lambda self: self.root / "metrics.jsonl")
    evals = property(lambda self: self.root / "evals.jsonl")
    diagnostics = property(lambda self: self.root / "diagnostics.jsonl")
    calibration = property(lambda self: self.root / "calibration.json")
    positions = property(lambda self: self.root / "positions.json")  # final pass's loss by position in the window
    summary = property(lambda self: self.root / "summary.json")
    lm_eval = property(lambda self: self.root / "lm_eval.json")
    lm_eval_v2 = property(lambda self: self.root / "lm_eval_v2.json")  # suite v2 (issue 17)
    lm_eval_v3 = property(lambda self: self.root / "lm_eval_v3.json")  # suite v3 (open prose, amendment 17 item 7)
    reused_from = property(lambda self: self.root / "reused_from.json")
    manifest = property(lambda self: self.root / "manifest.json")  # the seal of a finished run, written last (seal.py)
    notebook = property(lambda self: self.root / "02_train.ipynb")
    checkpoint = property(lambda self: self.root / "ckpt.pt")
    final_model = property(lambda self: self.root / "model.pt")
    # the final pass's logits while calibration reads them, where too large for memory (removed before the seal)
    final_logits = property(lambda self: self.root / ".final_logits.npy")
    lock = property(lambda self: self.root / ".lock")
    cell_lock_path = property(lambda self: self.root / ".cell.lock")

    @property
    def arm(self) -> str:
        return self.root.parent.name

    @property
    def seed(self) -> int:
        return int(self.root.name.removeprefix("seed"))

    def training_lock(self, leave_no_file: bool = False) -> RunLock:
        return RunLock(self.lock, leave_no_file=leave_no_file)

    def cell_lock(self, leave_no_file: bool = False) -> RunLock:
        """The sweep's lock on one cell (its kept notebook and status); training takes the run dir's own lock."""
        return RunLock(self.cell_lock_path, what="cell", leave_no_file=leave_no_file)


@dataclass(frozen=True)
class StudyDir:
    """A study's own files beside its run directories."""

    root: Path

    index = property(lambda self: self.root / "runs.csv")  # written by results.build_index only
    sweep_log = property(lambda self: self.root / "sweeps.jsonl")  # one line per sweep invocation
    report = property(lambda self: self.root / "REPORT.md")
    analysis = property(lambda self: self.root / "analysis")  # <scope>/family.csv, decision.json, results.*


def study_dir_for(study: str, out_dir: str | os.PathLike | None = None) -> StudyDir:
    check_name("study", study)
    return StudyDir(runs_root(out_dir) / study)


def existing_study(out: Path, study: str, command: str) -> Path:
    """A study folder a command reads (index, seal), refused in one line where it is not there."""
    check_name("study", study)
    if not (out / study).is_dir():
        raise ConfigError(f"invalid study {study!r} for {command}: no folder {shown_path(out / study)}; allowed: a "
                          f"study with run directories under {shown_path(out)}")
    return out / study


def run_dir_for(study: str, variant: str, seed: int, out_dir: str | os.PathLike | None = None,
                tag: str = "") -> Path:
    """runs/<study>/<variant>[<tag>]/seed<k>; the tag names any extra sweep axes (e.g. '_lr=1e-3').
    Study and tag are path components: a name that would leave `out_dir` is refused."""
    check_name("study", study)
    check_name("run_tag", tag, allow_empty=True)
    first_field = re.fullmatch(r"_([A-Za-z][A-Za-z0-9_]*)=.+", tag)
    if tag and not (first_field and first_field[1] in {*RunConfig.__dataclass_fields__, "preset"}):
        # 'ln' + '_matched' would be variant ln_matched's directory: a tag must read as axes, never as a name
        raise ConfigError(f"invalid run_tag={tag!r}; allowed: empty, or '_FIELD=VALUE' pairs as a sweep writes them "
                          "(e.g. '_lr=0.001')")
    return runs_root(out_dir) / study / f"{canonical_variant(variant)}{tag}" / f"seed{seed}"


def check_run_tag(tag: str, cfg: RunConfig) -> str:
    """A run tag as the run's own config spells it: each `_FIELD=VALUE` pair must be a field of `cfg` (its preset
    included) written as a sweep writes it (Cell.tag). Unchecked, `-p run_tag _lr=0.5` made arm `ln_lr=0.5` of a run
    trained at lr 0.001, indexed, sealed and plotted under that name (issue 117, item 8)."""
    rest, named = tag, set()
    while rest:
        name, _, tail = rest[1:].partition("=")
        if name in ("variant", "seed") or name not in RunConfig.__dataclass_fields__:
            why = f"{name!r} is not a config field a tag can name"
        elif name in named:
            why = f"field {name} is named twice"
        else:
            value = str(getattr(cfg, name))
            after = tail[len(value):]
            if tail.startswith(value) and (not after or after.startswith("_")):
                named.add(name)
                rest = after
                continue
            why = f"this run's {name} is {value}"
        raise ConfigError(f"invalid run_tag={tag!r}: {why}; allowed: empty, or '_FIELD=VALUE' pairs of the run's config "
                          "fields (not variant or seed) with its own values, as a sweep writes them")
    return tag


def finished_run_dirs(study_root: Path) -> list[RunDir]:
    """Every run of a study directory that has finished (holds summary.json), in path order."""
    return [RunDir(p.parent) for p in sorted(study_root.glob("**/summary.json"))]


def holds_a_run(run: RunDir) -> bool:
    """Whether the directory holds something of a run to keep: a checkpoint or a summary. A config.json alone is
    left by a run that failed before its first checkpoint (say, a model too large to allocate): nothing of it can
    be resumed, so it does not bar a run with another config from the directory."""
    return run.checkpoint.is_file() or run.summary.is_file()


def recorded_seconds(run: RunDir, with_lm_eval: bool = True) -> float:
    """What a finished run took when it was recorded: its wall time (training and evaluation), plus its zero-shot
    scoring's where asked and recorded. Raises OSError / ValueError / KeyError where its summary cannot be read."""
    import json

    wall = float(json.loads(run.summary.read_text())["wall_s"] or 0)
    lm = json.loads(run.lm_eval.read_text()).get("seconds", 0) if with_lm_eval and run.lm_eval.is_file() else 0
    return wall + float(lm)
