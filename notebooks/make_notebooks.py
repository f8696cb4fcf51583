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
    import embnorm_lib
from embnorm_lib.notebook import brief_errors

brief_errors()  # a bad parameter reads as one line (what is wrong, what is allowed), not a traceback"""


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
data_path = ""     # "": $EMBNORM_DATA, the cache, ../shared/data, a download
figures_dir = ""   # "": <repo>/figures/data
""", parameters=True),
        code(IMPORT_LIBRARY),
        md("""
## Locate and verify

The corpus is resolved from an explicit path, then `$EMBNORM_DATA`, then the local cache, then a
copy in `../shared/data` beside the checkout, and only then downloaded. Whatever the source, its SHA-256 must match the canonical file: a run on a
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
plots.save(fig, pathlib.Path(figures_dir or repo_root() / "figures" / "data") / "char_classes",
           f"embnorm · tiny Shakespeare sha256 {corpus.sha256[:12]}")
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
data_path = ""          # "": $EMBNORM_DATA, the cache, ../shared/data, a download
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
    "03_diagnostics.ipynb": [
        md("""
# 03 · Diagnostics: why a variant trains the way it does

Reads every finished run of a study and plots, per arm, the mean over seeds with a 95% band
(Student t over seeds): loss curves, gradient norms (total and per parameter group), embedding
and block-1 input norms by character class, oversmoothing (cosine similarity), residual-stream norms
by depth, attention and output logit growth, reliability diagrams and NLL against softmax
temperature. All figures are written to `figures/<study>/` as PNG and PDF.
"""),
        code("""
study = "seeds-final"
arms = ""            # regex on arm names, empty keeps all
out_dir = ""         # "": <repo>/runs
figures_dir = ""     # "": <repo>/figures/<study>
interactive = True   # the widget explorer at the end; publish and the tests run with False
""", parameters=True),
        code(IMPORT_LIBRARY),
        md("""
## What was run

One row per arm: how many seeds finished, how many diverged, and the final validation loss.
"""),
        code("""
from embnorm_lib.report import arm_table
from embnorm_lib.sweep import build_index

runs = build_index(study, out_dir or None)
if arms:
    runs = runs[runs["arm"].str.contains(arms)]
arm_table(runs)[["runs", "diverged", "val_loss_mean", "val_loss_std", "ece_equal_width_mean"]]
"""),
        md("""
## The static figure set

Rendered from the run files by `embnorm_lib.figures` (one registry entry per figure), so the same
figures come out of papermill, JupyterLab and the test suite.
"""),
        code("""
import matplotlib.pyplot as plt
from embnorm_lib.figures import FIGURES, StudyData, render_study

written = render_study(study, out_dir or None, figures_dir or None, arms=arms)
from embnorm_lib.io import shown_path

print(f"{len(written)} figures written to {shown_path(pathlib.Path(next(iter(written.values()))[0]).parent)}")
"""),
        md("""
## The three figures to read first

Validation loss over training, the total gradient norm, and the residual-stream norm by depth:
an embedding norm fixes the scale of what enters block 1, and these show what that does downstream.
"""),
        code("""
data = StudyData(study, out_dir or None, arms)
for name in ("val_loss", "grad_norm_total", "residual_norm_by_depth"):
    FIGURES[name](data)
plt.show()
"""),
        md("""
## Explore (JupyterLab)

Pick a study and a figure. Batch runs (papermill with `interactive=False`) skip this cell's widgets:
with no frontend to talk to they add nothing to the static set above.
"""),
        code("""
from embnorm_lib.io import default_runs_dir

studies = sorted(p.parent.name for p in pathlib.Path(out_dir or default_runs_dir()).glob("*/runs.csv"))

def show(study_name, figure, arm_regex):
    FIGURES[figure](StudyData(study_name, out_dir or None, arm_regex))
    plt.show()

if interactive:
    import ipywidgets as widgets

    widgets.interact(show, study_name=widgets.Dropdown(options=studies, value=study if study in studies else None),
                     figure=widgets.Dropdown(options=list(FIGURES), value="val_loss"),
                     arm_regex=widgets.Text(value=arms));
"""),
    ],
    "04_statistics.ipynb": [
        md("""
# 04 · Statistics: the paired answer

The analysis registered in `docs/PROTOCOL.md`, applied to one study. Within each training regime
(preset) of the study, every variant is compared with `none` seed by seed: mean paired difference,
95% BCa bootstrap CI, paired t-test and Wilcoxon signed-rank, Hedges-corrected d_z, probability of
improvement, Holm adjustment across (variant × metric), and the power of the design. The decision
rule then turns the numbers into a recommendation. Its executed copy is rendered to
`runs/<study>/report.html`; `runs/<study>/REPORT.md` states the answer in words.
"""),
        code("""
study = "seeds-final"
metrics = "val_loss,val_acc,ece_equal_width,brier,lm_macro_acc,final_grad_norm,peak_grad_norm,spike_count"
out_dir = ""        # "": <repo>/runs
figures_dir = ""    # "": <repo>/figures/<study>
""", parameters=True),
        code(IMPORT_LIBRARY),
        md("""
## Paired comparisons

One analysis per training regime; the Holm family is all (variant × metric) comparisons within it.
"""),
        code("""
from embnorm_lib import analysis

analyses = analysis.analyse(study, metrics.split(","), out_dir or None)
[(a.scope, len(a.runs)) for a in analyses]
"""),
        md("""
## Results tables

Per metric and variant: arm means ± SD over seeds, the paired difference with its CI, raw and
Holm-adjusted p-values, the Wilcoxon check, the effect size and the share of seeds that improved.
"""),
        code("""
from IPython.display import Markdown, display

for a in analyses:
    display(Markdown(f"### {a.label}"))
    display(Markdown(analysis.to_markdown(analysis.results_table(a))))
"""),
        md("""
## Forest plot and per-seed lines

Filled markers are Holm-significant; dotted lines on the loss panel mark the minimum effect of
interest. Each grey line in the second figure is one seed across the arms.
"""),
        code("""
import matplotlib.pyplot as plt

for a in analyses:
    analysis.plot_forest(a)
    analysis.plot_paired_lines(a)
plt.show()
"""),
        md("""
## Power

How large an effect these seeds can detect, and how many seeds 80% power at 0.01 nats/char needs.
"""),
        code("""
for a in analyses:
    display(Markdown(f"### {a.label}"))
    display(Markdown(analysis.to_markdown(analysis.power_table(a))))
"""),
        md("""
## Stability

Accuracy at one learning rate and one budget is half the question; the other half is whether an
embedding norm buys stability. The stability studies (`stability-lr`, `stability-init`,
`stability-stress`, `stability-budget`; docs/PROTOCOL.md "Stability") are analysed together:
LR sensitivity curves with seed bands, the init-scale × variant table, divergence and spike counts,
and the recommendation. Written to `runs/STABILITY.md`; REPORT.md quotes its recommendation.
"""),
        code("""
from pathlib import Path

from embnorm_lib import stability

stability_report = stability.write_report(out_dir or None,
                                          Path(figures_dir).parent / "stability" if figures_dir else None)
display(Markdown(stability_report.read_text()))
"""),
        md("""
## Decision and report

The registered rule, applied; then every table, figure and the plain-words REPORT.md are written.
"""),
        code("""
for a in analyses:
    display(Markdown("\\n".join([f"### {a.label}", *analysis.plain_words(a)])))
from embnorm_lib.io import shown_path

report = analysis.write_outputs(analyses, out_dir or None, figures_dir or None)
print(f"wrote {shown_path(report)}")
"""),
    ],
    "kaggle_quickstart.ipynb": [
        md("""
# Kaggle / Colab quickstart (GPU)

Clones embnorm (once), installs only what the image lacks (keeping its CUDA torch and scientific stack), checks the GPU and
runs a small paired sweep on it. On CUDA the library picks bf16 on compute capability >= 8.0 and fp16
with loss scaling below that (T4, P100), and compiles the model with `torch.compile`.
Turn on the GPU accelerator and internet in the notebook settings first.
"""),
        code("""
repo_url = ""            # your clone URL of embnorm (not needed when this notebook runs inside a checkout)
study = "gpu-demo"
preset = "seeds-final"  # or gpt-small for a GPT-2-small-shaped model (GPU only)
variants = "none,ln,rms"
seeds = "0-2"           # 0, "0-2", "0,3" or a list
""", parameters=True),
        md("""
## Get the code and what a run needs

Safe to run again, also after a kernel restart (it reuses the clone). Only packages the image lacks are
installed; the image's own torch (CUDA), numpy, pandas, matplotlib and scipy are kept as they are, so no
restart is needed unless this cell says so.
"""),
        code("""
import os, pathlib, subprocess, sys

here = next((p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents] if (p / "embnorm_lib").is_dir()), None)
if here is None and (pathlib.Path("embnorm") / "embnorm_lib").is_dir():
    here = pathlib.Path("embnorm").resolve()  # cloned before a kernel restart
    print(f"using the existing clone in {here}")
if here is None:
    if not repo_url:
        raise ValueError("set repo_url to your clone URL of embnorm; allowed: any git URL")
    subprocess.run(["git", "clone", "--depth", "1", repo_url, "embnorm"], check=True)
    here = pathlib.Path("embnorm").resolve()
os.chdir(here)
sys.path.insert(0, str(here))

from embnorm_lib import quickstart

before = quickstart.installed_versions()
missing = quickstart.missing_packages()
if missing:
    print("installing what the image lacks:", ", ".join(missing))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
changed = quickstart.restart_needed(before, quickstart.installed_versions())
print(f"restart the kernel, then run this cell again ({', '.join(changed)} changed)" if changed
      else "ready: nothing the kernel has loaded was changed, no restart needed")
"""),
        md("""
## The GPU the runs will use
"""),
        code("""
import torch
from embnorm_lib.device import resolve_precision, select_device

device = select_device("auto")
print(device, torch.cuda.get_device_name() if device.type == "cuda" else "(no GPU: runs will use the CPU)",
      "precision:", resolve_precision("auto", device))
"""),
        md("""
## A paired sweep

Each cell of the grid runs `notebooks/02_train.ipynb` through papermill; one worker, since the GPU is shared.
"""),
        code("""
subprocess.run([sys.executable, "-m", "embnorm_lib.sweep", study, "--preset", preset, "--variants", variants,
                "--seeds", quickstart.seeds_text(seeds), "--workers", "1"], check=True)
subprocess.run([sys.executable, "-m", "embnorm_lib.report", "summary", study], check=True)
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
