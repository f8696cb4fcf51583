"""Pages as templates: the prose lives in Jinja2 files under embnorm_lib/templates/, filled from result records (plain
JSON-safe dicts). The filters here format numbers and turn a row's registered decision into its word; they never
choose what a page says, and nothing they render is read back.

    render("prose_tuning.md.j2", record)           # a whole page
    macro("answer.md.j2", "first_screen")(record)  # one block of a page (what a test pins)

A template writes prose wrapped: inside `{% filter paragraphs %}` each paragraph (blank lines apart) comes out as one
line (Markdown bullets and table rows are one line each), and `{% filter oneline %}` makes a whole block one line."""
from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..stats import signed

if TYPE_CHECKING:
    import jinja2

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def fmt(value, spec: str) -> str:
    """`{{ x|fmt('+.3f') }}`: Python's format mini-language, so a template formats a number the way code would; a
    signed fixed-point spec goes through `signed`, so no difference reads '-0.000'."""
    if (m := re.fullmatch(r"\+\.(\d)f", spec)) and value is not None:
        return signed(value, int(m.group(1)))
    return format(value, spec)


def interval(r: dict, digits: int = 3) -> str:
    """'+0.121 [+0.119, +0.123]': a row's mean difference and its 95% interval."""
    return f"{signed(r['mean_diff'], digits)} [{signed(r['ci_low'], digits)}, {signed(r['ci_high'], digits)}]"


def effect(r: dict, cost: str = "costs", gain: str = "helps") -> str:
    """A row's decision word: 'equivalent within ±0.01' where its TOST (Holm) puts the difference inside the margin,
    else its direction where Holm resolves it, else 'not resolved'."""
    from ..stats.equivalence import EQUIVALENT_WORDS

    if r.get("equivalent"):
        return EQUIVALENT_WORDS
    if not r["significant"]:
        return "not resolved"
    return cost if r["mean_diff"] > 0 else gain


def millions(params: float) -> str:
    """'14.2M' from 1M up, '0.79M' below."""
    return f"{params / 1e6:.1f}M" if params >= 1e6 else f"{params / 1e6:.2f}M"


def model(r: dict) -> str:
    """'8 × 128': layers × width of a record that has both."""
    return f"{r['layers']} × {r['width']}"


def pick(rows: list[dict], **match) -> list[dict]:
    """The rows whose fields equal every `match` value."""
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def one(rows: list[dict], **match) -> dict:
    """The one row matching; refused (not guessed) where there is none or several."""
    found = pick(rows, **match)
    if len(found) != 1:
        raise ValueError(f"{len(found)} rows match {match}; allowed: exactly one")
    return found[0]


def and_list(items) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = [str(x) for x in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def oneline(text: str) -> str:
    """A wrapped block as one line: each line break, with the indentation around it, becomes one space."""
    return re.sub(r"[ \t]*\n[ \t]*", " ", text.strip())


def paragraphs(text: str) -> str:
    """A block of wrapped paragraphs (separated by blank lines) as one line each, one line break apart."""
    return "\n".join(oneline(chunk) for chunk in re.split(r"\n[ \t]*\n", text.strip()) if chunk.strip())


def p_value(p: float) -> str:
    from ..stats import p_text

    return p_text(p)


def percent(share: float) -> str:
    from .render import percent as whole_percent

    return whole_percent(share)


FILTERS = {"fmt": fmt, "interval": interval, "effect": effect, "millions": millions, "model": model, "pick": pick,
           "one": one, "and_list": and_list, "oneline": oneline, "paragraphs": paragraphs, "p": p_value, "percent": percent}


@cache
def environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.do"])
    env.filters.update(FILTERS)
    return env


def render(template: str, record: dict) -> str:
    """A whole page: `template` filled from `record`'s keys."""
    return environment().get_template(template).render(**record)


def macro(template: str, name: str) -> Callable[..., str]:
    """One macro of a template as a function (a block of a page, called with its record)."""
    return getattr(environment().get_template(template).module, name)
