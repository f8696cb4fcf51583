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
    assert f"{swapped / 4 / macro:.0%} of it from the spelling task `swapped`" in tldr_line("Zero-shot")
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
    assert f"(peak LR 1: {int(none['failed'].sum())} of {len(none)} seeds), no norm removed the failures" in screen
    assert f"failed `none` {int(none['failed'].sum())}," in tldr_line("Stability")
    # the search: no arm fails below the lowest failing LR
    search = runs_of("stability-lr-v2")
    assert f"no arm fails below peak LR {search.loc[search['failed'], 'cfg.lr'].min():g}" in tldr_line("Stability")
    # the size ladder: the largest size, and where none's loss stops falling (one-sided Welch t, p >= 0.05)
    ladder = runs_of("ladder")
    assert paired(ladder[ladder["cfg.preset"] == "ladder-4"]) in screen
    none = ladder[ladder["variant"] == "none"]
    loss = {int(p.split("-")[1]): g["val_loss"] for p, g in none.groupby("cfg.preset")}
    flat = next(r for r in sorted(loss)[:-1]
                if stats.ttest_ind(loss[r + 1], loss[r], equal_var=False, alternative="less").pvalue >= 0.05)
    shape = ladder.loc[ladder["cfg.preset"] == f"ladder-{flat}", ["cfg.n_layer", "cfg.n_embd"]].iloc[0]
    assert (f"From {12 * shape['cfg.n_layer'] * shape['cfg.n_embd'] ** 2 / 1e6:.1f}M up the baseline's loss stops "
            "falling" in tldr_line("Size"))
    assert f"from {12 * shape['cfg.n_layer'] * shape['cfg.n_embd'] ** 2 / 1e6:.1f}M up the 1 MB corpus" in screen


@pytest.mark.committed
def test_the_answer_data_behind_the_figure_is_what_the_runs_give():
    from embnorm_lib.analyses import answer
    from embnorm_lib.core.io import default_runs_dir

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
    from embnorm_lib.analyses.answer import plateau_start

    rng = np.random.default_rng(0)
    falling = pd.DataFrame([{"rung": r, "val_loss": 2.0 - 0.1 * r + rng.normal(0, 0.005)} for r in range(4)
                            for _ in range(5)])
    assert plateau_start(falling) is None
    flat = falling.assign(val_loss=np.where(falling["rung"] >= 2, 1.8 + rng.normal(0, 0.005, len(falling)),
                                            falling["val_loss"]))
    assert plateau_start(flat) == 2


def test_every_committed_figure_is_indexed_and_an_unknown_one_is_refused():
    from embnorm_lib.analyses.site import describe_figure

    listed = subprocess.run(["git", "ls-files", "figures"], cwd=REPO, capture_output=True, text=True).stdout.split()
    index = (REPO / "figures" / "README.md").read_text()
    pngs = [p.removeprefix("figures/") for p in listed if p.endswith(".png")]
    assert pngs and all(f"]({p})" in index for p in pngs), [p for p in pngs if f"]({p})" not in index]
    assert "| ? |" not in index
    with pytest.raises(ValueError, match="no entry in site.FIGURE_WHAT"):
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

    from embnorm_lib.publishing import plots

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


# -- the fresh-eyes critique of the first screen (regime in the headline, ladder budget, configurations, init grid,
# stability panel, terms explained), each re-derived from the committed runs with this file's own code

def tldr_line(label: str) -> str:
    """The bullet of FINDINGS.md's "The answer in detail" (the TL;DR's long form) that opens with **label."""
    detail = (REPO / "FINDINGS.md").read_text().split("## The answer in detail", 1)[1].split("\n## ", 1)[0]
    return next(line for line in detail.splitlines() if line.startswith(f"- **{label}"))


def test_the_tldr_is_short_and_links_to_the_answer_in_detail():
    tldr = first_screen().split("## TL;DR", 1)[1].split("![", 1)[0]
    bullets = [line for line in tldr.splitlines() if line.startswith("- ")]
    assert all(len(b.split()) <= 45 for b in bullets), max(bullets, key=lambda b: len(b.split()))
    assert len(tldr.split()) <= 250
    assert "(FINDINGS.md#the-answer-in-detail)" in tldr
    for label in ("Answer", "Zero-shot", "Stability", "Init scale", "Size", "Scope"):  # each has its long form
        assert any(b.startswith(f"- **{label}") for b in bullets) and tldr_line(label), label


def train_chars() -> int:
    from embnorm_lib.core.data import load_corpus

    return len(load_corpus().train)


def tuned_runs(h1b: pd.DataFrame) -> pd.DataFrame:
    """H1b's runs of each arm at its own best LR of the search (clipping on): the LRs other than the tested 1 and 0.3."""
    return h1b[(h1b["cfg.grad_clip"] == 1.0) & ~h1b["cfg.lr"].isin([1.0, 0.3])]


@pytest.mark.committed
def test_the_headline_states_the_budget_where_it_holds_and_that_the_cost_shrinks_with_training():
    answer = tldr_line("Answer")
    main = runs_of("main")
    epochs = {}
    for preset, sub in main.groupby("cfg.preset"):
        epochs[preset] = sub["tokens"].mean() / train_chars()
        assert f"{int(sub['cfg.max_iters'].iloc[0])} iterations = {epochs[preset]:.2f} epochs" in answer, preset
    # every registered regime resolves a cost, so the headline holds up to the longest of them
    assert f"short training budgets (≤ {max(epochs.values()):.2f} epochs), keep baseline" in answer
    budget = pd.concat([runs_of("stability-budget"), runs_of("stability-budget-v2")])
    longest = budget[budget["cfg.max_iters"] == budget["cfg.max_iters"].max()]
    assert f"shrinks toward zero: {paired(budget[budget['cfg.max_iters'] == 150]).split()[0]} at 150 iterations" in answer
    assert (f"{paired(longest)} (not resolved) at {longest['cfg.max_iters'].iloc[0]} "
            f"({longest['tokens'].mean() / train_chars():.2f} epochs" in answer)


@pytest.mark.committed
def test_the_confidence_says_the_two_registered_configurations_differ_in_depth_and_budget():
    main = runs_of("main")
    shapes = main.groupby("cfg.preset", sort=False)[["cfg.n_layer", "cfg.max_iters"]].first()
    shapes = shapes.loc[["seeds-final", "nanogpt-cpu"]]
    layers = " vs ".join(str(v) for v in shapes["cfg.n_layer"])
    iters = " vs ".join(str(v) for v in shapes["cfg.max_iters"])
    assert (f"differ in depth ({layers} layers) and budget ({iters} iterations) at once" in tldr_line("Scope"))
    assert "in both model configurations)" not in first_screen()  # the old wording implied two replications


@pytest.mark.committed
def test_the_size_line_states_the_ladders_budget_and_where_the_adequate_data_ladder_stands():
    from embnorm_lib.studies import study_cells

    size = tldr_line("Size")
    ladder = runs_of("ladder")
    params = 12 * ladder["cfg.n_layer"] * ladder["cfg.n_embd"] ** 2
    per_param = (ladder["tokens"] / params).groupby(ladder["cfg.preset"]).mean()
    passes = (ladder["tokens"] / train_chars()).groupby(ladder["cfg.preset"]).mean()
    # the smallest size reaches the tokens-per-parameter target (rounded up to whole iterations); the others hit the cap
    assert (f"{int(per_param.max())} tokens per non-embedding parameter, capped at {round(passes.max())} passes "
            f"over the {train_chars() / 1e6:.1f}M training characters" in size)
    assert f"every size sees {passes.min():.1f}–{passes.max():.0f} passes" in size
    for study, kind in (("ladder-data-lr", "tuning"), ("ladder-data", "confirmatory")):
        index = REPO / "runs" / study / "runs.csv"
        finished = len(pd.read_csv(index)) if index.is_file() else 0
        registered = len(study_cells(study))
        if registered:
            assert f"{finished} of {registered if kind == 'confirmatory' else f'the {registered}'} {kind} runs" in size
    assert "in progress" in size and "no result of it is quoted yet" in size


def test_the_adequate_data_ladder_is_quoted_as_in_progress_until_its_confirmatory_runs_finish():
    from embnorm_lib.analyses.answer import data_ladder_words

    link = {"number": 16, "link": "docs/PROTOCOL.md#x"}
    tuning = {"ladder-data-lr": {"finished": 12, "registered": 30}}
    waiting = data_ladder_words({"chars": 58e6, "amendment": link,
                                 "studies": {**tuning, "ladder-data": {"finished": 0, "registered": 0}}})
    assert "12 of the 30 tuning runs registered so far have finished" in waiting and "quoted yet" in waiting
    running = data_ladder_words({"chars": 58e6, "amendment": link,
                                 "studies": {**tuning, "ladder-data": {"finished": 19, "registered": 60}}})
    assert "19 of 60 confirmatory runs" in running and "in progress" in running
    early = data_ladder_words({"chars": 58e6, "amendment": link, "planned": 60,
                               "studies": {**tuning, "ladder-data": {"finished": 5, "registered": 5}}})
    assert "5 of 5 confirmatory runs (of the 60 its design holds)" in early and "in progress" in early
    done = data_ladder_words({"chars": 58e6, "amendment": link,
                              "studies": {**tuning, "ladder-data": {"finished": 60, "registered": 60}}})
    assert "has finished (60 of 60 confirmatory runs)" in done and "in progress" not in done


@pytest.mark.committed
def test_the_init_grid_is_scoped_shows_both_heads_and_links_to_the_seed_study():
    from embnorm_lib.studies.seed_study import SEED_STUDY_TABLE1

    scale = runs_of("stability-scale-v2")
    table = first_screen().split("| regime |", 1)[1]
    for (std, tied), sub in scale.groupby(["cfg.emb_init_std", "cfg.tie_embeddings"]):
        head = "tied" if tied else "untied"
        row = next(line for line in table.splitlines() if f"N(0, {std:g}), {head} head" in line)
        assert paired(sub) in row and paired(sub, variant="rms") in row, (std, head)
    init = tldr_line("Init scale")
    width, layers, iters = (int(scale[c].iloc[0]) for c in ("cfg.n_embd", "cfg.n_layer", "cfg.max_iters"))
    assert (f"in one exploratory grid** ({layers} × {width}, {iters} iterations, {scale['seed'].nunique()} seeds"
            in init)
    prelim = runs_of("seeds-prelim")
    assert (int(prelim["cfg.n_layer"].iloc[0]), int(prelim["cfg.n_embd"].iloc[0]),
            int(prelim["cfg.max_iters"].iloc[0])) == (layers, width, iters)
    assert "This is the seed study's model and budget" in init
    assert f"{SEED_STUDY_TABLE1['none']['embedding_norm']:g}, is near √{width} = {np.sqrt(width):.1f}" in init
    assert "if it used PyTorch's default N(0, 1) embedding init" in init


@pytest.mark.committed
def test_the_stability_line_gives_h1b_failures_and_tuned_costs_of_every_arm_and_the_searchs_seeds():
    line = tldr_line("Stability")
    h1b = runs_of("stability-h1b-v2")
    at_one = h1b[(h1b["cfg.lr"] == 1.0) & (h1b["cfg.grad_clip"] == 1.0)]
    counts = at_one.groupby("variant")["failed"].sum().astype(int)
    order = ["none", "ln", "rms", "scaled"]
    assert ("failed " + ", ".join(f"`{v}` {counts[v]}" for v in order) + f" of {at_one['seed'].nunique()}") in line
    tuned = tuned_runs(h1b)
    for variant in order[1:]:
        assert f"`{variant}` {paired(tuned, variant=variant)}" in line, variant
    search = runs_of("stability-lr-v2")
    assert (f"peak LR {search['cfg.lr'].min():g}–{search['cfg.lr'].max():g}, {search['seed'].nunique()} seeds per "
            "arm and LR" in line)
    assert line.startswith("- **Stability: no benefit detected.**")


@pytest.mark.committed
def test_the_zero_shot_line_names_its_models_budget_tasks_and_the_superseded_suite():
    line = tldr_line("Zero-shot")
    final = runs_of("main")
    final = final[final["cfg.preset"] == "seeds-final"]
    assert (f"(the {final['cfg.n_layer'].iloc[0]} × {final['cfg.n_embd'].iloc[0]} models at "
            f"{final['cfg.max_iters'].iloc[0]} iterations, {final['seed'].nunique()} seeds" in line)
    assert f"Suite v1 (`ln` {paired(final, 'lm_macro_acc')}) is superseded" in line
    assert "the spelling task `swapped`" in line and "docs/PROTOCOL.md#amendment-3-" in line
    assert "after suite v1's scores were seen and before any study was scored with it" in line


def test_suite_v2_was_registered_after_v1_scored_the_main_study_and_before_v2_scored_any():
    """What the zero-shot line says of amendment 3's timing, checked against the repository's history."""
    def first_commit_time(text: str, path: str) -> int:
        log = subprocess.run(["git", "log", "--format=%ct", f"-S{text}", "--", path], cwd=REPO, capture_output=True,
                             text=True)
        return int(log.stdout.split()[-1]) if log.returncode == 0 and log.stdout.split() else -1

    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("needs the repository's full history")
    registered = first_commit_time("### Amendment 3", "docs/PROTOCOL.md")
    v1 = first_commit_time("lm_macro_acc", "runs/main/runs.csv")
    v2 = first_commit_time("lm2_macro_acc", "runs/main/runs.csv")
    if min(registered, v1, v2) < 0:
        pytest.skip("the history does not hold the committed runs")
    assert v1 < registered < v2


def github_slug(heading: str) -> str:
    return "".join(c for c in heading.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def test_every_link_on_the_first_screen_opens_a_file_and_an_existing_heading():
    links = re.findall(r"\]\(([^)\s]+)\)", first_screen())
    assert any("#" in link for link in links)
    for link in links:
        path, _, anchor = link.partition("#")
        assert (REPO / path).exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (REPO / path).read_text(), flags=re.M)
            assert anchor in {github_slug(h) for h in headings}, link


def test_the_first_screen_explains_its_terms():
    screen = first_screen()
    note = next(line for line in screen.splitlines() if line.startswith("How to read"))
    for term in ("*Resolved*", "Holm's correction", "*H1b*", "*Data-bound*", "`swapped`", "footer", "sha256",
                 "filled marker"):
        assert term in note, term
    assert len(screen.split("<!-- answer:end -->")[0].splitlines()) <= 45  # the commands still fit the screen


def test_an_amendment_or_section_the_protocol_lacks_is_refused():
    from embnorm_lib.analyses.answer import amendment, protocol_section

    with pytest.raises(ValueError, match="no amendment heading naming 'no such study'"):
        amendment("no such study")
    with pytest.raises(ValueError, match="no '## Nowhere' section"):
        protocol_section("Nowhere")
    assert amendment("`stability-h1b-v2`")["link"].startswith("docs/PROTOCOL.md#amendment-2-")


@pytest.mark.slow
@pytest.mark.committed
def test_the_figure_panels_name_their_study_seeds_and_budget():
    import matplotlib.pyplot as plt

    from embnorm_lib.analyses import answer
    from embnorm_lib.core.io import default_runs_dir

    out = default_runs_dir()
    d = {"registered": answer.registered_data(out), "budget": answer.budget_data(out), "init": answer.init_data(out),
         "failures": answer.failure_data(out), "size": answer.size_data(out)}
    fig = answer.answer_figure(d)
    budget, init, failures, size = fig.axes[:4]
    search = runs_of("stability-lr-v2")
    assert f"LR search stability-lr-v2 (exploratory, {search['seed'].nunique()} seeds)" in failures.get_title()
    assert "no stability benefit\ndetected" in failures.get_title()
    note = " ".join(t.get_text() for t in failures.texts)
    h1b = runs_of("stability-h1b-v2")
    assert f"scaled {paired(tuned_runs(h1b), variant='scaled').split()[0]}" in note
    assert "20 tokens/param, ≤ 10 passes" in size.get_xlabel()
    assert "Init grid (exploratory; 8 × 128, 150 it, 3 seeds)" in init.get_title()
    assert "Budget trend (exploratory, 3 seeds)" in budget.get_title()
    assert "filled marker = resolved after Holm's correction" in fig._suptitle.get_text()
    plt.close(fig)
