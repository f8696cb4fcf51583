"""Writes the numbered notebooks from the cell lists below (outputs cleared, kernelspec set).

    python notebooks/make_notebooks.py

Edit the cells here, not in the .ipynb files, so the committed notebooks stay clean and consistent."""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

IMPORT_LIBRARY = """\
# Make embnorm_lib importable from a plain checkout too (Kaggle/Colab without `pip install -e .`).
import sys, pathlib
try:
    import embnorm_lib
except ImportError:
    root = next(p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents] if (p / "embnorm_lib").is_dir())
    sys.path.insert(0, str(root))
    import embnorm_lib"""


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str, parameters: bool = False):
    cell = new_code_cell(text.strip())
    if parameters:
        cell.metadata["tags"] = ["parameters"]
    return cell


NOTEBOOKS = {
    "01_data.ipynb": [
        md("""
# 01 · Data: tiny Shakespeare

The study trains character-level GPTs on tiny Shakespeare (Karpathy's char-rnn corpus).
This notebook locates the corpus, verifies it byte for byte, and describes what the models see:
the character vocabulary, the 90/10 train/validation split, and how characters fall into the
classes the diagnostics later track (letters, digits, punctuation, whitespace, newline).
"""),
        code("""
data_path = ""     # "": $EMBNORM_DATA, then the local cache, then a download
figures_dir = ""   # "": <repo>/figures/data
""", parameters=True),
        code(IMPORT_LIBRARY),
        md("""
## Locate and verify

The corpus is resolved from an explicit path, then `$EMBNORM_DATA`, then the local cache, and only
then downloaded. Whatever the source, its SHA-256 must match the canonical file: a run on a
different text would not be comparable with any other run of the study.
"""),
        code("""
from embnorm_lib.data import load_corpus
from embnorm_lib.notebook import corpus_facts

corpus = load_corpus(data_path or None)
corpus_facts(corpus)
"""),
        md("""
## Character classes

Embedding norms and block-1 inputs are later broken down by these classes, so we record how
common each class is in each split.
"""),
        code("""
from embnorm_lib.notebook import char_class_table

classes = char_class_table(corpus)
classes.pivot(index="class", columns="split", values="share").round(4)
"""),
        code("""
from embnorm_lib import plots
from embnorm_lib.io import repo_root

fig = plots.plot_char_classes(classes)
plots.save(fig, pathlib.Path(figures_dir or repo_root() / "figures" / "data") / "char_classes")
"""),
    ],
    "02_train.ipynb": [
        md("""
# 02 · Train one run

One run of the study: a Pre-LN GPT with one embedding variant, one seed, one preset. The variant is
the only difference between arms: `none` (A), `ln` (B, LayerNorm) or `rms` (C, RMSNorm) applied
to `tok_emb + pos_emb` before block 1. For a given seed every variant starts from the same
weights for every shared parameter and sees the same batches in the same order.

Run it with papermill, once per seed/variant:
`papermill notebooks/02_train.ipynb out.ipynb -p variant ln -p seed 3`
(the sweep, `python -m embnorm_lib.sweep`, does this for a whole study and keeps each executed
copy in its run directory), or top to bottom in JupyterLab / Kaggle / Colab.
"""),
        code("""
variant = "ln"          # none | ln | rms (aliases: layernorm, rmsnorm); see embnorm_lib/variants.py
seed = 0
preset = "seeds-final"  # seeds-prelim | seeds-final | nanogpt-cpu | tiny; see embnorm_lib/config.py
max_iters = 0           # 0 keeps the preset's value
study = "adhoc"         # runs land in <out_dir>/<study>/<variant>/seed<seed>
out_dir = ""            # "": <repo>/runs
data_path = ""          # "": $EMBNORM_DATA, then the local cache, then a download
device = "auto"         # auto picks cuda, then mps, then cpu
overrides = {}          # any other config field, e.g. {"lr": 1e-3} (pass with papermill -y)
run_tag = ""            # sweep axes other than variant/seed, part of the run directory name
progress = True
""", parameters=True),
        code(IMPORT_LIBRARY),
        md("""
## Configuration

Every knob of the run lives in one validated dataclass; the run directory keeps it as
`config.json`, and a checkpoint is only resumed by the same config.
"""),
        code("""
from embnorm_lib.notebook import config_from_parameters, run_dir_from_parameters

cfg = config_from_parameters(preset, variant, seed, max_iters, device, overrides)
run_dir = run_dir_from_parameters(cfg, study, out_dir, run_tag)
print(f"{cfg.variant} seed {cfg.seed}: {cfg.n_layer} layers x {cfg.n_embd}, {cfg.max_iters} iterations, "
      f"{cfg.token_budget:,} training tokens -> {run_dir}")
"""),
        md("""
## Train

The loop logs every step to `metrics.jsonl`, evaluates on the whole validation split at set
intervals, checkpoints so an interrupted run resumes to the same numbers, and records a
non-finite loss as a divergence rather than failing.
"""),
        code("""
from embnorm_lib.notebook import eval_printer
from embnorm_lib.train import train

summary = train(cfg, run_dir, data_path or None, progress=progress, on_eval=eval_printer(cfg))
"""),
        md("""
## Result

Final full-validation metrics from `summary.json`, and the run's curves.
"""),
        code("""
import pandas as pd

keys = ["variant", "seed", "steps", "tokens", "diverged", "val_loss", "val_ppl", "val_bpc", "val_acc",
        "ece_equal_width", "brier", "final_grad_norm", "spike_count", "n_params", "wall_s"]
pd.Series({k: summary.get(k) for k in keys}).to_frame("value")
"""),
        code("""
from embnorm_lib import plots
from embnorm_lib.notebook import eval_table, run_table

fig = plots.plot_run(run_table(run_dir), eval_table(run_dir), title=f"{cfg.variant} seed {cfg.seed}")
"""),
    ],
}


def write_all() -> list[Path]:
    written = []
    for name, cells in NOTEBOOKS.items():
        for i, cell in enumerate(cells):
            cell.id = f"{name.split('_')[0]}-{i:02d}"  # stable ids keep regenerated notebooks diff-free
        nb = new_notebook(cells=cells, metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        })
        path = HERE / name
        nbformat.write(nb, path)
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write_all():
        print(p)
