"""The seal of a finished run: manifest.json, written last, lists every result file of the run directory (its bytes,
sha256 and, for a per-step log, its rows) and the run's step count. A reader that trusts a run's numbers checks it
first with `verify_run` (the one check: a new file format adds a row counter to `ROW_COUNTERS`, nothing else), so a
missing, truncated or altered file stops the index and publication in one line instead of shrinking a study.

    python -m embnorm_lib seal                 # seal every finished run under runs/ that has no manifest yet
    python -m embnorm_lib seal <study> --check   # verify only: one line per damaged run, exit code 2

A stage that adds a file to a finished run (lm_eval.json, a copied run's reused_from.json) re-seals it with
`reseal`, which first verifies everything it does not change."""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigError, RunDirError, entry
from ..nets.variants import VARIANTS, canonical_variant
from .io import default_runs_dir, read_json, runs_root, write_json
from .rundir import LOCK_FILES, RunDir, existing_study
from .steplog import PARQUET, parquet_last_step, parquet_rows

MANIFEST_FORMAT = 1
# not results: weights and checkpoints stay local (never committed), the executed notebook is the sweep's record of
# how the run went and is rewritten after the run finished; the manifest does not list itself
NOT_SEALED = frozenset({RunDir(Path()).checkpoint.name, RunDir(Path()).final_model.name, RunDir(Path()).notebook.name,
                        RunDir(Path()).manifest.name, *LOCK_FILES})


class SealError(RunDirError):
    """A finished run's files do not match its seal (or it has none)."""


def _jsonl_rows(path: Path) -> int:
    rows = 0
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                raise SealError(f"run {path.parent}: {path.name} line {number} is not JSON; allowed: one JSON object "
                                f"per line (restore the file from git, or retrain the run)") from None
            rows += 1
    return rows


# How a per-step log's rows are counted, by file suffix: a new log format adds its counter here (and to LAST_STEP)
ROW_COUNTERS: dict[str, Callable[[Path], int]] = {".jsonl": _jsonl_rows, PARQUET: parquet_rows}


def file_record(path: Path) -> dict:
    """What the seal keeps of one file: its size and sha256, and its row count where it is a per-step log."""
    data = path.read_bytes()
    record = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if path.suffix in ROW_COUNTERS:
        record["rows"] = ROW_COUNTERS[path.suffix](path)
    return record


def sealed_files(run: RunDir) -> list[Path]:
    """The files a seal covers: every plain file of the run directory but the local and hidden ones."""
    return sorted(p for p in run.root.iterdir()
                  if p.is_file() and p.name not in NOT_SEALED and not p.name.startswith("."))


def _problem(run: RunDir, name: str, what: str) -> SealError:
    return SealError(f"run {run.root}: {name} {what}; allowed: the files as sealed in {run.manifest.name} (restore "
                     f"them from git, or delete the run directory and retrain it)")


def seal_command(run: RunDir) -> str:
    """The seal command for this run's study, with the runs directory actually in use."""
    runs_dir = run.root.parent.parent.parent
    default = runs_dir.resolve() == default_runs_dir().resolve()
    return f"python -m embnorm_lib seal {run.root.parent.parent.name}" + ("" if default else f" --out-dir {runs_dir}")


def _read_manifest(run: RunDir) -> dict:
    if not run.manifest.is_file():
        raise SealError(f"run {run.root}: {run.manifest.name} is missing (a finished run that is not sealed); allowed: "
                        f"a sealed run (re-running the command that trained it seals it, as does `{seal_command(run)}`)")
    try:
        manifest = read_json(run.manifest)
        if manifest.get("format") != MANIFEST_FORMAT or not isinstance(manifest.get("files"), dict):
            raise ValueError
    except (RunDirError, ValueError, AttributeError):
        raise _problem(run, run.manifest.name, f"is not a format-{MANIFEST_FORMAT} manifest") from None
    return manifest


def _check_file(run: RunDir, name: str, sealed: dict) -> None:
    path = run.root / name
    if not path.is_file():
        raise _problem(run, name, "is missing")
    size = path.stat().st_size
    if size < sealed["bytes"]:
        raise _problem(run, name, f"is shorter than sealed ({size} of {sealed['bytes']} bytes: truncated or edited)")
    found = file_record(path)
    if "rows" in sealed and found.get("rows") != sealed["rows"]:
        raise _problem(run, name, f"has {found.get('rows')} rows, sealed with {sealed['rows']}")
    if found["bytes"] != sealed["bytes"] or found["sha256"] != sealed["sha256"]:
        raise _problem(run, name, f"was altered ({found['bytes']} bytes, sha256 {found['sha256'][:12]}; sealed: "
                                  f"{sealed['bytes']} bytes, sha256 {sealed['sha256'][:12]})")


def verify_run(run: RunDir, except_files: tuple[str, ...] = ()) -> dict:
    """The one check of a finished run against its seal: every sealed file there with its bytes, hash and rows, and no
    result file added since. Raises SealError naming the run and the file; returns the manifest."""
    if not run.summary.is_file() and not run.manifest.is_file():
        raise SealError(f"run {run.root}: {run.summary.name} is missing (the run has not finished); allowed: a "
                        f"finished run")
    manifest = _read_manifest(run)
    _check_nothing_unsealed(run)
    for name, sealed in sorted(manifest["files"].items()):
        if name not in except_files:
            _check_file(run, name, sealed)
    added = sorted({p.name for p in sealed_files(run)} - set(manifest["files"]) - set(except_files))
    if added:
        other = Path(added[0]).with_suffix(".jsonl" if added[0].endswith(PARQUET) else PARQUET).name
        if other in manifest["files"] and other != added[0]:  # a log in both forms: a conversion was interrupted
            raise SealError(f"run {run.root}: {added[0]} and {other} are both there, the seal names {other} (a "
                            f"conversion of its logs was interrupted); allowed: one form (`python -m "
                            f"embnorm_lib compact-logs --study {run.root.parent.parent.name}` finishes it)")
        raise _problem(run, added[0], "was added after the run was sealed")
    return manifest


def _check_nothing_unsealed(run: RunDir) -> None:
    """What a seal cannot vouch for and the sealed-file check would pass over: a sub-directory, a symbolic link or a
    hidden file (other than a lock) inside the run directory."""
    for path in sorted(run.root.iterdir()):
        if path.is_symlink():
            what = "is a symbolic link"
        elif path.is_dir():
            what = "is a sub-directory"
        elif path.name.startswith(".") and path.name not in INTERNAL_HIDDEN and not path.name.endswith(".tmp"):
            what = "is a hidden file"
        else:
            continue
        raise SealError(f"run {run.root}: {path.name} {what} inside a sealed run; allowed: the run's own files only "
                        f"(remove it, or delete the run directory and retrain it)")


def check_summary_outcome(run: RunDir, summary: dict, error: type[RunDirError] = RunDirError) -> None:
    """A summary's outcome as the index reads it: `diverged` true or false, and `val_loss` a finite number (null only
    for a diverged run). Anything else is refused, naming it: a missing or NaN loss would be counted as a run and
    averaged as none."""
    diverged, loss = summary.get("diverged"), summary.get("val_loss", "missing")
    if not isinstance(diverged, bool):  # a cast would count null as a finished run, NaN as a failure
        raise error(f"run {run.root}: summary.json has diverged={diverged!r}; allowed: true or false (restore the "
                    "file from git, or retrain the run)")
    number = isinstance(loss, (int, float)) and not isinstance(loss, bool)
    if not ((number and math.isfinite(loss)) or (diverged and (loss is None or number))):
        raise error(f"run {run.root}: summary.json has val_loss={loss!r}; allowed: a finite number (null only where "
                    "diverged is true) (restore the file from git, or retrain the run)")


def check_run_identity(run: RunDir, config: dict, summary: dict, error: type[RunDirError] = RunDirError) -> None:
    """A run is the one its directory names: seed<k> is config.json's and summary.json's seed, and the arm directory
    begins with config.json's variant, which summary.json repeats. Every table keys runs on (arm, seed); a summary
    copied into another seed's directory would be counted twice as two seeds, or stop a pairing with a duplicate."""
    said = {"config.json": config.get("seed"), "summary.json": summary.get("seed", run.seed)}
    for name, seed in said.items():
        if seed != run.seed or isinstance(seed, bool):
            raise error(f"run {run.root}: {name} has seed={seed!r} in directory seed{run.seed}; allowed: the "
                        "directory's seed (restore the file from git, or retrain the run)")
    config_variant = config.get("variant")
    summary_variant = summary.get("variant", config_variant)  # a summary need not repeat it
    for name, given in (("config.json", config_variant), ("summary.json", summary_variant)):
        if not isinstance(given, str):  # never read as str(None), which is the variant 'none'
            raise error(f"run {run.root}: {name} has variant={given!r}; allowed: a variant name (restore the file "
                        "from git, or retrain the run)")
    try:
        variant, repeated = canonical_variant(config_variant), canonical_variant(summary_variant)
    except ConfigError as e:
        raise error(f"run {run.root}: {e}") from None
    # the longest registered variant the arm's name begins with: ln_matched_lr=1 is ln_matched's, not ln's
    named = max((v for v in VARIANTS if run.arm == v or run.arm.startswith(f"{v}_")), key=len, default=None)
    if not variant == repeated == named:
        raise error(f"run {run.root}: config.json has variant={config_variant!r} and summary.json "
                    f"variant={summary_variant!r} in arm directory {run.arm}; allowed: the arm's "
                    f"variant ({named!r}) in both (restore the files from git, or retrain the run)")


def _check_consistent(run: RunDir, records: dict[str, dict]) -> int:
    """Before a seal vouches for a run: its summary and config are JSON objects, every log parses (file_record counted
    its rows) and metrics reach the summary's step count. Returns that step count."""
    for path in (run.summary, run.config):
        if path.name not in records:
            raise SealError(f"run {run.root}: {path.name} is missing; allowed: a finished run (nothing was sealed)")
        if not isinstance(read_json(path), dict):
            raise SealError(f"run {run.root}: {path.name} is not a JSON object; allowed: the file the run wrote "
                            f"(nothing was sealed)")
    for path in run.root.glob("*.json"):
        if path.name in records:
            read_json(path)  # one line naming the file when it does not parse
    steps = read_json(run.summary).get("steps")
    log = next((p for p in sorted(run.root.glob(f"{run.metrics.stem}.*")) if p.suffix in LAST_STEP), run.metrics)
    last = LAST_STEP[log.suffix](log) if log.is_file() else None
    if not isinstance(steps, int) or last != steps:
        raise SealError(f"run {run.root}: {log.name} ends at step {last}, {run.summary.name} says "
                        f"{steps!r}; allowed: a log that reaches the run's last step (nothing was sealed)")
    return steps


def _jsonl_last_step(path: Path) -> int | None:
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    return json.loads(lines[-1]).get("step") if lines else 0  # an empty log: a run that took no step


# The last step of the per-step metrics log, by file suffix (beside ROW_COUNTERS: a new log format adds both)
LAST_STEP: dict[str, Callable[[Path], int | None]] = {".jsonl": _jsonl_last_step, PARQUET: parquet_last_step}


def seal_run(run: RunDir) -> Path:
    """Write the run's manifest (atomically, last): what every file of the finished run holds now."""
    records = {p.name: file_record(p) for p in sealed_files(run)}
    steps = _check_consistent(run, records)
    return write_json(run.manifest, {"format": MANIFEST_FORMAT, "steps": steps, "files": records})


def reseal_replacing(run: RunDir, replaced: dict[str, str]) -> Path:
    """Files of a finished run were converted to another form (a per-step log to Parquet: compact_logs): verify the
    run against its seal (the new files aside), then seal it with each new file in place of the one it replaces,
    which the caller removes next. Until then both are there and the seal names the new one."""
    manifest = verify_run(run, except_files=tuple(replaced.values()))
    missing = sorted(old for old in replaced if old not in manifest["files"])
    if missing:
        raise _problem(run, missing[0], "is not in its seal (nothing to replace)")
    files = {name: record for name, record in manifest["files"].items() if name not in replaced}
    files.update({new: file_record(run.root / new) for new in replaced.values()})
    metrics = replaced.get(run.metrics.name)
    if metrics and LAST_STEP[Path(metrics).suffix](run.root / metrics) != manifest["steps"]:
        raise SealError(f"run {run.root}: {metrics} does not end at step {manifest['steps']} as sealed; allowed: "
                        f"the log it replaces, converted (nothing was sealed)")
    return write_json(run.manifest, {"format": MANIFEST_FORMAT, "steps": manifest["steps"], "files": files})


SEALING = ".sealing.json"  # hidden (not sealed): the result file a stage is adding to a finished run, and its sha256
RETIME_MARKER = ".retime.json"  # hidden (not sealed): written before metrics.parquet is replaced, gone once resealed
# the hidden files the library itself keeps in a run directory for a while (locks, the reseal journal, the final
# logits until calibration is written, compact_logs' retime marker) and atomic writes' `.<name>.<random>.tmp`
INTERNAL_HIDDEN = frozenset({*LOCK_FILES, SEALING, RunDir(Path()).final_logits.name, RETIME_MARKER})


@contextmanager
def adding_result_file(run: RunDir, name: str, text: str) -> Iterator[None]:
    """Around the owner's write of a result file into a finished run (`text` is what it writes): the intent is
    recorded first and the run sealed again with the file after, so a kill between the write and the seal is finished
    by `finish_interrupted` when the command runs again."""
    write_json(run.root / SEALING, {"file": name, "sha256": hashlib.sha256(text.encode()).hexdigest()})
    yield
    reseal(run, name)
    (run.root / SEALING).unlink()


def finish_interrupted(run: RunDir) -> None:
    """Complete what a kill at the end of a run left undone, so re-running the same command resumes (issue 117 #7):
    a run killed after summary.json and before its seal is sealed (its checkpoint goes, as at the end of training);
    a result file whose write was recorded and completed is sealed in, one never written is forgotten."""
    marker = run.root / SEALING
    if marker.is_file():
        intent = read_json(marker)
        target = run.root / str(intent.get("file", ""))
        if target.is_file() and file_record(target)["sha256"] == intent.get("sha256"):
            reseal(run, target.name)
        if not target.is_file() or run.manifest.is_file() and target.name in read_json(run.manifest)["files"]:
            marker.unlink()
    if run.summary.is_file() and not run.manifest.is_file() and not marker.is_file():
        run.checkpoint.unlink(missing_ok=True)
        seal_run(run)


def reseal(run: RunDir, *changed: str) -> Path:
    """A stage wrote `changed` files into a finished run: verify the rest against the seal, then seal again. A run
    finished before seals existed is sealed whole."""
    if run.manifest.is_file():
        verify_run(run, except_files=changed)
    return seal_run(run)


def finished_summary(run: RunDir) -> dict | None:
    """A finished run's summary once its seal holds (None while it has not finished): what a trainer returns instead
    of training a finished run again, so a damaged one is named, not passed on as done."""
    if not run.summary.is_file():
        return None
    verify_run(run)
    return read_json(run.summary)


def run_dirs_of(study_root: Path) -> list[RunDir]:
    """Every run directory of a study that says it finished: a summary.json or a manifest.json (a sealed run whose
    summary went missing is damaged, not unfinished)."""
    marked = {p.parent for name in ("summary.json", RunDir(Path()).manifest.name) for p in study_root.glob(f"**/{name}")}
    return [RunDir(p) for p in sorted(marked) if not any(part.startswith(".") for part in p.relative_to(study_root).parts)]


def check_as_indexed(run: RunDir) -> None:
    """The index's checks of one run's summary and identity (outcome, seed, variant), as SealError."""
    if run.summary.is_file() and isinstance(summary := read_json(run.summary), dict):
        check_summary_outcome(run, summary, SealError)
        if run.config.is_file() and isinstance(config := read_json(run.config), dict):
            check_run_identity(run, config, summary, SealError)


def main(argv=None, study_check: Callable[[str, Path], None] | None = None) -> int:
    """The seal's command line; `study_check(study, runs_dir)` is the engine's rule for a whole study
    (runner/design.py), given by the `seal` verb (runner/seal_cli.py): core knows no registry."""
    p = argparse.ArgumentParser(prog="embnorm_lib seal", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("studies", nargs="*", help="studies under the runs directory (default: all of them)")
    p.add_argument("--out-dir", default=None, help="the runs directory (default runs/)")
    p.add_argument("--check", action="store_true", help="verify only; seal nothing")
    args = p.parse_args(argv)

    out = runs_root(args.out_dir)
    try:
        for study in args.studies:
            existing_study(out, study, "seal")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    roots = [out / s for s in args.studies] or sorted(p for p in out.iterdir() if p.is_dir())
    counts = {"sealed": 0, "verified": 0, "refused": 0}
    studies_refused = 0  # counted apart: a study-level refusal (a linked run, say) is no extra run
    for root in roots:
        if args.check and study_check is not None:  # the index's own rule on the whole study (issue 117)
            try:
                study_check(root.name, out)
            except RunDirError as e:
                print(f"error: {e}", file=sys.stderr)
                studies_refused += 1
        for run in run_dirs_of(root):
            try:
                if run.manifest.is_file() or args.check:
                    verify_run(run)
                    check_as_indexed(run)  # --check says what the index would refuse (issue 117 #9)
                    counts["verified"] += 1
                else:  # a run sealed by hand is one the index will read: its outcome must be one it can count
                    check_as_indexed(run)
                    seal_run(run)
                    counts["sealed"] += 1
            except RunDirError as e:
                print(f"error: {e}", file=sys.stderr)
                counts["refused"] += 1
    print(", ".join(f"{n} run(s) {what}" for what, n in counts.items())
          + (" (unsealed or damaged: each named above)" if counts["refused"] else "")
          + (f"; {studies_refused} study check(s) refused (named above)" if studies_refused else ""))
    return 2 if counts["refused"] or studies_refused else 0


if __name__ == "__main__":
    sys.exit(entry(main))
