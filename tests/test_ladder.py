"""The size ladder: its registered grid and budget rule, and its analysis on synthetic runs whose trend is known."""
import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from embnorm_lib.analyses import ladder, ladder_report, ladder_sections
from embnorm_lib.analyses import plots as analysis_plots
from embnorm_lib.core.config import (
    LADDER_RUNGS,
    PRESETS,
    TRAIN_CHARS_TINY_SHAKESPEARE,
    ladder_iters,
    non_embedding_params,
)
from embnorm_lib.studies import (
    LADDER_LR_AT_128,
    LADDER_LR_CHECKED,
    LADDER_LR_EXTENDED,
    LADDER_LR_GRID,
    LADDER_LR_NARROW_FROM,
    STUDIES,
    ladder_check_factors,
    ladder_lr,
    study_cells,
)


def test_the_ladder_spans_a_tenth_to_over_ten_million_parameters_with_the_stated_budget(corpus):
    sizes = [non_embedding_params(layers, width) for layers, width, _ in LADDER_RUNGS]
    assert len(sizes) >= 5 and sizes == sorted(sizes) and sizes[0] <= 1.5e5 and sizes[-1] >= 1e7
    assert TRAIN_CHARS_TINY_SHAKESPEARE == len(corpus.train)  # the cap's constant is the split's length
    for rung, (layers, width, _) in enumerate(LADDER_RUNGS):
        iters = PRESETS[f"ladder-{rung}"]["max_iters"]
        wanted = min(20 * non_embedding_params(layers, width), 10 * len(corpus.train))  # tokens: rule, then cap
        assert iters == 500 or (iters - 1) * 32 * 128 < wanted <= iters * 32 * 128, rung
    assert ladder_iters(2, 64) == 500  # the floor


def test_each_arm_runs_at_its_checked_factor_of_the_width_rule_and_rungs_come_small_first():
    cells = study_cells("ladder")
    assert len(cells) == 5 * 3 * 5
    assert [c.preset for c in cells] == sorted((c.preset for c in cells), key=lambda p: int(p.split("-")[1]))
    for c in cells:
        cfg = c.config()
        rung = int(c.preset.split("-")[1])
        factor = LADDER_LR_CHECKED.get(rung, {}).get("ln" if c.variant == "rms" else c.variant, 1.0)
        assert cfg.lr == pytest.approx(LADDER_LR_AT_128[c.variant] * 128 / cfg.n_embd * factor, rel=1e-2)
    checks = [(c.variant, c.config()) for c in study_cells("ladder-lr")]
    for rung in range(len(LADDER_RUNGS)):
        for v in ("none", "ln"):
            if not ladder_check_factors(rung, v):
                continue
            found = sorted(ladder.lr_factor(cfg.lr, v, cfg.n_embd, rung) for w, cfg in checks
                           if w == v and cfg.preset == f"ladder-{rung}" and cfg.seed == 0)
            assert found == ladder_check_factors(rung, v)
            if rung < LADDER_LR_NARROW_FROM:
                assert {0.25, 0.5, 1.0, 2.0, 4.0} <= set(found)
    for v, cfg in checks:  # every check LR is its factor times the rule, to the 3 digits LRs are written with
        factor = ladder.lr_factor(cfg.lr, v, cfg.n_embd, int(cfg.preset.split("-")[1]))
        assert cfg.lr == pytest.approx(LADDER_LR_AT_128[v] * 128 / cfg.n_embd * factor, rel=5e-3)


def test_from_rung_3_the_check_centres_on_the_rung_belows_best_factor():
    """Amendment 14: a narrower grid, the rung below's registered best times 1/2, 1 and 2, entered before the rung's
    check runs; a rung whose grid is not entered yet has no check runs (it waits for the rung below's best factors)."""
    assert LADDER_LR_NARROW_FROM == 3 and set(LADDER_LR_GRID) <= set(range(LADDER_LR_NARROW_FROM, len(LADDER_RUNGS)))
    for rung, by_arm in LADDER_LR_GRID.items():
        assert set(by_arm) == {"none", "ln"}
        for variant, grid in by_arm.items():
            below = LADDER_LR_CHECKED[rung - 1][variant]
            assert grid == [below / 2, below, below * 2], (rung, variant)
    assert ladder_check_factors(3, "none") == [0.125, 0.25, 0.5] and ladder_check_factors(3, "ln") == [0.5, 1.0, 2.0]
    # arms x factors x seeds, seeds inner; rung 3 has no amendment-6 extension, rung 4's none one (its best at 0.125,
    # the grid's smallest factor, runs/ladder-lr)
    assert ladder_check_factors(4, "none") == [0.0625, 0.125, 0.25, 0.5]
    for rung, factors in ((3, 6), (4, 7)):
        cells = [c for c in study_cells("ladder-lr") if c.preset == f"ladder-{rung}"]
        assert len(cells) == factors * 2 and [c.seed for c in cells] == [0, 1] * factors, rung
    for rung in set(range(LADDER_LR_NARROW_FROM, len(LADDER_RUNGS))) - set(LADDER_LR_GRID):
        assert ladder_check_factors(rung, "ln") == [] and not [c for c in study_cells("ladder-lr")
                                                               if c.preset == f"ladder-{rung}"]


def test_a_ladder_run_at_a_rung_whose_lr_check_is_not_registered_waits_and_the_sweep_trains_none(
        tmp_path, monkeypatch, capsys):
    """Amendment 5: a rung runs at its checked factor. Before that factor is entered its cells carry the rule's LR
    (factor 1); the sweep lists them as waiting and trains none (a rung-4 run is hours on a CPU, at an LR the
    registered cell then no longer has)."""
    from embnorm_lib import studies
    from embnorm_lib.runner import sweep

    for name in ("ladder", "ladder-bpe", "ladder-bpe-rep", "ladder-bpe-rep2", "ladder-bpe-scale"):
        for cell in study_cells(name):
            rung = int(cell.preset.removeprefix("ladder-"))
            assert bool(studies.waits_for(cell)) == (rung not in LADDER_LR_CHECKED), (name, cell.label())
    assert not [c for c in study_cells("ladder-lr") if studies.waits_for(c)]  # the check itself never waits
    assert studies.waits_for(studies.grid("adhoc", "tiny", ["ln"], [0])[0]) == ""

    monkeypatch.delitem(LADDER_LR_CHECKED, 1)  # as if rung 1's check were not registered yet
    cells = [c for c in study_cells("ladder") if c.preset == "ladder-1"][:4]
    why = studies.waits_for(cells[0])
    assert "rung 1's LR check" in why and "--only preset=ladder-1" in why and "LADDER_LR_CHECKED[1]" in why

    def must_not_train(*args, **kwargs):
        raise AssertionError("a waiting cell was sent to training")

    monkeypatch.setattr(sweep, "execute_cell", must_not_train)
    said = []
    report = sweep.run_sweep(cells, tmp_path, echo=said.append)
    assert report.waiting == 4 and report.results == [] and said == [f"4 run(s) wait, none trained: {why}"]
    assert not (tmp_path / "ladder").exists()  # nothing written: no run directory, no index, no sweep log
    assert sweep.main(["ladder", "--list", "--only", "preset=ladder-1/", "--out-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 15 and all(line.startswith("waits ") and line.endswith(f"(for {why})") for line in listed)


def check_runs(best=None, failed_at=None, rung=1):
    """ladder-lr-like runs at a rung without an extension: loss is a parabola in log2(factor) around each arm's
    planted best."""
    best = best or {"none": 0.5, "ln": 2.0}
    rows = []
    for variant, centre in best.items():
        for factor in ladder_check_factors(rung, variant):
            for seed in (0, 1):
                loss = 2.0 + 0.1 * (np.log2(factor) - np.log2(centre)) ** 2 + 0.001 * seed
                if failed_at == (variant, factor):
                    loss = float("nan")
                width = LADDER_RUNGS[rung][1]
                rows.append({"variant": variant, "seed": seed, "cfg.preset": f"ladder-{rung}", "cfg.n_embd": width,
                             "cfg.lr": LADDER_LR_AT_128[variant] * 128 / width * factor, "val_loss": loss,
                             "diverged": False})
    return pd.DataFrame(rows)


def test_the_lr_check_finds_each_arms_planted_best_factor_and_flags_the_grid_edge():
    best = ladder.best_factors(ladder.lr_check(check_runs())).set_index("variant")
    assert best.loc["none", "best_factor"] == 0.5 and best.loc["ln", "best_factor"] == 2.0
    assert best["bracketed"].all()
    edge = ladder.best_factors(ladder.lr_check(check_runs({"none": 0.25, "ln": 4.0}))).set_index("variant")
    assert not edge["bracketed"].any() and edge.loc["ln", "best_factor"] == 4.0
    failed = ladder.best_factors(ladder.lr_check(check_runs(failed_at=("ln", 2.0)))).set_index("variant")
    assert failed.loc["ln", "best_factor"] != 2.0  # a factor with a failed run never wins
    partial = ladder.lr_check(check_runs())
    assert ladder.best_factors(partial[partial["factor"] != 4.0]).empty  # a rung waits for its whole grid
    extended = ladder.lr_check(check_runs(rung=0))  # rung 0's ln check goes on beyond the grid (amendment 6)
    assert ladder_check_factors(0, "ln")[-1] > 4.0
    assert list(ladder.best_factors(extended)["variant"]) == ["ln", "none"]
    assert list(ladder.best_factors(extended[extended["factor"] <= 4.0])["variant"]) == ["none"]


def test_the_subword_lr_check_covers_both_tokenizers_and_reuses_the_subword_ladders_runs(corpus):
    from embnorm_lib.runner.reuse import _identity_key

    cells = study_cells("ladder-bpe-lr")
    assert len(cells) == 2 * 2 * 5 * 2  # tokenizers x arms x factors x seeds
    tokenizers = [c.config().tokenizer for c in cells]
    assert tokenizers == sorted(tokenizers, key=lambda t: t != "bpe-4096")  # bpe-4096 runs first
    assert {c.preset for c in cells} == {"ladder-1"} and {c.variant for c in cells} == {"none", "ln"}
    ladder_runs = {_identity_key(c.config()) for c in study_cells("ladder-bpe") if c.preset == "ladder-1"}
    shared = [c for c in cells if _identity_key(c.config()) in ladder_runs]
    # the subword ladder's own seeds 0-1 at the factor it ran at, per tokenizer and arm: copied, not trained again
    assert len(shared) == 8 and {c.seed for c in shared} == {0, 1}
    assert all(ladder.lr_factor(c.config().lr, c.variant, 128, 1) == LADDER_LR_CHECKED[1][c.variant] for c in shared)


def test_the_subword_lr_check_finds_each_tokenizers_best_and_says_if_the_ladder_ran_there(tmp_path):
    """The data the report and the findings line quote (their wording: tests/golden/, the same planted runs)."""
    from test_golden import subword_check

    from embnorm_lib.analyses.ladder_findings import subword_lr_findings

    planted = {"bpe-4096": {"none": 2.0, "ln": 1.0}, "bpe-512": {"none": LADDER_LR_CHECKED[1]["none"], "ln": 0.5}}
    runs = subword_check()  # bpe-4096's ln 0.2 nats/token lower at every factor; 4 tokens per character
    check, best, at_best = ladder.check_summary(runs)
    best = best.set_index(["tokenizer", "variant"])
    for tok, arms in planted.items():
        for variant, factor in arms.items():
            assert best.loc[(tok, variant), "best_factor"] == factor
            assert best.loc[(tok, variant), "ladder_factor"] == LADDER_LR_CHECKED[1][variant]  # what the ladder ran
    assert best["bracketed"].all() and (check["seeds"] == 2).all()
    none = best.loc[("bpe-4096", "none")]
    assert none["best_lr"] == pytest.approx(ladder_lr("none", 128, 2.0), rel=5e-3)  # ladder_lr: 3 digits
    # the planted parabola puts the ladder's factor (0.5) two factors of two from the best (2): 0.1 * 2**2 higher
    gap = 0.1 * (np.log2(2.0) - np.log2(LADDER_LR_CHECKED[1]["none"])) ** 2
    assert none["gap_to_best"] == pytest.approx(gap)
    assert best.loc[("bpe-4096", "ln"), "gap_to_best"] == 0 and (best["gap_to_best"] > 0).sum() == 2
    # each arm at its own best factor, paired by seed: ln's 0.2 nats/token lower is 0.05 nats/char
    described = at_best.set_index(["tokenizer", "variant"])
    assert described.loc[("bpe-4096", "ln"), "factor"] == 1.0 and described.loc[("bpe-512", "ln"), "factor"] == 0.5
    assert described.loc[("bpe-4096", "ln"), "diff_vs_none"] == pytest.approx(-0.05)
    assert described.loc[("bpe-512", "ln"), "diff_vs_none"] == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(described.loc[("bpe-4096", "none"), "diff_vs_none"])
    (tmp_path / "ladder-bpe-lr").mkdir()
    runs.to_csv(tmp_path / "ladder-bpe-lr" / "runs.csv", index=False)
    assert ladder_report.write_report("ladder-bpe-lr", tmp_path, tmp_path / "figures").is_file()
    drawn = sorted(f.name for f in (tmp_path / "figures").iterdir())  # a check draws its LR curves, no ladder figure
    assert drawn == ["ladder-bpe-lr_lr_curves.pdf", "ladder-bpe-lr_lr_curves.png"]
    # one findings line per complete (tokenizer, rung); a tokenizer whose grid lacks a seed is left out
    assert [line.split(" (")[0] for line in subword_lr_findings(tmp_path)] == ["- rung 1, bpe-4096 tokens",
                                                                                "- rung 1, bpe-512 tokens"]
    partial = runs[(runs["cfg.tokenizer"] == "bpe-512") | (runs["seed"] == 0)]
    partial.to_csv(tmp_path / "ladder-bpe-lr" / "runs.csv", index=False)
    assert [line.split(" (")[0] for line in subword_lr_findings(tmp_path)] == ["- rung 1, bpe-512 tokens"]

def test_the_rung_2_subword_lr_check_runs_the_character_grid_and_reuses_the_subword_ladders_seeds(corpus):
    from embnorm_lib.runner.reuse import _identity_key

    cells = study_cells("ladder-bpe-lr2")  # amendment 13: rung 2, bpe-4096, the character check's factors there
    assert {c.preset for c in cells} == {"ladder-2"} and {c.config().tokenizer for c in cells} == {"bpe-4096"}
    for variant in ("none", "ln"):
        factors = sorted({ladder.lr_factor(c.config().lr, variant, 192, 2) for c in cells if c.variant == variant})
        assert factors == ladder_check_factors(2, variant) and {c.seed for c in cells} == {0, 1}
    assert len(cells) == 2 * (6 + 5)  # none has amendment 6's extension (1/8) at rung 2
    ladder_runs = {_identity_key(c.config()) for c in study_cells("ladder-bpe") if c.preset == "ladder-2"}
    shared = [c for c in cells if _identity_key(c.config()) in ladder_runs]
    assert len(shared) == 4 and {c.seed for c in shared} == {0, 1}  # ladder-bpe's seeds 0-1 at its factors: copied
    assert all(ladder.lr_factor(c.config().lr, c.variant, 192, 2) == LADDER_LR_CHECKED[2][c.variant] for c in shared)


def test_the_rung_2_subword_lr_check_reports_under_its_own_amendment(tmp_path):
    from embnorm_lib.analyses.findings import findings_text
    from embnorm_lib.analyses.ladder_findings import subword_lr_findings

    assert ladder.SUBWORD_LR_CHECKS["ladder-bpe-lr2"] == 13
    runs = check_runs({"none": 0.5, "ln": 1.0}, rung=2).assign(**{"cfg.tokenizer": "bpe-4096"})
    runs["val_loss_per_char"] = runs["val_loss"] / 3.3
    best = ladder.check_summary(runs)[1].set_index("variant")
    assert best.loc["none", "best_factor"] == 0.5 and best.loc["ln", "best_factor"] == 1.0
    assert best.loc["none", "best_lr"] == pytest.approx(ladder_lr("none", 192, 0.5), rel=5e-3)  # 3 digits
    assert best.loc["none", "ladder_factor"] == LADDER_LR_CHECKED[2]["none"] != 0.5
    (tmp_path / "ladder-bpe-lr2").mkdir()
    runs.to_csv(tmp_path / "ladder-bpe-lr2" / "runs.csv", index=False)
    text = ladder_report.write_report("ladder-bpe-lr2", tmp_path, tmp_path / "figures").read_text()
    assert "Amendment 13" in text and "mendment 8" not in text  # its own amendment, not the rung-1 check's
    lines = subword_lr_findings(tmp_path, "ladder-bpe-lr2")
    assert [line.split(" (")[0] for line in lines] == ["- rung 2, bpe-4096 tokens"]
    readme = findings_text(tmp_path, studies=[])
    assert "runs/ladder-bpe-lr2/LADDER.md" in readme and "runs/ladder-bpe-lr/LADDER.md" not in readme
    # with the rung-2 replication published, the rung-2 check follows it (it checks that replication's LRs)
    rep2 = replication_runs("ladder-2")
    (tmp_path / "ladder-bpe-rep2").mkdir()
    rep2.to_csv(tmp_path / "ladder-bpe-rep2" / "runs.csv", index=False)
    readme = findings_text(tmp_path, studies=[])
    assert 0 < readme.index("runs/ladder-bpe-rep2/LADDER.md") < readme.index("runs/ladder-bpe-lr2/LADDER.md")


@pytest.mark.committed
def test_the_registered_ladder_factors_are_what_the_committed_check_gives():
    """Amendment 5: studies.LADDER_LR_CHECKED must equal ladder-lr's best factors for every rung it names."""
    from pathlib import Path

    from embnorm_lib.runner.results import has_index, load_runs

    runs_dir = Path(__file__).resolve().parents[1] / "runs"
    if not LADDER_LR_CHECKED:
        return
    assert has_index("ladder-lr", runs_dir)
    best = ladder.best_factors(ladder.lr_check(load_runs("ladder-lr", runs_dir)))
    found = {(r.rung, r.variant): r.best_factor for r in best.itertuples()}
    for rung, by_arm in LADDER_LR_CHECKED.items():
        for variant, factor in by_arm.items():
            assert found.get((rung, variant)) == factor, (rung, variant)


@pytest.mark.committed
def test_an_arm_whose_checked_best_sits_at_the_grids_edge_has_its_next_factor_registered():
    """Amendment 6: a best at the smallest or largest factor run so far sends the check one factor of two beyond it
    (studies.LADDER_LR_EXTENDED) before the ladder's rung may use it."""
    from embnorm_lib.runner.results import load_runs

    best = ladder.best_factors(ladder.lr_check(load_runs("ladder-lr", REPO / "runs")))
    for r in best[~best["bracketed"]].itertuples():
        factors = ladder_check_factors(r.rung, r.variant)
        beyond = r.best_factor / 2 if r.best_factor == min(factors) else r.best_factor * 2
        assert beyond in LADDER_LR_EXTENDED.get(r.rung, {}).get(r.variant, []), (r.rung, r.variant, beyond)


def synthetic(slope=-0.03, seeds=5, ln_at_zero=0.2):
    rng = np.random.default_rng(0)
    rows = []
    for rung, (layers, width, _) in enumerate(LADDER_RUNGS):
        params = non_embedding_params(layers, width)
        for seed in range(seeds):
            base = 2.0 - 0.1 * rung + rng.normal(0, 0.01)
            for variant, shift in (("none", 0.0), ("ln", ln_at_zero + slope * np.log10(params)), ("rms", 0.05)):
                loss = base + shift + rng.normal(0, 0.005)
                rows.append({"variant": variant, "seed": seed, "cfg.n_layer": layers, "cfg.n_embd": width,
                             "cfg.preset": f"ladder-{rung}", "cfg.tokenizer": "char", "cfg.vocab_size": 65,
                             "cfg.max_iters": PRESETS[f"ladder-{rung}"]["max_iters"], "cfg.batch_size": 32,
                             "cfg.block_size": 128, "val_loss": loss,
                             "best_val_loss": loss - 0.01})
    return pd.DataFrame(rows)


def test_per_size_comparisons_and_the_fitted_trend_find_the_planted_slope():
    table = ladder.rung_table(synthetic())
    assert set(table["params"]) == {non_embedding_params(a, b) for a, b, _ in LADDER_RUNGS}
    fits = ladder.trend(table).set_index("variant")
    assert fits.loc["ln", "slope_per_decade"] == pytest.approx(-0.03, abs=0.01)
    assert fits.loc["ln", "slope_ci_high"] < 0 and "falls" in ladder.trend_words(fits.loc["ln"])
    assert fits.loc["rms", "slope_ci_low"] < 0 < fits.loc["rms", "slope_ci_high"]  # no slope planted
    assert "no trend" in ladder.trend_words(fits.loc["rms"])
    assert fits.loc["ln", "extrapolated_diff"] == pytest.approx(0.2 - 0.03 * np.log10(1.3e9), abs=0.1)


def test_three_sizes_that_happen_to_fall_on_a_line_do_not_make_a_narrow_trend_interval():
    """Amendment 12: the residual variance of three points has one degree of freedom; points that lie near a line
    by chance must not give an interval narrower than the sizes' own errors allow."""
    sizes = [non_embedding_params(a, b) for a, b, _ in LADDER_RUNGS[:3]]
    # three sizes, five seeds each, standard errors of about 0.01 nats/char, means almost exactly on a line
    half_width = 0.01 * 2.776  # the 95% t half-width at 4 degrees of freedom
    means = [0.02 - 0.01 * (np.log10(p) - np.log10(sizes[0])) + e for p, e in zip(sizes, (0, 1e-5, -1e-5))]
    table = pd.DataFrame([{"tokenizer": "char", "params": p, "preset": f"ladder-{r}", "variant": "ln",
                           "metric": "val_loss", "seeds": 5, "mean_diff": m, "ci_low": m - half_width,
                           "ci_high": m + half_width, "p_holm": 0.5, "significant": False}
                          for r, (p, m) in enumerate(zip(sizes, means, strict=True))])
    fit = ladder.trend(table).iloc[0]
    assert fit["scale"] == 1.0  # the residual scatter is far below the errors: the errors set the interval
    assert fit["slope_ci_low"] < 0 < fit["slope_ci_high"]  # plain WLS would give -0.010 +- 0.0002
    assert fit["extrapolated_ci_high"] - fit["extrapolated_ci_low"] > 0.5
    assert ladder.scale_answer(table, ladder.trend(table)).iloc[0]["answer"] == "no change resolved"


def test_a_resolved_slope_whose_line_passes_zero_is_not_called_shrinking():
    table = ladder.rung_table(synthetic(slope=-0.05, ln_at_zero=0.3))
    fits = ladder.trend(table)
    ln = fits[fits["variant"] == "ln"].iloc[0]
    assert ln["line_at_smallest"] > 0 > ln["line_at_largest"] and ln["slope_ci_high"] < 0
    table = table.assign(significant=False)  # no size resolved: not a flip
    answer = ladder.scale_answer(table, fits).set_index("variant").loc["ln", "answer"]
    assert answer == "crosses zero"


def test_the_scale_answer_says_shrinks_grows_or_flips_only_where_the_tests_resolve_it():
    shrinking = ladder.scale_answer(ladder.rung_table(synthetic(ln_at_zero=0.3))).set_index("variant")
    assert shrinking.loc["ln", "answer"] == "shrinks"  # a cost at every size, falling by 0.03 per decade
    assert shrinking.loc["rms", "answer"] == "no change resolved"  # a constant cost, resolved at every size
    assert len(shrinking.loc["rms", "cost_at"]) == len(LADDER_RUNGS) and not shrinking.loc["rms", "gain_at"]
    grows = ladder.scale_answer(ladder.rung_table(synthetic(slope=0.03, ln_at_zero=-0.1))).set_index("variant")
    assert grows.loc["ln", "answer"] == "grows"  # a cost that rises with size
    flips = ladder.scale_answer(ladder.rung_table(synthetic(slope=-0.05, ln_at_zero=0.3))).set_index("variant")
    assert flips.loc["ln", "answer"] == "flips"  # a cost at 0.1M (+0.05), a gain at 14M (-0.06)
    assert flips.loc["ln", "cost_at"] and flips.loc["ln", "gain_at"]
    words = ladder.scale_words(flips.loc["ln"].to_dict() | {"variant": "ln"})
    assert "**flips**" in words and "a gain resolved at" in words and "(an extrapolation)" in words


def test_a_size_enters_the_trend_and_the_findings_only_with_all_its_registered_seeds(tmp_path):
    from embnorm_lib.analyses.ladder_findings import ladder_scale_findings

    runs = synthetic()
    early = runs[(runs["cfg.preset"] != "ladder-4") | (runs["seed"] < 2)]  # rung 4: the check's two reused seeds
    assert ladder.trend(ladder.rung_table(early))["rungs"].eq(len(LADDER_RUNGS) - 1).all()
    two_sizes = runs[runs["cfg.preset"].isin(["ladder-0", "ladder-1"]) | (runs["seed"] < 2)]
    assert ladder.trend(ladder.rung_table(two_sizes)).empty and ladder.scale_answer(ladder.rung_table(two_sizes)).empty
    (tmp_path / "ladder").mkdir()
    two_sizes.to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    assert ladder_scale_findings(tmp_path) == []  # two finished sizes: no answer across sizes
    runs.to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    answers = ladder.scale_answer(ladder.rung_table(runs), seeds=5).set_index("variant")
    assert len(ladder_scale_findings(tmp_path)) == len(answers) == 2
    assert answers.loc["ln", "sizes"] == 5 and answers.loc["ln", "tokenizer"] == "char"
    assert answers.loc["ln", "answer"] == "flips"  # the default plant: +0.05 at 0.1M, -0.01 at 14M


def test_a_sizes_holm_family_counts_the_loss_per_character_not_its_per_token_copy():
    """Amendment 7: per size one family on the final loss per character and the best loss; a subword run's per-token
    loss is the same paired test on a fixed multiple, so counting it too would make Holm stricter than registered."""
    from embnorm_lib import stats

    bpe = synthetic().assign(**{"cfg.tokenizer": "bpe-512"})
    bpe["val_loss_per_char"] = bpe["val_loss"] / 3
    table = ladder.rung_table(bpe)
    for _, size in table.groupby("params"):
        family = size[size["metric"] != "val_loss"]
        assert len(family) == 4 and size[size["metric"] == "val_loss"]["p_holm"].isna().all()
        assert family["p_holm"].to_numpy() == pytest.approx(stats.holm(family["p_t"].to_numpy())[1])
    char = ladder.rung_table(synthetic())
    assert char["p_holm"].notna().all() and set(char["metric"]) == {"val_loss", "best_val_loss"}


def test_the_per_seed_table_shows_each_runs_loss_per_character():
    bpe = synthetic().assign(**{"cfg.tokenizer": "bpe-512"})
    bpe["val_loss_per_char"] = bpe["val_loss"] / 3
    runs = pd.concat([synthetic(), bpe], ignore_index=True)
    table = ladder_sections.per_seed(runs)
    assert list(table.columns) == ["tokenizer", "preset", "seed", "none", "ln", "rms"]
    assert len(table) == 2 * len(LADDER_RUNGS) * 5
    row = table[(table["tokenizer"] == "bpe-512") & (table["preset"] == "ladder-1") & (table["seed"] == 2)].iloc[0]
    source = bpe[(bpe["cfg.preset"] == "ladder-1") & (bpe["seed"] == 2) & (bpe["variant"] == "ln")].iloc[0]
    assert row["ln"] == pytest.approx(source["val_loss_per_char"])  # per character, not the per-token loss

    assert "block 1's input" not in "\n".join(ladder_sections.per_seed_section(runs))  # no column, no table
    normed = runs.assign(final_block1_input_norm=np.arange(len(runs)) + 0.25)
    text = "\n".join(ladder_sections.per_seed_section(normed))
    norms = ladder_sections.per_seed(normed, "final_block1_input_norm")
    row = norms[(norms["tokenizer"] == "bpe-512") & (norms["preset"] == "ladder-1") & (norms["seed"] == 2)].iloc[0]
    source = normed[(normed["cfg.tokenizer"] == "bpe-512") & (normed["cfg.preset"] == "ladder-1")
                    & (normed["seed"] == 2) & (normed["variant"] == "rms")].iloc[0]
    assert row["rms"] == source["final_block1_input_norm"]
    assert f"| bpe-512 | ladder-1 | 2 | {row['none']:.2f} | {row['ln']:.2f} | {row['rms']:.2f} |" in text
    assert "gradient norm" not in text  # the index has no peak gradient norm: no table for it

    spiky = normed.assign(peak_grad_norm_post_warmup=np.where(normed["seed"] == 3, 184.378, 1.25))
    text = "\n".join(ladder_sections.per_seed_section(spiky))
    assert text.index("block 1's input") < text.index("gradient norm (before clipping)")
    assert "| char | ladder-2 | 3 | 184 | 184 | 184 |" in text and "| char | ladder-2 | 2 | 1.25 | 1.25 | 1.25 |" in text


def test_subword_trends_and_the_figure_use_the_loss_per_character():
    """Amendment 4: for BPE runs the primary metric is per character; a per-token difference must not leak in."""
    bpe = synthetic().assign(**{"cfg.tokenizer": "bpe-512"})
    bpe["val_loss_per_char"] = bpe["val_loss"]  # the planted slope lives per character...
    bpe["val_loss"] = bpe["val_loss_per_char"] * 3 + np.where(bpe["variant"] == "ln", 1.0, 0.0)  # ...not per token
    table = ladder.rung_table(pd.concat([synthetic(), bpe], ignore_index=True))
    picked = ladder.primary(table)
    assert set(zip(picked["tokenizer"], picked["metric"])) == {("char", "val_loss"), ("bpe-512", "val_loss_per_char")}
    fits = ladder.trend(table).set_index(["tokenizer", "variant"])
    assert fits.loc[("bpe-512", "ln"), "slope_per_decade"] == pytest.approx(-0.03, abs=0.01)
    assert fits.loc[("bpe-512", "ln"), "slope_per_decade"] == pytest.approx(fits.loc[("char", "ln"), "slope_per_decade"])


def test_an_arm_without_its_own_check_is_flagged_by_its_lr_familys(tmp_path):
    runs = synthetic()
    runs = runs[runs["variant"] == "ln"]
    runs = pd.concat([runs.assign(variant=v) for v in ("none", "ln_matched", "scaled_unit")], ignore_index=True)
    (tmp_path / "ladder-bpe-scale").mkdir()
    runs.assign(final_train_loss=lambda r: r["val_loss"] - 0.2).to_csv(tmp_path / "ladder-bpe-scale" / "runs.csv",
                                                                       index=False)
    unchecked = ladder_report.unchecked_rungs(runs)
    for rung in range(len(LADDER_RUNGS)):
        for variant, family in (("ln_matched", "ln"), ("scaled_unit", "none")):
            flagged = (rung, variant) in unchecked
            assert flagged is (family not in LADDER_LR_CHECKED.get(rung, {})), (rung, variant)


def test_the_command_line_reports_every_study_the_registry_analyses_as_a_ladder(tmp_path, capsys):
    from embnorm_lib.studies import studies_of

    assert {"ladder", "ladder-lr", "ladder-bpe-rep", "ladder-bpe-scale"} <= set(studies_of("ladder"))
    (tmp_path / "ladder-bpe-scale").mkdir()
    synthetic().to_csv(tmp_path / "ladder-bpe-scale" / "runs.csv", index=False)
    assert ladder_report.main(["ladder-bpe-scale", "--out-dir", str(tmp_path), "--figures-dir", str(tmp_path / "f")]) == 0
    assert (tmp_path / "ladder-bpe-scale" / "LADDER.md").is_file() and "(`ladder-bpe-scale`)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        ladder_report.main(["ladder-nope", "--out-dir", str(tmp_path)])


def test_the_report_renders(tmp_path):
    """Its figures, and the data it quotes (its wording: tests/golden/ladder_LADDER.md, from the same runs)."""
    runs = synthetic().assign(final_train_loss=lambda r: r["val_loss"] - 0.2)
    (tmp_path / "ladder").mkdir()
    runs.to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    assert ladder_report.write_report("ladder", tmp_path, tmp_path / "figures").is_file()
    assert ladder_sections.fit_table(runs)["gap"].to_numpy() == pytest.approx(0.2)
    unchecked = ladder_report.unchecked_rungs(runs)
    for rung in range(len(LADDER_RUNGS)):
        for variant in ("ln", "rms"):  # none, ln and rms are all in the index; rms follows ln's check
            assert ((rung, variant) in unchecked) is ("ln" not in LADDER_LR_CHECKED.get(rung, {}))
        assert ((rung, "none") in unchecked) is ("none" not in LADDER_LR_CHECKED.get(rung, {}))
    fits = ladder.trend(ladder.finished(ladder.rung_table(runs), 5), seeds=5).set_index("variant")
    assert fits.loc["ln", "slope_ci_high"] < 0 and "falls" in ladder.trend_words(fits.loc["ln"])
    budget = ladder_sections.budget_table(runs)
    assert (budget["runs"].sum(), budget["trained_here"].sum()) == (75, 75)
    assert (tmp_path / "figures" / "ladder_delta_vs_params.png").is_file()
    assert (tmp_path / "figures" / "ladder_delta_vs_compute.png").is_file()


def test_a_size_short_of_its_seeds_is_counted_in_the_report_but_not_compared(tmp_path):
    runs = synthetic()
    last = f"ladder-{len(LADDER_RUNGS) - 1}"
    partial = runs[(runs["cfg.preset"] != last) | ((runs["seed"] < 2) & (runs["variant"] != "rms"))]
    (tmp_path / "ladder").mkdir()
    partial.to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    text = ladder_report.write_report("ladder", tmp_path, tmp_path / "figures").read_text()
    per_size = text.split("## Per size")[1].split("## Per seed")[0]
    assert f"| {last} |" not in per_size and "| ladder-0 |" in per_size  # amendment 4: no interim comparison
    # rms has no run there yet: counted as 0, not left out
    assert f"- {last} (char): " in per_size and "`ln` 2, `rms` 0 of 5." in per_size
    assert f"| char | {last} | 1 |" in text  # its runs stay visible, per seed
    runs.to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    complete = ladder_report.write_report("ladder", tmp_path, tmp_path / "figures").read_text()
    assert f"| {last} |" in complete.split("## Per seed")[0] and "Not quoted yet" not in complete


def test_the_subword_report_says_its_lr_was_checked_on_characters_only(tmp_path):
    bpe = synthetic().assign(**{"cfg.tokenizer": "bpe-512"})
    bpe["val_loss_per_char"] = bpe["val_loss"]
    (tmp_path / "ladder-bpe").mkdir()
    bpe.to_csv(tmp_path / "ladder-bpe" / "runs.csv", index=False)
    text = ladder_report.write_report("ladder-bpe", tmp_path, tmp_path / "figures").read_text()
    assert STUDIES["ladder-bpe"].note in text and "subword LR check" in STUDIES["ladder-bpe"].note
    assert "`ln` (bpe-512)" in text
    char = synthetic()
    (tmp_path / "ladder").mkdir()
    char.to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    assert "subword LR" not in ladder_report.write_report("ladder", tmp_path, tmp_path / "figures").read_text()


def test_each_size_states_its_training_tokens_and_compute():
    table = ladder.rung_table(synthetic()).set_index(["preset", "variant", "metric"])
    layers, width, _ = LADDER_RUNGS[1]
    row = table.loc[("ladder-1", "ln", "val_loss")]
    tokens = ladder_iters(layers, width) * 32 * 128
    assert row["train_tokens"] == tokens
    assert row["train_flops"] == 6 * (non_embedding_params(layers, width) + width * 65) * tokens
    bare = ladder.rung_table(synthetic().drop(columns=["cfg.vocab_size"]))
    assert bare["train_flops"].isna().all()  # not guessed when the index lacks a config column


def test_the_budget_table_gives_each_arms_shape_budget_lr_and_the_compute_trained_here():
    runs = synthetic()
    runs["cfg.lr"] = [ladder_lr(v, w) for v, w in zip(runs["variant"], runs["cfg.n_embd"], strict=True)]
    runs["wall_s"] = 60.0 * (1 + runs["seed"])  # 1..5 minutes: median 3
    runs["device"], runs["torch_threads"] = "cpu", 1
    runs["reused_from"] = np.where(runs["seed"] < 2, "ladder-lr/x", "")  # seeds 0-1 came from the check
    table = ladder_sections.budget_table(runs)
    assert list(table["preset"])[:3] == ["ladder-0"] * 3 and list(table["variant"])[:3] == ["none", "ln", "rms"]
    row = table[(table["preset"] == "ladder-1") & (table["variant"] == "ln")].iloc[0]
    layers, width, _ = LADDER_RUNGS[1]
    assert (row["n_layer"], row["n_embd"], row["params"]) == (layers, width, non_embedding_params(layers, width))
    assert row["iters"] == ladder_iters(layers, width) and row["train_tokens"] == row["iters"] * 32 * 128
    assert row["tokens_per_param"] == pytest.approx(row["train_tokens"] / row["params"])
    assert row["lr"] == f"{ladder_lr('ln', width):.3g}" and (row["runs"], row["trained_here"]) == (5, 3)
    assert row["min_per_run"] == pytest.approx(3.0) and row["run_hours_here"] == pytest.approx((3 + 4 + 5) / 60)
    assert "15 runs finished, 9 of them" in ladder_sections.budget_words(table[table["preset"] == "ladder-1"])
    bare = ladder_sections.budget_table(synthetic())  # an index without wall times says so rather than claiming zero
    assert bare["run_hours_here"].isna().all() and "run-hours" not in ladder_sections.budget_words(bare)


def test_the_readme_line_per_finished_size_words_each_arm_by_holm(tmp_path):
    from embnorm_lib.analyses.ladder_findings import ladder_findings

    assert ladder_findings(tmp_path) == []
    (tmp_path / "ladder").mkdir()
    synthetic().to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    lines = ladder_findings(tmp_path)
    assert len(lines) == len(LADDER_RUNGS) and lines[0].startswith("- rung 0 (2 × 64, 0.10M")
    assert "`ln` +" in lines[0] and "significant" in lines[0] and "LR `none` 0.01, `ln` 0.024" in lines[0]
    few = synthetic(seeds=3)
    few.to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    assert ladder_findings(tmp_path) == []  # a size is quoted once its five registered seeds have finished


def test_the_subword_ladders_readme_line_quotes_the_loss_per_character(tmp_path):
    from embnorm_lib.analyses.ladder_findings import ladder_findings

    bpe = synthetic().assign(**{"cfg.tokenizer": "bpe-512"})
    bpe["val_loss_per_char"] = bpe["val_loss"]
    bpe["val_loss"] = bpe["val_loss_per_char"] * 3  # per token: three times the per-character difference
    (tmp_path / "ladder-bpe").mkdir()
    bpe.to_csv(tmp_path / "ladder-bpe" / "runs.csv", index=False)
    lines = ladder_findings(tmp_path, "ladder-bpe")
    assert len(lines) == len(LADDER_RUNGS) and lines[1].startswith("- rung 1, bpe-512 tokens (4 × 128")
    per_char = ladder.primary(ladder.rung_table(bpe))
    ln = per_char[(per_char["variant"] == "ln") & (per_char["preset"] == "ladder-1")].iloc[0]
    assert f"`ln` {ln.mean_diff:+.3f} [{ln.ci_low:+.3f}, {ln.ci_high:+.3f}]" in lines[1]
    assert ladder_findings(tmp_path, "ladder") == []  # the char ladder's lines come from its own study
    from embnorm_lib.analyses.findings import findings_text

    text = findings_text(tmp_path, studies=())
    assert "runs/ladder-bpe/LADDER.md" in text and "amendments 4 and 7" in text


def test_the_figure_fills_the_significant_sizes_above_the_open_markers():
    import matplotlib.pyplot as plt


    table = ladder.primary(ladder.rung_table(synthetic()))
    fig = analysis_plots.plot_ladder(table)
    lines = fig.axes[0].lines
    marked = [ln for ln in lines if ln.get_marker() not in ("None", "", None, "_", "|")]  # not the caps
    open_markers = [ln for ln in marked if ln.get_markerfacecolor() == "white"]
    filled = [ln for ln in marked if ln.get_markerfacecolor() != "white"]
    assert filled and sum(len(ln.get_xdata()) for ln in filled) == int(table["significant"].sum())
    assert min(ln.get_zorder() for ln in filled) > max(ln.get_zorder() for ln in open_markers)
    plt.close(fig)


def test_the_figure_tells_the_tokenizers_apart_at_one_size():
    import matplotlib.pyplot as plt


    runs = []
    for tokenizer in ("bpe-512", "bpe-4096"):
        bpe = synthetic().assign(**{"cfg.tokenizer": tokenizer})
        bpe["val_loss_per_char"] = bpe["val_loss"]
        runs.append(bpe)
    table = ladder.primary(ladder.rung_table(pd.concat(runs, ignore_index=True)))
    fig = analysis_plots.plot_ladder(table)
    series = {c.get_label(): c.lines[0] for c in fig.axes[0].containers}  # each errorbar: label -> data line
    assert len(series) == 4
    styles = {label.split("(")[1]: line.get_linestyle() for label, line in series.items()}
    assert len(set(styles.values())) == 2  # one line style per tokenizer, whatever the arm's colour
    markers = {label.split(" ")[0]: line.get_marker() for label, line in series.items()}
    assert len(set(markers.values())) == 2  # and one marker per arm, so ln and rms stay apart
    xs = [tuple(np.round(np.asarray(line.get_xdata(), dtype=float), 3)) for line in series.values()]
    assert len(set(xs)) == len(xs)  # no two (arm, tokenizer) series drawn at the same x
    plt.close(fig)


def test_the_papers_ladder_data_quotes_both_ladders_per_character(tmp_path):
    from embnorm_lib.analyses.paper_ladder import ladder_data

    (tmp_path / "ladder-lr").mkdir()
    check_runs(rung=1).to_csv(tmp_path / "ladder-lr" / "runs.csv", index=False)
    assert "family" not in ladder_data(tmp_path) and ladder_data(tmp_path)["subword_runs"] == 0
    bpe = synthetic().assign(**{"cfg.tokenizer": "bpe-512"})
    bpe["val_loss_per_char"] = bpe["val_loss"]
    bpe["val_loss"] = bpe["val_loss_per_char"] * 3 + np.where(bpe["variant"] == "ln", 1.0, 0.0)  # per token: off
    for study, runs in (("ladder", synthetic()), ("ladder-bpe", bpe)):
        (tmp_path / study).mkdir()
        runs.to_csv(tmp_path / study / "runs.csv", index=False)
    found = ladder_data(tmp_path)
    assert found["subword_runs"] == len(bpe)
    assert found["subword_planned"] == len(STUDIES["ladder-bpe"].cells()) == 90  # rungs 1-3 x 2 tokenizers x 3 x 5
    family = pd.DataFrame(found["family"]).set_index(["tokenizer", "preset", "variant"])
    per_char = ladder.primary(ladder.rung_table(bpe)).set_index(["preset", "variant"])
    assert family.loc[("bpe-512", "ladder-1", "ln"), "mean_diff"] == pytest.approx(
        per_char.loc[("ladder-1", "ln"), "mean_diff"])
    assert set(family.index.get_level_values("tokenizer")) == {"char", "bpe-512"}
    assert len(family) == 2 * len(LADDER_RUNGS) * 2  # two tokenizers x sizes x (ln, rms); no per-token row
    # a size short of its registered seeds is counted among the runs, not quoted (README's rule, amendment 4)
    partial = bpe[~((bpe["cfg.preset"] == "ladder-1") & (bpe["variant"] == "rms") & (bpe["seed"] == 4))]
    partial.to_csv(tmp_path / "ladder-bpe" / "runs.csv", index=False)
    found = ladder_data(tmp_path)
    quoted = {(r["tokenizer"], r["preset"]) for r in found["family"]}
    assert ("bpe-512", "ladder-1") not in quoted and ("bpe-512", "ladder-2") in quoted
    assert found["subword_runs"] == len(partial)
    # nor a size where one arm has not run at all: its Holm family would be short of that arm's tests
    no_rms = bpe[~((bpe["cfg.preset"] == "ladder-2") & (bpe["variant"] == "rms"))]
    no_rms.to_csv(tmp_path / "ladder-bpe" / "runs.csv", index=False)
    quoted = {(r["tokenizer"], r["preset"]) for r in ladder_data(tmp_path)["family"]}
    assert ("bpe-512", "ladder-2") not in quoted and ("bpe-512", "ladder-1") in quoted
    assert "peaks" not in ladder_data(tmp_path)  # no stability readings in the index, no exploratory peaks

    # the exploratory gradient-norm peaks come with the quoted sizes only, each with its size
    def with_peaks(runs):
        return runs.assign(peak_grad_norm_post_warmup=np.where(runs["variant"] == "ln", 8.0 + runs["seed"] / 10, 1.0) * (1 + runs["seed"]),
                           clipped_frac=0.0, spike_count_post_warmup=0)

    with_peaks(no_rms).to_csv(tmp_path / "ladder-bpe" / "runs.csv", index=False)
    with_peaks(synthetic()).to_csv(tmp_path / "ladder" / "runs.csv", index=False)
    peaks = pd.DataFrame(ladder_data(tmp_path)["peaks"])
    assert set(zip(peaks["tokenizer"], peaks["preset"], strict=True)) == quoted | {
        ("char", f"ladder-{r}") for r in range(len(LADDER_RUNGS))}
    row = peaks[(peaks["tokenizer"] == "bpe-512") & (peaks["preset"] == "ladder-1") & (peaks["variant"] == "ln")]
    assert row["ratio"].item() == pytest.approx(8.2, rel=0.01) and row["params"].item() == non_embedding_params(4, 128)


@pytest.mark.committed
def test_the_papers_ladder_data_says_where_the_pass_cap_binds_and_what_it_does_to_tokens_per_parameter(corpus):
    import json

    from embnorm_lib.core.config import LADDER_EPOCH_CAP, LADDER_TOKENS_PER_PARAM

    # the committed paper record (test_paper holds it to a fresh ladder_data of the committed runs)
    budget = json.loads((REPO / "paper" / "data.json").read_text())["ladder"]["budget"]
    sizes = [non_embedding_params(layers, width) for layers, width, _ in LADDER_RUNGS]
    capped = [r for r, n in enumerate(sizes) if LADDER_TOKENS_PER_PARAM * n > LADDER_EPOCH_CAP * len(corpus.train)]
    assert capped and budget["first_capped"] == capped[0]
    cap_tokens = budget["capped_tokens"]
    assert LADDER_EPOCH_CAP * len(corpus.train) <= cap_tokens < LADDER_EPOCH_CAP * len(corpus.train) + 32 * 128
    for r in capped:  # every capped rung trains on the same tokens, so its tokens per parameter fall with size
        assert budget["tokens_per_param"][str(r)] == pytest.approx(cap_tokens / sizes[r])
    assert budget["tokens_per_param"][str(len(sizes) - 1)] < 1 < LADDER_TOKENS_PER_PARAM


def test_the_fit_table_gives_each_arms_train_and_validation_loss_their_gap_and_the_rise_after_the_best():
    runs = synthetic(seeds=2)
    runs["cfg.lr"] = [ladder_lr(v, w) for v, w in zip(runs["variant"], runs["cfg.n_embd"], strict=True)]
    runs["final_train_loss"] = runs["val_loss"] - 0.1 * (1 + runs["cfg.preset"].str[-1].astype(int))  # gap grows
    table = ladder_sections.fit_table(runs)
    assert len(table) == len(LADDER_RUNGS) * 3 and (table["seeds"] == 2).all()
    row = table[(table["preset"] == "ladder-2") & (table["variant"] == "rms")].iloc[0]
    mine = runs[(runs["cfg.preset"] == "ladder-2") & (runs["variant"] == "rms")]
    assert row["train_loss"] == pytest.approx(mine["final_train_loss"].mean())
    assert row["val_loss"] == pytest.approx(mine["val_loss"].mean()) and row["gap"] == pytest.approx(0.3)
    assert row["val_rise"] == pytest.approx(0.01) and row["lr"] == pytest.approx(ladder_lr("rms", LADDER_RUNGS[2][1]))
    assert table.groupby("preset")["gap"].mean().to_numpy() == pytest.approx(
        [0.1 * (1 + r) for r in range(len(LADDER_RUNGS))])  # what fit_words quotes per rung
    words = ladder_sections.fit_words(table)
    section = ladder_sections.fit_section(runs)
    assert len(words) == 1 and section[0].startswith("## Fit") and words[0] in section
    assert ladder_sections.fit_section(synthetic()) == []  # an index without training losses draws no table of NaNs
    two_lrs = pd.concat([runs, runs.assign(**{"cfg.lr": runs["cfg.lr"] * 2, "val_loss": runs["val_loss"] + 1})])
    assert len(ladder_sections.fit_table(two_lrs)) == 2 * len(table)  # an LR check keeps each LR its own row
    assert "block1_input_norm" not in table  # an index without the norm gets no column of NaNs
    normed = runs.assign(final_block1_input_norm=np.where(runs["variant"] == "none", 1.0, 12.0) + runs["seed"])
    with_norm = ladder_sections.fit_table(normed)
    assert with_norm[with_norm["variant"] == "none"]["block1_input_norm"].tolist() == [1.5] * len(LADDER_RUNGS)
    assert with_norm[with_norm["variant"] == "ln"]["block1_input_norm"].tolist() == [12.5] * len(LADDER_RUNGS)
    assert "| block1_input_norm |" in "\n".join(ladder_sections.fit_section(normed))


@pytest.mark.parametrize("study,preset", [("ladder-bpe-rep", "ladder-1"), ("ladder-bpe-rep2", "ladder-2")])
def test_each_subword_replication_repeats_ladder_bpes_bpe4096_size_on_fresh_seeds_only(study, preset):
    """Amendments 9 and 11: the same configs as ladder-bpe at that size with bpe-4096 tokens, seeds 5-14, nothing
    else."""
    from dataclasses import asdict

    original = {c.variant: asdict(c.config()) for c in study_cells("ladder-bpe")
                if c.preset == preset and dict(c.overrides).get("tokenizer") == "bpe-4096" and c.seed == 0}
    replication = study_cells(study)
    assert len(replication) == 30 and sorted({c.seed for c in replication}) == list(range(5, 15))
    assert not {c.seed for c in replication} & {c.seed for c in study_cells("ladder-bpe")}
    for c in replication:
        assert {**asdict(c.config()), "seed": 0} == original[c.variant]


def replication_runs(preset: str) -> pd.DataFrame:
    """A replication's index as the synthetic ladder gives it: one size with bpe-4096 tokens, seeds 5-14."""
    runs = synthetic(seeds=10)
    runs = runs[runs["cfg.preset"] == preset].assign(**{"cfg.tokenizer": "bpe-4096", "cfg.vocab_size": 4096})
    return runs.assign(seed=runs["seed"] + 5, val_loss_per_char=runs["val_loss"])


def test_the_rung_2_replication_quotes_its_registered_peak_family_once_finished(tmp_path):
    """Amendment 11 registers the gradient-norm peaks as a confirmatory family of that study alone: its report and
    the README say so, worded by the Holm decision; every other ladder report keeps them exploratory."""
    from embnorm_lib.analyses.findings import findings_text
    from embnorm_lib.analyses.ladder_findings import ladder_findings, ladder_peak_findings

    runs = replication_runs("ladder-2")
    rng = np.random.default_rng(3)
    paired = 10 ** rng.normal(0, 0.3, 10)[runs["seed"].to_numpy() - 5]  # one seed's peak level shared by its arms
    planted = np.where(runs["variant"] == "ln", 16.0, 1.0)  # ln's peaks 16 times none's, rms's as none's
    runs = runs.assign(peak_grad_norm_post_warmup=paired * planted * 10 ** rng.normal(0, 0.05, len(runs)),
                       clipped_frac=0.02, spike_count_post_warmup=0)
    (tmp_path / "ladder-bpe-rep2").mkdir()
    runs[runs["seed"] < 14].to_csv(tmp_path / "ladder-bpe-rep2" / "runs.csv", index=False)  # nine of ten seeds
    assert ladder_findings(tmp_path, "ladder-bpe-rep2") == ladder_peak_findings(tmp_path, "ladder-bpe-rep2") == []
    assert "runs/ladder-bpe-rep2/LADDER.md" not in findings_text(tmp_path, studies=())
    runs.to_csv(tmp_path / "ladder-bpe-rep2" / "runs.csv", index=False)
    assert "runs/ladder-bpe-rep2/LADDER.md" in findings_text(tmp_path, studies=())
    assert [line.split(" (")[0] for line in ladder_findings(tmp_path, "ladder-bpe-rep2")] == [
        "- rung 2, bpe-4096 tokens"]
    peaks = ladder_sections.peak_table(runs).set_index("variant")  # what the one peak line quotes, by its Holm decisions
    assert len(ladder_peak_findings(tmp_path, "ladder-bpe-rep2")) == 1 and "ladder-bpe-rep2" in ladder.CONFIRMATORY_PEAKS
    assert peaks.loc["ln", "ratio"] == pytest.approx(16, rel=0.15) and peaks.loc["ln", "significant"]
    assert peaks.loc["rms", "ratio_ci_low"] < 1 < peaks.loc["rms", "ratio_ci_high"] and not peaks.loc["rms", "significant"]
    report = ladder_report.write_report("ladder-bpe-rep2", tmp_path, tmp_path / "figures").read_text()
    assert "## Gradient-norm peaks (confirmatory, docs/PROTOCOL.md amendment 11)" in report
    assert "(exploratory)" not in report.split("## Gradient-norm peaks")[1].split("\n")[0]
    (tmp_path / "ladder-bpe-rep").mkdir()  # the rung-1 replication registered no peaks: exploratory there
    runs.assign(**{"cfg.preset": "ladder-1"}).to_csv(tmp_path / "ladder-bpe-rep" / "runs.csv", index=False)
    report = ladder_report.write_report("ladder-bpe-rep", tmp_path, tmp_path / "figures").read_text()
    assert "(exploratory)" in report.split("## Gradient-norm peaks")[1].split("\n")[0]


def test_the_replication_is_quoted_once_its_ten_seeds_have_finished_and_its_report_fits_no_trend(tmp_path):
    from embnorm_lib.analyses.findings import findings_text
    from embnorm_lib.analyses.ladder_findings import ladder_findings

    runs = replication_runs("ladder-1")
    (tmp_path / "ladder-bpe-rep").mkdir()
    runs[runs["seed"] < 14].to_csv(tmp_path / "ladder-bpe-rep" / "runs.csv", index=False)  # nine of ten seeds
    assert "subword replication" not in findings_text(tmp_path, studies=())
    assert ladder_findings(tmp_path, "ladder-bpe-rep") == []
    runs.to_csv(tmp_path / "ladder-bpe-rep" / "runs.csv", index=False)
    assert "runs/ladder-bpe-rep/LADDER.md" in findings_text(tmp_path, studies=())
    assert [line.split(" (")[0] for line in ladder_findings(tmp_path, "ladder-bpe-rep")] == ["- rung 1, bpe-4096 tokens"]
    table = ladder.finished(ladder.primary(ladder.rung_table(runs)), 10)
    assert set(table["preset"]) == {"ladder-1"} and (table["seeds"] == 10).all()
    report = ladder_report.write_report("ladder-bpe-rep", tmp_path, tmp_path / "figures").read_text()
    assert report.startswith("# One size of the ladder (`ladder-bpe-rep`)") and "10 | " in report
    assert "Trend across sizes" not in report and "Figures:" not in report
    assert not (tmp_path / "figures").exists()


def test_the_lr_check_figure_fills_each_arms_best_factor_and_the_report_points_at_it(tmp_path):
    import warnings

    import matplotlib.pyplot as plt

    check = ladder.lr_check(check_runs({"none": 0.5, "ln": 2.0}))
    fig = analysis_plots.plot_lr_check(check, ladder.best_factors(check))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["none", "ln"]  # registry order
    filled = [ln for ln in ax.lines if ln.get_linestyle() == "None"]
    assert sorted(float(ln.get_xdata()[0]) for ln in filled) == [0.5, 2.0]
    plt.close(fig)
    partial = check[check["factor"] != 4.0]  # a grid not yet complete has no best to fill
    fig = analysis_plots.plot_lr_check(partial, ladder.best_factors(partial))
    assert all(len(ln.get_xdata()) == 0 for ln in fig.axes[0].lines if ln.get_linestyle() == "None")
    plt.close(fig)
    # into a caller's axes (the paper's nested grid) it draws and leaves the layout, and its warnings, to the caller
    fig = plt.figure()
    grid = fig.add_gridspec(2, 1)[0].subgridspec(1, 2)
    axes = [fig.add_subplot(grid[0, i]) for i in range(2)]
    before = [ax.get_position().bounds for ax in axes]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        analysis_plots.plot_lr_check(check, ladder.best_factors(check), axes=axes)
    assert [ax.get_position().bounds for ax in axes] == before and axes[0].lines
    plt.close(fig)
    (tmp_path / "ladder-lr").mkdir()
    check_runs(rung=1).to_csv(tmp_path / "ladder-lr" / "runs.csv", index=False)
    text = ladder_report.write_report("ladder-lr", tmp_path, tmp_path / "figures").read_text()
    assert "Figure: `figures/ladder/ladder-lr_lr_curves.png`" in text
    assert (tmp_path / "figures" / "ladder-lr_lr_curves.png").is_file()
    # a partial check names what it still lacks, per rung, from its registered cells (rung 1 is all here)
    lacking = {p: sum(c.preset == p for c in study_cells("ladder-lr")) for p in ("ladder-0", "ladder-4")}
    unfinished = ladder_report._unfinished_rungs("ladder-lr", check_runs(rung=1))
    assert unfinished.startswith(f"ladder-0 ({lacking['ladder-0']} runs), ladder-2 (") and "ladder-1 (" not in unfinished
    assert unfinished.endswith(f"ladder-4 ({lacking['ladder-4']} runs)") and f"still to finish {unfinished};" in text


def test_the_subword_scale_study_takes_each_arms_lr_family_and_reports_the_shares(tmp_path):
    """Amendment 10: ln_matched at ln's LR, scaled_unit at none's; none and ln are the replication's own runs; the
    findings give each arm's difference and the share of ln's that normalizing or rescaling alone carries."""
    from dataclasses import asdict

    from embnorm_lib.analyses.findings import findings_text
    from embnorm_lib.analyses.ladder_findings import subword_scale_findings

    rep = {(c.variant, c.seed): asdict(c.config()) for c in study_cells("ladder-bpe-rep")}
    for c in study_cells("ladder-bpe-scale"):
        cfg = c.config()
        if c.variant in ("none", "ln"):
            assert asdict(cfg) == rep[(c.variant, c.seed)]  # copied from ladder-bpe-rep, not retrained
        else:
            family = {"ln_matched": "ln", "scaled_unit": "none"}[c.variant]
            assert cfg.lr == rep[(family, c.seed)]["lr"]
    from test_golden import subword_scale

    runs = subword_scale()  # ln -0.07, ln_matched -0.007, scaled_unit -0.063 nats/char against none
    (tmp_path / "ladder-bpe-scale").mkdir()
    runs.to_csv(tmp_path / "ladder-bpe-scale" / "runs.csv", index=False)
    assert "runs/ladder-bpe-scale/LADDER.md" in findings_text(tmp_path, studies=())
    lines = subword_scale_findings(tmp_path)
    assert len(lines) == 2 and "LR `none` 0.005, `ln` 0.003, `ln_matched` 0.003, `scaled_unit` 0.005" in lines[0]
    diff = ladder.primary(ladder.rung_table(runs)).set_index("variant")["mean_diff"]
    assert diff.to_dict() == pytest.approx({"ln": -0.07, "ln_matched": -0.007, "scaled_unit": -0.063}, abs=1e-3)
    # the shares the second line quotes: 10% and 90% of ln's difference
    assert (diff["ln_matched"] / diff["ln"], diff["scaled_unit"] / diff["ln"]) == pytest.approx((0.1, 0.9), abs=0.01)


def test_the_gradient_norm_peaks_are_compared_as_paired_ratios_and_labelled_exploratory():
    runs = synthetic()
    assert ladder_sections.peak_section(runs) == []  # an index without the stability readings gets no section
    rng = np.random.default_rng(1)
    base = 10 ** rng.normal(0, 0.3, len(runs))  # none's peaks spread over a factor of a few between seeds
    paired = base[runs.groupby(["cfg.preset", "seed"]).ngroup().to_numpy()]  # one seed's peaks shared by its arms
    planted = np.where((runs["variant"] == "ln") & (runs["cfg.preset"] == "ladder-2"), 40.0, 1.0)
    runs = runs.assign(peak_grad_norm_post_warmup=paired * planted * 10 ** rng.normal(0, 0.05, len(runs)),
                       clipped_frac=np.where(runs["variant"] == "ln", 0.2, 0.05),
                       spike_count_post_warmup=np.where(runs["seed"] == 0, 1, 0))
    table = ladder_sections.peak_table(runs).set_index(["preset", "variant"])
    assert table.loc[("ladder-2", "ln"), "ratio"] == pytest.approx(40, rel=0.15)
    assert table.loc[("ladder-2", "ln"), "ratio_ci_low"] > 20 and table.loc[("ladder-2", "ln"), "significant"]
    assert table.loc[("ladder-2", "rms"), "ratio_ci_low"] < 1 < table.loc[("ladder-2", "rms"), "ratio_ci_high"]
    assert not table.loc[("ladder-1", "ln"), "significant"]  # nothing planted there
    assert table.loc[("ladder-2", "ln"), "clipped_variant"] == pytest.approx(0.2)
    assert table.loc[("ladder-2", "ln"), "spikes_none"] == 1 and table.loc[("ladder-2", "ln"), "spikes_variant"] == 1
    text = "\n".join(ladder_sections.peak_section(runs))
    assert "(exploratory)" in text.split("\n")[0] and "registered analysis" in text


def test_block1_norm_against_loss_is_a_rank_correlation_per_arm_labelled_exploratory():
    runs = synthetic()
    assert ladder_sections.norm_loss_section(runs) == []  # an index without the norm reading gets no section
    rng = np.random.default_rng(2)
    loss = ladder.loss_per_char(runs)
    # planted at rung 2's ln: the norm falls as the loss rises (a perfect inverse ranking); elsewhere noise
    planted = (runs["variant"] == "ln") & (runs["cfg.preset"] == "ladder-2")
    norm = np.where(planted, 20.0 - 10 * loss, 10 + rng.normal(0, 1, len(runs)))
    table = ladder_sections.norm_loss_table(runs.assign(final_block1_input_norm=norm)).set_index(["preset", "variant"])
    assert table.loc[("ladder-2", "ln"), "kendall_tau"] == pytest.approx(-1.0)
    assert table.loc[("ladder-2", "ln"), "p"] == pytest.approx(2 / 120)  # exact: 2 of the 5! orderings as extreme
    assert table.loc[("ladder-2", "ln"), "seeds"] == 5
    assert table.loc[("ladder-2", "rms"), "p"] > 2 / 120
    text = "\n".join(ladder_sections.norm_loss_section(runs.assign(final_block1_input_norm=norm)))
    assert "(exploratory)" in text.split("\n")[0] and "registered analysis" in text and "Kendall" in text


def test_the_budget_section_says_how_many_runs_moved_to_another_cpu_when_resumed():
    runs = synthetic()
    assert "resumed on another CPU" not in " ".join(ladder_sections.budget_section(runs))
    runs["cpu_changed_on_resume"] = [True, None] + [False] * (len(runs) - 2)
    assert " 1 run(s) were resumed" in " ".join(ladder_sections.budget_section(runs))


def test_publishing_an_lr_check_asks_no_size_findings(monkeypatch, tmp_path):
    """`publish ladder-lr` failed with a pandas error: its publisher asked for the ladder's size findings, which pair
    one run per arm and seed, from a study holding several LRs per seed."""
    from embnorm_lib.analyses import ladder_findings, publishers
    from embnorm_lib.analyses import ladder_report as analysis

    written = {}
    monkeypatch.setattr(publishers, "build_index", lambda study, out: None)
    monkeypatch.setattr(publishers, "zeroshot_report", lambda study, out: {})
    monkeypatch.setattr(ladder_findings, "ladder_answer", lambda out, study: written.setdefault("asked", study) and ["- a"])
    def write_report(study, out, figures, answer=None):
        written[study] = answer
        return tmp_path / "LADDER.md"

    monkeypatch.setattr(analysis, "write_report", write_report)
    for study in analysis.LR_CHECKS:
        publishers.ladder(study, tmp_path, None)
    assert "asked" not in written and all(written[s] is None for s in analysis.LR_CHECKS)
    publishers.ladder("ladder", tmp_path, None)
    assert written["asked"] == "ladder" and written["ladder"] == ["- a"]


def test_the_registered_token_counts_are_the_committed_tokenizers_counts_and_listing_cells_tokenizes_nothing(monkeypatch):
    """Study.cells() has no side effect (issue 114 item 5): the subword ladder's budgets read registered token counts,
    which equal what the committed tokenizers give for tiny Shakespeare's training split."""
    from embnorm_lib.core.corpora import data
    from embnorm_lib.core.corpora.data import load_corpus
    from embnorm_lib.studies import STUDIES
    from embnorm_lib.studies.ladder import TRAIN_TOKENS

    for tokenizer, tokens in TRAIN_TOKENS.items():
        assert len(load_corpus(tokenizer=tokenizer).train) == tokens, tokenizer

    def refuse(*args, **kwargs):
        raise AssertionError("listing a study's cells loaded a corpus")

    monkeypatch.setattr(data, "load_corpus", refuse)
    for study in STUDIES.values():
        study.cells()
