"""A corpus of your own from a Hugging Face dataset (issue 18): one text column of one split, written as a UTF-8
file with a JSON record beside it, so runs name it by sha256 exactly as they name any other file.

    python -m embnorm_lib corpus wikitext --config wikitext-2-raw-v1 --split train --out data/wikitext2.txt

Needs the `datasets` package and a network (neither is a dependency of the study). The rows are joined with a
newline in the dataset's own order, so the same dataset revision gives the same bytes and the same checksum; the
record (`<out>.json`) keeps the name, config, split, column, revision, row count and checksum. The command prints
the `--set` flags that train on the file; the 90/10 split is then the usual one (data.load_corpus)."""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Callable

from ..errors import DataError, entry
from ..records.io import atomic_write_bytes, atomic_write_text

MIN_CHARS = 1000  # what data.load_corpus accepts


def _load_with_datasets(name: str, config: str | None, split: str, revision: str | None):
    try:
        import datasets
    except ImportError:
        raise DataError("a Hugging Face dataset needs the `datasets` package (pip install datasets) and a network; "
                        "without them pass any UTF-8 text file as data_path") from None
    try:
        return datasets.load_dataset(name, config, split=split, revision=revision)
    except Exception as e:  # offline, unknown name, config or split: datasets raises many types
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DataError(f"could not load Hugging Face dataset {name!r} (config {config!r}, split {split!r}): "
                        f"{first_line}") from None


def export_dataset(name: str, out: str | Path, *, config: str | None = None, split: str = "train",
                   column: str = "text", revision: str | None = None,
                   load: Callable | None = None) -> dict:
    """Write one column of one split as `out` (UTF-8, rows joined by newlines) and `out`.json; return the record.
    `load(name, config, split, revision)` returns the split (a `datasets.Dataset` unless a test passes another)."""
    out = Path(out)
    if out.suffix == ".json":
        raise DataError(f"invalid --out {out}; allowed: a text file path (its record is written beside it as .json)")
    dataset = (load or _load_with_datasets)(name, config, split, revision)
    columns = list(dataset.column_names)
    if column not in columns:
        raise DataError(f"invalid column {column!r} for dataset {name!r}; allowed: {', '.join(columns)}")
    rows = list(dataset[column])
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, str)), None)
    if bad is not None:
        raise DataError(f"invalid column {column!r} for dataset {name!r}: row {bad} is {type(rows[bad]).__name__}; "
                        f"allowed: a column of strings")
    text = "\n".join(rows)
    if len(text) < MIN_CHARS:
        raise DataError(f"dataset {name!r} split {split!r} column {column!r} holds {len(text)} characters; "
                        f"allowed: at least {MIN_CHARS:,}")
    payload = text.encode("utf-8")
    record = {"source": "huggingface", "dataset": name, "config": config, "split": split, "column": column,
              "revision": revision, "fingerprint": getattr(dataset, "_fingerprint", None), "rows": len(rows),
              "characters": len(text), "vocab_size": len(set(text)), "bytes": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest(), "file": out.name}
    atomic_write_bytes(out, payload)
    atomic_write_text(out.with_name(out.name + ".json"), json.dumps(record, indent=2) + "\n")
    return record


def train_flags(record: dict, out: str | Path) -> str:
    """The flags that train on the exported file (vocab_size is its number of distinct characters)."""
    return (f"--set corpus_sha256={record['sha256']} --set vocab_size={record['vocab_size']} "
            f"--data-path {out}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="a Hugging Face dataset name, e.g. wikitext")
    p.add_argument("--config", default=None, help="the dataset's configuration, e.g. wikitext-2-raw-v1")
    p.add_argument("--split", default="train")
    p.add_argument("--column", default="text")
    p.add_argument("--revision", default=None, help="a git revision of the dataset, for a checksum that lasts")
    p.add_argument("--out", required=True, help="the text file to write (its record goes beside it as .json)")
    args = p.parse_args(argv)
    try:
        record = export_dataset(args.dataset, args.out, config=args.config, split=args.split, column=args.column,
                                revision=args.revision)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {record['rows']:,} rows, {record['characters']:,} characters, "
          f"sha256 {record['sha256']}\ntrain on it with: {train_flags(record, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
