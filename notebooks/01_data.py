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
# # 01 · Data: tiny Shakespeare
#
# The study trains character-level GPTs on tiny Shakespeare (Karpathy's char-rnn corpus).
# This notebook locates the corpus, verifies it byte for byte, and describes what the models see:
# the character vocabulary, the 90/10 train/validation split, and how characters fall into the
# classes the diagnostics later track (letters, digits, punctuation, whitespace, newline).

# %% tags=["parameters"]
data_path = ""     # "": $EMBNORM_DATA, the cache, ../shared/data, a download
figures_dir = ""   # "": <repo>/figures/data

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
# ## Locate and verify
#
# The corpus is resolved from an explicit path, then `$EMBNORM_DATA`, then the local cache, then a
# copy in `../shared/data` beside the checkout, and only then downloaded. Whatever the source, its SHA-256 must match the canonical file: a run on a
# different text would not be comparable with any other run of the study.

# %%
from embnorm_lib.core.corpora.data import load_corpus
from embnorm_lib.core.notebook import corpus_facts
from embnorm_lib.publishing.render import WideTable

corpus = load_corpus(data_path or None)
WideTable(corpus_facts(corpus))

# %% [markdown]
# ## Character classes
#
# Embedding norms and block-1 inputs are later broken down by these classes, so we record how
# common each class is in each split.

# %%
from embnorm_lib.core.notebook import char_class_table

classes = char_class_table(corpus)
classes.pivot(index="class", columns="split", values="share").round(4)

# %%
from embnorm_lib.core.records.io import repo_root, shown_path
from embnorm_lib.publishing import plots

fig = plots.plot_char_classes(classes)
saved = plots.save(fig, pathlib.Path(figures_dir or repo_root() / "figures" / "data") / "char_classes",
                   f"embnorm · tiny Shakespeare sha256 {corpus.sha256[:12]}")
print("wrote", ", ".join(shown_path(p) for p in saved))
