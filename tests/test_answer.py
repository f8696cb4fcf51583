"""The answer on one screen (issue 71): the README's first screen, FINDINGS.md and the figure index. The numbers
and decisions `analyses.answer` returns are checked against the committed runs with this file's own pandas/scipy code
(not the library's analysis); that the README and FINDINGS.md say what that data renders is checked once, whole
(`test_the_readme_and_findings_say_what_the_committed_data_renders`), so a change of wording edits no test."""
import functools
import json
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from scipy import stats

from embnorm_lib.publishing.templating import interval, millions

README = REPO / "README.md"


def first_screen(lines: int = 60) -> str:
    return "\n".join(README.read_text().splitlines()[:lines])


def answer_detail() -> str:
    """FINDINGS.md's "The answer in detail": the long form of each TL;DR line, every quoted regime and how to read it."""
    return (REPO / "FINDINGS.md").read_text().split("## The answer in detail", 1)[1].split("\n## ", 1)[0]


def paired(runs: pd.DataFrame, column: str = "val_loss", variant: str = "ln") -> str:
    """variant minus none on the same seed: '+0.121 [+0.119, +0.123]' (mean, 95% t interval), as the README prints."""
    wide = runs.pivot_table(index="seed", columns="variant", values=column)
    d = (wide[variant] - wide["none"]).dropna().to_numpy()
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"


def paired_numbers(runs: pd.DataFrame, column: str = "val_loss", variant: str = "ln") -> list[float]:
    """[mean, low, high] of `paired`: variant minus none on the same seed with its 95% t interval."""
    wide = runs.pivot_table(index="seed", columns="variant", values=column)
    d = (wide[variant] - wide["none"]).dropna().to_numpy()
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return [d.mean(), d.mean() - half, d.mean() + half]


def assert_interval(row: dict, runs: pd.DataFrame, column: str = "val_loss", variant: str = "ln") -> None:
    """A row of the answer's data holds the paired difference this file computes from the runs."""
    got = [row["mean_diff"], row["ci_low"], row["ci_high"]]
    assert got == pytest.approx(paired_numbers(runs, column, variant), abs=1e-5), (variant, column)


def pick(rows: list[dict], **match) -> dict:
    (row,) = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return row


def runs_of(study: str) -> pd.DataFrame:
    return pd.read_csv(REPO / "runs" / study / "runs.csv")


@functools.cache
def committed(part: str) -> dict:
    """One part of the data the README's first screen quotes (`answer.<part>_data`), from the committed runs, computed
    once for this file."""
    from embnorm_lib.analyses import answer
    from embnorm_lib.core.records.io import default_runs_dir

    if part == "curves":
        from embnorm_lib.analyses.curves import curves_data

        return curves_data(default_runs_dir())
    if part == "prose":
        from embnorm_lib.analyses.prose import confirmatory_result

        return confirmatory_result(default_runs_dir())
    return getattr(answer, f"{part}_data")(default_runs_dir())


def answer_data() -> dict:
    """`answer.answer_data()` of the committed runs, from the parts computed once."""
    from embnorm_lib.analyses import answer
    from embnorm_lib.core.corpora.data import load_corpus

    corpus = load_corpus()
    parts = {"registered": "registered", "zeroshot": "zeroshot", "budget": "budget", "init": "init",
             "failures": "failure", "size": "size", "curves": "curves", "prose_ladder": "prose"}
    return {"corpus": {"chars": len(corpus.train) + len(corpus.val)}, "baselines": answer.baseline_data(),
            **{k: committed(v) for k, v in parts.items()}}


def test_the_first_screen_holds_the_advice_the_figure_the_table_the_links_and_two_commands():
    """Issue 113: the README's first 40 lines hold the advice with its regime and confidence, the figure and a table
    of at most 8 regimes; the two commands follow on the same screen."""
    screen = first_screen(40)
    tldr = screen.split("## TL;DR", 1)[1].split("![", 1)[0]
    advice = next(line for line in tldr.splitlines() if line.startswith("**Advice: "))
    assert "Confidence: **" in advice and "tokens per parameter" in advice and "tuned learning rate" in advice
    assert 1 <= len([line for line in tldr.splitlines() if line.startswith("- ")]) <= 8
    figure = re.search(r"!\[[^\]]+\]\((figures/[^)]+\.png)\)", screen)
    assert figure and (REPO / figure.group(1)).is_file()
    table = [line for line in screen.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| setting | no norm (bigram) |") and 1 <= len(table) - 1 <= 8
    for link in ("(paper/paper.pdf)", "(FINDINGS.md)", "(figures/README.md)"):
        assert link in screen
    commands = [line for line in first_screen().splitlines() if line.startswith("bash scripts/")]
    assert [c.split()[1] for c in commands] == ["scripts/study.sh", "scripts/test.sh"]
    for jargon in ("arm ", "H1b", "amendment", "suite v2", "`ladder-data"):  # no project jargon above the fold
        assert jargon not in screen.split("<!-- answer:end -->")[0], jargon
    assert len(README.read_text().split()) <= 3000


def test_the_reading_note_defines_every_arm_and_the_failure_the_figure_shows():
    """A first-time reader met `scaled (tok·√d)` and 'share of runs failed' in the figure with neither defined on the
    first screen: every arm beyond the three of the question, and what counts as a failure, are defined there."""
    from embnorm_lib.analyses import answer, boundary
    from embnorm_lib.analyses.answer_figure import ARM_NAMES

    detail = answer.detail_lines(answer.record(answer_data()))
    note = next(line for line in detail if line.startswith("How to read"))
    for arm in set(ARM_NAMES) - {"none", "ln", "rms"}:
        assert f"*{arm}*" in note
    assert "non-finite" in boundary.__doc__ and "above its loss at initialisation" in boundary.__doc__
    assert "*fails* when its loss becomes non-finite or its final validation loss ends above its loss at " \
           "initialisation" in note


@pytest.mark.committed
def test_the_answer_data_re_derives_from_the_committed_runs():
    from embnorm_lib.analyses import answer_words

    main = runs_of("main")
    for preset in ("seeds-final", "nanogpt-cpu"):
        sub = main[main["cfg.preset"] == preset]
        for variant in ("ln", "rms"):
            assert_interval(pick(committed("registered")[preset]["loss"], variant=variant), sub, variant=variant)
    # the budget trend at its smallest and largest budget
    budget = pd.concat([runs_of("stability-budget"), runs_of("stability-budget-v2")])
    b = answer_words.budget_words(committed("budget"))
    # the shortest budget whose cost is resolved (150's is not, in the budget grid's family) and the longest
    assert (b["shortest"], b["first"]["max_iters"], b["last"]["max_iters"]) == (150, 300, 8000)
    assert b["first"]["significant"] and not pick(committed("budget")["rows"], variant="ln", max_iters=150)["significant"]
    assert_interval(b["first"], budget[budget["cfg.max_iters"] == 300])
    assert_interval(b["last"], budget[budget["cfg.max_iters"] == 8000])
    # the init scale, untied head
    scale = runs_of("stability-scale-v2")
    for std in (0.02, 1.0):
        assert_interval(pick(committed("init")["rows"], variant="ln", emb_init_std=std, head="untied"),
                        scale[(scale["cfg.emb_init_std"] == std) & ~scale["cfg.tie_embeddings"]])
    # H1b: none's failures at peak LR 1 with clipping, on its fresh seeds; no norm removed them
    h1b = runs_of("stability-h1b-v2")
    none = h1b[(h1b["variant"] == "none") & (h1b["cfg.lr"] == 1.0) & (h1b["cfg.grad_clip"] == 1.0)]
    f = answer_words.failure_words(committed("failure"))
    assert (f["none"], committed("failure")["h1b"]["seeds"], f["fixed"]) == (int(none["failed"].sum()), len(none), [])
    # the search: no arm fails below the lowest failing LR
    search = runs_of("stability-lr-v2")
    assert committed("failure")["lowest_failing_lr"] == search.loc[search["failed"], "cfg.lr"].min()
    # the size ladder: the largest size, and where none's loss stops falling (one-sided Welch t, p >= 0.05)
    ladder = runs_of("ladder")
    assert_interval(pick(committed("size")["rows"], variant="ln", rung=4), ladder[ladder["cfg.preset"] == "ladder-4"])
    none = ladder[ladder["variant"] == "none"]
    loss = {int(p.split("-")[1]): g["val_loss"] for p, g in none.groupby("cfg.preset")}
    flat = next(r for r in sorted(loss)[:-1]
                if stats.ttest_ind(loss[r + 1], loss[r], equal_var=False, alternative="less").pvalue >= 0.05)
    shape = ladder.loc[ladder["cfg.preset"] == f"ladder-{flat}", ["cfg.n_layer", "cfg.n_embd"]].iloc[0]
    assert committed("size")["plateau_from"] == flat
    assert answer_words.size_words(committed("size"))["plateau_params"] == 12 * shape["cfg.n_layer"] * shape["cfg.n_embd"] ** 2


@pytest.mark.committed
def test_the_readme_and_findings_say_what_the_committed_data_renders():
    """The README's answer block is `answer.first_screen` of the committed data, and FINDINGS.md holds each line of
    `answer.detail_lines`: the wording is pinned by the published pages themselves, rewritten by
    `python -m embnorm_lib publish readme`."""
    from embnorm_lib.analyses import answer
    from embnorm_lib.publishing.readme import ANSWER_END, ANSWER_START

    d = answer_data()
    block = README.read_text().split(ANSWER_START, 1)[1].split(ANSWER_END, 1)[0]
    from embnorm_lib.analyses.answer_figure import FIGURE

    record = answer.record(d)
    assert block == "\n" + answer.first_screen(record, FIGURE.with_suffix(".png").as_posix()) + "\n"
    findings = (REPO / "FINDINGS.md").read_text().splitlines()
    assert all(line in findings for line in answer.detail_lines(record))
    # the pages are the template filled from the committed record, and that record is what the runs give
    assert json.loads((REPO / "runs" / answer.RECORD).read_text()) == record


@pytest.mark.committed
def test_the_answer_data_behind_the_figure_is_what_the_runs_give():

    budget = pd.concat([runs_of("stability-budget"), runs_of("stability-budget-v2")])
    for row in committed("budget")["rows"]:
        sub = budget[budget["cfg.max_iters"] == row["max_iters"]]
        assert interval(row) == paired(sub, variant=row["variant"])
    ladder = runs_of("ladder")
    size = committed("size")
    assert size["plateau_from"] == 2  # issue 76: rungs 2-4 of the char ladder are data-bound
    for row in size["rows"]:
        assert interval(row) == paired(ladder[ladder["cfg.preset"] == f"ladder-{row['rung']}"], variant=row["variant"])


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
    from embnorm_lib.analyses.answer import amendment

    assert "suite v2" in zero_shot and f"amendment {amendment('zero-shot suite v2')['number']}" in zero_shot
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
    screen = first_screen()
    tldr = screen.split("## TL;DR", 1)[1].split("![", 1)[0]
    bullets = [line for line in tldr.splitlines() if line.startswith("- ")]
    assert all(len(b.split()) <= 80 for b in bullets), max(bullets, key=lambda b: len(b.split()))
    assert len(tldr.split()) <= 400
    assert "(FINDINGS.md#the-answer-in-detail)" in screen
    for label in ("Short training", "Unit-variance", "Stability", "Zero-shot"):
        assert any(b.startswith(f"- **{label}") for b in bullets), label
    for label in ("Short training", "Zero-shot", "Calibration", "Stability", "Init scale", "Size", "Scope"):  # the long forms
        assert tldr_line(label), label


def train_chars() -> int:
    from embnorm_lib.core.corpora.data import load_corpus

    return len(load_corpus().train)


def tuned_runs(h1b: pd.DataFrame) -> pd.DataFrame:
    """H1b's runs of each arm at its own best LR of the search (clipping on): the LRs other than the tested 1 and 0.3."""
    return h1b[(h1b["cfg.grad_clip"] == 1.0) & ~h1b["cfg.lr"].isin([1.0, 0.3])]


@pytest.mark.committed
@pytest.mark.committed
def test_the_calibration_line_quotes_each_regimes_brier_and_ece_as_the_runs_and_holm_give_them():
    """The TL;DR answers the question's calibration part: every registered regime's Brier score and top-label ECE,
    each norm's paired difference recomputed from the runs, worded by the family's Holm decision."""
    from embnorm_lib.analyses import answer

    reg = committed("registered")
    main = runs_of("main")
    for preset, r in reg.items():
        family = pd.read_csv(REPO / "runs" / "main" / "analysis" / preset / "family.csv")
        sub = main[main["cfg.preset"] == preset]
        assert {(x["metric"], x["variant"]) for x in r["calibration"]} == {
            (m, v) for m in ("brier", "ece_equal_width") for v in ("ln", "rms")}
        for x in r["calibration"]:
            assert_interval(x, sub, column=x["metric"], variant=x["variant"])
            decided = family[(family["metric"] == x["metric"]) & (family["variant"] == x["variant"])].iloc[0]
            assert x["significant"] == bool(decided["significant"])
    line = next(b for b in first_screen().splitlines() if b.startswith("- **Zero-shot**")).split("**Calibration**", 1)[1]
    record = answer.record(answer_data())
    assert line in answer.first_screen(record, "f.png") and tldr_line("Calibration") in answer.detail_lines(record)
    brier = [pick(r["calibration"], metric="brier", variant="ln") for r in reg.values()]
    if all(x["significant"] and x["mean_diff"] > 0 for x in brier):  # today's runs: worse in both regimes
        assert "**worsens** the Brier score in both regimes" in line
    ece = [(r["iters"], pick(r["calibration"], metric="ece_equal_width", variant="ln")) for r in reg.values()]
    for iters, x in ece:
        word = "not resolved" if not x["significant"] else "better" if x["mean_diff"] < 0 else "worse"
        assert f"{word}" + (f" by {abs(x['mean_diff']):.3f}" if x["significant"] else "") + f" at {iters}" in line


def test_the_headline_states_the_budget_where_it_holds_and_that_the_cost_shrinks_with_training():
    from embnorm_lib.analyses import answer_words

    reg = committed("registered")
    main = runs_of("main")
    epochs = {}
    for preset, sub in main.groupby("cfg.preset"):
        epochs[preset] = sub["tokens"].mean() / train_chars()
        assert (reg[preset]["iters"], reg[preset]["epochs"]) == (int(sub["cfg.max_iters"].iloc[0]),
                                                                 pytest.approx(epochs[preset], abs=1e-6)), preset
    # every registered regime resolves a cost, so the headline holds up to the longest of them, with the verdict
    # both regimes' decision rules reached
    verdicts = {json.loads((REPO / "runs" / "main" / "analysis" / p / "decision.json").read_text())["overall"]
                for p in epochs}
    words = answer_words.headline_words({"registered": reg})
    assert (words["max_epochs"], {words["verdict"]}) == (pytest.approx(max(epochs.values())), verdicts)
    # the cost shrinks toward zero: smaller at the longest budget than at the shortest, and not resolved there
    budget = pd.concat([runs_of("stability-budget"), runs_of("stability-budget-v2")])
    longest = budget[budget["cfg.max_iters"] == budget["cfg.max_iters"].max()]
    b = answer_words.budget_words(committed("budget"))
    assert abs(paired_numbers(longest)[0]) < abs(paired_numbers(budget[budget["cfg.max_iters"] == 150])[0])
    assert (b["last"]["max_iters"], b["last"]["significant"]) == (longest["cfg.max_iters"].iloc[0], False)
    assert b["last"]["epochs"] == pytest.approx(longest["tokens"].mean() / train_chars(), abs=1e-6)
    assert_interval(b["last"], longest)


@pytest.mark.committed
def test_the_confidence_says_the_two_registered_configurations_differ_in_depth_and_budget():
    from embnorm_lib.analyses import answer_words

    main = runs_of("main")
    shapes = main.groupby("cfg.preset", sort=False)[["cfg.n_layer", "cfg.max_iters"]].first()
    shapes = shapes.loc[["seeds-final", "nanogpt-cpu"]]
    confidence = answer_words.confidence_data({"registered": committed("registered")})
    assert confidence["differ"] == {"layers": list(shapes["cfg.n_layer"]), "iters": list(shapes["cfg.max_iters"])}
    assert "in both model configurations)" not in first_screen()  # the old wording implied two replications


@pytest.mark.committed
def test_the_size_line_states_the_ladders_budget_and_where_the_adequate_data_ladder_stands():
    from embnorm_lib.analyses import answer_words
    from embnorm_lib.studies import study_cells

    size = committed("size")
    ladder = runs_of("ladder")
    params = 12 * ladder["cfg.n_layer"] * ladder["cfg.n_embd"] ** 2
    per_param = (ladder["tokens"] / params).groupby(ladder["cfg.preset"]).mean()
    passes = (ladder["tokens"] / train_chars()).groupby(ladder["cfg.preset"]).mean()
    # the smallest size reaches the tokens-per-parameter target (rounded up to whole iterations); the others hit the cap
    assert (size["tokens_per_param"], size["passes_cap"], size["train_chars"]) == \
        (int(per_param.max()), round(passes.max()), train_chars())
    words = answer_words.size_words(size)
    assert [words["passes_low"], words["passes_high"]] == pytest.approx([passes.min(), passes.max()], abs=0.05)
    progress = size["data_ladder"]
    for study in ("ladder-data-lr", "ladder-data"):
        index = REPO / "runs" / study / "runs.csv"
        finished = len(pd.read_csv(index)) if index.is_file() else 0
        assert progress["studies"][study] == {"finished": finished, "registered": len(study_cells(study))}, study
    # each size is quoted once all its runs are in; the ladder is finished once every registered run is
    assert answer_words.data_ladder_finished(progress) == all(v["finished"] == v["registered"]
                                                        for v in progress["studies"].values())
    # every quoted size is the paired difference this file computes from the rung's confirmatory runs, and the
    # README's table and the answer in detail's table carry it
    confirm = runs_of("ladder-data")
    readme, detail = first_screen(), answer_detail()
    for r in progress["rungs"]:
        rung = confirm[confirm["cfg.preset"] == f"ladder-data-{r['rung']}"]
        assert r["seeds"] == rung["seed"].nunique() and not set(rung["seed"]) & {100, 101, 102}
        assert_interval(r, rung, variant=r["variant"])
    for rung in {r["rung"] for r in progress["rungs"]}:
        ln = pick(progress["rungs"], rung=rung, variant="ln")
        row = [line for line in detail.splitlines() if line.startswith(f"| open English: size "
                                                                      f"{millions(ln['params'])} params")]
        assert len(row) == 1 and interval(ln) in row[0]
        row = [line for line in readme.splitlines() if line.startswith(f"| open English, {millions(ln['params'])} params")]
        assert len(row) == 1 and interval(ln) in row[0]
    scale = (REPO / "FINDINGS.md").read_text().split("### Scale", 1)[1].split("\n### ", 1)[0]
    for r in progress["rungs"]:  # the Scale section lists each quoted size, both norms, at the report's precision
        assert f"`{r['variant']}` {r['mean_diff']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]" in scale


def data_ladder_states() -> dict[str, dict]:
    """The adequate-data ladder's progress as `answer.data_ladder_progress` returns it, planted at four stages."""
    link = {"number": 16, "link": "docs/PROTOCOL.md#x"}
    tuning = {"ladder-data-lr": {"finished": 12, "registered": 30}}

    def stage(finished, registered, **more):
        return {"chars": 58e6, "dictionary_share": 0.94, "amendment": link, **more,
                "studies": {**tuning, "ladder-data": {"finished": finished, "registered": registered}}}

    def row(rung, variant, diff, low, high, significant):
        params, shape, iters = {0: (98_304, "2 × 64", 480), 1: (331_776, "3 × 96", 1620), 2: (786_432, "4 × 128", 3840),
                                3: (1_843_200, "6 × 160", 9000)}[rung]
        return {"rung": rung, "params": params, "shape": shape, "iters": iters, "passes": 0.03 * (rung + 1),
                "seeds": 10, "variant": variant, "none": 2.5 - rung, "mean_diff": diff, "ci_low": low, "ci_high": high,
                "p_holm": 0.18 if not significant else 2.6e-09, "significant": significant, "mde_80": 0.1,
                "data_bound": False}

    quoted = [row(0, "ln", 0.076, 0.002, 0.151, False), row(0, "rms", 0.099, -0.001, 0.198, False),
              row(1, "ln", 0.052, 0.048, 0.057, True), row(1, "rms", -0.048, -0.057, -0.039, True)]
    more = [row(2, "ln", 0.021, 0.012, 0.030, True), row(2, "rms", 0.004, -0.003, 0.011, False),
            row(3, "ln", 0.009, 0.004, 0.014, True), row(3, "rms", 0.002, -0.004, 0.008, False)]
    design = {"sizes": 4, "tokens_per_param": 20, "trend_min_sizes": 3}
    return {"waiting": stage(0, 0), "running": stage(19, 60), "early": stage(5, 5, planned=60),
            "two sizes quoted": stage(60, 60, planned=90, rungs=quoted, **design),
            "four sizes quoted": stage(120, 120, planned=120, rungs=quoted + more, **design, trend=[
                {"variant": "ln", "rungs": 4, "slope_per_decade": -0.03, "slope_ci_low": -0.05, "slope_ci_high": -0.01},
                {"variant": "rms", "rungs": 4, "slope_per_decade": 0.01, "slope_ci_low": -0.02, "slope_ci_high": 0.04}]),
            "done": stage(60, 60), "done, quoted": stage(90, 90, planned=90, rungs=quoted, **design, trend=[
                {"variant": "ln", "rungs": 3, "slope_per_decade": -0.03, "slope_ci_low": -0.05, "slope_ci_high": -0.01},
                {"variant": "rms", "rungs": 3, "slope_per_decade": 0.01, "slope_ci_low": -0.02, "slope_ci_high": 0.04}])}


def test_the_adequate_data_ladder_is_quoted_as_in_progress_until_its_confirmatory_runs_finish():
    """Finished only when every registered confirmatory run has, and at least as many as its design holds (the
    wording of each stage: tests/golden/answer_data_ladder.md)."""
    from embnorm_lib.analyses.answer_words import data_ladder_finished

    finished = {name: data_ladder_finished(p) for name, p in data_ladder_states().items()}
    assert finished == {"waiting": False, "running": False, "early": False, "two sizes quoted": False,
                        "four sizes quoted": True, "done": True, "done, quoted": True}


def planted_record(outcomes: dict[int, tuple[float, float, float]], none: float = 1.5) -> dict:
    """The committed answer record with the adequate-data ladder's LayerNorm and RMSNorm rows replaced by planted
    (mean, low, high) per size, each resolved where its interval excludes 0."""
    from embnorm_lib.analyses import answer

    d = json.loads(json.dumps(answer_data()))
    rows = d["size"]["data_ladder"]["rungs"]
    for r in rows:
        mean, low, high = outcomes[r["rung"]]
        r.update(mean_diff=mean, ci_low=low, ci_high=high, significant=low > 0 or high < 0,
                 equivalent=-0.01 < low and high < 0.01, none=none)
    return answer.record(d)


def test_the_advice_follows_the_trained_sizes_and_a_planted_gain_flips_it():
    """Issue 113: the advice comes from the trained, tuned sizes: with every interval above -0.01 it says leave the
    norm out; a planted gain beyond the MEI at one size turns it into no default; an untrained ladder gives no
    trained size to quote (its `none` planted above the bigram)."""
    from embnorm_lib.analyses import answer

    def advice(record):
        text = answer.first_screen(record, "f.png")
        return next(line for line in text.splitlines() if line.startswith("**Advice: "))

    small = {0: (0.05, 0.02, 0.08), 1: (0.05, 0.04, 0.06), 2: (0.008, -0.001, 0.017), 3: (-0.004, -0.006, -0.002)}
    record = planted_record(small)
    assert record["w"]["advice"]["gain_ruled_out"] and record["w"]["advice"]["confidence"] == "moderate"
    assert advice(record).startswith("**Advice: leave the embedding norm out.**")
    gain = planted_record({**small, 3: (-0.03, -0.04, -0.02)})
    assert not gain["w"]["advice"]["gain_ruled_out"]
    assert advice(gain).startswith("**Advice: no default either way yet.**") and "-0.030 at 1.8M (helps)" in advice(gain)
    resolved = planted_record({**small, 2: (0.02, 0.012, 0.028)})
    assert resolved["w"]["advice"]["confidence"] == "high"
    untrained = planted_record(small, none=2.6)
    assert untrained["w"]["advice"]["rungs"] == [] and untrained["w"]["advice"]["confidence"] == "none"


@pytest.mark.committed
def test_the_init_grid_is_scoped_shows_both_heads_and_links_to_the_seed_study():
    from embnorm_lib.analyses import answer_words
    from embnorm_lib.studies.seed_study import SEED_STUDY_TABLE1

    scale = runs_of("stability-scale-v2")
    init = committed("init")
    for (std, tied), sub in scale.groupby(["cfg.emb_init_std", "cfg.tie_embeddings"]):
        head = "tied" if tied else "untied"
        for variant in ("ln", "rms"):
            assert_interval(pick(init["rows"], variant=variant, emb_init_std=std, head=head), sub, variant=variant)
    width, layers, iters = (int(scale[c].iloc[0]) for c in ("cfg.n_embd", "cfg.n_layer", "cfg.max_iters"))
    assert (init["layers"], init["width"], init["iters"], init["seeds"]) == (layers, width, iters,
                                                                             scale["seed"].nunique())
    prelim = runs_of("seeds-prelim")
    assert (int(prelim["cfg.n_layer"].iloc[0]), int(prelim["cfg.n_embd"].iloc[0]),
            int(prelim["cfg.max_iters"].iloc[0])) == (layers, width, iters)
    assert answer_words.init_words(init)["seed_setup"]  # this is the seed study's model and budget
    seed = init["seed_study"]
    assert (seed["embedding_norm"], seed["unit_init_norm"]) == (SEED_STUDY_TABLE1["none"]["embedding_norm"],
                                                                pytest.approx(np.sqrt(width)))


@pytest.mark.committed
def test_the_stability_line_gives_h1b_failures_and_tuned_costs_of_every_arm_and_the_searchs_seeds():
    from embnorm_lib.analyses import answer_words

    failures = committed("failure")
    words = answer_words.failure_words(failures)
    h1b = runs_of("stability-h1b-v2")
    at_one = h1b[(h1b["cfg.lr"] == 1.0) & (h1b["cfg.grad_clip"] == 1.0)]
    counts = at_one.groupby("variant")["failed"].sum().astype(int)
    order = ["none", "ln", "rms", "scaled"]
    failed = {"none": words["none"], **{v: x["failures"] for v, x in words["variants"].items()}}
    assert failed == {v: counts[v] for v in order} and failures["h1b"]["seeds"] == at_one["seed"].nunique()
    tuned = tuned_runs(h1b)
    for variant in order[1:]:
        assert_interval(words["variants"][variant], tuned, variant=variant)
    search = runs_of("stability-lr-v2")
    assert (words["lr_low"], failures["largest_lr"], failures["seeds"]) == (
        search["cfg.lr"].min(), search["cfg.lr"].max(), search["seed"].nunique())
    assert words["fixed"] == []  # no benefit detected


@pytest.mark.committed
def test_the_zero_shot_line_names_its_models_budget_tasks_and_the_superseded_suite():
    from embnorm_lib.analyses import answer_words

    final = runs_of("main")
    final = final[final["cfg.preset"] == "seeds-final"]
    reg = committed("registered")["seeds-final"]
    assert (reg["layers"], reg["width"], reg["iters"], reg["seeds"]) == (
        final["cfg.n_layer"].iloc[0], final["cfg.n_embd"].iloc[0], final["cfg.max_iters"].iloc[0],
        final["seed"].nunique())
    assert committed("zeroshot")["seeds"] == final["seed"].nunique()
    # zero-shot suite v2 and the share of its macro difference the `swapped` task carries (macro = mean of 4 tasks)
    z = answer_words.zeroshot_words(committed("zeroshot"))
    assert_interval(z["macro"], final, "lm2_macro_acc")
    wide = final.pivot_table(index="seed", columns="variant", values=["lm2_macro_acc", "lm2.swapped.0shot.acc"])
    macro = (wide["lm2_macro_acc"]["ln"] - wide["lm2_macro_acc"]["none"]).mean()
    swapped = (wide["lm2.swapped.0shot.acc"]["ln"] - wide["lm2.swapped.0shot.acc"]["none"]).mean()
    assert (z["top"]["task"], z["top"]["share"]) == ("swapped", pytest.approx(swapped / 4 / macro, abs=1e-5))
    assert_interval(pick(reg["zeroshot_v1"], variant="ln"), final, "lm_macro_acc")  # suite v1, superseded
    assert committed("zeroshot")["amendment"]["link"].startswith("docs/PROTOCOL.md#amendment-3-")


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
    for term in ("Δ is", "layers × width", "*trained*", "*equivalent within ±0.01*", "*registered*", "*exploratory*",
                 "**high**", "**moderate**", "**low**", "count-bigram"):
        assert term in note, term
    detail = next(line for line in answer_detail().splitlines() if line.startswith("How to read"))
    for term in ("*Resolved*", "Holm's correction", "*H1b*", "*Data-bound*", "*ECE*", "*Brier score*", "footer", "sha256",
                 "filled marker"):
        assert term in detail, term
    assert len(screen.split("<!-- answer:end -->")[0].splitlines()) <= 40  # the commands still fit the screen


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
    """Top: the advice's evidence (the open-English ladder inside the ±MEI band, the largest size's learning curves);
    bottom: where the answer changes (budget, init scale), each panel naming its regime."""
    import json

    import matplotlib.pyplot as plt

    from embnorm_lib.analyses import answer_figure
    from embnorm_lib.stats import MEI

    d = answer_data()
    w = json.loads((REPO / "runs" / "answer.json").read_text())["w"]
    fig = answer_figure.answer_figure(d, w)
    advice, curves, budget, init = fig.axes[:4]
    rungs, i = w["dl"]["rungs"], d["init"]
    assert f"{min(r['seeds'] for r in rungs)} seeds" in advice.get_title() and "tokens/param" in advice.get_xlabel()
    band = [p for p in advice.patches if abs(p.get_y() + MEI) < 1e-12]  # the shaded ±MEI band
    assert band and band[0].get_height() == pytest.approx(2 * MEI)
    ticks = [t.get_text() for t in advice.get_xticklabels()]
    assert [t.endswith("not trained") for t in ticks] == [not r["trained"] for r in rungs]
    largest = max((c for c in w["curves"] if c["trained"]), key=lambda c: c["params"])
    share = largest["shares"]["ln"]["none_to_norm"]["mean"]
    assert f"{share:.0%} of its steps" in curves.get_title() and f"{largest['steps']:,} steps" in curves.get_title()
    back = largest["shares"]["ln"]["norm_to_none"]  # both directions, each with the seeds it holds for
    assert f"LayerNorm reaches no norm's final loss at {back['mean']:.0%} of its steps ({back['pairs']} of" in curves.get_title()
    assert all(f"{x}" in init.get_title() for x in (i["layers"], i["width"], i["iters"], f"{i['seeds']} seeds"))
    assert f"{d['budget']['seeds']} seeds" in budget.get_title()
    # the marker key: filled = resolved after Holm, grey = equivalent, open = not resolved or exploratory
    assert all(key in fig._suptitle.get_text() for key in ("filled: a difference resolved after Holm", "grey: equivalent",
                                                           "open markers: a description"))
    plt.close(fig)


def test_an_unresolved_open_english_row_gives_each_norms_mde():
    """A regime-table row covers `ln` and `rms`; where it is not resolved, the MDE it quotes must name whose it is
    (each norm has its own: at one size `rms`'s can be twice `ln`'s)."""
    rows = [line for line in answer_detail().splitlines()
            if line.startswith("| open English") and "not resolved (MDE" in line]
    assert rows
    for row in rows:
        mde = re.search(r"\(MDE ([^)]*)\)", row).group(1)
        assert re.fullmatch(r"`ln` \d\.\d{3}, `rms` \d\.\d{3}", mde), row


def test_the_answer_gives_the_baselines_loss_and_the_reading_note_says_what_gpt2_init_is():
    """The Δ alone leaves a reader without scale: the Answer names `none`'s mean final validation loss (from the runs),
    and the reading note says GPT-2 init's embedding std and that its output head is the token embedding."""
    from embnorm_lib.core.config import RunConfig

    main = runs_of("main")
    head = main[(main["cfg.preset"] == "seeds-final") & (main["variant"] == "none")]
    assert f"no norm {head['val_loss'].mean():.3f}, a count bigram " in first_screen()
    tied = {RunConfig.load(REPO / "runs" / "main" / r / "config.json").tie_embeddings for r in head["run_dir"]}
    stds = set(head["cfg.emb_init_std"])
    assert len(tied) == len(stds) == 1
    words = "the output head tied to the token embedding" if tied.pop() else "an output head of its own"
    assert f"*GPT-2 init*: token and position embeddings drawn from N(0, {stds.pop():g}), {words};" in answer_detail()
    other = main[(main["cfg.preset"] == "nanogpt-cpu") & (main["variant"] == "none")]["val_loss"].mean()
    assert f"nats/char over `none`'s {head['val_loss'].mean():.3f} (" in tldr_line("Short training")
    assert f"] over {other:.3f} (" in tldr_line("Short training")  # FINDINGS' long form: both registered regimes' baselines


def test_no_page_writes_a_negative_zero_percent():
    """A share that rounds to 0 is 0%: '-0%' reads as a direction the number does not have."""
    pages = [REPO / "README.md", REPO / "FINDINGS.md", *sorted((REPO / "runs").glob("*/*.md"))]
    assert not [p.name for p in pages if re.search(r"(?<![\d.])-0(\.0+)?%", p.read_text())]


def test_the_reading_note_says_what_an_arms_own_best_lr_is_from_the_search_h1b_follows():
    """The H1b line's 'its own best LR' was undefined on the first screen (a first-screen reader): the note names the
    search and its seeds per rate, read from the search's runs, and the best LR is the one lowest in seed-mean
    capped loss there (stability.lr_sensitivity), as the tuned runs of H1b use."""
    from embnorm_lib.analyses import stability

    search = runs_of("stability-lr-v2")
    seeds = search.groupby(["variant", "cfg.lr"])["seed"].nunique()
    assert seeds.nunique() == 1
    assert (f"an arm's *own best LR*: its lowest mean final loss in H1b's LR search (`stability-lr-v2`, "
            f"{seeds.iloc[0]} seeds per rate; a failed run counts at its initial loss)") in answer_detail()
    best = stability.lr_sensitivity(search).set_index("variant")["best_lr"]
    tuned = runs_of("stability-h1b-v2")
    tuned = tuned[tuned["run_dir"].str.contains("tuned") | ~tuned["cfg.lr"].isin([1.0, 0.3])]
    for variant, lrs in tuned.groupby("variant")["cfg.lr"]:
        assert set(lrs) == {best[variant]}, variant


def test_the_advices_trend_is_fitted_without_the_untrained_smallest_size():
    """Issue 113: the 4-size trend runs through the smallest open-English size, whose `none` is not trained; the
    advice quotes the fit without it, and its words follow that fit's interval (not the 4-size one)."""
    record = json.loads((REPO / "runs" / "answer.json").read_text())
    a, dl = record["w"]["advice"], record["w"]["dl"]
    untrained = [r["rung"] for r in dl["rungs"] if not r["trained"]]
    advice = next(line for line in first_screen().splitlines() if line.startswith("**Advice: "))
    if untrained != [0]:
        assert a["trend"] is None and "no trend" not in advice
        return
    fit = next(t for t in dl["trend_without_smallest"] if t["variant"] == "ln")
    assert a["trend"]["rungs"] == len(a["rungs"]) == fit["rungs"]
    assert a["trend"]["slope_ci_low"] == fit["slope_ci_low"] and a["trend"]["slope_ci_high"] == fit["slope_ci_high"]
    resolved = fit["slope_ci_high"] < 0 or fit["slope_ci_low"] > 0
    assert ("no size trend is resolved" in advice) == (not resolved)


@pytest.mark.committed
def test_h1bs_spike_endpoint_is_reported_as_the_runs_give_it():
    """Issue 113: H1b's registered spike endpoint (post-warm-up spikes per run at LR 1, clipping on) was never on a
    page; each arm's count and its paired difference from none are now, recomputed here from the runs."""
    h1b = runs_of("stability-h1b-v2")
    at = h1b[(h1b["cfg.lr"] == 1.0) & (h1b["cfg.grad_clip"] == 1.0)]
    spikes = committed("failure")["h1b"]["regimes"]["clip"]["variants"]
    none = at[at["variant"] == "none"]["spike_count_post_warmup"].mean()
    for variant, x in spikes.items():
        assert x["spikes"]["variant_value"] == pytest.approx(
            at[at["variant"] == variant]["spike_count_post_warmup"].mean())
        assert x["spikes"]["none_value"] == pytest.approx(none)
        assert_interval(x["spikes"], at, column="spike_count_post_warmup", variant=variant)
    assert f"`ln` {spikes['ln']['spikes']['variant_value']:.1f}, Δ {spikes['ln']['spikes']['mean_diff']:+.1f}" in \
        answer_detail()


@pytest.mark.committed
def test_each_open_english_size_states_how_sharply_its_lrs_were_chosen():
    """Issue 113: beside each size's result, how far each tuned arm's LR led the next best in tuning (the report's
    own margins, LADDER-DATA.md), so a difference of that size reads in context."""
    record = json.loads((REPO / "runs" / "answer.json").read_text())
    margins = record["d"]["size"]["data_ladder"]["lr_margins"]
    report = (REPO / "runs" / "ladder-data" / "LADDER-DATA.md").read_text()
    for rung, arms in margins.items():
        shift = arms.pop("shift")
        words = ", ".join(f"`{arm}` {m['margin']:+.4f} (SE {m['se']:.4f})" for arm, m in arms.items())
        assert f"- rung {rung}: {words}." in report
        assert f"by `none` {arms['none']['margin']:+.4f} ± {arms['none']['se']:.4f}" in answer_detail()
        # and the difference with either arm one step off, the same numbers as the report's table
        assert f"| {rung} | {shift['at_best']:+.4f} (" in report
        assert (f"runs {shift['low']:+.4f} to {shift['high']:+.4f} against {shift['at_best']:+.4f} at both "
                f"registered LRs, the sign changing in {shift['sign_changes']} of {shift['moves']} moves"
                ) in " ".join(answer_detail().split())
    assert margins  # every quoted size of the finished ladder has its margins


def test_the_prose_ladder_leads_the_first_screen_once_a_size_is_complete_and_trained():
    """Issue 113 item 4: the prose ladder's record slots into the first screen without rewriting it; a recipe and
    size leads once it is complete and trained, with its registered words; before that the page is as it was."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from test_prose_confirm import planted

    from embnorm_lib.analyses.answer import first_screen
    from embnorm_lib.analyses.prose_confirm import confirmatory_record

    rec = json.loads((REPO / "runs" / "answer.json").read_text())
    before = first_screen({**rec, "d": {**rec["d"], "prose_ladder": None}}, "figures/answer.png")
    prose = json.loads(json.dumps(confirmatory_record(planted({"ln": 0.05}, {}), 2.0, 0.10)))
    led = first_screen({**rec, "d": {**rec["d"], "prose_ladder": prose}}, "figures/answer.png")
    lead = led.split("## TL;DR", 1)[1].strip().split("\n")[0]
    assert lead.startswith("**On natural prose with subword tokens**") and "LayerNorm **costs** in bits per byte" in lead
    assert "with the GPT-2 / nanoGPT recipe (" in lead and "(10 seeds)" in lead.replace("\n", " ")
    assert led.replace(lead + "\n\n", "") == before  # nothing else moves
    partial = {**prose, "cells": [{**c, "complete": False} for c in prose["cells"]]}
    assert first_screen({**rec, "d": {**rec["d"], "prose_ladder": partial}}, "figures/answer.png") == before
