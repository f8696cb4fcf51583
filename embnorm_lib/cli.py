"""What the command lines share: parsing seeds, FIELD=VALUE assignments and values, each refused in one line."""
from __future__ import annotations

import json
import re
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


def parse_value(text: str) -> Any:
    """A JSON value (number, true/false, list...) or, failing that, the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def split_assignment(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"invalid assignment {text!r}; allowed: FIELD=VALUE")
    key, value = text.split("=", 1)
    return key.strip(), value
