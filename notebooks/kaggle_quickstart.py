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
# # Kaggle / Colab quickstart (GPU)
#
# Clones embnorm (once), installs only what the image lacks (keeping its CUDA torch and scientific stack), checks the GPU and
# runs a small paired sweep on it. On CUDA the library picks bf16 on compute capability >= 8.0 and fp16
# with loss scaling below that (T4, P100), and compiles models of 50M parameters or more with `torch.compile`
# (smaller ones are launch-bound on a GPU, where compiling does not pay).
# Turn on the GPU accelerator and internet in the notebook settings first.

# %% tags=["parameters"]
repo_url = ""            # not needed inside a checkout; else your copy of embnorm: a git clone URL (push
                         # this checkout to a git host first) or the folder of an uploaded copy (a Kaggle
                         # dataset holding the checkout: /kaggle/input/<name>/embnorm)
study = "gpu-demo"
preset = "seeds-final"  # or gpt-small for a GPT-2-small-shaped model (GPU only)
variants = "none,ln,rms"
seeds = "0-2"           # 0, "0-2", "0,3" or a list
data_path = ""          # "": tiny Shakespeare; or a folder of token shards (nanoGPT train.bin/val.bin, or
                        # llm.c/FineWeb *_train_*.bin, *_val_*.bin), e.g. an attached Kaggle dataset
vocab_size = 0          # 0: the preset's; with shards, one above their largest id (GPT-2 BPE: 50304)

# %% [markdown]
# ## Get the code and what a run needs
#
# Safe to run again, also after a kernel restart (it reuses the clone). Only packages the image lacks are
# installed; the image's own torch (CUDA), numpy, pandas, matplotlib and scipy are kept as they are, so no
# restart is needed unless this cell says so.

# %%
import os
import pathlib
import shutil
import subprocess
import sys

here = next((p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents] if (p / "embnorm_lib").is_dir()), None)
if here is None and (pathlib.Path("embnorm") / "embnorm_lib").is_dir():
    here = pathlib.Path("embnorm").resolve()  # cloned before a kernel restart
    print("using the existing clone in embnorm/")
if here is None:  # before the library is here, so the few lines that fetch it are written out
    where = ("a git clone URL of your copy of embnorm (push this checkout to a git host, e.g. GitHub, and copy its "
             "clone URL) or the folder of an uploaded copy (a Kaggle dataset: /kaggle/input/<name>/embnorm)")
    if not repo_url:
        raise ValueError(f"set repo_url; allowed: {where}")
    if pathlib.Path(repo_url).is_dir():  # an uploaded dataset is read-only: copied, runs and all
        if not (pathlib.Path(repo_url) / "embnorm_lib").is_dir():
            raise ValueError(f"invalid repo_url {repo_url!r}: no embnorm_lib/ in that folder; allowed: {where}")
        shutil.copytree(repo_url, "embnorm", ignore=shutil.ignore_patterns(".git", "__pycache__"))
    elif subprocess.run(["git", "clone", "--depth", "1", "--quiet", repo_url, "embnorm"]).returncode != 0:
        raise ValueError(f"git clone {repo_url!r} failed (its message is above); allowed: {where}")
    here = pathlib.Path("embnorm").resolve()
os.chdir(here)
sys.path.insert(0, str(here))

from embnorm_lib.core import quickstart

before = quickstart.installed_versions()
missing = quickstart.missing_packages()
if missing:
    print("installing what the image lacks:", ", ".join(missing))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
changed = quickstart.restart_needed(before, quickstart.installed_versions())
print(f"restart the kernel, then run this cell again ({', '.join(changed)} changed)" if changed
      else "ready: nothing the kernel has loaded was changed, no restart needed")

# %% [markdown]
# ## The GPU the runs will use

# %%
import torch

from embnorm_lib.core.device import resolve_precision, select_device

device = select_device("auto")
print(device, torch.cuda.get_device_name() if device.type == "cuda" else "(no GPU: runs will use the CPU)",
      "precision:", resolve_precision("auto", device))

# %% [markdown]
# ## A paired sweep
#
# Each cell of the grid runs `notebooks/02_train.ipynb` through papermill; one worker, since the GPU is shared.

# %%
quickstart.run_command([sys.executable, "-m", "embnorm_lib", "sweep", study, "--preset", preset, "--variants",
                        variants, "--seeds", quickstart.seeds_text(seeds), "--workers", "1",
                        *quickstart.data_arguments(data_path, vocab_size)])

# %% [markdown]
# ## The runs, per arm

# %%
from IPython.display import Markdown

from embnorm_lib.publishing.report import arm_table, markdown_arm_table
from embnorm_lib.runner.results import load_runs

Markdown(markdown_arm_table(arm_table(load_runs(study))))
