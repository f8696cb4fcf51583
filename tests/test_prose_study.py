"""The prose ladder's registered design (issue 112; amendment 17): presets, grids, seeds, the tables the tuning fills,
the tuning record and its report, and the rule that the amendment precedes every run."""
from __future__ import annotations

import json
import math
import subprocess

import pandas as pd
import pytest

from embnorm_lib.analyses import prose as analysis
from embnorm_lib.core.config import PRESETS, RunConfig
from embnorm_lib.core.presets import PROSE_RECORD, PROSE_TOKENIZER_RECORD, prose_iters, prose_params
from embnorm_lib.core.records.io import repo_root
from embnorm_lib.studies import STUDIES, prose

needs_records = pytest.mark.skipif(not (PROSE_RECORD.is_file() and PROSE_TOKENIZER_RECORD.is_file()),
                                   reason="no committed open-prose records")


def test_sizes_span_at_least_6x_and_budget_rule():
    params = [prose.non_embedding_params(r) for r in range(len(prose.PROSE_RUNGS))]
    assert len(params) >= 3 and params[-1] / params[0] >= 6
    vocab = 4096
    for rung, p in enumerate(params):
        counted = p + (vocab + 128) * prose.PROSE_RUNGS[rung][1] if rung >= 1 else p  # amendment 19
        assert prose_params(rung, vocab) == counted
        assert prose_iters(rung, 1, train_tokens=10**9, vocab_size=vocab) == math.ceil(
            20 * counted / prose.PROSE_TOKENS_PER_ITER)
        # the pass cap binds on a small corpus
        assert prose_iters(rung, 1, train_tokens=1000, vocab_size=vocab) == math.ceil(4000 / prose.PROSE_TOKENS_PER_ITER)
    assert prose_iters(0, 4, train_tokens=10**9) == 4 * prose_iters(0, 1, train_tokens=10**9) == 1920


@needs_records
def test_amendment_19_budgets_and_levels():
    iters = {level: PRESETS[prose.preset_name("gpt2", level)]["max_iters"] for level in prose.LEVELS}
    assert iters == {"0": 480, "0-x4": 1920, "1": 3600, "2": 6480}
    assert prose.MAIN_LEVELS == ("0-x4", "1", "2") and prose.BUDGET_LEVEL == "0"
    assert iters["0-x4"] == 4 * iters[prose.BUDGET_LEVEL]  # the budget control is exactly 4x in tokens
    assert "prose-gpt2-1-x4" not in PRESETS  # only size 0 has a second budget
    # the 4x level is centred on the 480-iteration LR (same width), the next size on it scaled by width
    for recipe in prose.RECIPE_NAMES:
        for arm in prose.ARMS:
            c = prose.centre(recipe, "0-x4", arm)
            assert c == prose.lr_of(recipe, "0", arm)
            assert len(prose.grid(recipe, "0-x4", arm)) >= 3
    budget = STUDIES["prose-budget"].cells()
    assert {c.preset for c in budget} == {prose.preset_name(r, "0") for r in prose.RECIPE_NAMES}
    assert {c.seed for c in budget} == set(prose.CONFIRMATORY_SEEDS)
    assert all(dict(c.overrides)["lr"] == prose.lr_of(c.preset.split("-")[1], "0", c.variant) for c in budget)
    assert not {c.preset for c in STUDIES["prose"].cells()} & {prose.preset_name(r, "0") for r in prose.RECIPE_NAMES}


@needs_records
def test_presets_carry_recipe_corpus_tokenizer_and_stay_within_4_passes():
    tokens = json.loads(PROSE_TOKENIZER_RECORD.read_text())["train_tokens"]
    for recipe in prose.RECIPE_NAMES:
        for level in prose.LEVELS:
            cfg = RunConfig(**PRESETS[prose.preset_name(recipe, level)])
            assert cfg.tokenizer == "bytebpe-4096" and cfg.corpus_sha256 == json.loads(
                    PROSE_RECORD.read_text())["sha256"]
            assert cfg.max_iters * cfg.tokens_per_iter / tokens <= 4
            assert cfg.tie_embeddings is (recipe == "gpt2")
            assert cfg.emb_init_std == (0.02 if recipe == "gpt2" else 1.0)


def test_rung0_grid_is_sqrt2_spaced_with_five_points_for_every_arm():
    for recipe in prose.RECIPE_NAMES:
        for arm in prose.ARMS:
            lrs = prose.grid(recipe, "0", arm)
            assert len(lrs) == 5 + len(prose.EXTENSIONS.get((recipe, "0"), {}).get(arm, []))
            ratios = [b / a for a, b in zip(lrs, lrs[1:])]
            assert all(abs(r - math.sqrt(2)) < 0.01 for r in ratios)


def test_tuning_cells_use_only_tuning_seeds_and_every_arm_is_tuned():
    cells = STUDIES["prose-lr"].cells()
    assert {c.seed for c in cells} == set(prose.TUNING_SEEDS)
    assert not set(prose.TUNING_SEEDS) & set(prose.CONFIRMATORY_SEEDS + prose.EXTRA_SEEDS)
    assert {c.variant for c in cells} == {"none", "ln", "rms"}
    assert {c.preset for c in cells} >= {prose.preset_name(r, "0") for r in prose.RECIPE_NAMES}
    assert len(prose.CONFIRMATORY_SEEDS) >= 6


def _planted(recipe="gpt2", level="0", arm="ln", losses=None):
    """Tuning runs of one arm: losses[lr] = per-seed final losses."""
    rows = []
    for lr, values in losses.items():
        for seed, value in zip(prose.TUNING_SEEDS, values):
            rows.append({"cfg.preset": prose.preset_name(recipe, level), "cfg.variant": arm, "cfg.lr": lr,
                         "cfg.seed": seed, "val_loss": value, "val_loss_per_char": value / 4, "failed": False})
    return pd.DataFrame(rows)


def test_best_lr_rule_brackets_extends_and_reports_the_runner_up():
    lrs = prose.grid("gpt2", "0", "ln")
    interior = {lr: [3.0 + abs(i - 2) * 0.01 + s * 0.001 for s in range(3)] for i, lr in enumerate(lrs)}
    found = prose.best_lrs(_planted(losses=interior), "gpt2", "0")["ln"]
    assert found["best"] == lrs[2] and found["bracketed"] and found["runner_up"] in (lrs[1], lrs[3])
    edge = {lr: [3.0 + i * 0.01] * 3 for i, lr in enumerate(lrs)}
    found = prose.best_lrs(_planted(losses=edge), "gpt2", "0")["ln"]
    assert found["best"] == lrs[0] and not found["bracketed"]
    assert found["extend_to"] == pytest.approx(lrs[0] / math.sqrt(2), rel=0.01)
    failed = _planted(losses=interior)
    failed.loc[failed["cfg.lr"] == lrs[2], "failed"] = True  # a LR with a failed run never wins
    assert prose.best_lrs(failed, "gpt2", "0")["ln"]["best"] != lrs[2]


@needs_records
def test_tuning_record_and_report_show_the_lead():
    lrs = prose.grid("gpt2", "0", "ln")
    runs = _planted(losses={lr: [3.0 + abs(i - 2) * 0.01 + 0.002 * s for s in range(3)]
                            for i, lr in enumerate(lrs)})
    record = analysis.tuning_record(runs)
    cell = next(c for c in record["cells"] if (c["recipe"], c["level"], c["arm"]) == ("gpt2", "0", "ln"))
    assert cell["best"] == lrs[2] and cell["lead"] == pytest.approx(0.01) and cell["lead_se"] == pytest.approx(0)
    record.update(study="prose-lr", commit="abc", planned=90, runs_sha256="f" * 12, description="d", note="n",
                  question="q")
    page = analysis.render("prose_tuning.md.j2", record)
    assert f"| gpt2 | 0 | ln | {lrs[0]}: 3.0220" in page and "0.0100 ± 0.0000" in page
    assert "| gpt2 | 0 | none |" in page and "pending" in page  # an arm without runs yet
    assert f"{record['bigram_bits_per_byte']:.3f} bits per byte" in page and "at least 10% below it" in page


def amendment_commit(number: int = 17) -> str:
    """The first commit whose docs/PROTOCOL.md holds amendment `number`."""
    out = subprocess.run(["git", "log", "--reverse", "--format=%H", "-S", f"### Amendment {number} ", "--",
                          "docs/PROTOCOL.md"], cwd=repo_root(), capture_output=True, text=True, check=True).stdout
    return out.split()[0] if out.split() else ""


def descends_from(commit: str, ancestor: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", ancestor, commit], cwd=repo_root(),
                          capture_output=True).returncode == 0


def test_the_amendment_precedes_every_prose_run():
    ancestor = amendment_commit()
    summaries = [p for study in ("prose-lr", "prose", "prose-budget")
                 for p in (repo_root() / "runs" / study).rglob("summary.json")]
    if not ancestor:
        assert not summaries, "prose runs exist but no commit registers amendment 17"
        pytest.skip("amendment 17 not committed yet")
    for path in summaries:
        commit = json.loads(path.read_text())["git_commit"]
        assert descends_from(commit, ancestor), f"{path}: trained at {commit[:12]}, before amendment 17"
    # the check can fail: the commit before the amendment does not descend from it
    parent = subprocess.run(["git", "rev-parse", f"{ancestor}^"], cwd=repo_root(), capture_output=True,
                            text=True).stdout.strip()
    assert not descends_from(parent, ancestor)


@pytest.mark.committed
def test_registered_extensions_and_lrs_are_what_the_tuning_runs_give():
    """EXTENSIONS and BEST_LR are typed in by the registered rule only: every complete arm whose best sits at an
    edge has the point beyond it registered, and a best LR is registered exactly where it is bracketed."""
    index = repo_root() / "runs" / "prose-lr" / "runs.csv"
    if not index.is_file():
        pytest.skip("no prose tuning runs committed")
    runs = pd.read_csv(index)
    for level in prose.LEVELS:
        for recipe in prose.RECIPE_NAMES:
            found = prose.best_lrs(runs, recipe, level)
            for arm in prose.ARMS:
                got = found[arm]
                if got.get("complete") and got["bracketed"]:
                    assert prose.lr_of(recipe, level, arm) == got["best"], (recipe, level, arm)
                else:
                    assert prose.lr_of(recipe, level, arm) is None, f"{recipe} size {level} {arm}: not bracketed yet"
                if got.get("complete") and got["extend_to"]:
                    assert got["extend_to"] in prose.EXTENSIONS.get((recipe, level), {}).get(arm, []), \
                        (recipe, level, arm)
    for (recipe, level), arms in prose.EXTENSIONS.items():  # nothing registered beyond what some run asked for
        for arm, points in arms.items():
            assert all(p not in {prose._snap(prose.centre(recipe, level, arm) * prose.LR_STEP ** j)
                                 for j in range(-prose.GRID_HALF_WIDTH[level], prose.GRID_HALF_WIDTH[level] + 1)}
                       for p in points), (recipe, level, arm)


def test_amendment_19_precedes_every_run_at_its_budgets():
    """Runs at the budgets amendment 19 set (size 0 at 1,920 iterations, sizes 1 and 2) and every budget-control
    and confirmatory run descend from it; size 0's 480-iteration tuning runs came before it."""
    ancestor = amendment_commit(19)
    later = {prose.preset_name(r, level) for r in prose.RECIPE_NAMES for level in prose.LEVELS[1:]}
    for study in ("prose-lr", "prose", "prose-budget"):
        for path in (repo_root() / "runs" / study).rglob("summary.json"):
            summary = json.loads(path.read_text())
            if study != "prose-lr" or summary["preset"] in later:
                assert ancestor, f"{path}: a run at amendment 19's budgets but no commit registers it"
                assert descends_from(summary["git_commit"], ancestor), f"{path}: trained before amendment 19"
    if not ancestor:
        pytest.skip("amendment 19 not committed yet")


def test_amendment_20_seeds_follow_the_pilot_and_the_compute():
    """Seeds 6-9 go to every recipe at sizes 0-x4 and 1 because the pilot's item-sampling MDE at 6 seeds exceeds
    the limit at every preset piloted; size 2 may have them only where the projection with them fits the limit."""
    from embnorm_lib.lmtasks.pilot_prose import RECORD
    from embnorm_lib.studies import prose_setup

    pilot = json.loads(RECORD.read_text())
    assert pilot and all(p["seeds"] == len(prose.CONFIRMATORY_SEEDS) for p in pilot.values())
    over = all(p["mde_item_sampling_lower_bound"] > prose.MDE_LIMIT for p in pilot.values())
    for recipe in prose.RECIPE_NAMES:
        assert ({"0-x4", "1"} <= set(prose.SEEDS_ADDED.get(recipe, ()))) == over
        for level in prose.MAIN_LEVELS:
            want = 10 if level in prose.SEEDS_ADDED.get(recipe, ()) else 6
            assert len(prose.confirmatory_seeds(recipe, level)) == want
    if any("2" in levels for levels in prose.SEEDS_ADDED.values()):
        times = json.loads(prose_setup.STEP_TIMES.read_text())
        every = prose_setup.projection(times, prose_setup.landed_wall_seconds(), every_level_added=True)
        assert every["total"] <= prose.COMPUTE_LIMIT_HOURS


def test_the_projection_counts_measured_times_and_added_seeds():
    from embnorm_lib.studies import prose_setup

    times = json.loads(prose_setup.STEP_TIMES.read_text())
    none = prose_setup.projection(times, {})
    assert none["spent"] == 0 and none["ratio"] == 1.0
    preset = prose.preset_name("gpt2", "1")
    slow = prose_setup.projection(times, {preset: [2 * 3600 * prose_setup.run_hours(preset, times)] * 2})
    assert slow["ratio"] == pytest.approx(2.0) and slow["total"] == pytest.approx(2 * none["total"])
    every = prose_setup.projection(times, {}, every_level_added=True)
    size2 = 3 * 2 * len(prose.EXTRA_SEEDS) * sum(prose_setup.run_hours(prose.preset_name(r, "2"), times)
                                                  for r in prose.RECIPE_NAMES) / 2
    assert every["total"] - none["total"] == pytest.approx(size2 if "2" not in prose.SEEDS_ADDED["gpt2"] else 0)


def test_confirmatory_and_budget_runs_are_scored_on_suite_v3_and_tuning_runs_are_not():
    for name in prose.SCORED_STUDIES:
        cells = STUDIES[name].cells()
        assert cells and all(c.config().lm_eval for c in cells), name
    assert not any(c.config().lm_eval for c in STUDIES["prose-lr"].cells())
    assert {c.seed for c in STUDIES["prose-budget"].cells()} == set(prose.CONFIRMATORY_SEEDS)


def test_amendment_20_precedes_every_confirmatory_and_budget_run():
    ancestor = amendment_commit(20)
    for study in prose.SCORED_STUDIES:
        for path in (repo_root() / "runs" / study).rglob("summary.json"):
            assert ancestor, f"{path}: a confirmatory prose run but no commit registers amendment 20"
            assert descends_from(json.loads(path.read_text())["git_commit"], ancestor), f"{path}: before amendment 20"
    if not ancestor:
        pytest.skip("amendment 20 not committed yet")


def test_the_corpus_feeds_no_rung_past_its_four_passes():
    """The data can feed the model (issue 112 item 4): every registered size's budget stays within 4 passes, and the
    largest model the split feeds at 20 tokens per parameter is 4 x train tokens / 20, under 10M parameters for this
    corpus (so issue 112 item 9's >= 10M rung needs more text, not a GPU alone)."""
    from embnorm_lib.core.presets import PROSE_RUNGS, prose_params, prose_records
    from embnorm_lib.studies.prose_setup import largest_fed

    train_tokens = prose_records()[1]["train_tokens"]
    assert largest_fed(train_tokens) == 4 * train_tokens // 20 and largest_fed(1000) == 200
    assert all(prose_params(rung) <= largest_fed() for rung in range(len(PROSE_RUNGS)))
    assert largest_fed() < 10_000_000


def test_the_embedding_decay_cells_are_the_size_1_confirmatory_cells_with_the_tables_undecayed():
    """Amendment 21: each cell is a `prose` cell of size 1 (same arm, seed, LR, scoring) but for emb_weight_decay=0,
    seeds 0-5 only, and a cell exists only once its arm's LR is registered."""
    decay_off = STUDIES[prose.EMB_DECAY_STUDY].cells()
    confirmatory = {(c.preset, c.variant, c.seed): c.config() for c in STUDIES["prose"].cells()
                    if c.preset.endswith(f"-{prose.EMB_DECAY_LEVEL}")}
    assert {c.seed for c in decay_off} <= set(prose.CONFIRMATORY_SEEDS)
    assert {(c.preset, c.variant) for c in decay_off} == {(p, v) for p, v, _ in confirmatory}
    for cell in decay_off:
        cfg = cell.config()
        twin = confirmatory[(cell.preset, cell.variant, cell.seed)]
        assert cfg.emb_weight_decay == 0.0 and twin.emb_weight_decay is None and cfg.lm_eval
        assert {k for k, v in cfg.training_identity().items() if twin.training_identity()[k] != v} == {
            "emb_weight_decay"}, cell.label()
        assert "emb_weight_decay=0.0" in str(cell.run_dir("runs"))
    assert STUDIES[prose.EMB_DECAY_STUDY].status == "exploratory"


def test_amendment_21_precedes_every_embedding_decay_run():
    ancestor = amendment_commit(21)
    for path in (repo_root() / "runs" / prose.EMB_DECAY_STUDY).rglob("summary.json"):
        assert ancestor, f"{path}: an embedding-decay run but no commit registers amendment 21"
        assert descends_from(json.loads(path.read_text())["git_commit"], ancestor), f"{path}: before amendment 21"
    if not ancestor:
        pytest.skip("amendment 21 not committed yet")


def test_a_pages_run_count_is_the_registered_design_and_does_not_move_when_an_lr_registers(monkeypatch, tmp_path):
    """The confirmatory cells register size by size as LRs are tuned: "4 of 80" became "4 of 90" when gpt2 size 1's
    rms LR registered. Pages count against the design's total; only the "registered so far" figure moves."""
    from embnorm_lib.runner.registry import planned_runs
    from embnorm_lib.studies import ladder_data

    full = {s: planned_runs(s) for s in (prose.CONFIRM_STUDY, prose.BUDGET_STUDY, prose.EMB_DECAY_STUDY)}
    arms, recipes = len(prose.ARMS), len(prose.RECIPE_NAMES)
    assert full[prose.CONFIRM_STUDY] == arms * sum(len(prose.confirmatory_seeds(r, level))
                                                  for level in prose.MAIN_LEVELS for r in prose.RECIPE_NAMES)
    assert full[prose.BUDGET_STUDY] == full[prose.EMB_DECAY_STUDY] == arms * recipes * len(prose.CONFIRMATORY_SEEDS)
    before = len(STUDIES[prose.CONFIRM_STUDY].cells())
    fewer = {key: dict(lrs) for key, lrs in prose.BEST_LR.items()}
    fewer[("gpt2", "1")].pop("rms", None)
    fewer[("gpt2", "1")].pop("ln", None)
    monkeypatch.setattr(prose, "BEST_LR", fewer)
    assert len(STUDIES[prose.CONFIRM_STUDY].cells()) < before  # fewer cells registered ...
    for study, total in full.items():  # ... the same design
        assert planned_runs(study) == total
    assert planned_runs(prose.TUNING_STUDY) == len(STUDIES[prose.TUNING_STUDY].cells())  # grids grow by the rule
    # the adequate-data ladder declares its design the same way (its rungs, too, registered as their LRs were tuned)
    assert planned_runs(ladder_data.LADDER_DATA) == ladder_data.confirmatory_runs_planned() == 120
    record = json.loads((repo_root() / "runs" / prose.CONFIRM_STUDY / "result.json").read_text())
    assert record["planned"] == full[prose.CONFIRM_STUDY] and record["registered"] == before
