"""The answer on one screen (issue 71): the README's first screen, FINDINGS.md and the figure index, checked against
the committed runs with this file's own pandas/scipy code (not the library's analysis)."""
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from scipy import stats

README = REPO / "README.md"


def first_screen(lines: int = 60) -> str:
    return "\n".join(README.read_text().splitlines()[:lines])


def paired(runs: pd.DataFrame, column: str = "val_loss", variant: str = "ln") -> str:
    """variant minus none on the same seed: '+0.121 [+0.119, +0.123]' (mean, 95% t interval), as the README prints."""
    wide = runs.pivot_table(index="seed", columns="variant", values=column)
    d = (wide[variant] - wide["none"]).dropna().to_numpy()
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"


def runs_of(study: str) -> pd.DataFrame:
    return pd.read_csv(REPO / "runs" / study / "runs.csv")


def test_the_first_screen_holds_the_tldr_the_figure_the_table_the_links_and_two_commands():
    screen = first_screen()
    tldr = screen.split("## TL;DR", 1)[1].split("![", 1)[0]
    assert 1 <= len([line for line in tldr.splitlines() if line.startswith("- ")]) <= 8
    figure = re.search(r"!\[[^\]]+\]\((figures/[^)]+\.png)\)", screen)
    assert figure and (REPO / figure.group(1)).is_file()
    assert "| regime | Δ val loss `ln` [95% CI] | Δ `rms` [95% CI] | decision |" in screen
    for link in ("(paper/paper.pdf)", "(FINDINGS.md)", "(figures/README.md)"):
        assert link in screen
    commands = [line for line in screen.splitlines() if line.startswith("bash scripts/")]
    assert [c.split()[1] for c in commands] == ["scripts/study.sh", "scripts/test.sh"]
    assert "**Confidence**" in tldr and "**Scope**" in tldr
    assert len(README.read_text().split()) <= 3000


@pytest.mark.committed
def test_the_first_screen_numbers_re_derive_from_the_committed_runs():
    screen = first_screen()
    main = runs_of("main")
    for preset in ("seeds-final", "nanogpt-cpu"):
        sub = main[main["cfg.preset"] == preset]
        for variant in ("ln", "rms"):
            assert paired(sub, variant=variant) in screen, (preset, variant)
    # zero-shot suite v2 and the share of its macro difference the `swapped` task carries (macro = mean of 4 tasks)
    final = main[main["cfg.preset"] == "seeds-final"]
    assert paired(final, "lm2_macro_acc") in screen
    wide = final.pivot_table(index="seed", columns="variant", values=["lm2_macro_acc", "lm2.swapped.0shot.acc"])
    macro = (wide["lm2_macro_acc"]["ln"] - wide["lm2_macro_acc"]["none"]).mean()
    swapped = (wide["lm2.swapped.0shot.acc"]["ln"] - wide["lm2.swapped.0shot.acc"]["none"]).mean()
    assert f"{swapped / 4 / macro:.0%} of it from one task (`swapped`)" in screen
    # the budget trend at its smallest and largest budget
    budget = pd.concat([runs_of("stability-budget"), runs_of("stability-budget-v2")])
    assert paired(budget[budget["cfg.max_iters"] == 8000]) in screen
    assert f"{paired(budget[budget['cfg.max_iters'] == 150]).split()[0]} at 150" in screen
    # the init scale, untied head
    scale = runs_of("stability-scale-v2")
    for std in (0.02, 1.0):
        assert paired(scale[(scale["cfg.emb_init_std"] == std) & ~scale["cfg.tie_embeddings"]]) in screen
    # H1b: none's failures at peak LR 1 with clipping, on its fresh seeds
    h1b = runs_of("stability-h1b-v2")
    none = h1b[(h1b["variant"] == "none") & (h1b["cfg.lr"] == 1.0) & (h1b["cfg.grad_clip"] == 1.0)]
    assert f"`none` failed {int(none['failed'].sum())} of {len(none)} fresh seeds" in screen
    # the search: no arm fails below the lowest failing LR
    search = runs_of("stability-lr-v2")
    assert f"No arm fails below peak LR {search.loc[search['failed'], 'cfg.lr'].min():g}" in screen
    # the size ladder: the largest size, and where none's loss stops falling (one-sided Welch t, p >= 0.05)
    ladder = runs_of("ladder")
    assert paired(ladder[ladder["cfg.preset"] == "ladder-4"]) in screen
    none = ladder[ladder["variant"] == "none"]
    loss = {int(p.split("-")[1]): g["val_loss"] for p, g in none.groupby("cfg.preset")}
    flat = next(r for r in sorted(loss)[:-1]
                if stats.ttest_ind(loss[r + 1], loss[r], equal_var=False, alternative="less").pvalue >= 0.05)
    shape = ladder.loc[ladder["cfg.preset"] == f"ladder-{flat}", ["cfg.n_layer", "cfg.n_embd"]].iloc[0]
    assert f"from {12 * shape['cfg.n_layer'] * shape['cfg.n_embd'] ** 2 / 1e6:.1f}M up the baseline's loss stops falling" in screen


@pytest.mark.committed
def test_the_answer_data_behind_the_figure_is_what_the_runs_give():
    from embnorm_lib import answer
    from embnorm_lib.io import default_runs_dir

    out = default_runs_dir()
    budget = pd.concat([runs_of("stability-budget"), runs_of("stability-budget-v2")])
    for row in answer.budget_data(out)["rows"]:
        sub = budget[budget["cfg.max_iters"] == row["max_iters"]]
        assert answer.interval(row) == paired(sub, variant=row["variant"])
    ladder = runs_of("ladder")
    size = answer.size_data(out)
    assert size["plateau_from"] == 2  # issue 76: rungs 2-4 of the char ladder are data-bound
    for row in size["rows"]:
        assert answer.interval(row) == paired(ladder[ladder["cfg.preset"] == f"ladder-{row['rung']}"], variant=row["variant"])


def test_a_plateau_starts_where_the_next_size_is_no_better():
    from embnorm_lib.answer import plateau_start

    rng = np.random.default_rng(0)
    falling = pd.DataFrame([{"rung": r, "val_loss": 2.0 - 0.1 * r + rng.normal(0, 0.005)} for r in range(4)
                            for _ in range(5)])
    assert plateau_start(falling) is None
    flat = falling.assign(val_loss=np.where(falling["rung"] >= 2, 1.8 + rng.normal(0, 0.005, len(falling)),
                                            falling["val_loss"]))
    assert plateau_start(flat) == 2


def test_every_committed_figure_is_indexed_and_an_unknown_one_is_refused():
    from embnorm_lib.report import describe_figure

    listed = subprocess.run(["git", "ls-files", "figures"], cwd=REPO, capture_output=True, text=True).stdout.split()
    index = (REPO / "figures" / "README.md").read_text()
    pngs = [p.removeprefix("figures/") for p in listed if p.endswith(".png")]
    assert pngs and all(f"]({p})" in index for p in pngs), [p for p in pngs if f"]({p})" not in index]
    assert "| ? |" not in index
    with pytest.raises(ValueError, match="no entry in report.FIGURE_WHAT"):
        describe_figure("main/mystery.png")


def test_the_findings_page_is_grouped_by_question_and_reconciles_the_zero_shot_suites():
    page = (REPO / "FINDINGS.md").read_text()
    titles = re.findall(r"^### (\w[\w-]*)", page, flags=re.M)
    assert titles == ["Accuracy", "Calibration", "Zero-shot", "Stability", "Scale", "Mechanism"]
    for group in page.split("\n### ")[1:]:
        assert group.split("\n\n")[1].startswith("*")  # each opens with the sentence of what it means
    zero_shot = page.split("### Zero-shot", 1)[1].split("\n### ", 1)[0]
    assert "suite v2 is the registered zero-shot endpoint (docs/PROTOCOL.md amendment 3)" in zero_shot
    assert "of the macro difference" in zero_shot and "`swapped`" in zero_shot
    # wherever suite v1 appears, its relation to v2 is stated in the same group
    for group in page.split("\n### ")[1:]:
        assert "suite v1" not in group.lower() or "superseded" in group
    assert "suite v1" not in README.read_text().split("## TL;DR")[1].split("](figures")[0].lower() or \
        "superseded" in README.read_text()


def test_study_figures_label_axes_and_legends_in_words_and_keep_ln_and_rms_apart():
    import matplotlib.pyplot as plt

    from embnorm_lib import plots

    rows = [{"arm": f"{v}_preset=nanogpt-cpu", "seed": s, "step": t, "val_loss": 2.0 - 0.01 * t,
             "grad_norm.block1.attn": 1.0} for v in ("none", "ln", "rms") for s in range(2) for t in range(10)]
    series = pd.DataFrame(rows)
    fig = plots.plot_study_metric(series, "val_loss")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "validation loss (nats/char)" and ax.get_xlabel() == "training step"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[1].startswith("ln (preset nanogpt-cpu)") and not any("=" in t for t in legend)
    markers = {line.get_label().split()[0]: line.get_marker() for line in ax.get_lines()}
    assert markers["ln"] != markers["rms"]
    plt.close(fig)
    panels = plots.plot_study_panels(series, ["grad_norm.block1.attn"], "gradient norm per group")
    assert panels.axes[0].get_title() == "grad norm: block1 attn"
    plt.close(panels)
