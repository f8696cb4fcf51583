"""A run's per-step logs (metrics, diagnostics, evals): JSONL while the run trains, Parquet once it has finished.

A live run rewrites `<log>.jsonl` at every checkpoint (checkpoint.Logs). When it finishes, train.py writes its metrics
and diagnostics as `<log>.parquet` instead (evals stay JSONL: a few dozen rows, read by eye), and
`python -m embnorm_lib compact-logs` converts the runs that finished before. Every reader goes through
`read_step_log`, which takes the Parquet file when there is one, else the JSONL, and returns the very rows `json.loads`
gives for the JSONL: the same keys in the same order, the same types (bool, int, float, None, str, lists and
objects) and values, a key missing from a row still missing.

Timings are logged at a stated resolution, `TIMING_DECIMALS` (step_ms to 10 µs, wall_s to 1 ms: finer digits are
the timer's noise on a shared machine, and they were a third of a Parquet log's bytes); `round_timings` applies it, to
a live run's rows as they are logged and to older runs' logs when compact_logs converts or re-encodes them.

The Parquet form, format `FORMAT` (zstd level 19, no statistics; floats byte-stream-split, ints delta-coded), holds
only standard Parquet types, so that pandas, pyarrow, Polars or DuckDB read the true value of every cell without
this library:
- a key's values keep their type where they share one (bool, int64, str; None is null); floats are float32 where
  every value round-trips exactly (losses and norms come from float32 tensors), else float64 (`lr`); a timing whose
  every value is at its stated resolution is a DECIMAL(18, places) (an int64 count, delta-coded: float64 takes ~2x
  the bytes), read back as the very float; a key with mixed types, lists or objects holds each value as its JSON
  text (listed under `json` in the metadata);
- `wide` layout (a log with at least as many rows as keys: metrics): one column per key in order of first
  appearance, null where a row lacks the key. The footer's metadata (key `META_KEY`) says which keys each row has,
  in its order (`keysets`: lists of column positions; `keyset_runs`: [keyset, count] per run of rows), which tells a
  missing key from a null and keeps a resumed run's other key order;
- `long` layout (a short log with many keys: diagnostics, ~100 keys and a few dozen rows, where Parquet's overhead of
  ~150 bytes per column would outweigh the data): one row per (row, key) in the rows' own order, columns `row`,
  `key` and one `value.<type>` column per type (`.pivot(index="row", columns="key")` gives the wide table).
Formats 1-3 (steplog_legacy: a private key column, scaled timings, `lr` as nulls) still read; compact_logs migrates.
The bytes are deterministic for a pyarrow version (the footer names it: `created_by`) and may differ under another
one; what holds across versions is the rows, and a finished run's seal records the bytes it has."""
from __future__ import annotations

import io
import json
import math
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..errors import RunDirError
from ..training.schedule import config_beside
from .io import atomic_write_bytes, jsonl_text, same_rows
from .rundir import RunDir
from .steplog_legacy import decode_wide

LOGS = ("metrics", "evals", "diagnostics")  # the per-step logs of a run (RunDir attributes, file stems)
COMPACTED = ("metrics", "diagnostics")  # the logs a finished run keeps as Parquet
PARQUET = ".parquet"
FORMAT = 4  # 4: standard types only (2 and 3 scaled timings and derived lr, 1-3 a private key column)
READABLE_FORMATS = (1, 2, 3, 4)
TIMING_DECIMALS = {"step_ms": 2, "wall_s": 3}  # the resolution timings are kept at (decimal places)
DECIMAL_PRECISION = 18  # digits of a timing's DECIMAL column: its count fits an int64
META_KEY = b"embnorm.steplog"
ZSTD_LEVEL = 19
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def jsonl_path(run_dir: RunDir | str | os.PathLike, log: str) -> Path:
    """`<run>/<log>.jsonl` for a RunDir or a run directory path."""
    if log not in LOGS:
        raise ValueError(f"unknown step log {log!r}; allowed: {', '.join(LOGS)}")
    return (run_dir.root if isinstance(run_dir, RunDir) else Path(run_dir)) / f"{log}.jsonl"


def parquet_path(run_dir: RunDir | str | os.PathLike, log: str) -> Path:
    return jsonl_path(run_dir, log).with_suffix(PARQUET)


def read_step_log(run_dir: RunDir | str | os.PathLike, log: str) -> list[dict]:
    """The rows of one per-step log ("metrics", "evals" or "diagnostics") of a run (a RunDir or its directory):
    from `<log>.parquet` when the run has one, else from `<log>.jsonl` ([] when it has neither)."""
    from .io import read_jsonl

    compact = parquet_path(run_dir, log)
    return read_parquet_log(compact) if compact.is_file() else read_jsonl(jsonl_path(run_dir, log))


def step_log_frame(run_dir: RunDir | str | os.PathLike, log: str):  # noqa: ANN201 (pandas is imported only here)
    """read_step_log as a DataFrame (one row per step)."""
    import pandas as pd

    return pd.DataFrame(read_step_log(run_dir, log))


def round_timings(rows: list[dict]) -> list[dict]:
    """`rows` with each float timing (TIMING_DECIMALS) rounded to its stated resolution; other values as they are."""
    return [{k: round(v, TIMING_DECIMALS[k]) if k in TIMING_DECIMALS and type(v) is float and math.isfinite(v) else v
             for k, v in row.items()} for row in rows]


def _at_places(values: list, places: int) -> bool:
    """Whether every value of `values` (None aside) is a float that a DECIMAL(DECIMAL_PRECISION, places) column holds
    and gives back: count / 10^places is the very float."""
    floats = [v for v in values if v is not None]
    scale, bound = 10 ** places, 10 ** DECIMAL_PRECISION
    # -0.0 is no count's quotient (0 / scale is +0.0): a column holding it stays a float column
    return bool(floats) and all(type(v) is float and math.isfinite(v) and abs(k := round(v * scale)) < bound
                                and k / scale == v and math.copysign(1, v) == math.copysign(1, k) for v in floats)


# -- encoding -------------------------------------------------------------------------------------------------------

def _kind(values: list) -> str:
    """How a column is stored: by the types of its present, non-null values."""
    types = {type(v) for v in values if v is not None}
    if not types:
        return "null"
    if types == {bool}:
        return "bool"
    if types == {int} and all(_INT64[0] <= v <= _INT64[1] for v in values if v is not None):
        return "int"
    if types == {float}:
        return "float32" if all(_exact_float32(v) for v in values if v is not None) else "float64"
    if types == {str}:
        return "str"
    return "json"


def _exact_float32(value: float) -> bool:
    import numpy as np

    if not math.isfinite(value):
        return True  # nan and ±inf are float32 values too (NaN's sign and payload aside: none in these logs)
    with np.errstate(over="ignore"):
        return float(np.float32(value)) == value and (value != 0.0 or math.copysign(1, value) ==
                                                       math.copysign(1, float(np.float32(value))))


def _check_rows(rows: list[dict]) -> None:
    for row in rows:
        if not isinstance(row, dict) or not all(isinstance(k, str) for k in row):
            raise ValueError(f"a step-log row must be a JSON object with string keys, not {str(row)[:80]!r}")


_ARROW_TYPES = {"null": "null", "bool": "bool_", "int": "int64", "float32": "float32", "float64": "float64",
                "str": "string", "json": "string"}


def _arrow_array(values: list, kind: str):  # noqa: ANN202 (a pyarrow.Array)
    import pyarrow as pa

    if kind == "json":
        values = [None if v is _MISSING else json.dumps(v) for v in values]
    else:
        values = [None if v is _MISSING else v for v in values]
    return pa.array(values, type=getattr(pa, _ARROW_TYPES[kind])())


_MISSING = object()


def encode(rows: list[dict]) -> bytes:
    """The Parquet bytes of `rows` (dicts with str keys); read back with `decode`, they give the same rows. The layout
    is chosen by shape: `wide` with at least as many rows as keys (metrics), else `long` (the module's docstring)."""
    _check_rows(rows)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    meta, table = _wide(rows, keys) if len(rows) >= len(keys) else _long(rows, keys)
    return _write(table, {"format": FORMAT, **meta})


def _runs(values: list[int]) -> list[list[int]]:
    """`values` run-length coded: [value, count] per run (a resumed run has two key orders, in two runs of rows)."""
    runs: list[list[int]] = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return runs


def _decimal_array(values: list, places: int):  # noqa: ANN202 (a pyarrow.Array)
    import pyarrow as pa

    return pa.array([None if v is _MISSING or v is None else Decimal(round(v * 10 ** places)).scaleb(-places)
                     for v in values], type=pa.decimal128(DECIMAL_PRECISION, places))


def _wide(rows: list[dict], keys: list[str]) -> tuple[dict, Any]:
    import pyarrow as pa

    keysets: dict[tuple, int] = {}
    for row in rows:
        keysets.setdefault(tuple(row), len(keysets))
    columns = {key: [row.get(key, _MISSING) for row in rows] for key in keys}
    kinds = {key: _kind([v for v in values if v is not _MISSING]) for key, values in columns.items()}
    decimal = {key for key in keys if key in TIMING_DECIMALS and kinds[key] in ("float32", "float64")
               and _at_places([v for v in columns[key] if v is not _MISSING], TIMING_DECIMALS[key])}
    arrays = [_decimal_array(values, TIMING_DECIMALS[key]) if key in decimal else _arrow_array(values, kinds[key])
              for key, values in columns.items()]
    position = {key: i for i, key in enumerate(keys)}
    meta = {"layout": "wide", "keysets": [[position[k] for k in keyset] for keyset in keysets],
            "keyset_runs": _runs([keysets[tuple(row)] for row in rows]),
            "json": [key for key in keys if kinds[key] == "json"]}
    return meta, pa.Table.from_arrays(arrays, names=keys)


def _long(rows: list[dict], keys: list[str]) -> tuple[dict, Any]:
    import pyarrow as pa

    kinds = {key: _kind([row[key] for row in rows if key in row]) for key in keys}
    used = list(dict.fromkeys(kinds[key] for key in keys))
    cells = [(i, key, value) for i, row in enumerate(rows) for key, value in row.items()]
    arrays = [pa.array([i for i, _, _ in cells], type=pa.int32()), pa.array([k for _, k, _ in cells], type=pa.string())]
    for kind in used:
        arrays.append(_arrow_array([v if kinds[k] == kind else _MISSING for _, k, v in cells], kind))
    meta = {"layout": "long", "rows": len(rows), "kinds": used}
    return meta, pa.Table.from_arrays(arrays, names=["row", "key", *(f"value.{kind}" for kind in used)])


# per Arrow type: the Parquet encoding that packs it best (floats: byte-stream split, then zstd; ints: deltas)
_ENCODINGS = {"float": "BYTE_STREAM_SPLIT", "double": "BYTE_STREAM_SPLIT", "int32": "DELTA_BINARY_PACKED",
              "int64": "DELTA_BINARY_PACKED"}


def _write(table, meta: dict) -> bytes:  # noqa: ANN001 (a pyarrow.Table)
    import pyarrow as pa
    import pyarrow.parquet as pq

    # a DECIMAL column is written as its int64 count (store_decimal_as_integer), which deltas pack like any int
    encodings = {f.name: "DELTA_BINARY_PACKED" if pa.types.is_decimal(f.type) else _ENCODINGS[str(f.type)]
                 for f in table.schema if str(f.type) in _ENCODINGS or pa.types.is_decimal(f.type)}
    sink = io.BytesIO()
    # store_schema=False: no serialised Arrow schema (the Parquet types say it all); the format's own metadata is the
    # footer's one key-value pair. No statistics, and a dictionary only for the long layout's key column.
    with pq.ParquetWriter(sink, table.schema, compression="zstd", compression_level=ZSTD_LEVEL,
                          use_dictionary=["key"] if meta["layout"] == "long" else False, write_statistics=False,
                          column_encoding=encodings or None, store_schema=False,
                          store_decimal_as_integer=True) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
        writer.add_key_value_metadata({META_KEY: json.dumps(meta, separators=(",", ":")).encode()})
    return sink.getvalue()


def _decode_table(table, config_of=None) -> list[dict]:  # noqa: ANN001 (a pyarrow.Table; a callable -> RunConfig)
    raw = (table.schema.metadata or {}).get(META_KEY)
    meta = json.loads(raw) if raw else None
    if not isinstance(meta, dict) or meta.get("format") not in READABLE_FORMATS:
        raise ValueError(f"not a step log of format 1-{FORMAT} (metadata {META_KEY.decode()!r} missing or of another "
                         f"format)")
    if meta["layout"] == "wide":
        return _decode_wide(table, meta) if meta["format"] >= 4 else decode_wide(table, meta, config_of)
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    rows: list[dict] = [{} for _ in range(meta["rows"])]
    values = [(kind == "json", columns[f"value.{kind}"]) for kind in meta["kinds"]]
    for i, (r, key) in enumerate(zip(columns["row"], columns["key"])):
        value = None  # a cell is in its key's kind column: null in the others (and there too when it is None)
        for as_json, column in values:
            if column[i] is not None:
                value = json.loads(column[i]) if as_json else column[i]
                break
        rows[r][key] = value
    return rows


def _decode_wide(table, meta: dict) -> list[dict]:  # noqa: ANN001 (a pyarrow.Table)
    import pyarrow as pa

    keys = table.column_names
    columns = {key: _decimal_floats(table.column(key).combine_chunks()) if pa.types.is_decimal(table.column(key).type)
               else table.column(key).to_pylist() for key in keys}
    as_json = set(meta["json"])
    for key in as_json:
        columns[key] = [None if v is None else json.loads(v) for v in columns[key]]
    keysets = [[keys[i] for i in keyset] for keyset in meta["keysets"]]
    which = [k for k, count in meta["keyset_runs"] for _ in range(count)]
    if keys and len(which) != table.num_rows:  # rows that are all `{}` have no column to count them
        raise ValueError(f"keyset_runs cover {len(which)} rows of {table.num_rows}")
    return [{key: columns[key][i] for key in keysets[k]} for i, k in enumerate(which)]


def _decimal_floats(array) -> list:  # noqa: ANN001 (a pyarrow decimal128 Array)
    """A DECIMAL column's values as the floats written: count / 10^scale, correctly rounded. Decimal objects took 40% of
    reading a log, so the counts are read as the low 64-bit words (|count| < 10^18) and numpy divides them where that
    is exact (|count| < 2^53: two exact doubles), else Python's int / int does; a big-endian machine takes Decimals."""
    import sys

    import numpy as np

    if sys.byteorder != "little" or not len(array):
        return [None if v is None else float(v) for v in array.to_pylist()]
    counts = np.frombuffer(array.buffers()[1], dtype=np.int64)[2 * array.offset::2][:len(array)]
    scale = 10 ** array.type.scale
    exact = bool(np.all(np.abs(counts) < 2 ** 53))
    values = (counts / scale).tolist() if exact else [k / scale for k in counts.tolist()]
    return [None if null else v for v, null in zip(values, array.is_null().to_pylist())] if array.null_count else values


def decode(payload: bytes, config=None) -> list[dict]:  # noqa: ANN001 (a RunConfig, or None)
    """The rows of a step log's Parquet bytes (see `encode`); `config`: the run's, for a log with derived columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return _decode_table(pq.read_table(pa.BufferReader(payload)), None if config is None else lambda: config)


def read_parquet_log(path: str | os.PathLike) -> list[dict]:
    """The rows of a `<log>.parquet` file; one line naming the file when it is damaged or of another format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..errors import ConfigError

    path = Path(path)
    try:
        return _decode_table(pq.read_table(pa.BufferReader(path.read_bytes())), lambda: config_beside(path))
    except (OSError, ValueError, KeyError, IndexError, TypeError, ConfigError) as e:
        raise RunDirError(f"unreadable step log {path} ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}); "
                          f"allowed: a format-{FORMAT} Parquet step log (restore it from git, or retrain the run)"
                          ) from None


def outdated(path: str | os.PathLike) -> bool:
    """Whether the step log at `path` is a wide log of a format before 4, which plain Parquet readers misread (a
    private key column, scaled timings, `lr` as nulls): what compact_logs rewrites as format 4."""
    import pyarrow.parquet as pq

    meta = json.loads((pq.ParquetFile(path).metadata.metadata or {}).get(META_KEY, b"{}"))
    return meta.get("layout") == "wide" and meta.get("format", FORMAT) < 4


def parquet_rows(path: Path) -> int:
    """The row count of a `<log>.parquet` file (from its footer), for the seal."""
    import pyarrow.parquet as pq

    try:
        footer = pq.ParquetFile(path).metadata
        meta = json.loads((footer.metadata or {})[META_KEY])
        if meta["layout"] == "long":
            return meta["rows"]
        return sum(count for _, count in meta["keyset_runs"]) if "keyset_runs" in meta else footer.num_rows
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunDirError(f"unreadable step log {path} ({type(e).__name__}); allowed: a format-{FORMAT} Parquet "
                          f"step log (restore it from git, or retrain the run)") from None


def parquet_last_step(path: Path) -> int | None:
    """The `step` of a `<log>.parquet` file's last row (0 for an empty log), for the seal."""
    rows = read_parquet_log(path)
    return rows[-1].get("step") if rows else 0


def checked_encode(path: str | os.PathLike, rows: list[dict]) -> bytes:
    """encode(rows), checked to read back as the same rows (RunDirError naming `path`, the file it is meant for)."""
    payload = encode(rows)
    if not same_rows(decode(payload), rows):
        raise RunDirError(f"the Parquet form of {path} does not read back as the rows it was written from; nothing "
                          f"was written (allowed: rows of JSON values; report this with the file)")
    return payload


def write_parquet_log(path: str | os.PathLike, rows: list[dict]) -> Path:
    """`rows` as a Parquet step log at `path`, written atomically after checking that the bytes read back as the
    same rows (nothing is written otherwise)."""
    return atomic_write_bytes(path, checked_encode(path, rows))


def main(argv=None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(description="Write a run's per-step log as JSONL to stdout, from whichever form it "
                                            "has (e.g. `python -m embnorm_lib steplog runs/<study>/ln/seed0 metrics > "
                                            "metrics.jsonl` gives back a converted log's original file).")
    p.add_argument("run_dir", help="a run directory (runs/<study>/<arm>/seed<k>)")
    p.add_argument("log", choices=LOGS)
    args = p.parse_args(argv)
    run = Path(args.run_dir)
    if not (jsonl_path(run, args.log).is_file() or parquet_path(run, args.log).is_file()):
        raise RunDirError(f"no {args.log} log in {run} (neither {args.log}.jsonl nor {args.log}{PARQUET}); allowed: a "
                          f"run directory that holds one")
    sys.stdout.write(jsonl_text(read_step_log(run, args.log)))
    return 0


if __name__ == "__main__":
    import sys

    from ..errors import entry

    sys.exit(entry(main))
