"""The paper types no number of its own; its data file is what the committed studies give today."""
import json
import re
import subprocess

import pytest
from conftest import REPO

from embnorm_lib.analyses import paper
from embnorm_lib.core.records.io import published


def test_the_paper_source_types_no_number():
    source = (REPO / "paper" / "paper.typ").read_text()
    prose = "\n".join(line.split("//")[0] for line in source.splitlines())  # comments may explain
    layout = re.sub(r"\d+(\.\d+)?\s?(cm|em|pt|mm|fr)\b|width: \d+%", "", prose)  # sizes, not results
    typed = re.findall(r"(?<![\w.#])\d+\.\d+|\d+\s?%", layout)
    assert not typed, f"numbers typed into paper.typ instead of read from data.json: {typed}"


@pytest.fixture(scope="module")
def fresh_data():
    """paper_data of the committed runs, computed once for this module's tests."""
    return paper.paper_data(REPO / "runs")


def planted_paper(tmp_path, data: dict) -> tuple[str, str]:
    """The paper rendered to HTML from a copy of paper/ with `data` as its data.json: (its text with the tags
    stripped and whitespace folded, the HTML)."""
    import shutil

    typst = pytest.importorskip("typst")
    shutil.copytree(REPO / "paper", tmp_path / "paper", dirs_exist_ok=True)
    (tmp_path / "paper" / "data.json").write_text(json.dumps(data))
    html = typst.compile(str(tmp_path / "paper" / "paper.typ"), root=str(tmp_path / "paper"), format="html").decode()
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)), html


@pytest.mark.committed
def test_the_papers_data_is_what_the_committed_studies_give(fresh_data):
    """Fails when runs or analyses change without `python -m embnorm_lib paper` (the paper would be stale)."""
    committed = json.loads((REPO / "paper" / "data.json").read_text())
    fresh = json.loads(json.dumps(fresh_data))
    assert committed == fresh
    ln = next(r for r in fresh["regimes"]["seeds_final"]["family"] if r["variant"] == "ln" and r["metric"] == "val_loss")
    import pandas as pd

    family = pd.read_csv(REPO / "runs" / "main" / "analysis" / "seeds-final" / "family.csv")
    row = family[(family["variant"] == "ln") & (family["metric"] == "val_loss")].iloc[0]
    assert ln["mean_diff"] == pytest.approx(row["mean_diff"]) and ln["significant"] == bool(row["significant"])
    # suite v2's macro rows are each regime's zero-shot runs' paired differences, recomputed
    runs = pd.read_csv(REPO / "runs" / "main" / "runs.csv").dropna(subset=["lm2_macro_acc"])
    for key, z in fresh.get("zeroshot_v2", {}).items():
        regime = runs[runs["cfg.preset"] == key.replace("_", "-")]
        means = regime.pivot(index="seed", columns="variant", values="lm2_macro_acc")
        assert z["seeds"] == sorted(means.index)
        for r in (r for r in z["family"] if r["task"] == "macro"):
            assert r["mean_diff"] == pytest.approx((means[r["variant"]] - means["none"]).mean())


@pytest.mark.committed
def test_the_paper_builds(tmp_path, fresh_data):
    import shutil

    pytest.importorskip("typst")
    shutil.copytree(REPO / "paper", tmp_path / "paper")
    pdf = paper.build(REPO / "runs", tmp_path / "paper", data=fresh_data)
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.read_bytes() == (REPO / "paper" / "paper.pdf").read_bytes()
    tex = (tmp_path / "paper" / "latex" / "paper.tex").read_text()
    assert tex == (REPO / "paper" / "latex" / "paper.tex").read_text()  # the committed LaTeX export is current
    assert "\\begin{document}" in tex and "\\title{When does a normalization layer after the embedding cost" in tex
    figures = sorted(p.stem for p in (tmp_path / "paper" / "figures").glob("*.svg"))
    assert figures and all(f"{{figures/{name}.pdf}}" in tex for name in figures)  # every figure, as vector PDF
    assert all((tmp_path / "paper" / "latex" / "figures" / f"{name}.pdf").is_file() for name in figures)


@pytest.mark.committed
@pytest.mark.slow  # test_the_paper_builds compares the whole PDF, figures included, byte for byte
def test_rebuilding_the_figures_leaves_them_byte_identical(tmp_path):
    paper.write_inputs(REPO / "runs", tmp_path)
    first = {p.name: p.read_bytes() for p in (tmp_path / "figures").iterdir()}
    paper.write_inputs(REPO / "runs", tmp_path)
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "figures").iterdir()}


@pytest.mark.committed
def test_the_subword_lr_check_table_gives_each_arms_best_beside_its_character_factor(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))
    assert "subword_check" not in data["ladder"] or data["ladder"]["subword_check"]  # absent or complete arms only
    data["ladder"]["subword_check"] = [  # a planted check result: the table must quote it, not compute its own
        {"tokenizer": "bpe-4096", "rung": 1, "variant": "none", "best_factor": 2, "best_lr": 0.01, "bracketed": True,
         "val_loss_mean": 5, "ladder_factor": 0.5, "ladder_factor_val_loss": 5.1234, "gap_to_best": 0.1234,
         "amendment": 8},
        {"tokenizer": "bpe-4096", "rung": 1, "variant": "ln", "best_factor": 1, "best_lr": 0.003, "bracketed": True,
         "val_loss_mean": 5, "ladder_factor": 1, "ladder_factor_val_loss": 5, "gap_to_best": 0, "amendment": 8}]
    data["ladder"]["subword_at_best"] = [{"tokenizer": "bpe-4096", "rung": 1, "variant": "ln", "factor": 1, "seeds": 2,
                                          "val_loss_per_char": 1.5, "diff_vs_none": -0.0567}]
    text, _ = planted_paper(tmp_path, data)
    assert "(amendment 8 at rung 1," in text
    # one row per arm, each planted result quoted as it is: best multiple, the characters' multiple with the loss
    # gap only where the two differ, and the normed arm's difference at both arms' best rates
    assert "bpe-4096 1 none 2 × 0.5 × (+0.1234 nats/token) bpe-4096 1 ln 1 × 1 × −0.057 Table" in text
    assert text.count("nats/token)") == 1
    # the rung-2 check (amendment 13) joins the same table, its row naming its rung
    data["ladder"]["subword_check"].append(
        {"tokenizer": "bpe-4096", "rung": 2, "variant": "ln", "best_factor": 0.5, "best_lr": 0.001, "bracketed": True,
         "val_loss_mean": 5, "ladder_factor": 1, "ladder_factor_val_loss": 5.0421, "gap_to_best": 0.0421,
         "amendment": 13})
    text, _ = planted_paper(tmp_path, data)
    assert "(amendment 8 at rung 1 and amendment 13 at rung 2," in text
    assert "bpe-4096 2 ln 0.5 × 1 × (+0.0421 nats/token) – Table" in text


@pytest.mark.committed
def test_the_ladders_trend_sentence_quotes_the_scale_answer_and_names_the_unfinished_rungs(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))

    def render(ladder_part):
        data["ladder"].update(ladder_part)
        return planted_paper(tmp_path, data)[0]

    text = render({"scale": [], "unfinished_rungs": [2, 3, 4]})
    assert "Rungs 2, 3 and 4 of" in text and "have not finished" in text  # data["ladder"]["unfinished_rungs"]
    assert "claimed yet" in text and "Across its" not in text  # no scale answer: no trend
    planted = {"tokenizer": "char", "variant": "ln", "sizes": 3, "params_min": 98304, "params_max": 2654208,
               "answer": "shrinks", "slope_per_decade": -0.0123, "slope_ci_low": -0.0456, "slope_ci_high": -0.0011,
               "at_params": 1.3e9, "extrapolated_diff": -0.0789, "extrapolated_ci_low": -0.3, "extrapolated_ci_high": 0.2}
    text = render({"scale": [planted], "unfinished_rungs": [3, 4]})
    assert "Rungs 3 and 4 of" in text and "have not finished" in text
    one = render({"scale": [planted], "unfinished_rungs": [4]})
    assert "Rung 4 of" in one and "has not finished" in one
    assert "claimed yet" not in text
    # the planted scale answer, quoted: its sizes, its range, its direction ("shrinks") and its slope
    assert "With char tokens (3 finished sizes, 0.10M to 2.65M non-embedding parameters" in text
    assert "ln ’s difference from none moves towards zero" in text
    assert "slope in nats/char per decade: −0.012 [−0.046, −0.001] for ln ; the next paragraph" in text
    # two arms of one tokenizer share one sentence; an arm whose answer differs gets its own clause in it
    rms = {**planted, "variant": "rms", "answer": "no change", "slope_per_decade": 0.001}
    text = render({"scale": [planted, rms], "unfinished_rungs": []})
    assert text.count("With char tokens") == 1 and "slopes in nats/char per decade: −0.012" in text
    assert "moves towards zero as the model grows; rms ’s difference from none shows no change" in text
    text = render({"scale": [planted, {**rms, "answer": "shrinks"}], "unfinished_rungs": []})
    assert "each arm’s difference from none moves towards zero" in text
    assert "−0.079" not in text and "Carried to" not in text  # no extrapolation from data-bound rungs (issue 72)
    text = render({"scale": [planted], "unfinished_rungs": []})
    assert "have not finished" not in text and "has not finished" not in text


@pytest.mark.committed
def test_the_subword_replications_sentence_quotes_each_arm_by_its_holm_decision(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))
    assert "replication" not in data["ladder"] or all(r["seeds"] == 10 for r in data["ladder"]["replication"])
    row = {"tokenizer": "bpe-4096", "params": 786432, "preset": "ladder-1", "seeds": 10}
    data["ladder"]["replication"] = [
        {**row, "variant": "ln", "mean_diff": -0.0612, "ci_low": -0.0934, "ci_high": -0.0291, "p_holm": 0.0043,
         "significant": True},
        {**row, "variant": "rms", "mean_diff": -0.0201, "ci_low": -0.0654, "ci_high": 0.0252, "p_holm": 0.41,
         "significant": False}]
    text, html = planted_paper(tmp_path, data)
    assert "10 fresh seeds (amendment 9" in text
    ln, rms = text.index("−0.061 [−0.093, −0.029] nats/char (Holm p = 0.004)"), text.index(
        "−0.020 [−0.065, +0.025] nats/char (Holm p = 0.410)")
    assert "not resolvably" not in text[ln - 80:ln] and "not resolvably" in text[ln:rms]  # by each Holm decision
    # the recommendations carry it too, worded by the same decisions
    advice = text[text.index("The advice above is about character tokens"):]
    assert advice.index("lowered validation loss by 0.061") < advice.index("RMSNorm did not resolvably change")


@pytest.mark.committed
def test_the_rung_2_replication_quotes_its_loss_and_peak_families_by_their_holm_decisions(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))
    row = {"tokenizer": "bpe-4096", "params": 2654208, "preset": "ladder-2", "seeds": 10}
    data["ladder"]["replication2"] = [
        {**row, "variant": "ln", "mean_diff": 0.0312, "ci_low": 0.0101, "ci_high": 0.0523, "p_holm": 0.021,
         "significant": True},
        {**row, "variant": "rms", "mean_diff": -0.0051, "ci_low": -0.0302, "ci_high": 0.0200, "p_holm": 0.66,
         "significant": False}]
    data["ladder"]["replication2_peaks"] = [
        {"variant": "ln", "seeds": 10, "ratio": 12.34, "ratio_ci_low": 3.21, "ratio_ci_high": 47.4, "p_holm": 0.0042,
         "significant": True},
        {"variant": "rms", "seeds": 10, "ratio": 1.5, "ratio_ci_low": 0.62, "ratio_ci_high": 3.6, "p_holm": 0.35,
         "significant": False}]
    text, _ = planted_paper(tmp_path, data)
    assert "10 fresh seeds (amendment 11" in text
    ln = text.index("+0.031 [+0.010, +0.052] nats/char (Holm p = 0.021)")
    assert "not resolvably" not in text[ln - 80:ln] and "not resolvably" in text[ln:ln + 120]
    peaks = text.index("12.3 times the baseline's [3.21, 47.4] (Holm p = 0.004)")  # ln's planted peak ratio
    assert "raised the peak" in text[peaks - 80:peaks]
    assert "did not resolvably change the peak" in text[peaks:] and "(1.5 times [0.62, 3.6]) (Holm p = 0.350)" in text
    # the recommendations carry it, worded by the same decisions
    assert "raised validation loss by 0.031" in text and "not a stability fix" in text
    del data["ladder"]["replication2_peaks"][0]  # no resolved peak: no stability advice
    assert "not a stability fix" not in planted_paper(tmp_path, data)[0]


@pytest.mark.committed
def test_the_ladder_table_has_one_row_per_size_and_names_what_holm_resolves(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))
    size = {"tokenizer": "char", "params": 2654208, "preset": "ladder-2", "seeds": 5}
    data["ladder"]["family"] = [
        {**size, "variant": "ln", "mean_diff": 0.0234, "ci_low": 0.0111, "ci_high": 0.0357, "p_holm": 0.021,
         "significant": True},
        {**size, "variant": "rms", "mean_diff": 0.0051, "ci_low": -0.0052, "ci_high": 0.0154, "p_holm": 0.33,
         "significant": False}]
    text, html = planted_paper(tmp_path, data)
    resolved = text[text.index("Significant after Holm:"):][:200]  # ln only: rms's Holm p is 0.33
    assert "+0.023 [+0.011, +0.036] nats/char (Holm p = 0.021)" in resolved and "rms" not in resolved.split(".")[0]
    row = re.search(r"<tr>\s*<td>char</td>\s*<td>2\.65M</td>.*?</tr>", html, re.S)
    assert row and "<strong>+0.023" in row.group(0) and "+0.005" in row.group(0) and "<strong>+0.005" not in row.group(0)


@pytest.mark.committed
def test_the_subword_scale_sentence_quotes_each_arm_beside_layernorm(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))
    row = {"tokenizer": "bpe-4096", "params": 786432, "seeds": 5}
    data["ladder"].pop("subword_scale_gap", None)
    data["ladder"]["subword_scale"] = [
        {**row, "variant": v, "mean_diff": m, "ci_low": m - 0.0101, "ci_high": m + 0.0102, "p_holm": p,
         "significant": p < 0.05}
        for v, m, p in (("ln", -0.0701, 0.0012), ("ln_matched", -0.0071, 0.31), ("scaled_unit", -0.0633, 0.0023))]
    text, html = planted_paper(tmp_path, data)
    # it names its size, and comes before the rung-2 replication (which its "at the same size" must not point to)
    assert "(0.79M parameters; amendment 10, 5 seeds)" in text
    shares = text[text.index("(0.79M parameters; amendment 10, 5 seeds)"):][:600]
    # each planted arm's difference in order, ln_matched, scaled_unit, then LayerNorm's, and their Holm p's
    assert shares.index("−0.007 [−0.017, +0.003]") < shares.index("−0.063 [−0.073, −0.053]") \
        < shares.index("−0.070 [−0.080, −0.060]")
    assert "ln p = 0.001, ln_matched p = 0.310, scaled_unit p = 0.002" in text
    # the appendix names the embedding's scale as the first thing to try only where scaled_unit resolves and
    # ln_matched does not, after the follow-up's numbers and before the rung-2 replication
    advice = "a unit-scale token embedding is the first thing to try with subword tokens."
    assert advice in text  # no gap data: no caution
    assert shares.index("−0.070 [−0.080, −0.060]") < text[text.index("(0.79M parameters; amendment 10"):].index(advice)
    if data["ladder"].get("replication2"):
        assert text.index("Which part of the norm carries that gain") < text.index("a second replication on")
        assert text.index(advice) < text.index("a second replication on")
    data["ladder"]["subword_scale_gap"] = {"none": 0.4077, "ln": 0.48, "ln_matched": 0.40, "scaled_unit": 0.8749}
    text, _ = planted_paper(tmp_path / "gap", data)
    caution = text[text.index("first thing to try with subword tokens"):][:300]  # subword_scale_gap: scaled_unit's, none's
    assert caution.index("0.87 nats per token") < caution.index("0.41 without it")
    data["ladder"]["subword_scale"][2]["significant"] = False
    text, _ = planted_paper(tmp_path / "unresolved", data)
    assert "( scaled_unit ) by −0.063" in text
    assert "first thing to try" not in text


@pytest.mark.committed
def test_the_limitations_name_only_what_is_still_open(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))
    data["ladder"].update(unfinished_rungs=[3, 4])
    text = planted_paper(tmp_path, data)[0]
    assert "not all trained yet" in text  # unfinished_rungs [3, 4]
    assert "search is in progress" not in text  # H1b has finished: it is not called open
    data["ladder"].update(unfinished_rungs=[], subword_runs=data["ladder"]["subword_planned"])
    text = planted_paper(tmp_path, data)[0]
    assert "not all trained yet" not in text


@pytest.mark.committed
def test_the_gpu_check_is_quoted_from_bench_gpu_and_says_when_a_sign_changed(tmp_path, fresh_data):
    bench = json.loads((REPO / "runs" / "bench-gpu.json").read_text())["parts"]["study:main"]
    compared = bench["against_committed_cpu"]
    gpu = fresh_data["gpu_check"]
    # data.json's numbers are rounded to io.PUBLISHED_DIGITS (the same file on every CPU)
    assert gpu["study_wall_s"] == published(bench["study_wall_s"]) and gpu["runs_compared"] == compared["runs_compared"]
    assert gpu["paired"]["seeds_final"]["ln"]["gpu"] == \
        published(compared["paired_diff_to_none_by_arm"]["ln_preset=seeds-final"]["here_mean"])
    data = json.loads(json.dumps(fresh_data))
    data["gpu_check"].update(same_sign_every_seed=False, failures=2, max_abs_val_loss_diff=0.01234)
    text, _ = planted_paper(tmp_path, data)
    assert "end to end (2 failed), and the" in text and "within 0.0123 nats/char of the committed CPU runs" in text
    assert "changed sign between the devices" in text  # same_sign_every_seed False
    del data["gpu_check"]
    assert "re-trained once on a GPU" not in planted_paper(tmp_path, data)[0]


@pytest.mark.committed
def test_the_paper_leads_with_the_trained_ladder_and_keeps_its_scope(tmp_path, fresh_data):
    """Issue 113: the abstract (at most 200 words) and the first figure lead with the trained, tuned ladder, each of
    its sizes in the registered words (equivalence first), then the short budgets at GPT-2 init; no stale "in
    progress" wording; the 1.3B scale appears in related work and in Limitations only; each claim's registration
    status is in the appendix's table."""
    text, html = planted_paper(tmp_path, fresh_data)
    abstract = text[text.index("Abstract."):text.index("1. Introduction")]
    assert len(abstract.split()) <= 200
    assert abstract.index("Trained and tuned") < abstract.index("At GPT-2 initialisation and short budgets")
    top = fresh_data["ladder"]["data_ladder"]["rungs"][-1]
    word = "equivalent within" if top["equivalent"] else ("a cost" if top["significant"] else "")
    assert word and word in abstract
    # the top size's words carry what qualifies them: significance beside equivalence, a sign one LR step can flip
    top_ln = [r for r in fresh_data["ladder"]["data_ladder"]["rungs"] if r["variant"] == "ln"][-1]
    margins = fresh_data["ladder"]["data_ladder"]["lr_margins"][str(top_ln["rung"])]["shift"]
    assert ("; significant after Holm" in abstract) == (top_ln["equivalent"] and top_ln["significant"])
    assert ("one learning-rate step can flip its sign" in abstract) == (margins["sign_changes"] > 0)
    steady = json.loads(json.dumps(fresh_data))
    steady["ladder"]["data_ladder"]["lr_margins"][str(top_ln["rung"])]["shift"]["sign_changes"] = 0
    steady_text, _ = planted_paper(tmp_path, steady)
    assert "learning-rate step can flip" not in steady_text
    figures = re.findall(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', html)
    import base64
    assert base64.b64decode(figures[0]) == (REPO / "paper" / "figures" / "data_ladder.svg").read_bytes()
    for stale in ("(in progress)", "so far", "preliminary", "Toward the size ladder"):
        assert stale not in text, stale
    for overclaim in ("acts through", "fail too", "keeps falling", "can only cost", "largest for the shortest"):
        assert overclaim not in text, overclaim
    assert text.count(fresh_data["external"]["lescao_scale"]) == 2  # related work (their models) and Limitations
    limitations = text[text.index("6. Limitations"):text.index("Bibliography")]
    assert len(limitations.split()) >= 300 and "from data-bound sizes" in limitations
    statuses = {claim["status"] for claim in fresh_data["registration"]}
    for status, words in (("before", "before its data existed"), ("after", "after the data were seen"),
                          ("exploratory", "exploratory")):
        assert (words in text) or status not in statuses
    assert "Suite v2 is the registered endpoint" in text and "swapped" in text
    # H1b's registered spike endpoint is reported, and every reference of refs.bib is cited
    assert "spikes per run after warm-up" in text
    bib = set(re.findall(r"^@\w+\{([\w-]+),", (REPO / "paper" / "refs.bib").read_text(), flags=re.M))
    source = (REPO / "paper" / "paper.typ").read_text()
    assert bib and all(f"@{key}" in source for key in bib), sorted(k for k in bib if f"@{k}" not in source)


@pytest.mark.committed
def test_the_main_text_fits_eight_pages_before_references_and_appendix():
    typst = pytest.importorskip("typst")
    paper_dir = REPO / "paper"
    page = json.loads(typst.query(str(paper_dir / "paper.typ"), "<main-end>", field="value", root=str(paper_dir)))
    assert page == [page[0]] and 1 <= page[0] <= 8, page


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def test_the_scale_grid_is_a_table_with_one_row_per_init_regime_and_bold_where_holm_resolves(tmp_path, fresh_data):
    data = json.loads(json.dumps(fresh_data))
    base = {"emb_init_std": 0.02, "head": "untied", "seeds": 3, "init_block1_input_norm": 0.3}
    data["scale_vs_norm"]["rows"] = [
        {**base, "variant": "none", "delta_vs_none": None, "ci_low": None, "ci_high": None, "significant": None},
        {**base, "variant": "ln", "delta_vs_none": 0.0876, "ci_low": 0.0771, "ci_high": 0.0981, "significant": True},
        {**base, "variant": "ln_matched", "delta_vs_none": 0.0034, "ci_low": -0.0012, "ci_high": 0.0081,
         "significant": False}]
    text, html = planted_paper(tmp_path, data)
    row = re.search(r"<tr>\s*<td>0\.02</td>\s*<td>untied</td>.*?</tr>", html, re.S)
    assert row and "<strong>+0.088" in row.group(0) and "+0.003" in row.group(0)
    assert "<strong>+0.003" not in row.group(0)  # not resolved: plain
    assert "Embedding init std" not in text  # the run-on list is gone


def test_each_half_of_layernorm_is_a_table_row_per_resolved_init_regime(tmp_path, fresh_data):
    """The mechanism's halves against LayerNorm were a run-on list of three regimes (the review): now one table row
    each, with block 1's input norm at init and both halves' paired differences."""
    data = json.loads(json.dumps(fresh_data))
    share = {**data["scale_vs_norm"]["shares"][0], "emb_init_std": 0.02, "head": "tied", "none_input_norm": 0.321,
             "ln_input_norm": 11.24, "ln_matched_vs_ln": -0.2021, "ln_matched_vs_ln_low": -0.2391,
             "ln_matched_vs_ln_high": -0.1641, "scaled_unit_vs_ln": -0.0661, "scaled_unit_vs_ln_low": -0.0881,
             "scaled_unit_vs_ln_high": -0.0441, "scale_share": 0.3}
    data["scale_vs_norm"]["shares"] = [share, {k: v for k, v in share.items() if k != "scale_share"}
                                       | {"head": "untied"}]
    text, html = planted_paper(tmp_path, data)
    rows = re.findall(r"<tr>\s*<td>0\.02</td>\s*<td>(?:un)?tied</td>\s*<td>0\.32 → 11\.24</td>.*?</tr>", html, re.S)
    assert len(rows) == 2 and "−0.202 [−0.239, −0.164]" in rows[0] and "−0.066 [−0.088, −0.044]" in rows[0]
    assert "—" in rows[1]  # a regime without the rescaled half says so
    assert "compares each half with LayerNorm itself" in text


def test_the_ladders_peak_reading_groups_the_resolved_comparisons_by_direction(tmp_path, fresh_data):
    """The exploratory gradient-norm peaks: counted (resolved of all), then lower and higher listed apart, so a
    reader sees the split before the intervals."""
    data = json.loads(json.dumps(fresh_data))
    peak = {"tokenizer": "char", "preset": "ladder-0", "params": 98304, "seeds": 5, "p_holm": 0.01, "ratio_ci_low": 0.2,
            "ratio_ci_high": 0.6}
    data["ladder"]["peaks"] = [{**peak, "variant": "ln", "ratio": 0.4, "significant": True},
                               {**peak, "variant": "rms", "ratio": 0.5, "significant": True},
                               {**peak, "variant": "ln", "params": 786432, "ratio": 2.5, "ratio_ci_low": 1.5,
                                "ratio_ci_high": 4.0, "significant": True},
                               {**peak, "variant": "rms", "params": 786432, "ratio": 1.1, "ratio_ci_low": 0.8,
                                "ratio_ci_high": 1.4, "significant": False}]
    text, _ = planted_paper(tmp_path, data)
    said = text[text.index("was resolved in"):][:400]  # code spans come out of the HTML with a space around them
    assert said.startswith("was resolved in 3 of 4 comparisons: the norm’s peak was lower in 2 ( ln at 0.1M (char)")
    assert "and higher in 1 ( ln at 0.79M (char), 2.5" in said


@pytest.mark.committed
def test_each_claims_registration_status_agrees_with_the_git_history(fresh_data):
    """"before": the registering commit of docs/PROTOCOL.md is an ancestor of every commit the claim's runs recorded
    (for a zero-shot suite, of the commit that first wrote its scores); "after": some run predates it."""
    import shutil

    if shutil.which("git") is None or _git("cat-file", "-e", "7948277d^{commit}").returncode != 0:
        pytest.skip("needs the repository's git history")
    score_column = {"zeroshot_v1": "lm_macro_acc", "zeroshot_v2": "lm2_macro_acc"}
    for claim in fresh_data["registration"]:
        if claim["status"] == "exploratory":
            assert claim["registered_by"] is None
            continue
        registered = claim["registered_by"]
        if claim["claim"] in score_column:  # the data are the scores, written after the runs had trained
            first = _git("log", "--reverse", "--format=%H", "-S", score_column[claim["claim"]], "--",
                         "runs/main/runs.csv").stdout.split()[0]
            data_commits = [first]
        else:
            data_commits = claim["run_commits"]
        descends = [_git("merge-base", "--is-ancestor", registered, c).returncode == 0 for c in data_commits]
        if claim["status"] == "before":
            assert all(descends), claim["claim"]
        else:
            assert not all(descends), claim["claim"]


@pytest.mark.committed
def test_the_adequate_data_ladders_paragraph_quotes_each_size_its_data_bound_label_and_the_trend(tmp_path, fresh_data):
    """Planted finished sizes: every size gets its sentence and table row, a data-bound size says it is left out of
    the trend, and once a trend is fitted its direction and slope are quoted (no extrapolation) instead of the
    waiting sentence."""
    data = json.loads(json.dumps(fresh_data))
    dl = data["ladder"]["data_ladder"]

    def row(rung, variant, diff, significant, data_bound=False):
        return {"rung": rung, "params": [98304, 331776, 786432][rung], "shape": ["2 × 64", "3 × 96", "4 × 128"][rung],
                "iters": [480, 1620, 3840][rung], "passes": 0.1, "seeds": 10, "variant": variant, "lr": 0.006,
                "lr_none": 0.007, "none": 2.0 - rung / 4, "none_sd": 0.0123, "mean_diff": diff, "ci_low": diff - 0.01,
                "ci_high": diff + 0.01, "significant": significant, "p_holm": 0.001 if significant else 0.4,
                "mde_80": 0.0234, "data_bound": data_bound, "endpoints_repeat": True}

    dl["rungs"] = [row(0, "ln", 0.076, False), row(0, "rms", 0.099, False), row(1, "ln", 0.052, True),
                   row(1, "rms", 0.048, True), row(2, "ln", 0.0321, True, True), row(2, "rms", 0.0111, False, True)]
    dl["trend"] = []
    text, _ = planted_paper(tmp_path, data)
    assert "3 of the 4 sizes have finished" in text and "is drawn only once 3 sizes" in text
    # one row per finished size in the Holm table: size, shape, none's seed SD, each norm's Holm p, data-bound
    holm_rows = ["0.10M 2 × 64 0.012 0.400 0.400 no", "0.33M 3 × 96 0.012 0.001 0.001 no",
                 "0.79M 4 × 128 0.012 0.001 0.400 yes"]
    assert " ".join(holm_rows) + " Table" in text and "+0.032" in text
    assert "Size and budget grow together" not in text  # said with the trend it qualifies
    # each family of 4 holds its 2 distinct tests twice where best = final loss in every run: said once
    assert text.count("2 distinct tests, each counted twice") == 1 and "would use the levels 0.025 and 0.05" in text
    # each size's differences are stated in Table 1 (and the abstract), not again in the appendix
    assert "+0.076 [+0.066, +0.086]" in text
    assert "+0.076 [+0.066, +0.086]" not in text[text.index("gives their Holm-adjusted p-values"):]
    # a size whose none seeds spread far more than the others' says how far (the review asked about 0.10M's SD)
    assert "seeds end anywhere" not in text
    spread = {"none_sd": 0.135, "none_min": 2.2941, "none_max": 2.6338}
    dl["rungs"] = [{**r, **spread} if r["rung"] == 0 else {**r, "none_min": 1.9, "none_max": 1.95} for r in dl["rungs"]]
    text, _ = planted_paper(tmp_path, data)
    assert "At 0.10M none ’s 10 seeds end anywhere from 2.294 to 2.634 nats/char (a count bigram scores" in text
    assert text.count("seeds end anywhere") == 1
    dl["rungs"] = [{**r, "none_sd": 0.0123} for r in dl["rungs"]]
    dl["trend"] = [{"variant": "ln", "rungs": 3, "slope_per_decade": -0.0456, "slope_ci_low": -0.0789,
                    "slope_ci_high": -0.0123, "direction": "falls"},
                   {"variant": "rms", "rungs": 3, "slope_per_decade": 0.0111, "slope_ci_low": -0.0222,
                    "slope_ci_high": 0.0333, "direction": "not resolved"}]
    dl["rungs"] = [{**r, "data_bound": False} for r in dl["rungs"]]
    text, _ = planted_paper(tmp_path, data)
    assert "is drawn only once" not in text and " yes Table" not in text
    assert "Across the 3 sizes that pass the data-bound check, ln ’s difference falls as the model grows" in text
    assert "slope −0.046 [−0.079, −0.012] nats/char per decade" in text
    assert "rms ’s difference shows no change with size that the data resolve" in text
    assert "Size and budget grow together on this ladder (480 to 3840 iterations over these sizes)" in text
    # the size recommendation counts the sizes still to be quoted, and the claims table carries the ladder's row
    assert "Its largest size is not quoted until all its registered runs are in." in text
    assert "Open-English ladder: a difference at some size (3 of 4 sizes finished)" in text
    dl["sizes"] = 5
    text, _ = planted_paper(tmp_path, data)
    assert "Its 2 largest sizes are not quoted until all their registered runs are in." in text
    assert "That experiment is under way" in text and "3 of the 5 sizes have finished" in text
    dl["sizes"] = 3  # every size in: the ladder is reported as run, not as under way or as a count of the planned
    text, _ = planted_paper(tmp_path, data)
    assert "are not quoted until" not in text and "is not quoted until" not in text
    assert "under way" not in text and "That experiment was run" in text and "All 3 sizes have finished" in text
    assert "(all 3 sizes finished)" in text and " of 3 sizes" not in text and "of 3 planned" not in text


def test_the_budget_figure_fills_a_marker_only_where_holm_resolves_it():
    """As in every other figure of the paper: filled = significant after Holm (the series' points and the registered
    diamonds alike); a reviewer found the budget figure's convention reversed."""
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    from embnorm_lib.analyses.paper_figures import budget_figure

    data = json.loads((REPO / "paper" / "data.json").read_text())
    fig = budget_figure(data)
    points = [c for c in fig.axes[0].collections if c.get_offsets().shape[0] > 1 and len(c.get_facecolors()) > 1]
    white = mcolors.to_rgba("white")
    filled = sorted(bool(tuple(face) != white) for c in points for face in c.get_facecolors())
    assert filled == sorted(bool(r["significant_final"]) for r in data["budget"])
    diamonds = [line for line in fig.axes[0].lines if line.get_marker() == "D"]
    registered = [r for r in data["regimes"]["nanogpt_cpu"]["family"] if r["metric"] == "val_loss"]
    assert sorted(line.get_markerfacecolor() != "white" for line in diamonds) == sorted(r["significant"] for r in registered)
    plt.close(fig)


def test_the_h1b_section_says_how_far_its_failure_test_reaches_at_its_seeds():
    """With 5 seeds per arm even a perfect arm (0 failures) cannot resolve against `none`'s 3 with Fisher's test: the
    paper says so, from the counts (a reviewer asked for the failure test's power)."""
    from scipy.stats import fisher_exact

    data = json.loads((REPO / "paper" / "data.json").read_text())
    for regime in data["h1b"]["regimes"].values():
        failures = next(r for r in regime["family"] if r["endpoint"] == "failures")
        n, k = failures["n"], failures["none_value"]
        assert regime["fisher_p_if_never_failed"] == pytest.approx(fisher_exact([[0, n], [k, n - k]]).pvalue)
    assert "even an arm that never failed would give Fisher" in (REPO / "paper" / "paper.typ").read_text()


@pytest.mark.committed
def test_the_subword_section_states_each_tokenizers_budget_from_the_runs(tmp_path, fresh_data):
    """The subword ladder's tokens per run, passes and tokens per non-embedding parameter, read back from runs.csv
    and the tokenizers' training splits; a planted budget is quoted as it is."""
    import pandas as pd

    from embnorm_lib.core.config import LADDER_RUNGS, non_embedding_params
    from embnorm_lib.studies.ladder import _train_tokens

    runs = pd.read_csv(REPO / "runs" / "ladder-bpe" / "runs.csv")
    budget = {b["tokenizer"]: b for b in fresh_data["ladder"]["subword_budget"]}
    assert sorted(budget) == sorted(runs["tokenizer"].unique())
    for tokenizer, sub in runs.groupby("tokenizer"):
        b = budget[tokenizer]
        assert b["tokens"] == sub["tokens"].max() == sub["tokens"].min()
        assert b["passes"] == pytest.approx(b["tokens"] / _train_tokens(tokenizer))
        assert b["passes"] <= 10.02  # the cap, a step's tokens over
        for preset in sub["preset"].unique():
            rung = int(preset.split("-")[1])
            assert b["tokens_per_param"][str(rung)] == pytest.approx(
                b["tokens"] / non_embedding_params(*LADDER_RUNGS[rung][:2]))
    data = json.loads(json.dumps(fresh_data))
    data["ladder"]["subword_budget"] = [{"tokenizer": "bpe-4096", "tokens": 1234567, "passes": 9.87,
                                         "tokens_per_param": {"1": 4.56, "2": 1.23}}]
    text, _ = planted_paper(tmp_path, data)
    assert ("the 10-pass cap binding: 1.23M bpe-4096 tokens (9.9 passes over the training split; 4.6 and 1.2 tokens "
            "per non-embedding parameter at rungs 1 and 2), below the 20 tokens per parameter") in text


def test_the_ladder_figure_ticks_every_size_and_shades_the_cap_apart_from_the_data_bound_rungs():
    """A subword panel spans less than a decade, where log ticks labelled one size; and the shade that said '10
    passes (data-bound)' covered rung 1, where the cap binds but the baseline still improves (reviewer items)."""
    import matplotlib.pyplot as plt

    from embnorm_lib.analyses.paper_figures import ladder_figure

    data = json.loads((REPO / "paper" / "data.json").read_text())
    lad = data["ladder"]
    fig = ladder_figure(data)
    bottom = [ax for ax in fig.axes if ax.get_title().endswith("tokens")]
    assert bottom
    for ax in bottom:
        sizes = sorted({r["params"] for r in lad["family"] if f"{r['tokenizer']} tokens" == ax.get_title()})
        assert list(ax.get_xticks()) == sizes
        assert all(label.get_text().endswith("M") for label in ax.get_xticklabels())
    # the review found the char panel's rotated size ticks crowding one another: neighbouring labels must not touch
    renderer = fig.canvas.get_renderer()
    for ax in bottom:
        boxes = [label.get_window_extent(renderer) for label in ax.get_xticklabels()]
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), ax.get_title()
    char = next(ax for ax in bottom if ax.get_title() == "char tokens")
    spans = {p.get_label(): p.get_x() for p in char.patches if p.get_label() and "passes" in p.get_label()}
    assert set(spans) == {"10 passes (capped)", "10 passes, data-bound"}
    params = lad["params"]
    assert params[str(lad["budget"]["first_capped"])] / 1.4 == pytest.approx(spans["10 passes (capped)"])
    assert params[str(lad["plateau_from"])] / 1.4 == pytest.approx(spans["10 passes, data-bound"])
    plt.close(fig)
