"""Reading the wide Parquet step logs of formats 1-3, which plain Parquet readers misread; steplog writes format 4.

Kept so that a run copied in from an older checkout (or a commit before the migration) still reads, and so that
compact_logs can migrate it: it reads the rows here and writes them again as format 4. Those formats held:
- `__keys__`, an int32 column: per row, the index of its key list in the metadata's `keysets` (column positions
  after `__keys__`, in the row's own key order);
- `decimal` (format 2): key -> places; the column holds the int64 count of its last place (a timing x100 or x1000),
  read back as count / 10^places, which gives the very float;
- `derived` (format 3): key -> digest; the column holds nulls and the values are computed again from the run's
  config.json (schedule.fill_derived, which checks the digest).
The long layout (diagnostics) is the same in every format and is read by steplog itself."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..training.schedule import fill_derived

KEYS_COLUMN = "__keys__"  # formats 1-3: per row, the index of its key list in the metadata's "keysets"


def decode_wide(table: Any, meta: dict, config_of: Callable | None) -> list[dict]:
    """The rows of a format 1-3 wide table (a pyarrow.Table) with its metadata `meta`; `config_of` gives the run's
    RunConfig, for a log with derived columns (ValueError without one)."""
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    for key, places in meta.get("decimal", {}).items():
        scale = 10 ** places  # an int divided by an int is correctly rounded: the float that was written
        columns[key] = [None if k is None else k / scale for k in columns[key]]
    keys = table.column_names[1:]
    keysets = [[keys[i] for i in keyset] for keyset in meta["keysets"]]
    as_json = set(meta["json"])
    rows = [{key: json.loads(columns[key][i]) if key in as_json else columns[key][i] for key in keysets[k]}
            for i, k in enumerate(columns[KEYS_COLUMN])]
    return fill_derived(rows, meta.get("derived", {}), config_of)
