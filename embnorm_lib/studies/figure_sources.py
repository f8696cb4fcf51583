"""Which studies each committed figure is drawn from, as the figure index (analyses/site.py) names them: the study
layer holds every study name; the site reads these tables."""

# figures/stability-v2/<prefix>_lr_boundary_*: the LR search each prefix names (boundary.py)
BOUNDARY_PREFIX = {"": "stability-lr-v2", "noclip": "stability-noclip-v2", "bf16": "stability-bf16-v2",
                   "deep": "stability-deep-v2", "deep32": "stability-deep32-v2"}
# a figure (by its name) drawn from studies other than its folder's
FIGURE_STUDIES = {
    "budget_trend": "stability-budget, stability-budget-v2",
    "h1b_stability_vs_cost": "stability-h1b-v2",
    "length_tuned": "stability-h1b-v2",
    "learning_curves": "ladder-data",
    "answer": "main, stability-budget(-v2), stability-scale-v2, stability-lr-v2, stability-h1b-v2, ladder",
}
LADDER_FOLDER = "ladder"  # figures/ladder/<study>_<figure>: the ladder study the figure's name starts with
STABILITY_V1_FOLDER, STABILITY_V1_WORDS = "stability", "stability (v1 studies)"
