"""A run's per-step logs (metrics, diagnostics, evals): JSONL while the run trains, Parquet once it has finished.

A live run rewrites `<log>.jsonl` at every checkpoint (checkpoint.Logs). When it finishes, train.py writes its metrics
and diagnostics as `<log>.parquet` instead (evals stay JSONL: a few dozen rows, read by eye), and
`python -m embnorm_lib.compact_logs` converts the runs that finished before. Every reader goes through
`read_step_log`, which takes the Parquet file when there is one, else the JSONL, and returns the very rows `json.loads`
gives for the JSONL: the same keys in the same order, the same types (bool, int, float, None, str, lists and
objects) and values, a key missing from a row still missing.

Timings are logged at a stated resolution, `TIMING_DECIMALS` (step_ms to 10 µs, wall_s to 1 ms: finer digits are
the timer's noise on a shared machine, and they were a third of a Parquet log's bytes); `round_timings` applies it, to
a live run's rows as they are logged and to older runs' logs when compact_logs converts or re-encodes them.

The Parquet form (format `FORMAT`, or 1 for a log without a decimal column; zstd level 19, no statistics; floats
byte-stream-split, ints delta-coded):
- a key's values keep their type where they share one (all bool, all int: int64, all float, all str; None is null);
  a float key whose every value is a decimal of at most `MAX_DECIMALS` places (the timings) is stored as the int64
  count of its last place (`decimal` in the metadata: key -> places) and read back as that count divided by 10^places,
  which gives the very float; a key of `schedule.DERIVED` (the learning rate) whose every value is what its
  function gives for the run's config and the row's step is stored as a column of nulls (`derived` in the metadata:
  key -> a digest of the values) and read back by calling the function again with the run's config.json, which
  gives the very floats (format 3; the digest is checked, and a platform whose `math.cos` rounds differently is
  warned of; it was 30% of a metrics log's bytes); other floats are float32 where every value round-trips exactly
  (losses and norms come from float32 tensors), else float64; a key with mixed types, lists or objects holds each
  value as its JSON text;
- `wide` layout (a log with at least as many rows as keys: metrics): one column per key in order of first
  appearance, null where a row lacks the key, plus `__keys__`: per row, which of the file's key lists (its metadata)
  the row has, in the row's order;
- `long` layout (a short log with many keys: diagnostics, ~100 keys and a few dozen rows, where Parquet's overhead of
  ~150 bytes per column would outweigh the data): one row per (row, key) in the rows' own order, columns `row`,
  `key` and one `value.<type>` column per type.
`pandas.read_parquet` reads either (a long file pivots to the wide table: `.pivot(index="row", columns="key")`; a
derived column reads as nulls there, since only `read_step_log` computes it).
The bytes are deterministic for a pyarrow version (the footer names it: `created_by`) and may differ under another
one; what holds across versions is the rows, and a finished run's seal records the bytes it has."""
from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path
from typing import Any

from .errors import RunDirError
from .io import atomic_write_bytes
from .rundir import RunDir
from .schedule import DERIVED, config_beside, derivable, fill_derived

LOGS = ("metrics", "evals", "diagnostics")  # the per-step logs of a run (RunDir attributes, file stems)
COMPACTED = ("metrics", "diagnostics")  # the logs a finished run keeps as Parquet
PARQUET = ".parquet"
FORMAT = 3  # 2 added decimal columns, 3 derived ones; a log is written at the lowest format that holds it
READABLE_FORMATS = (1, 2, 3)
TIMING_DECIMALS = {"step_ms": 2, "wall_s": 3}  # the resolution timings are kept at (decimal places)
MAX_DECIMALS = 6
META_KEY = b"embnorm.steplog"
KEYS_COLUMN = "__keys__"  # per row: the index of its key list in the metadata's "keysets"
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


def _decimals(values: list) -> int | None:
    """The fewest decimal places (0..MAX_DECIMALS) that hold every float of `values` exactly (count / 10^places gives
    the very float back; None values aside), or None."""
    floats = [v for v in values if v is not None]
    if not floats or not all(math.isfinite(v) for v in floats):
        return None
    for places in range(MAX_DECIMALS + 1):
        scale = 10 ** places
        # -0.0 is no count's quotient (0 / scale is +0.0): a column holding it stays a float column
        if all(abs(k := round(v * scale)) < 2 ** 53 and k / scale == v and math.copysign(1, v) == math.copysign(1, k)
               for v in floats):
            return places
    return None


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


def encode(rows: list[dict], config=None) -> bytes:  # noqa: ANN001 (a RunConfig, or None)
    """The Parquet bytes of `rows` (dicts with str keys); read back with `decode` (given the same `config`), they give
    the same rows. With the run's `config`, a `DERIVED` column that its function reproduces is stored as its recipe.

    Two layouts, chosen by shape: a log with at least as many rows as keys (metrics) is `wide`, one column per key;
    a short log with many keys (diagnostics: ~100 keys, a few dozen rows) is `long`, one row per (row, key) in the
    rows' own order, since Parquet's per-column overhead (~150 bytes in the footer) would outweigh its data."""
    _check_rows(rows)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    if len(rows) >= len(keys):
        meta, table = _wide(rows, keys, config)
    else:
        meta, table = _long(rows, keys)
    return _write(table, {"format": 3 if meta.get("derived") else 2 if meta.get("decimal") else 1, **meta})


def _wide(rows: list[dict], keys: list[str], config=None) -> tuple[dict, Any]:  # noqa: ANN001 (a RunConfig)
    import pyarrow as pa

    if KEYS_COLUMN in keys:
        raise ValueError(f"a step-log row may not have the key {KEYS_COLUMN!r} (the Parquet form's own column)")
    keysets: dict[tuple, int] = {}
    for row in rows:
        keysets.setdefault(tuple(row), len(keysets))
    columns = {key: [row.get(key, _MISSING) for row in rows] for key in keys}
    kinds = {key: _kind([v for v in values if v is not _MISSING]) for key, values in columns.items()}
    derived = {key: digest for key in keys if (digest := derivable(
        key, [(row, v) for row, v in zip(rows, columns[key]) if v is not _MISSING], config)) is not None}
    for key in derived:
        columns[key] = [v if v is _MISSING else None for v in columns[key]]
        kinds[key] = "null"
    decimal = {key: places for key in keys if kinds[key] in ("float32", "float64")
               and (places := _decimals([v for v in columns[key] if v is not _MISSING])) is not None}
    for key, places in decimal.items():
        columns[key] = [v if v is _MISSING or v is None else round(v * 10 ** places) for v in columns[key]]
        kinds[key] = "int"
    arrays = [pa.array([keysets[tuple(row)] for row in rows], type=pa.int32())]
    arrays += [_arrow_array(values, kinds[key]) for key, values in columns.items()]
    position = {key: i for i, key in enumerate(keys)}
    meta = {"layout": "wide", "keysets": [[position[k] for k in keyset] for keyset in keysets],
            "json": [key for key in keys if kinds[key] == "json"], **({"decimal": decimal} if decimal else {}),
            **({"derived": derived} if derived else {})}
    return meta, pa.Table.from_arrays(arrays, names=[KEYS_COLUMN, *keys])


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
    import pyarrow.parquet as pq

    encodings = {f.name: _ENCODINGS[str(f.type)] for f in table.schema if str(f.type) in _ENCODINGS}
    sink = io.BytesIO()
    # store_schema=False: no serialised Arrow schema (the Parquet types say it all); the format's own metadata is the
    # footer's one key-value pair. No statistics, and a dictionary only for the long layout's key column.
    with pq.ParquetWriter(sink, table.schema, compression="zstd", compression_level=ZSTD_LEVEL,
                          use_dictionary=["key"] if meta["layout"] == "long" else False, write_statistics=False,
                          column_encoding=encodings or None, store_schema=False) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
        writer.add_key_value_metadata({META_KEY: json.dumps(meta, separators=(",", ":")).encode()})
    return sink.getvalue()


def _decode_table(table, config_of=None) -> list[dict]:  # noqa: ANN001 (a pyarrow.Table; a callable -> RunConfig)
    raw = (table.schema.metadata or {}).get(META_KEY)
    meta = json.loads(raw) if raw else None
    if not isinstance(meta, dict) or meta.get("format") not in READABLE_FORMATS:
        raise ValueError(f"not a format-{FORMAT} step log (metadata {META_KEY.decode()!r} missing or of another "
                         f"format)")
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    for key, places in meta.get("decimal", {}).items():
        scale = 10 ** places  # an int divided by an int is correctly rounded: the float that was written
        columns[key] = [None if k is None else k / scale for k in columns[key]]
    if meta["layout"] == "wide":
        keys = table.column_names[1:]
        keysets = [[keys[i] for i in keyset] for keyset in meta["keysets"]]
        as_json = set(meta["json"])
        rows = [{key: json.loads(columns[key][i]) if key in as_json else columns[key][i] for key in keysets[k]}
                for i, k in enumerate(columns[KEYS_COLUMN])]
        return fill_derived(rows, meta.get("derived", {}), config_of)
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


def decode(payload: bytes, config=None) -> list[dict]:  # noqa: ANN001 (a RunConfig, or None)
    """The rows of a step log's Parquet bytes (see `encode`); `config`: the run's, for a log with derived columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return _decode_table(pq.read_table(pa.BufferReader(payload)), None if config is None else lambda: config)


def read_parquet_log(path: str | os.PathLike) -> list[dict]:
    """The rows of a `<log>.parquet` file; one line naming the file when it is damaged or of another format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .errors import ConfigError

    path = Path(path)
    try:
        return _decode_table(pq.read_table(pa.BufferReader(path.read_bytes())), lambda: config_beside(path))
    except (OSError, ValueError, KeyError, IndexError, TypeError, ConfigError) as e:
        raise RunDirError(f"unreadable step log {path} ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}); "
                          f"allowed: a format-{FORMAT} Parquet step log (restore it from git, or retrain the run)"
                          ) from None


def stored_in_full(path: str | os.PathLike, rows: list[dict]) -> list[str]:
    """The DERIVED keys that the wide step log at `path` (whose rows are `rows`) stores value by value although its
    run's config reproduces every one of them: what re-encoding it would store as their recipe (see `encode`)."""
    import pyarrow.parquet as pq

    meta = json.loads((pq.ParquetFile(path).metadata.metadata or {}).get(META_KEY, b"{}"))
    if meta.get("layout") != "wide":
        return []
    config = config_beside(path)
    return [key for key in DERIVED if key not in meta.get("derived", {})
            and derivable(key, [(row, row[key]) for row in rows if key in row], config) is not None]


def parquet_rows(path: Path) -> int:
    """The row count of a `<log>.parquet` file (from its footer), for the seal."""
    import pyarrow.parquet as pq

    try:
        footer = pq.ParquetFile(path).metadata
        meta = json.loads((footer.metadata or {})[META_KEY])
        return meta["rows"] if meta["layout"] == "long" else footer.num_rows
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunDirError(f"unreadable step log {path} ({type(e).__name__}); allowed: a format-{FORMAT} Parquet "
                          f"step log (restore it from git, or retrain the run)") from None


def parquet_last_step(path: Path) -> int | None:
    """The `step` of a `<log>.parquet` file's last row (0 for an empty log), for the seal."""
    rows = read_parquet_log(path)
    return rows[-1].get("step") if rows else 0


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """Whether two lists of rows are identical: keys and their order, value types and values (NaN equals NaN, 1 is
    not 1.0 nor True, None is not a missing key)."""
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def _same(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return list(x) == list(y) and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y))
    if isinstance(x, float):
        return x == y and math.copysign(1, x) == math.copysign(1, y) if not math.isnan(x) else math.isnan(y)
    return x == y


def checked_encode(path: str | os.PathLike, rows: list[dict]) -> bytes:
    """encode(rows) with the config of the run `path` is in (when it has one), checked to read back as the same rows
    (RunDirError naming `path`, the file it is meant for)."""
    config = config_beside(path)
    payload = encode(rows, config)
    if not same_rows(decode(payload, config), rows):
        raise RunDirError(f"the Parquet form of {path} does not read back as the rows it was written from; nothing "
                          f"was written (allowed: rows of JSON values; report this with the file)")
    return payload


def write_parquet_log(path: str | os.PathLike, rows: list[dict]) -> Path:
    """`rows` as a Parquet step log at `path`, written atomically after checking that the bytes read back as the
    same rows (nothing is written otherwise)."""
    return atomic_write_bytes(path, checked_encode(path, rows))


def jsonl_text(rows: list[dict]) -> str:
    """Rows as the JSONL text the library writes (io.write_jsonl): a converted log written out again is its original
    file byte for byte."""
    from .io import _json_safe

    return "".join(json.dumps(_json_safe(r), sort_keys=True) + "\n" for r in rows)


def main(argv=None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(description="Write a run's per-step log as JSONL to stdout, from whichever form it "
                                            "has (e.g. `python -m embnorm_lib.steplog runs/<study>/ln/seed0 metrics > "
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

    from .errors import entry

    sys.exit(entry(main))
