"""runs/RECIPES.md (issue 113): every committed study's training recipe, read from its runs' configs."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from embnorm_lib.publishing import recipe_table
from embnorm_lib.runner.results import load_runs
from embnorm_lib.studies import ladder_data

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs"


def _runs(lrs: dict[str, list[float]], **config) -> pd.DataFrame:
    base = {"cfg.preset": "p", "cfg.n_layer": 4, "cfg.n_embd": 128, "cfg.n_head": 4, "cfg.block_size": 64,
            "cfg.batch_size": 12, "cfg.max_iters": 2000, "cfg.warmup_frac": 0.05, "cfg.min_lr_ratio": 0.1,
            "cfg.beta1": 0.9, "cfg.beta2": 0.99, "cfg.weight_decay": 0.1, "cfg.dropout": 0.0, "cfg.grad_clip": 1.0,
            "cfg.emb_init_std": 0.02, "cfg.tie_embeddings": True, "cfg.tokenizer": "char", "cfg.vocab_size": 65,
            "cfg.precision": "auto", "precision": "fp32", **config}
    return pd.DataFrame([{**base, "cfg.variant": arm, "cfg.lr": lr} for arm, grid in lrs.items() for lr in grid])


@pytest.fixture
def two_studies(monkeypatch):
    """Two registered study names served from planted indexes."""
    frames = {"seeds-final": _runs({"none": [3e-4], "ln": [3e-4]}),
              "main": _runs({"none": [1e-3], "ln": [2e-3], "rms": [2e-3]}, **{"cfg.max_iters": 300})}
    monkeypatch.setattr(recipe_table, "has_index", lambda study, out: study in frames)
    monkeypatch.setattr(recipe_table, "load_runs", lambda study, out: frames[study].copy())
    return frames


def test_a_setting_every_row_shares_is_stated_once_and_what_differs_is_a_column(two_studies, tmp_path):
    page = recipe_table.recipes_page(tmp_path)
    shared = next(line for line in page.splitlines() if line.startswith("Shared by every run"))
    assert "AdamW betas (0.9, 0.99)" in shared and "context 64" in shared and "warm-up (share of iterations) 5%" in shared
    header = next(line for line in page.splitlines() if line.startswith("| study"))
    assert "iterations" in header and "peak LR per arm" in header and "context" not in header
    assert "| 2,000 |" in page and "| 300 |" in page
    assert "every arm 0.0003" in page and "`none` 0.001; `ln` 0.002; `rms` 0.002" in page


def test_the_page_follows_the_configs(two_studies, tmp_path):
    """A changed config changes the page: a planted LR and clipping off show in the rows that have them."""
    two_studies["main"].loc[two_studies["main"]["cfg.variant"] == "rms", "cfg.lr"] = 5e-3
    two_studies["main"]["cfg.grad_clip"] = 0.0
    page = recipe_table.recipes_page(tmp_path)
    assert "`rms` 0.005" in page and "| off |" in page and "| 1 |" in page


def test_a_grid_reads_as_its_range_and_an_index_older_than_a_field_takes_its_default(two_studies, tmp_path):
    two_studies["seeds-final"] = _runs({"none": [1e-4, 3e-4, 1e-3, 3e-3]}).drop(columns=["cfg.tie_embeddings"])
    table = recipe_table.recipe_table(tmp_path)
    row = table[table["study"] == "seeds-final"].iloc[0]
    assert row["peak LR per arm"] == "every arm 0.0001–0.003 (4 values)"
    assert row["embeddings, output head"] == "N(0, 0.02), tied head"  # RunConfig's default: a tied head


def test_the_committed_page_is_what_the_committed_configs_give():
    page = (RUNS / "RECIPES.md").read_text()
    assert page == recipe_table.recipes_page(RUNS) + "\n"
    runs = load_runs("ladder-data", RUNS)
    for rung in range(len(ladder_data.RUNGS)):
        at = runs[runs["cfg.preset"] == f"ladder-data-{rung}"]
        words = "; ".join(f"`{arm}` {at[at['cfg.variant'] == arm]['cfg.lr'].iloc[0]:g}" for arm in ("none", "ln", "rms"))
        assert f"| ladder-data-{rung} | 30 |" in page and words in page
        assert words == "; ".join(f"`{arm}` {ladder_data.lr_of(rung, arm):g}" for arm in ("none", "ln", "rms"))
