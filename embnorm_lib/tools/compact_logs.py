"""Convert finished runs' per-step logs (metrics.jsonl, diagnostics.jsonl) to Parquet (steplog), ~9x smaller.

    python -m embnorm_lib compact-logs --study <study>        # one study (repeat --study for more)
    python -m embnorm_lib compact-logs --budget-mb 170        # whole studies, largest first, while the JSONL they
                                                              # delete stays within 170 MB (10^6 bytes)
    python -m embnorm_lib compact-logs --check                # change nothing: what would be converted

Runs trained since steplog existed are written compact when they finish; this converts the ones before. It also
re-encodes a finished run's metrics.parquet whose timings are finer than their stated resolution
(steplog.TIMING_DECIMALS: runs trained before it), or that is a wide log of a format before 4 (a private `__keys__`
column, timings as scaled integers, `lr` as nulls rebuilt from config.json: plain Parquet readers misread them), and
writes it as format 4, which they read right; the rows read back are the same (timings rounded aside). And it slims
the run's executed notebook (runner.notebook_archive.slim_notebook: compact JSON, a table's HTML twin and per-cell
timestamps dropped), as sweeps now leave it, then packs each study's loose executed notebooks
into `runs/<study>/notebooks.tar.xz` (runner.notebook_archive; `extract-notebooks` puts them back). Per run,
under its lock: the run is verified against its seal; each log is written as `<log>.parquet` (atomically, read back
and compared row by row with the JSONL: same keys, order, types and values); the seal is rewritten to name the
Parquet files; only then are the JSONL files deleted. A run killed part-way holds whole files throughout (every
reader gets the same rows), and running the command again finishes it. A converted run is skipped, so the command
can be run any number of times. Live, unsealed or damaged runs are not touched (each is named in one line)."""
from __future__ import annotations

import argparse
import hashlib
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError, RunDirError, entry
from ..core.records.io import RunLock, atomic_write_bytes, read_json, read_jsonl, runs_root, shown_path, write_json
from ..core.records.rundir import RunDir
from ..core.records.seal import RETIME_MARKER, _read_manifest, reseal, reseal_replacing, run_dirs_of, verify_run
from ..core.records.steplog import (
    COMPACTED,
    checked_encode,
    outdated,
    parquet_path,
    read_parquet_log,
    round_timings,
    same_rows,
    write_parquet_log,
)
from ..runner.notebook_archive import ARCHIVE, pack_notebooks

MB = 10 ** 6


def _forms(run: RunDir) -> dict[str, str]:
    """Each compacted log's JSONL name -> its Parquet name."""
    return {f"{log}.jsonl": parquet_path(run, log).name for log in COMPACTED}


@dataclass
class Outcome:
    """What converting one run did: bytes of JSONL deleted and of Parquet added (0 for a run already converted)."""

    converted: bool = False
    retimed: bool = False  # metrics.parquet re-encoded: timings at their stated resolution, as format 4
    retimed_bytes: tuple[int, int] = (0, 0)  # its bytes before and after
    notebook_bytes: tuple[int, int] = (0, 0)  # the executed notebook's bytes before and after slimming
    jsonl_bytes: int = 0
    parquet_bytes: int = 0
    files: list[str] = field(default_factory=list)  # the file names written or deleted


def _sealed_forms(run: RunDir) -> tuple[dict, list[str]]:
    """The run verified against its seal, allowing beside each sealed log its other form (an interrupted conversion);
    returns the manifest's files and those other forms present."""
    sealed = _read_manifest(run)["files"]
    others = [new if old in sealed else old for old, new in _forms(run).items() if old in sealed or new in sealed]
    extra = [name for name in others if (run.root / name).is_file()]
    verify_run(run, except_files=tuple(extra))
    return sealed, extra


def _same_or_refuse(run: RunDir, jsonl: Path, parquet: Path) -> list[dict]:
    rows = round_timings(read_jsonl(jsonl))
    if not same_rows(read_parquet_log(parquet), rows):
        raise RunDirError(f"run {run.root}: {parquet.name} does not hold the rows of {jsonl.name}; nothing was deleted "
                          f"(allowed: the Parquet form of the same log: delete {parquet.name} and run compact_logs "
                          f"again)")
    return rows


def convert_run(run: RunDir, dry_run: bool = False) -> Outcome:
    """Convert one finished, sealed run's metrics and diagnostics logs to Parquet (see the module's docstring);
    a run already converted is left as it is (`dry_run`: nothing is written). Raises RunDirError naming the run and the file."""
    outcome = Outcome()
    sealed, extra = _sealed_forms(run)
    todo = {old: new for old, new in _forms(run).items() if old in sealed}
    leftover = [old for old, new in _forms(run).items() if new in sealed and old in extra]
    if dry_run:
        outcome.converted = bool(todo or leftover)
        outcome.jsonl_bytes = sum((run.root / old).stat().st_size for old in [*todo, *leftover])
        return outcome
    for old in leftover:  # converted and sealed, killed before its JSONL went: check it, then delete it
        jsonl, parquet = run.root / old, run.root / _forms(run)[old]
        _same_or_refuse(run, jsonl, parquet)
        outcome.jsonl_bytes += jsonl.stat().st_size
        jsonl.unlink()
        outcome.files.append(old)
    for old, new in todo.items():
        rows = round_timings(read_jsonl(run.root / old))
        write_parquet_log(run.root / new, rows)  # checked to read back as `rows` before it is put in place
        _same_or_refuse(run, run.root / old, run.root / new)  # and once more from the disk
    if todo:
        reseal_replacing(run, todo)  # the seal names the Parquet files: from here on the JSONL are surplus
        for old, new in todo.items():
            outcome.jsonl_bytes += (run.root / old).stat().st_size
            outcome.parquet_bytes += (run.root / new).stat().st_size
            (run.root / old).unlink()
            outcome.files += [old, new]
    outcome.converted = bool(todo or leftover)
    return outcome


def retime_run(run: RunDir, outcome: Outcome, dry_run: bool = False) -> None:
    """Re-encode a finished run's metrics.parquet with its timings rounded to their stated resolution and as format
    4 (steplog.outdated: a format plain readers misread), then reseal it; a run with neither to do is left as it is
    (its bytes are not rewritten under another pyarrow either). Crash-safe: the marker names the sealed
    and the new bytes' sha256 before the file is replaced, so a run killed between the file and its seal is finished
    on the next call (and a file that is neither is refused as damaged)."""
    path = parquet_path(run, "metrics")
    if not path.is_file() or _read_manifest(run)["files"].get(path.name) is None:
        return
    verify_run(run)
    rows = read_parquet_log(path)
    rounded = round_timings(rows)
    if same_rows(rounded, rows) and not outdated(path):
        return
    outcome.retimed = True
    if dry_run:
        return
    payload = checked_encode(path, rounded)  # its hash goes into the marker before the file is replaced
    sealed_bytes = path.stat().st_size
    write_json(run.root / RETIME_MARKER, {"sealed": _read_manifest(run)["files"][path.name]["sha256"],
                                          "new": hashlib.sha256(payload).hexdigest()})
    atomic_write_bytes(path, payload)
    if not same_rows(read_parquet_log(path), rounded):  # read back from the disk before the seal takes it
        raise RunDirError(f"run {run.root}: {path.name} as written does not read back as the rows it was written "
                          f"from; not resealed (allowed: restore the run from git and run compact_logs again)")
    reseal(run, path.name)
    (run.root / RETIME_MARKER).unlink()
    outcome.retimed_bytes = (sealed_bytes, len(payload))


def finish_pending_retime(run: RunDir, outcome: Outcome, dry_run: bool = False) -> None:
    """A re-encoding killed between the new metrics.parquet and its seal (RETIME_MARKER left): reseal it when the
    file is the re-encoding the marker names, start over when it is still the sealed file, refuse anything else."""
    path, marker = parquet_path(run, "metrics"), run.root / RETIME_MARKER
    if marker.is_file():
        pending = read_json(marker)
        if not isinstance(pending, dict) or not {"sealed", "new"} <= set(pending):
            raise RunDirError(f"run {run.root}: {RETIME_MARKER} is not a re-encoding record; allowed: the JSON object "
                              f"compact_logs wrote (restore the run from git, delete the marker, run compact_logs "
                              f"again)")
        now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        sealed = _read_manifest(run)["files"].get(path.name, {}).get("sha256")
        if now == sealed == pending["new"]:  # killed after the seal, before the marker went: nothing left to do
            if not dry_run:
                marker.unlink()
            return
        if now == pending.get("new") and sealed == pending.get("sealed"):
            if not dry_run:
                reseal(run, path.name)  # verifies every other file against the seal first
                marker.unlink()
            outcome.retimed = True
            return
        if now != pending.get("sealed"):
            raise RunDirError(f"run {run.root}: {path.name} is neither the sealed file nor its re-encoding named in "
                              f"{RETIME_MARKER}; allowed: one of them (restore the run from git and run compact_logs "
                              f"again)")
        if not dry_run:
            marker.unlink()  # killed before the file was replaced: start over


def convert_locked(run: RunDir, dry_run: bool = False) -> Outcome:
    """convert_run under the run's lock (the one training takes), so no process writes the run meanwhile; a lock file
    this call had to create goes again."""
    lock_existed = run.lock.exists()
    lock = RunLock(run.lock)
    if not lock.acquire():
        raise RunDirError(f"run {run.root} is in use by another process (lock {run.lock.name} held); allowed: a "
                          f"finished run nobody is writing (run compact_logs again later)")
    try:
        outcome = Outcome()
        finish_pending_retime(run, outcome, dry_run)
        outcome = convert_run(run, dry_run) if not outcome.retimed else outcome
        retime_run(run, outcome, dry_run)
        if run.notebook.is_symlink():  # slimming would copy whatever it points at into the run, then the archive
            raise RunDirError(f"run {run.root}: {run.notebook.name} is a symbolic link; allowed: the executed notebook "
                              "a sweep wrote, as a regular file (remove the link)")
        if run.notebook.is_file() and not dry_run:  # not sealed: the sweep's record of how the run went
            from ..runner.notebook_archive import slim_notebook

            before = run.notebook.stat().st_size
            try:
                slimmed = slim_notebook(run.notebook)
            except Exception as e:  # nbformat/JSON/decoding errors: the file is not a notebook we can read
                raise RunDirError(f"run {run.root}: {run.notebook.name} is not a readable notebook ({type(e).__name__})"
                                  f"; allowed: the executed notebook a sweep wrote (restore it from git, or delete "
                                  f"it)") from None
            if slimmed:
                outcome.notebook_bytes = (before, run.notebook.stat().st_size)
        return outcome
    finally:
        if not lock_existed:
            run.lock.unlink(missing_ok=True)  # while held: the way checkpoint.holding leaves no trace
        lock.release()


def jsonl_bytes(study_root: Path) -> int:
    """Bytes of the compacted logs' JSONL files in a study's finished runs (what converting it would delete)."""
    return sum(p.stat().st_size for run in run_dirs_of(study_root) for old in _forms(run)
               if (p := run.root / old).is_file())


def choose_studies(out: Path, studies: list[str], budget_mb: float | None) -> tuple[list[tuple[str, int]], list]:
    """The studies to convert, largest JSONL first: those named (default: every study under `out`), and with a
    budget, whole studies while the JSONL deleted stays within it (a study that would exceed it is left for later,
    a smaller one may still fit). Returns (chosen, left), each as (study, JSONL bytes)."""
    from ..core.config import check_name

    for study in studies:
        check_name("study", study)
        if not (out / study).is_dir():
            raise ConfigError(f"invalid study {study!r}: no directory {out / study}; allowed: a study under {out}")
        if not any((out / study).glob("*/seed*")):  # runs/tokenizers holds tokenizer files, not runs
            raise ConfigError(f"invalid study {study!r}: no run directory (<arm>/seed<k>) in {out / study}; allowed: "
                              f"a study with runs under {out}")
    names = studies or sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    sizes = sorted(((name, jsonl_bytes(out / name)) for name in dict.fromkeys(names)), key=lambda s: (-s[1], s[0]))
    chosen, left, total = [], [], 0
    for name, size in sizes:
        if budget_mb is None or total + size <= budget_mb * MB:
            chosen.append((name, size))
            total += size
        else:
            left.append((name, size))
    return chosen, left


def _said(counts: dict, verb: str, dry_run: bool) -> str:
    said = f"{verb} {counts['runs']} run(s), JSONL {counts['jsonl']:,} bytes" + (
        "" if dry_run else f" -> Parquet {counts['parquet']:,} bytes")
    if counts["retimed"]:
        said += f"; {'would re-encode' if dry_run else 're-encoded'} {counts['retimed']} run(s)' metrics.parquet " \
                f"(as steplog format 4: timings at their stated resolution, lr as values)" + (
                    "" if dry_run else f", {counts['before']:,} -> {counts['after']:,} bytes")
    if counts["notebooks"]:
        said += f"; slimmed {counts['notebooks']} executed notebook(s), {counts['nb_before']:,} -> " \
                f"{counts['nb_after']:,} bytes"
    if counts["packed"]:
        said += f"; packed {counts['packed']} executed notebook(s) ({counts['pk_before']:,} bytes) into " \
                f"{ARCHIVE}, now {counts['pk_after']:,} bytes"
    return said


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", action="append", default=[], help="a study under the runs directory (repeatable; "
                                                                "default: all of them)")
    p.add_argument("--budget-mb", default=None,
                   help="convert whole studies, largest first, while the JSONL deleted stays within this many MB")
    p.add_argument("--check", action="store_true", help="change nothing: say what would be converted")
    p.add_argument("--out-dir", default=None, help="the runs directory (default runs/)")
    args = p.parse_args(argv)
    if args.budget_mb is not None:
        typed = args.budget_mb
        try:
            args.budget_mb = float(typed)
        except ValueError:
            args.budget_mb = math.nan
        if not (math.isfinite(args.budget_mb) and args.budget_mb > 0):  # inf would be no budget at all
            raise ConfigError(f"invalid --budget-mb {typed!r}; allowed: a finite number of MB above 0")
    out = runs_root(args.out_dir)
    if not out.is_dir():
        raise ConfigError(f"invalid --out-dir {args.out_dir or out}: no such directory; allowed: a runs directory")
    chosen, left = choose_studies(out, args.study, args.budget_mb)
    verb = "would convert" if args.check else "converted"
    totals = {"runs": 0, "jsonl": 0, "parquet": 0, "refused": 0, "retimed": 0, "before": 0, "after": 0,
              "notebooks": 0, "nb_before": 0, "nb_after": 0, "packed": 0, "pk_before": 0, "pk_after": 0}
    for study, _size in chosen:
        counts = dict.fromkeys(totals, 0)
        refused: set[Path] = set()
        for run in run_dirs_of(out / study):
            try:
                outcome = convert_locked(run, dry_run=args.check)
            except RunDirError as e:
                print(f"error: {e}", file=sys.stderr)
                counts["refused"] += 1
                refused.add(run.root)
                continue
            counts["runs"] += outcome.converted
            counts["jsonl"] += outcome.jsonl_bytes
            counts["parquet"] += outcome.parquet_bytes
            counts["retimed"] += outcome.retimed
            counts["before"] += outcome.retimed_bytes[0]
            counts["after"] += outcome.retimed_bytes[1]
            counts["notebooks"] += outcome.notebook_bytes != (0, 0)
            counts["nb_before"] += outcome.notebook_bytes[0]
            counts["nb_after"] += outcome.notebook_bytes[1]
        if not args.check:
            try:  # a refused run's notebook stays where it is, with the run
                counts["packed"], counts["pk_before"], counts["pk_after"] = pack_notebooks(out / study, skip=refused)
            except RunDirError as e:
                print(f"error: {e}", file=sys.stderr)
                counts["refused"] += 1
        print(f"{study}: {_said(counts, verb, args.check)}" + (f"; {counts['refused']} run(s) refused (named above)"
                                                               if counts["refused"] else ""))
        for key in totals:
            totals[key] += counts[key]
    for study, size in left:
        print(f"{study}: left as JSONL ({size:,} bytes; over the budget of {args.budget_mb:g} MB)")
    print(f"total in {len(chosen)} studies of {shown_path(out)}: {_said(totals, verb, args.check)}"
          + (f"; {totals['refused']} run(s) refused" if totals["refused"] else ""))
    return 2 if totals["refused"] else 0


if __name__ == "__main__":
    sys.exit(entry(main))

