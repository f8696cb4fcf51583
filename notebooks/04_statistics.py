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
# # 04 · Statistics: the paired answer
#
# The analysis registered in `docs/PROTOCOL.md`, applied to one study. Within each training regime
# (preset) of the study, every variant is compared with `none` seed by seed: mean paired difference,
# 95% paired t interval, paired t-test with Holm adjustment across (variant × metric), Wilcoxon signed-rank
# (with the smallest p it can reach at this n), Hedges-corrected d_z, probability of improvement, and the
# power of the design at each test's Holm level (docs/PROTOCOL.md, amendment 1). The decision
# rule then turns the numbers into a recommendation. Its executed copy is rendered to
# `runs/<study>/report.html`; `runs/<study>/REPORT.md` states the answer in words.

# %% tags=["parameters"]
study = "seeds-final"
metrics = ""        # "": the registered family (analysis.DEFAULT_METRICS); or a comma-separated list
out_dir = ""        # "": <repo>/runs
figures_dir = ""    # "": <repo>/figures/<study>, or <out_dir>/figures/<study>

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
# ## Paired comparisons
#
# One analysis per training regime; the Holm family is all (variant × metric) comparisons within it.

# %%
from embnorm_lib.analyses import paired as analysis

analyses = analysis.analyse(study, metrics.split(",") if metrics else None, out_dir or None)
print("; ".join(f"{a.heading}: {len(a.runs)} runs" for a in analyses))

# %% [markdown]
# ## Results tables
#
# Per metric and variant: arm means ± SD over seeds, the paired difference with its CI, raw and
# Holm-adjusted p-values, the Wilcoxon check, the effect size and the share of seeds that improved.

# %%
from IPython.display import Markdown, display

from embnorm_lib.publishing.render import WideTable

for a in analyses:
    display(Markdown(f"### {a.heading}"))
    display(WideTable(analysis.results_table(a)))

# %% [markdown]
# ## Forest plot and per-seed lines
#
# Filled markers are Holm-significant; dotted lines on the loss panel mark the minimum effect of
# interest. Each grey line in the second figure is one seed across the arms.

# %%
import matplotlib.pyplot as plt

from embnorm_lib import stats
from embnorm_lib.publishing import plots

for a in analyses:
    plots.plot_forest(a.family, a.heading, stats.PRIMARY, stats.MEI)
    plots.plot_paired_lines(a.runs, a.heading)
plt.show()

# %% [markdown]
# ## Power
#
# How large an effect these seeds can detect at each test's Holm level (and at the unadjusted 0.05), and how
# many seeds 80% power at 0.01 nats/char needs.

# %%
for a in analyses:
    display(Markdown(f"### {a.heading}"))
    display(WideTable(analysis.power_table(a)))

# %% [markdown]
# ## Stability
#
# Accuracy at one learning rate and one budget is half the question; the other half is whether an
# embedding norm buys stability. The stability studies (`stability-lr`, `stability-init`,
# `stability-stress`, `stability-budget`; docs/PROTOCOL.md "Stability") are analysed together:
# LR sensitivity curves with seed bands, the init-scale × variant table, divergence and spike counts,
# and the recommendation, in `runs/STABILITY.md` (`python -m embnorm_lib publish stability`). Here,
# and in REPORT.md, the recommendation is computed from those studies' runs.csv.

# %%
from embnorm_lib.analyses import stability

display(Markdown(stability.recommendation_for(out_dir or None) or "No stability study has been run yet."))

# %% [markdown]
# ## Decision and report
#
# The registered rule, applied; then every table, figure and the plain-words REPORT.md are written.

# %%
for a in analyses:
    display(Markdown("\n".join([f"### {a.heading}", *analysis.plain_words(a)])))
from embnorm_lib.core.records.io import shown_path

report = analysis.write_outputs(analyses, out_dir or None, figures_dir or None)
print(f"wrote {shown_path(report)}")
