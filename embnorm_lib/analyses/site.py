"""The site: the README's first screen, FINDINGS.md and the figure index (issue 71), the pages that quote every
study's report, written from the committed runs (runner.registry.Site.readme names `update_readme`). The page frames
are the engine's (publishing/readme.py); what they say, and what each committed figure shows, is here."""
from __future__ import annotations

import json
from pathlib import Path

from ..core.records.io import repo_root, runs_root, write_bytes_if_changed
from ..publishing.readme import ANSWER_END, ANSWER_START, FINDINGS_PAGE, figure_index, findings_page, replace_block
from ..studies.figure_sources import (
    BOUNDARY_PREFIX,
    FIGURE_STUDIES,
    LADDER_FOLDER,
    STABILITY_V1_FOLDER,
    STABILITY_V1_WORDS,
)
from .findings import findings_text


def update_readme(out_dir=None) -> list[Path]:
    """The README's first screen (TL;DR, answer figure, regime table), FINDINGS.md and the figure index, from the
    committed runs: the answer's record is written as runs/answer.json (embnorm_lib.analyses.answer) and the pages are
    its template (templates/answer.md.j2) filled from what that file holds. Every block is computed before any file
    is written."""
    from . import answer
    from .answer_figure import write_curves_figure, write_figure

    data = answer.answer_data(out_dir)
    record_text = json.dumps(answer.record(data), indent=1, ensure_ascii=False) + "\n"
    record = json.loads(record_text)  # the pages read the record as written, nothing else
    figure = write_figure(data, record["w"], out_dir)
    curves = write_curves_figure(record["w"], out_dir)
    root = repo_root()
    readme = root / "README.md"
    block = answer.first_screen(record, figure.relative_to(root).as_posix())
    content = replace_block(readme.read_text(), ANSWER_START, ANSWER_END, block, readme)
    page = findings_page(findings_text(out_dir), answer.detail_lines(record))
    index = figure_index(root / "figures", describe_figure)
    return [figure, write_bytes_if_changed(runs_root(out_dir) / answer.RECORD, record_text.encode()),
            *([curves] if curves else []), write_bytes_if_changed(readme, content.encode()),
            write_bytes_if_changed(root / FINDINGS_PAGE, page.encode()),
            write_bytes_if_changed(root / "figures" / "README.md", index.encode())]


# What each committed figure shows and which findings group it belongs to (FINDINGS_GROUPS), by file name; a study's
# per-run figures (figures.FIGURES) share one entry per name. `figure_index` refuses a figure that no entry describes.
FIGURE_WHAT = {
    "answer": ("The answer in four panels: Δ val loss vs model size for trained, tuned models on open English (±0.01 "
               "band); the largest size's learning curves; Δ vs training budget and vs embedding init scale on tiny "
               "Shakespeare", "README TL;DR"),
    "learning_curves": ("training loss per step on open English, per size and variant at its tuned LR, with the share of "
                        "steps no norm needs to reach LayerNorm's final loss (exploratory)", "accuracy"),
    "char_classes": ("tiny Shakespeare: the share of each character class in the training and validation splits",
                     "data"),
    "train_loss": ("training loss per step, per arm (mean and 95% band over seeds)", "accuracy"),
    "val_loss": ("validation loss at each evaluation, per arm (mean and 95% band over seeds)", "accuracy"),
    "grad_norm_total": ("total gradient norm before clipping per step, per arm", "stability"),
    "grad_norm_groups": ("gradient norm per parameter group (embeddings, first and last block, final norm)",
                         "mechanism"),
    "block1_input_norm": ("norm of what enters block 1, per step and arm", "mechanism"),
    "embedding_norm_by_class": ("token-embedding norm by character class at the end", "mechanism"),
    "block1_input_norm_by_class": ("block-1 input norm by character class at the end", "mechanism"),
    "cosine_similarity": ("mean pairwise cosine similarity of token embeddings and block-1 inputs", "mechanism"),
    "residual_norm_by_depth": ("residual-stream norm after each block at the end", "mechanism"),
    "attention_logit_max": ("largest attention logit per layer over training", "stability"),
    "output_logits": ("output-logit growth over training", "stability"),
    "reliability_equal_width": ("reliability diagram (accuracy vs confidence, equal-width bins)", "calibration"),
    "reliability_equal_mass": ("reliability diagram (accuracy vs confidence, equal-mass bins)", "calibration"),
    "temperature_nll": ("validation NLL against softmax temperature", "calibration"),
    "effects": ("prose ladder: each norm's difference from no norm in bits per byte and zero-shot macro accuracy, per "
                "recipe and size (95% paired interval; the ±0.01 equivalence band shaded)", "accuracy, zero-shot"),
    "forest": ("paired difference from none per registered metric, per arm (95% t interval; filled: Holm-significant)",
               "accuracy, calibration, zero-shot"),
    "paired_lines": ("each seed's value per arm, joined by seed", "accuracy, calibration"),
    "delta_vs_params": ("each norm's Δ final val loss vs none against model size", "scale"),
    "delta_vs_compute": ("each norm's Δ final val loss vs none against training compute", "scale"),
    "lr_curves": ("final val loss against the LR factor, per rung and arm (the LR check)", "scale"),
    "lr_boundary_loss": ("final val loss and failures against peak LR, per arm", "stability"),
    "lr_boundary_growth": ("share failed, largest attention and output logit against peak LR, per arm", "stability"),
    "budget_trend": ("each norm's Δ final and best val loss vs none against training budget", "accuracy"),
    "budget_deltas": ("each norm's Δ val loss vs none at 150, 300 and 2000 iterations (stability v1)", "accuracy"),
    "h1b_stability_vs_cost": ("failures at peak LR 1 against the tuned cost, per arm (H1b)", "stability"),
    "length_tuned": ("Δ val loss vs none at each position of the window, each arm at its best LR", "stability"),
    "lr_sensitivity": ("final val loss against peak LR, per arm (stability v1)", "stability"),
    "stress_loss_traces": ("training loss traces in the stress regime (stability v1)", "stability"),
}


def describe_figure(rel: str) -> tuple[str, str, str]:
    """(what it shows, which study, which findings group) of a figure's path under figures/."""
    parts = rel.removesuffix(".png").split("/")
    folder, stem = (parts[0], parts[-1]) if len(parts) > 1 else ("", parts[0])
    matches = [n for n in FIGURE_WHAT if stem == n or stem.endswith("_" + n) or stem.startswith(n + "_")]
    if not matches:
        raise ValueError(f"figure {rel} has no entry in site.FIGURE_WHAT; allowed: a figure whose name ends with one "
                         f"of {', '.join(FIGURE_WHAT)}")
    name = sorted(matches, key=lambda n: (n != stem, -len(n)))[0]  # the exact name, else the longest
    what, group = FIGURE_WHAT[name]
    if name in ("forest", "paired_lines"):
        study = f"{folder} (regime {stem.removeprefix(name + '_')})"
    elif name.startswith("lr_boundary"):
        study = BOUNDARY_PREFIX[stem[: -len(name)].rstrip("_")]
    elif folder == LADDER_FOLDER:
        study = stem.removesuffix("_" + name)
    elif name in FIGURE_STUDIES:
        study = FIGURE_STUDIES[name]
    elif folder == STABILITY_V1_FOLDER:
        study = STABILITY_V1_WORDS
    else:
        study = folder
    return what, study, group
