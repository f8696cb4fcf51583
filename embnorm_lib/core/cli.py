"""What the command lines share: parsing seeds, FIELD=VALUE assignments and values, each refused in one line, and
the command line every report module shares."""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError


def parse_seeds(text: str) -> list[int]:
    """'0-4', '0,3,7' or a mix; anything else (negative, fractional, words, empty) is refused."""
    seeds = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match or (match[2] is not None and int(match[2]) < int(match[1])):
            raise ConfigError(f"invalid --seeds {text!r}; allowed: integers >= 0 as a range or list, e.g. 0-4 or 0,3,7")
        lo, hi = int(match[1]), int(match[2] if match[2] is not None else match[1])
        seeds.extend(range(lo, hi + 1))
    return seeds


def _finite(number: str) -> float:
    # json reads 1e400 as inf: a field's check would then name inf, not what was typed
    value = float(number)
    if not math.isfinite(value):
        raise ConfigError(f"invalid value {number!r}: beyond a 64-bit float's range; allowed: a number within "
                          f"+-1.8e308")
    return value


def parse_value(text: str) -> Any:
    """A JSON value (number, true/false, list...) or, failing that, the text itself."""
    try:
        return json.loads(text, parse_float=_finite)
    except json.JSONDecodeError:
        return text


def split_assignment(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"invalid assignment {text!r}; allowed: FIELD=VALUE")
    key, value = text.split("=", 1)
    return key.strip(), value


def parse_overrides(texts: list[str]) -> dict[str, Any]:
    """--set FIELD=VALUE, each field once: given twice, a dict would keep the last one without a word."""
    fixed: dict[str, Any] = {}
    for key, value in map(split_assignment, texts):
        if key in fixed:
            raise ConfigError(f"invalid --set {key}={value}: field {key} is already set to {fixed[key]!r}; allowed: "
                              "each field once")
        fixed[key] = parse_value(value)
    return fixed


def parse_axes(texts: list[str], fixed: dict) -> dict[str, list]:
    """--axis FIELD=V1,V2 (one per field) as {field: values}. A field given twice, a value repeated or a field also
    fixed by --set is refused: a dict would keep only the last, and a repeated value makes two cells of one run
    directory (runs.csv would then hold duplicate labels that no analysis can pair)."""
    axes: dict[str, list] = {}
    for text in texts:
        key, value = split_assignment(text)
        values = [parse_value(x) for x in value.split(",")]
        if key in axes:
            raise ConfigError(f"invalid --axis {text!r}: field {key} is given twice; allowed: one --axis per field, "
                              f"its values comma-separated (e.g. --axis {key}=0.001,0.003)")
        if key in fixed:
            raise ConfigError(f"invalid --axis {text!r}: field {key} is also fixed by --set; allowed: one of them")
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            raise ConfigError(f"invalid --axis {text!r}: value {repeated[0]} is repeated; allowed: distinct values")
        axes[key] = values
    return axes


def report_main(argv, doc: str, studies: Sequence[str], write: Callable[[str, argparse.Namespace], Path],
                options: Sequence[str] = ("--figures-dir",)) -> int:
    """The command line every report module shares: the study (a choice when there are several), --out-dir and the
    module's path options; a study without runs.csv is refused in one line; the written report is printed."""
    from .records.io import directory_option, runs_root
    from .records.rundir import study_dir_for

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if len(studies) > 1:
        p.add_argument("study", nargs="?", default=studies[0], choices=studies)
    p.add_argument("--out-dir", default=None)
    for option in options:
        p.add_argument(option, default=None)
    args = p.parse_args(argv)
    study = getattr(args, "study", studies[0])
    if getattr(args, "figures_dir", None):
        directory_option(args.figures_dir, "--figures-dir")  # before the analysis, not inside its figure writes
    if not study_dir_for(study, runs_root(args.out_dir)).index.is_file():
        print(f"error: no runs.csv for {study}; run `python -m embnorm_lib sweep {study}` first", file=sys.stderr)
        return 2
    print(write(study, args).read_text())
    return 0
