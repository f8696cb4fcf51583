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
# # 02 · Train one run
#
# One run of the study: a Pre-LN GPT with one embedding variant, one seed, one preset. The variant is
# the only difference between arms: `none` (A), `ln` (B, LayerNorm) or `rms` (C, RMSNorm) applied
# to `tok_emb + pos_emb` before block 1. For a given seed every variant starts from the same
# weights for every shared parameter and sees the same batches in the same order.
#
# Run it with papermill, once per seed/variant:
# `papermill notebooks/02_train.ipynb out.ipynb -p variant ln -p seed 3`
# (add `-p smoke True` for a quick check that everything runs: a few iterations, evaluation on a small subset,
# marked `"comparable": false` in its summary.json)
# (the sweep, `python -m embnorm_lib sweep`, does this for a whole study and keeps each executed
# copy in its run directory), or top to bottom in JupyterLab / Kaggle / Colab.

# %% tags=["parameters"]
variant = "ln"          # none | ln | rms (aliases: layernorm, rmsnorm); see embnorm_lib/core/nets/variants.py
seed = 0
preset = "seeds-final"  # seeds-prelim | seeds-final | nanogpt-cpu | tiny; see embnorm_lib/core/presets.py
max_iters = 0           # 0 keeps the preset's value
study = "adhoc"         # runs land in <out_dir>/<study>/<variant>/seed<seed>
out_dir = ""            # "": <repo>/runs
data_path = ""          # "": $EMBNORM_DATA, the cache, ../shared/data, a download
device = "auto"         # auto picks cuda, then mps, then cpu
overrides = {}          # any other config field, e.g. {"lr": 1e-3} (pass with papermill -y)
run_tag = ""            # sweep axes other than variant/seed, part of the run directory name
progress = True
figures = True          # False: no run figure (the sweep; it is redrawn from the logs at will)
smoke = False           # True: a quick check that everything runs (notebook.SMOKE: a few iterations, evaluation on a
                        # small subset); its summary.json says it is not comparable with the studies' results

# %%
# Make embnorm_lib importable from a plain checkout too (Kaggle/Colab without `pip install -e .`).
import pathlib
import sys

try:
    import embnorm_lib  # noqa: F401 (only checks that it is importable)
except ImportError:
    root = next(p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents] if (p / "embnorm_lib").is_dir())
    sys.path.insert(0, str(root))
from embnorm_lib.core.notebook import brief_errors, check_committed_defaults, pin_library

brief_errors()  # a bad parameter reads as one line (what is wrong, what is allowed), not a traceback
check_committed_defaults(globals())  # a default autosaved into the committed notebook must not steer the design card
if smoke is not True:  # a smoke run lasts seconds, so nothing to pin; importing every module would cost it ~2 s
    pin_library()  # the whole library loaded now: edits to the checkout while this run trains reach none of its cells

# %% [markdown]
# ## Configuration
#
# Every knob of the run lives in one validated dataclass; the run directory keeps it as
# `config.json`, and a checkpoint is only resumed by the same config.

# %%
from embnorm_lib.core.notebook import (
    check_switches,
    config_from_parameters,
    existing_run_note,
    recorded_time_note,
    run_dir_from_parameters,
)
from embnorm_lib.core.records.io import shown_path
from embnorm_lib.runner.design import check_registered_cell

check_switches(progress=progress, figures=figures)  # `-p figures no` arrives as text, which would read as True
cfg = config_from_parameters(preset, variant, seed, max_iters, device, overrides, smoke=smoke, data_path=data_path)
run_dir = run_dir_from_parameters(cfg, study, out_dir, run_tag, smoke=smoke)
check_registered_cell(study, cfg, run_dir, out_dir or None)  # a registered study takes only its own cells (issue 117)
print(f"{cfg.variant} seed {cfg.seed}: {cfg.n_layer} layers x {cfg.n_embd}, {cfg.max_iters} iterations, "
      f"{cfg.token_budget:,} training tokens -> {shown_path(run_dir)}")  # relative: no path of this machine kept
if note := existing_run_note(cfg, run_dir):  # a finished run is shown, not retrained; another config's is refused
    print(note)
elif not smoke and (note := recorded_time_note(cfg)):  # before a run of minutes, how many
    print(note)

# %% [markdown]
# ## Train
#
# The loop logs every step to `metrics.jsonl` (`metrics.parquet` once the run has finished: read either with
# `embnorm_lib.core.records.steplog.read_step_log`), evaluates on the whole validation split at set
# intervals, checkpoints so an interrupted run resumes to the same numbers, and records a
# non-finite loss as a divergence rather than failing.

# %%
from embnorm_lib.core.notebook import eval_printer, train_job

summary = train_job(cfg, run_dir, data_path or None, progress=progress, on_eval=eval_printer(cfg),
                    out_dir=out_dir or None)

# %% [markdown]
# ## Zero/few-shot suite (when the config asks: `lm_eval`)
#
# A separate stage after training: the final weights answer the Shakespeare tasks through
# lm-evaluation-harness, and the scores land in `lm_eval.json` (the study's index picks them up).

# %%
from embnorm_lib.core.scoring.lm_eval_adapter import score_if_asked

lm_score = score_if_asked(cfg, run_dir, data_path or None)
lm_score["macro"] if lm_score else "not asked for (lm_eval=False) or the run diverged"

# %% [markdown]
# ## Result
#
# Final full-validation metrics from `summary.json`, and the run's curves (a sweep skips the figure: its
# logs redraw it).

# %%
import pandas as pd

keys = ["variant", "seed", "steps", "tokens", "diverged", "val_loss", "val_ppl", "val_bpc", "val_acc",
        "ece_equal_width", "brier", "final_grad_norm", "spike_count", "n_params", "wall_s"]
pd.Series({k: summary.get(k) for k in keys}, name=f"{cfg.variant} seed {cfg.seed}").to_frame()

# %%
from embnorm_lib.core.notebook import FIGURE_NOT_DRAWN, eval_table, run_table
from embnorm_lib.publishing import plots

if figures:
    fig = plots.plot_run(run_table(run_dir), eval_table(run_dir), title=f"{cfg.variant} seed {cfg.seed}")
else:
    print(FIGURE_NOT_DRAWN)
