# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Diagnostics: why a variant trains the way it does
#
# Reads every finished run of a study and plots, per arm, the mean over seeds with a 95% band
# (Student t over seeds): loss curves, gradient norms (total and per parameter group), embedding
# and block-1 input norms by character class, oversmoothing (cosine similarity), residual-stream norms
# by depth, attention and output logit growth, reliability diagrams and NLL against softmax
# temperature. All figures are written to `figures/<study>/` as PNG and PDF.

# %% tags=["parameters"]
study = "seeds-final"
arms = ""            # regex on arm names, empty keeps all
out_dir = ""         # "": <repo>/runs
figures_dir = ""     # "": <repo>/figures/<study>, or <out_dir>/figures/<study>
interactive = True   # the widget explorer at the end; publish and the tests run with False

# %%
# Make embnorm_lib importable from a plain checkout too (Kaggle/Colab without `pip install -e .`).
import pathlib
import sys

try:
    import embnorm_lib  # noqa: F401 (only checks that it is importable)
except ImportError:
    root = next(p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents] if (p / "embnorm_lib").is_dir())
    sys.path.insert(0, str(root))
from embnorm_lib.core.notebook import brief_errors

brief_errors()  # a bad parameter reads as one line (what is wrong, what is allowed), not a traceback

# %% [markdown]
# ## What was run
#
# One row per arm: how many seeds finished, how many diverged, and the final validation loss.

# %%
from embnorm_lib.publishing.report import arm_table
from embnorm_lib.runner.results import load_runs

runs = load_runs(study, out_dir or None)  # runs.csv, written by the sweep (and publish) from the run directories
if arms:
    runs = runs[runs["arm"].str.contains(arms)]
arm_table(runs)[["runs", "diverged", "val_loss_mean", "val_loss_std", "ece_equal_width_mean"]]

# %% [markdown]
# ## The static figure set
#
# Rendered from the run files by `embnorm_lib.publishing.figures` (one registry entry per figure), so the same
# figures come out of papermill, JupyterLab and the test suite.

# %%
import matplotlib.pyplot as plt

from embnorm_lib.publishing.figures import FIGURES, StudyData, render_study

written = render_study(study, out_dir or None, figures_dir or None, arms=arms)
from embnorm_lib.core.records.io import shown_path

print(f"{len(written)} figures written to {shown_path(pathlib.Path(next(iter(written.values()))[0]).parent)}")

# %% [markdown]
# ## The three figures to read first
#
# Validation loss over training, the total gradient norm, and the residual-stream norm by depth:
# an embedding norm fixes the scale of what enters block 1, and these show what that does downstream.

# %%
data = StudyData(study, out_dir or None, arms)
for name in ("val_loss", "grad_norm_total", "residual_norm_by_depth"):
    FIGURES[name](data)
plt.show()

# %% [markdown]
# ## Explore (JupyterLab)
#
# Pick a study and a view: **paired differences** (each arm's difference from `none` on the same seed, per regime of
# the grid, with 95% paired t intervals: where the answer is) for any metric, or any **figure** of the static set. A
# grid study's figures open on one regime of the grid (the arm filter shows which; clear it to see every arm). Batch
# runs (papermill with `interactive=False`) skip the widgets: with no frontend they add nothing to the figures above.

# %%
if interactive:
    from IPython.display import display

    from embnorm_lib.publishing.explore import explorer

    display(explorer(study, out_dir or None))
