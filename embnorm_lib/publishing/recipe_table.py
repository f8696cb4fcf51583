"""runs/RECIPES.md: the training recipe of every committed study, read from its runs' configs (issue 113).

One row per study and preset: the model, context and batch, iterations, warm-up, gradient clipping, embeddings and
output head, tokens, precision and each arm's peak LR (a grid where a study searched LRs). A setting every row
shares is stated once above the table instead of repeated in a column. Nothing here is typed per study: the values
are the configs' (runs.csv's `cfg.*` columns), and this module is the page's only writer.

    python -m embnorm_lib report recipes     # rewrite runs/RECIPES.md (publish does it with runs/README.md)"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pandas as pd

from ..core.config import RunConfig
from ..core.nets.variants import variant_rank
from ..core.records.io import write_bytes_if_changed
from ..runner.registry import STUDIES
from ..runner.results import has_index, load_runs

PAGE = "RECIPES.md"
OPTIMIZER = "AdamW, weight decay on matrices and embeddings only (core.training.optimizer.make_optimizer)"
SCHEDULE = "linear warm-up, then cosine decay to the minimum LR (core.training.schedule.lr_at)"


def _number(value) -> str:
    if hasattr(value, "item"):  # a numpy scalar from a column
        value = value.item()
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def spread(values) -> str:
    """Distinct values as a reader wants them: one as itself, a few listed, many as their range and count."""
    values = pd.Series(list(values)).dropna()
    distinct = sorted(values.unique(), key=lambda v: (str(type(v)), v))
    if not distinct:
        return "–"
    if len(distinct) <= 3 or not all(isinstance(v, (int, float)) for v in distinct):
        return ", ".join(_number(v) for v in distinct)
    return f"{_number(distinct[0])}–{_number(distinct[-1])} ({len(distinct)} values)"


def _per_row(g: pd.DataFrame, fmt: Callable[[pd.Series], str]) -> str:
    return "; ".join(dict.fromkeys(fmt(r) for _, r in g.iterrows()))


def _embeddings(r: pd.Series) -> str:
    head = "tied head" if bool(r["cfg.tie_embeddings"]) else "untied head"
    if not bool(r["cfg.tie_embeddings"]) and isinstance(r.get("cfg.head_init"), str):
        head += f" ({r['cfg.head_init']} init)"
    return f"N(0, {_number(float(r['cfg.emb_init_std']))}), {head}"


def _batch(r: pd.Series) -> str:
    accum = int(r.get("cfg.grad_accum", 1) or 1)
    return f"{int(r['cfg.batch_size'])}" + (f" × {accum} accumulated" if accum > 1 else "")


def arm_lrs(g: pd.DataFrame) -> str:
    """Each arm's peak LR, or its grid where the study searched; one phrase when every arm has the same."""
    by_arm = {arm: spread(sub["cfg.lr"].astype(float)) for arm, sub in g.groupby("cfg.variant")}
    if len(set(by_arm.values())) == 1:
        return f"every arm {next(iter(by_arm.values()))}"
    return "; ".join(f"`{arm}` {by_arm[arm]}" for arm in sorted(by_arm, key=variant_rank))


COLUMNS: dict[str, Callable[[pd.DataFrame], str]] = {
    "model (layers × width, heads)": lambda g: _per_row(
        g, lambda r: f"{int(r['cfg.n_layer'])} × {int(r['cfg.n_embd'])}, {int(r['cfg.n_head'])}"),
    "context": lambda g: spread(g["cfg.block_size"].astype(int)),
    "batch": lambda g: _per_row(g, _batch),
    "iterations": lambda g: spread(g["cfg.max_iters"].astype(int)),
    "warm-up (share of iterations)": lambda g: ", ".join(f"{v:.0%}" for v in sorted(g["cfg.warmup_frac"].unique())),
    "minimum LR (× peak)": lambda g: spread(g["cfg.min_lr_ratio"].astype(float)),
    "AdamW betas": lambda g: _per_row(g, lambda r: f"({_number(float(r['cfg.beta1']))}, "
                                                   f"{_number(float(r['cfg.beta2']))})"),
    "weight decay": lambda g: spread(g["cfg.weight_decay"].astype(float)),
    "dropout": lambda g: spread(g["cfg.dropout"].astype(float)),
    "gradient clipping": lambda g: _per_row(g, lambda r: "off" if float(r["cfg.grad_clip"]) == 0
                                            else _number(float(r["cfg.grad_clip"]))),
    "embeddings, output head": lambda g: _per_row(g, _embeddings),
    "tokens (vocabulary)": lambda g: _per_row(g, lambda r: f"{r['cfg.tokenizer']} ({int(r['cfg.vocab_size'])})"),
    # the precision a run resolved (`auto` is fp32 on a CPU), where its index recorded it
    "precision": lambda g: spread(g["precision"].fillna(g["cfg.precision"]) if "precision" in g else g["cfg.precision"]),
    "peak LR per arm": arm_lrs,
}


def with_config_defaults(runs: pd.DataFrame) -> pd.DataFrame:
    """An index whose runs predate a config field gets the field's default, as RunConfig.load reads their
    config.json (a field missing from it takes the default: what those runs trained with)."""
    for f in fields(RunConfig):
        column = f"cfg.{f.name}"
        if column not in runs:
            runs[column] = f.default
        elif f.default is not None and runs[column].isna().any():  # an index mixing runs from before and after
            runs[column] = runs[column].astype(object).where(runs[column].notna(), f.default)
    return runs


def recipe_table(out: Path) -> pd.DataFrame:
    """One row per committed study (registry order) and preset: each COLUMNS entry over that group's runs."""
    rows = []
    for study in (s for s in STUDIES if has_index(s, out)):
        runs = with_config_defaults(load_runs(study, out))
        if runs.empty:
            continue
        presets = runs["cfg.preset"].fillna("–") if "cfg.preset" in runs else pd.Series("–", index=runs.index)
        for preset, g in runs.groupby(presets, sort=False):
            row = {"study": study, "status": STUDIES[study].status, "preset": preset, "runs": len(g)}
            row.update({name: fmt(g) for name, fmt in COLUMNS.items()})
            rows.append(row)
    return pd.DataFrame(rows)


def shared_settings(table: pd.DataFrame) -> dict[str, str]:
    """The COLUMNS whose value is the same in every row: stated once, not repeated per row."""
    return {name: table[name].iloc[0] for name in COLUMNS if name in table and table[name].nunique() == 1}


def recipes_page(out: Path) -> str:
    table = recipe_table(out)
    lines = ["# Training recipes", "",
             "How every committed study trained, read from its runs' configs (`runs/<study>/runs.csv`). Optimizer: "
             f"{OPTIMIZER}; schedule: {SCHEDULE}. A setting every study shares is stated once here; the table shows "
             "the rest, one row per study and preset. Written by `python -m embnorm_lib report recipes` (and by "
             "every `publish`).", ""]
    if table.empty:
        return "\n".join(lines + ["No committed study yet."])
    shared = shared_settings(table)
    lines += ["Shared by every run: " + "; ".join(f"{name} {value}" for name, value in shared.items()) + ".", ""]
    shown = ["study", "status", "preset", "runs"] + [c for c in COLUMNS if c not in shared]
    lines += ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for row in table.to_dict("records"):
        cells = [f"[`{row['study']}`]({row['study']}/)"] + [str(row[c]) for c in shown[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_recipes(out: Path) -> Path:
    """runs/RECIPES.md, rewritten only when its text changes."""
    return write_bytes_if_changed(Path(out) / PAGE, (recipes_page(Path(out)) + "\n").encode())
