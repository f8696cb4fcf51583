"""Issue 71, the report pages, the zero-shot v1/v2 statement, the explorer and the figures: every study report opens
with its question, design and answer (one header, computed from the registry); the two zero-shot suites are related
wherever both appear; the explorer's paired view re-derives the registered family; no figure shows an internal name."""
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from embnorm_lib.analyses import plots as analysis_plots
from embnorm_lib.publishing import explore, plots, study_header
from embnorm_lib.runner.registry import site
from embnorm_lib.studies import STATUSES, STUDIES, study_cells

V2_REPORTS = next(s.links for s in site().sections if s.links)  # the report files runs/README.md links
REPORTS = sorted([*(p for name in (*V2_REPORTS, "REPORT.md") for p in (REPO / "runs").glob(f"*/{name}")),
                  REPO / "runs" / "STABILITY.md"])


# -- the header ------------------------------------------------------------------------------------------------------

@pytest.mark.committed
@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.relative_to(REPO / "runs").as_posix())
def test_every_committed_report_opens_with_its_question_design_and_answer_before_any_table(path):
    text = path.read_text()
    top = text.split("\n|", 1)[0].split("Written by", 1)[0].split("Analysis per", 1)[0]
    assert top.startswith("# ")
    for part in ("**Question.**", "**Design.**", "**Answer.**"):
        assert part in top, f"{path.name} does not open with {part}"
    assert top.index("**Question.**") < top.index("**Design.**") < top.index("**Answer.**")
    if "**Design.**" in top and "is not in the study registry" not in top:  # issue 113: how far past counting
        assert top.index("**Design.**") < top.index("**Baselines**") < top.index("**Answer.**")
        assert "not measured yet" not in top, f"{path.name}: a split of this study has no count baseline"
    if "**partial**" not in text.split("\n|", 1)[0]:  # a study with runs still to come may have no answer yet
        assert not re.search(r"\*\*Answer\.\*\* Not yet", top), f"{path.name}: a finished study states its answer"


def test_every_registered_study_has_a_question_without_numbers_and_a_status_the_protocol_lists():
    for name, study in STUDIES.items():
        named = re.sub(r"GPT-2|H1b|bf16|block 1", "", study.question)  # names, not quantities
        assert study.question.endswith("?") and not re.search(r"\d", named), name
        assert study.status in STATUSES, name
        words = study_header.status_words(name)  # raises where the amendment has no heading in docs/PROTOCOL.md
        heading = study_header.amendment_heading(study.amendment) if study.amendment else "as first registered"
        assert heading in words


@pytest.mark.parametrize("name", ["main", "stability-h1b-v2", "ladder"])
def test_the_design_is_the_registered_cells(name):
    cells = study_cells(name)
    design = "\n".join(study_header.design_lines(name))
    assert f"{len(cells)} runs registered" in design
    for preset in {c.preset for c in cells}:
        assert f"`{preset}`" in design
    for arm in {c.variant for c in cells}:
        assert f"`{arm}`" in design
    seeds = sorted({c.seed for c in cells})
    assert f"{len(seeds)} seeds ({seeds[0]}–{seeds[-1]})" in design
    iterations = {f"{c.config().max_iters:,}" for c in cells}
    assert all(f"iterations {i}" in design or i in design for i in iterations)


def test_the_baselines_line_reads_each_split_of_the_study_from_the_record(monkeypatch):
    from embnorm_lib.tools import baselines

    entry = {"corpus": "tinyshakespeare", "corpus_sha256": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e"
             "2dc565ed", "tokenizer": "char", "bigram_nats_per_token": 2.5, "unigram_nats_per_token": 3.25,
             "bigram_bits_per_byte": 3.6, "unigram_bits_per_byte": 4.7}
    monkeypatch.setattr(baselines, "load", lambda: {"tinyshakespeare/char": entry})
    words = study_header.baseline_words(["seeds-final"])
    assert "tinyshakespeare, characters: count bigram 2.500, unigram 3.250 nats/char." in words
    monkeypatch.setattr(baselines, "load", lambda: {"tinyshakespeare/char": {**entry, "bigram_nats_per_token": 2.7}})
    assert "count bigram 2.700" in study_header.baseline_words(["seeds-final"])
    # a study on two tokenizers names both; one without a measured baseline says how to measure it
    words = study_header.baseline_words(["ladder-bpe"])
    assert words.count("not measured yet (`python -m embnorm_lib baselines`)") == 2
    assert "baselines" in "\n".join(study_header.header_lines("seeds-final", ["x"])).lower()


def test_the_header_says_why_there_is_no_answer_yet_and_names_an_ad_hoc_study():
    lines = study_header.header_lines("stability-lr-v2", [], pending="waiting for seed 2")
    assert lines[-2] == "**Answer.** Not yet: waiting for seed 2."
    adhoc = "\n".join(study_header.header_lines("my-grid", ["- `ln` raises it."]))
    assert "`my-grid` is not in the study registry" in adhoc and "- `ln` raises it." in adhoc
    several = "\n".join(study_header.header_lines(["stability-lr", "stability-budget"], ["x"], question="Q?"))
    assert "- `stability-lr`: **Exploratory**" in several and "- `stability-budget`: **Exploratory**" in several


# -- zero-shot: suite v1 and suite v2 stated together -----------------------------------------------------------------

@pytest.mark.committed
@pytest.mark.parametrize("study", ["seeds-prelim", "seeds-final", "main"])
def test_wherever_both_zero_shot_suites_appear_their_relationship_is_stated(study):
    report = (REPO / "runs" / study / "REPORT.md").read_text()
    zeroshot = (REPO / "runs" / study / "ZEROSHOT.md").read_text()
    assert "suite v1 (superseded by suite v2" in report  # beside every printed suite-v1 row
    assert "## Zero-shot: suite v1 and suite v2" in report and "Suite v1, superseded:" in report
    assert "**Suite v1 and suite v2.** Suite v1, superseded:" in zeroshot
    readme = (REPO / "runs" / "README.md").read_text().split(f"## {study}\n", 1)[1].split("\n## ", 1)[0]
    assert "supersedes suite v1" in readme


# -- the explorer ------------------------------------------------------------------------------------------------------

@pytest.mark.committed
def test_the_paired_view_re_derives_the_registered_family():
    runs = pd.read_csv(REPO / "runs" / "main" / "runs.csv")
    view = explore.paired_view(runs, "val_loss")
    for preset in ("seeds-final", "nanogpt-cpu"):
        family = pd.read_csv(REPO / "runs" / "main" / "analysis" / preset / "family.csv")
        family = family[family["metric"] == "val_loss"].set_index("variant")
        mine = view[view["regime"] == f"preset={preset}"].set_index("variant")
        for column in ("mean_diff", "ci_low", "ci_high"):
            np.testing.assert_allclose(mine[column], family.loc[mine.index, column], rtol=1e-9)
        assert (mine["seeds"] == family.loc[mine.index, "n"]).all()


def _grid(lrs=(1e-4, 1e-3, 1e-2, 0.1, 0.3, 1.0), variants=("none", "ln", "rms", "scaled"), seeds=(0, 1, 2)):
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"arm": f"{v}_lr={lr}", "variant": v, "seed": s, "val_loss": 2 + rng.normal(0, 0.01)}
                         for lr in lrs for v in variants for s in seeds])


def test_a_grid_study_opens_on_one_regime_and_a_small_one_on_every_arm():
    runs = _grid()
    runs.loc[runs["arm"].str.endswith("lr=0.01"), "val_loss"] -= 0.5  # the best LR
    chosen = explore.default_arms(runs)
    shown = sorted(a for a in runs["arm"].unique() if re.search(chosen, a))
    assert shown == ["ln_lr=0.01", "none_lr=0.01", "rms_lr=0.01", "scaled_lr=0.01"]  # the best LR, every variant
    assert explore.default_arms(_grid(lrs=(1e-3, 1e-2))) == ""  # 8 arms fit one legend


def test_a_grid_study_never_opens_on_a_regime_with_a_diverged_run():
    """Issue 116 #3: stability-lr-v2 opened at LR 1, where runs diverged and the loss bands reached -40 nats/char."""
    runs = _grid().assign(diverged=False)
    runs.loc[runs["arm"].str.endswith("lr=1.0"), "val_loss"] -= 1.0  # lowest loss, but one run diverged there
    runs.loc[runs["arm"] == "none_lr=1.0", "diverged"] = True
    chosen = explore.default_arms(runs)
    shown = {a for a in runs["arm"].unique() if re.search(chosen, a)}
    assert not any(a.endswith("lr=1.0") for a in shown) and {a.split("_")[0] for a in shown} == {"none", "ln", "rms",
                                                                                               "scaled"}


@pytest.mark.committed
def test_the_committed_lr_study_opens_on_every_registered_arm_at_a_trained_lr():
    runs = pd.read_csv(REPO / "runs" / "stability-lr-v2" / "runs.csv")
    chosen = explore.default_arms(runs)
    shown = runs[runs["arm"].str.contains(chosen)]
    assert set(shown["variant"]) == set(runs["variant"]) and not shown["diverged"].astype(bool).any()


def test_a_bad_arm_filter_is_one_line():
    arms = ["none_lr=0.01", "ln_lr=0.01"]
    message = explore.arm_filter_error("ln_(lr", arms)
    assert message.startswith("arms filter 'ln_(lr' is not a regular expression (") and "\n" not in message
    assert explore.arm_filter_error("rms", arms).startswith("arms filter 'rms' matches none of this study's 2 arms")
    assert explore.arm_filter_error("^ln", arms) == ""


def test_the_explorer_shows_only_the_controls_of_its_view_and_draws_a_filter_on_enter(capsys):
    box = explore.explorer("stability-lr-v2")
    (_, view), (metric, figure, arms) = box.children[0].children, box.children[1].children
    assert arms.continuous_update is False  # applied on Enter, not on each keystroke
    assert metric.layout.display is None and figure.layout.display == arms.layout.display == "none"
    view.value = "figure"
    assert metric.layout.display == "none" and figure.layout.display is None and arms.layout.display is None
    capsys.readouterr()
    arms.value = "ln_(lr"
    shown = [line for line in capsys.readouterr().out.splitlines() if line.strip("\x1b[2K \n")]  # clear_output codes
    assert len(shown) == 1 and shown[0].startswith("arms filter 'ln_(lr' is not a regular expression")
    plt.close("all")


def test_the_forest_names_each_comparison_and_keeps_its_legend_off_the_data():
    """On seeds-final both rows read "all runs (5 seeds)" and the markers sat on the axes' edges under the legend."""
    runs = _grid(lrs=(1e-3,)).assign(arm=lambda r: r["variant"])
    fig = explore.plot_paired_view(explore.paired_view(runs, "val_loss"), "a study: val loss")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["ln − none (3 seeds)", "rms − none (3 seeds)",
                                                           "scaled − none (3 seeds)"]
    fig.canvas.draw()
    legend, axes_box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes_box.x1  # outside the data
    low, high = ax.get_ylim()
    assert low < -0.4 and high > len(ax.get_yticks()) - 0.6  # room around the first and last row
    plt.close(fig)


def test_the_paired_view_pairs_by_seed_within_a_regime_and_refuses_an_unknown_metric():
    runs = _grid(lrs=(1e-3,))
    runs.loc[runs["variant"] == "ln", "val_loss"] = runs.loc[runs["variant"] == "none", "val_loss"].to_numpy() + 0.1
    view = explore.paired_view(runs, "val_loss")
    ln = view[view["variant"] == "ln"].iloc[0]
    assert ln["regime"] == "lr=0.001" and ln["seeds"] == 3
    assert ln["mean_diff"] == pytest.approx(0.1) and ln["ci_low"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="metric 'no_such' is not in this study's runs.csv; allowed: val_loss"):
        explore.paired_view(runs, "no_such")
    fig = explore.plot_paired_view(explore.paired_view(_grid(), "val_loss"), "stability-lr-v2: val loss")
    assert plots.internal_names(fig) == []
    plt.close(fig)


# -- figures that speak -------------------------------------------------------------------------------------------------

def test_a_figure_showing_an_internal_name_is_refused_before_anything_is_written(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="none_preset=nanogpt-cpu")
    ax.plot([0, 1], [1, 0], label="ln_matched")
    ax.set(xlabel="training step", ylabel="val_loss")
    ax.legend()
    assert plots.internal_names(fig) == ["none_preset=nanogpt-cpu", "val_loss"]
    with pytest.raises(ValueError, match="figure bad shows internal name"):
        plots.save(fig, tmp_path / "bad")
    assert list(tmp_path.iterdir()) == []
    plt.close(fig)


def test_grid_axes_read_in_words():
    assert plots.arm_label("ln_grad_clip=1.0_lr=0.003") == "ln (grad clip 1.0, peak LR 0.003)"
    assert plots.arm_label("ln_matched_emb_init_std=1.0_tie_embeddings=False") == \
        "ln_matched (embedding init std 1.0, untied head)"
    assert plots.arm_label("ln_preset=nanogpt-cpu") == "ln (preset nanogpt-cpu)"


def _styles(ax) -> dict[str, tuple]:
    """legend label -> (marker, line style) of its line (an error bar's data line)."""
    from matplotlib.container import Container

    lines = {label: handle[0] if isinstance(handle, Container) else handle
             for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    return {label: (line.get_marker(), line.get_linestyle()) for label, line in lines.items()}


def test_stability_and_ladder_figures_keep_ln_and_rms_apart_and_show_no_internal_name():
    budget = pd.DataFrame([{"cfg.max_iters": it, "variant": v, "delta_vs_none": d, "ci_low": d - 0.01,
                            "ci_high": d + 0.01} for it in (150, 300, 2000) for v, d in (("ln", 0.1), ("rms", 0.1))])
    ladder = pd.DataFrame([{"tokenizer": "char", "variant": v, "params": p, "mean_diff": 0.01, "ci_low": 0.0,
                            "ci_high": 0.02, "significant": False} for p in (1e5, 1e6) for v in ("ln", "rms")])
    check = pd.DataFrame([{"tokenizer": "char", "rung": 0, "variant": v, "factor": f, "val_loss_mean": 2.0}
                          for f in (0.5, 1.0, 2.0) for v in ("none", "ln")])
    for fig in (analysis_plots.plot_budget_deltas(budget), analysis_plots.plot_ladder(ladder), analysis_plots.plot_lr_check(check, pd.DataFrame())):
        assert plots.internal_names(fig) == []
        styles = {k.split(" ")[0]: v for k, v in _styles(fig.axes[0]).items()}
        pair = ("ln", "rms") if "rms" in styles else ("none", "ln")
        assert styles[pair[0]] != styles[pair[1]], f"{pair} drawn alike"
        plt.close(fig)


def test_a_publication_parses_each_studys_runs_csv_once(tmp_path, monkeypatch):
    """Issue 74: the findings stage asked results.py for the same index once per paragraph, and each ask parsed
    runs.csv again (on the committed runs, 46 parses of 23 indexes, main's 9 times). load_runs parses an index once
    per content: a rewritten file is parsed again, and each caller gets a copy of its own."""
    import pandas as pd
    from test_ladder import synthetic

    from embnorm_lib.analyses.findings import findings_text
    from embnorm_lib.runner import results

    parsed = []
    original = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda *a, **k: parsed.append(a[0]) or original(*a, **k))
    monkeypatch.setattr(results, "_PARSED", {})
    (tmp_path / "ladder").mkdir()
    synthetic().to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    text = findings_text(tmp_path, studies=())
    assert text.count("runs/ladder/LADDER.md") >= 1 and len(parsed) == 1  # several ladder paragraphs, one parse
    first = results.load_runs("ladder", tmp_path)
    first["val_loss"] = 0.0  # a caller's change stays its own
    assert (results.load_runs("ladder", tmp_path)["val_loss"] != 0).all() and len(parsed) == 1
    synthetic(seeds=3).to_csv(tmp_path / "ladder" / "runs.csv", index=False)  # rewritten: parsed again, not stale
    assert results.load_runs("ladder", tmp_path)["seed"].max() == 2 and len(parsed) == 2


@pytest.mark.parametrize("name", ["ladder-data", "ladder", "ladder-bpe"])
def test_the_first_design_line_names_arms_and_seeds_only_where_every_setting_shares_them(name):
    cells = study_cells(name)
    lines = study_header.design_lines(name)
    settings = {}
    for c in cells:
        settings.setdefault((c.preset, dict(c.overrides).get("tokenizer", "char")), set()).add((c.variant, c.seed))
    shared = len({frozenset(s) for s in settings.values()}) == 1
    assert (" arms " in f" {lines[0]}") == (shared or len(settings) == 1), lines[0]


def test_a_figure_with_every_arm_keeps_its_legend_off_the_data():
    """Issue 116 #3: clearing the arm filter gave a 36-entry legend over the curves."""
    fig, axes = plt.subplots(1, 2)
    for i in range(36):
        axes[0].plot([0, 1], [i, i + 1], label=f"arm {i}")
    axes[0].legend()
    explore.legends_outside(fig)
    fig.canvas.draw()
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    legend = fig.legends[0]
    assert len(legend.get_texts()) == 36 and legend._ncols == 2
    assert legend.get_window_extent().x0 >= max(ax.get_window_extent().x1 for ax in axes)
    plt.close(fig)
