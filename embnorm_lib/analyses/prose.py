"""The prose ladder's analysis (issue 112; amendments 17 and 19) as records: `tuning_record` reads the LR-tuning runs into a
typed dict, written once as runs/<study>/result.json; the report is the template templates/prose_tuning.md.j2 filled
from that record, so its prose is edited as prose and no number in it is typed.

The confirmatory analysis (paired differences in bits per byte and zero-shot macro accuracy, Holm, TOST) is
prose_confirm.py's record (with the compute multiplier and the budget control's size-or-budget comparison), rendered
by templates/prose_confirm.md.j2 once the study has runs; amendment 21's exploratory embedding-decay comparison is
prose_embdecay.py's, rendered by templates/prose_embdecay.md.j2."""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..publishing.templating import render
from ..studies import prose
from .prose_confirm import bits_per_byte

TRAINED_MARGIN = 0.10  # amendment 17 item 7: none's final bits per byte at least 10% below the count bigram's


def tuning_record(runs) -> dict:
    """Per recipe, size and arm: the grid as run (mean final validation loss per LR over the tuning seeds, nats per
    token, and bits per byte), the best LR by the registered rule, whether it is bracketed, the LR an extension adds,
    and the runner-up with its lead paired over the tuning seeds (mean and standard error)."""
    cells = []
    for level in prose.LEVELS:
        for recipe in prose.RECIPE_NAMES:
            found = prose.best_lrs(runs, recipe, level) if len(runs) else {}
            for arm in prose.ARMS:
                grid = prose.grid(recipe, level, arm)
                if not grid:
                    continue
                info = found.get(arm, {"complete": False, "means": {}})
                rows = runs[(runs["cfg.preset"] == prose.preset_name(recipe, level)) & (runs["cfg.variant"] == arm)
                            ] if len(runs) else runs
                points = []
                for lr in grid:
                    at = rows[((rows["cfg.lr"] - lr).abs() < 1e-12)] if len(rows) else rows
                    points.append({"lr": lr, "seeds": int(at["cfg.seed"].nunique()) if len(at) else 0,
                                   "val_loss": float(at["val_loss"].mean()) if len(at) else None,
                                   "bits_per_byte": float(bits_per_byte(at).mean()) if len(at) else None})
                cell = {"recipe": recipe, "level": level, "rung": prose.rung_of(level), "arm": arm, "points": points,
                        "complete": info["complete"], "best": info.get("best"), "bracketed": info.get("bracketed"),
                        "extend_to": info.get("extend_to"), "runner_up": info.get("runner_up"),
                        "lead": None, "lead_se": None}
                if info.get("runner_up") is not None:
                    lead = _paired_lead(rows, info["best"], info["runner_up"])
                    cell.update(lead=lead[0], lead_se=lead[1])
                cells.append(cell)
    from ..core.presets import prose_records

    bigram = prose_records()[1]["bigram_bits_per_byte"]
    return {"kind": "prose-tuning", "finished": int(len(runs)), "cells": cells, "bigram_bits_per_byte": bigram,
            "trained_below_bits_per_byte": bigram * (1 - TRAINED_MARGIN), "trained_margin": TRAINED_MARGIN,
            "levels": [_level_row(level) for level in prose.LEVELS]}


def _level_row(level: str) -> dict:
    from ..core.config import PRESETS

    n_layer, n_embd, _ = prose.PROSE_RUNGS[prose.rung_of(level)]
    iters = PRESETS[prose.preset_name(prose.RECIPE_NAMES[0], level)]["max_iters"]
    return {"level": level, "shape": f"{n_layer} x {n_embd}", "params": prose.non_embedding_params(prose.rung_of(level)),
            "iters": iters, "tokens": iters * prose.PROSE_TOKENS_PER_ITER,
            "role": ("budget control" if level == prose.BUDGET_LEVEL
                     else "confirmatory" if level in prose.MAIN_LEVELS else "tuning only")}


def _paired_lead(rows, best: float, runner_up: float) -> tuple[float, float]:
    """The runner-up's final loss minus the best's, paired by tuning seed: mean and standard error."""
    a = rows[(rows["cfg.lr"] - runner_up).abs() < 1e-12].set_index("cfg.seed")["val_loss"]
    b = rows[(rows["cfg.lr"] - best).abs() < 1e-12].set_index("cfg.seed")["val_loss"]
    diff = (a - b).dropna()
    se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    return float(diff.mean()), se


def findings_paragraphs(out: Path) -> list[str]:
    """FINDINGS.md's paragraph on the ladder (templates/prose_findings.md.j2): how far its tuning has come and, per
    complete and trained recipe and size, the registered words; [] before the tuning study has a record."""
    path = Path(out) / prose.TUNING_STUDY / "result.json"
    if not path.is_file():
        return []
    from ..core.records.io import read_json

    return [render("prose_findings.md.j2", {"tuning": read_json(path), "confirm": confirmatory_result(out)}).strip()]


def confirmatory_result(out: Path) -> dict | None:
    """The ladder's confirmatory record as its report wrote it (runs/<study>/result.json; this module is its one
    writer) once it has runs, else None: the README's first screen leads with its trained, complete cells."""
    from ..core.records.io import read_json

    path = Path(out) / prose.CONFIRM_STUDY / "result.json"
    found = read_json(path) if path.is_file() else None
    return found if found and found.get("kind") == "prose-confirmatory" else None


def _confirmatory(study: str, runs, out) -> dict:
    """The confirmatory record of the ladder (with the budget control beside size 0-x4 where it has runs) or of the
    budget control itself (its one size, exploratory: amendment 19 item 5)."""
    from ..core.presets import prose_records
    from ..runner.results import has_index, load_runs, load_series
    from .prose_confirm import confirmatory_record

    bigram = prose_records()[1]["bigram_bits_per_byte"]
    evals = load_series(study, "evals", out)
    if study == prose.BUDGET_STUDY:
        return confirmatory_record(runs, bigram, TRAINED_MARGIN, evals, levels=(prose.BUDGET_LEVEL,))
    budget = load_runs(prose.BUDGET_STUDY, out) if has_index(prose.BUDGET_STUDY, out) else None
    return confirmatory_record(runs, bigram, TRAINED_MARGIN, evals, budget)


def _embdecay(runs, out) -> dict:
    """Amendment 21's record: these runs beside the confirmatory study's runs of the same size (none yet: empty)."""
    import pandas as pd

    from ..runner.results import has_index, load_runs
    from .prose_embdecay import embdecay_record

    decayed = load_runs(prose.CONFIRM_STUDY, out) if has_index(prose.CONFIRM_STUDY, out) else pd.DataFrame(
        columns=runs.columns)
    return embdecay_record(decayed, runs)


def _effects_figure(record: dict, out, figures_dir, study: str) -> str:
    """figures/<study>/effects.png (and .pdf) from the record; its path for the report, relative to the checkout."""
    import matplotlib.pyplot as plt

    from ..core.records.io import default_figures_dir, repo_root
    from .plots import plot_prose_effects, save

    folder = Path(figures_dir) if figures_dir else default_figures_dir(out, study)
    fig = plot_prose_effects(record)
    png = save(fig, folder / "effects", f"embnorm · {study} · runs.csv {record['runs_sha256'][:12]}")[0]
    plt.close(fig)
    try:
        return png.resolve().relative_to(repo_root().resolve()).as_posix()
    except ValueError:
        return png.as_posix()


def write_report(study: str, out_dir=None, figures_dir=None) -> Path:
    from ..core.records.io import fingerprint, git_commit, runs_root, write_text_stable
    from ..core.records.rundir import study_dir_for
    from ..runner.results import load_runs
    from ..studies import STUDIES

    out = runs_root(out_dir)
    runs = load_runs(study, out)
    if study == prose.TUNING_STUDY:
        record = tuning_record(runs)
    elif study in prose.SCORED_STUDIES and len(runs):
        record = _confirmatory(study, runs, out)
    elif study == prose.EMB_DECAY_STUDY and len(runs):
        record = _embdecay(runs, out)
    else:
        record = {"kind": "prose-pending", "finished": int(len(runs))}
    from ..runner.registry import planned_runs

    # the cells grow size by size as LRs register; the design's total (planned) does not
    record.update(study=study, commit=git_commit()[:12], planned=planned_runs(study),
                  registered=len(STUDIES[study].cells()),
                  runs_sha256=fingerprint(study_dir_for(study, out).index), description=STUDIES[study].description,
                  note=STUDIES[study].note, question=STUDIES[study].question)
    folder = out / study
    if record["kind"] == "prose-confirmatory" and record["cells"]:
        record["figure"] = _effects_figure(record, out, figures_dir, study)
    write_text_stable(folder / "result.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
    report = folder / "PROSE.md"
    template = {"prose-tuning": "prose_tuning.md.j2", "prose-confirmatory": "prose_confirm.md.j2",
                "prose-embedding-decay": "prose_embdecay.md.j2"}.get(
        record["kind"], "prose_pending.md.j2")
    write_text_stable(report, render(template, record))
    return report
