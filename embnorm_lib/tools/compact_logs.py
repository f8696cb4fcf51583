"""Convert finished runs' per-step logs (metrics.jsonl, diagnostics.jsonl) to Parquet (steplog), ~9x smaller.

    python -m embnorm_lib.compact_logs --study <study>        # one study (repeat --study for more)
    python -m embnorm_lib.compact_logs --budget-mb 170        # whole studies, largest first, while the JSONL they
                                                              # delete stays within 170 MB (10^6 bytes)
    python -m embnorm_lib.compact_logs --check                # change nothing: what would be converted

Runs trained since steplog existed are written compact when they finish; this converts the ones before. Per run,
under its lock: the run is verified against its seal; each log is written as `<log>.parquet` (atomically, read back
and compared row by row with the JSONL: same keys, order, types and values); the seal is rewritten to name the
Parquet files; only then are the JSONL files deleted. A run killed part-way holds whole files throughout (every
reader gets the same rows), and running the command again finishes it. A converted run is skipped, so the command
can be run any number of times. Live, unsealed or damaged runs are not touched (each is named in one line)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError, RunDirError, entry
from ..core.io import RunLock, read_jsonl, runs_root, shown_path
from ..core.rundir import RunDir
from ..core.seal import _read_manifest, reseal_replacing, run_dirs_of, verify_run
from ..core.steplog import COMPACTED, parquet_path, read_parquet_log, same_rows, write_parquet_log

MB = 10 ** 6


def _forms(run: RunDir) -> dict[str, str]:
    """Each compacted log's JSONL name -> its Parquet name."""
    return {f"{log}.jsonl": parquet_path(run, log).name for log in COMPACTED}


@dataclass
class Outcome:
    """What converting one run did: bytes of JSONL deleted and of Parquet added (0 for a run already converted)."""

    converted: bool = False
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
    rows = read_jsonl(jsonl)
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
        rows = read_jsonl(run.root / old)
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


def convert_locked(run: RunDir, dry_run: bool = False) -> Outcome:
    """convert_run under the run's lock (the one training takes), so no process writes the run meanwhile; a lock file
    this call had to create goes again."""
    lock_existed = run.lock.exists()
    lock = RunLock(run.lock)
    if not lock.acquire():
        raise RunDirError(f"run {run.root} is in use by another process (lock {run.lock.name} held); allowed: a "
                          f"finished run nobody is writing (run compact_logs again later)")
    try:
        return convert_run(run, dry_run)
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
    names = studies or sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    sizes = sorted(((name, jsonl_bytes(out / name)) for name in dict.fromkeys(names)), key=lambda s: (-s[1], s[0]))
    chosen, left, total = [], [], 0
    for name, size in sizes:
        if size == 0:
            continue
        if budget_mb is None or total + size <= budget_mb * MB:
            chosen.append((name, size))
            total += size
        else:
            left.append((name, size))
    return chosen, left


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", action="append", default=[], help="a study under the runs directory (repeatable; "
                                                                "default: all of them)")
    p.add_argument("--budget-mb", type=float, default=None,
                   help="convert whole studies, largest first, while the JSONL deleted stays within this many MB")
    p.add_argument("--check", action="store_true", help="change nothing: say what would be converted")
    p.add_argument("--out-dir", default=None, help="the runs directory (default runs/)")
    args = p.parse_args(argv)
    if args.budget_mb is not None and not args.budget_mb > 0:
        raise ConfigError(f"invalid --budget-mb {args.budget_mb}; allowed: a number of MB above 0")
    out = runs_root(args.out_dir)
    chosen, left = choose_studies(out, args.study, args.budget_mb)
    verb = "would convert" if args.check else "converted"
    totals = {"runs": 0, "jsonl": 0, "parquet": 0, "refused": 0}
    for study, _size in chosen:
        runs = refused = deleted = added = 0
        for run in run_dirs_of(out / study):
            try:
                outcome = convert_locked(run, dry_run=args.check)
            except RunDirError as e:
                print(f"error: {e}", file=sys.stderr)
                refused += 1
                continue
            runs += outcome.converted
            deleted += outcome.jsonl_bytes
            added += outcome.parquet_bytes
        print(f"{study}: {verb} {runs} run(s), JSONL {deleted:,} bytes" + ("" if args.check else
              f" -> Parquet {added:,} bytes") + (f"; {refused} run(s) refused (named above)" if refused else ""))
        totals["runs"] += runs
        totals["jsonl"] += deleted
        totals["parquet"] += added
        totals["refused"] += refused
    for study, size in left:
        print(f"{study}: left as JSONL ({size:,} bytes; over the budget of {args.budget_mb:g} MB)")
    print(f"total: {verb} {totals['runs']} run(s) in {len(chosen)} studies of {shown_path(out)}, JSONL "
          f"{totals['jsonl']:,} bytes" + ("" if args.check else f" -> Parquet {totals['parquet']:,} bytes")
          + (f"; {totals['refused']} run(s) refused" if totals["refused"] else ""))
    return 2 if totals["refused"] else 0


if __name__ == "__main__":
    sys.exit(entry(main))

