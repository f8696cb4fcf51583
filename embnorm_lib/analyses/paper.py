"""The paper (issue 19): paper/paper.pdf built from the committed studies, every number read from generated data.

    python -m embnorm_lib paper            # paper/data.json, paper/figures/*.svg, then paper/paper.pdf (typst)

Data flows one way: runs.csv and the analysis outputs (family.csv, decision.json) -> `paper_data` -> data.json and
figures -> paper.typ (prose written once, numbers only through `data.json`) -> paper.pdf via the `typst` package,
which bundles its compiler (no system TeX). tests/test_paper.py checks data.json against the committed analysis and
that paper.typ types no decimal number of its own."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import entry
from ..core.records.io import published, read_json, repo_root, runs_root
from ..core.records.rundir import study_dir_for
from ..publishing.paper import (  # noqa: F401 (data_json, latex_export: importable from here as before)
    PAPER_DIR,
    compile_paper,
    data_json,
    json_records,
    json_safe,
    latex_export,
    write_paper_inputs,
)
from ..runner.results import has_index, load_runs
from ..stats import seeds_behind
from ..studies import STUDIES
from ..studies.paper_sources import (  # noqa: F401 (REGISTRATION, BOUNDARY_KEYS: importable from here as before)
    BOUNDARY_KEYS,
    H1B,
    LADDER,
    LADDER_LR,
    MAIN,
    PRELIM,
    REGIMES,
    REGISTRATION,
    SCALE,
)
from .paper_figures import FAMILY_METRICS, PAPER_FIGURES
from .paper_ladder import TUNING_SEEDS, ladder_data, subword_bigram

# Facts quoted from other papers (kept here, not typed into the source, so the source types no number at all)
EXTERNAL_FACTS = {"lescao_scale": "1.3B"}


def family_rows(study: str, scope: str, out: Path) -> list[dict]:
    """The registered family of one study/regime, as the analysis wrote it (analysis/<scope>/family.csv)."""
    family = pd.read_csv(study_dir_for(study, out).analysis / scope / "family.csv")
    keep = ["variant", "metric", "n", "baseline_mean", "variant_mean", "mean_diff", "ci_low", "ci_high", "p_holm",
            "significant"]
    family = family[family["metric"].isin(FAMILY_METRICS)][keep]
    return [{k: json_safe(v) for k, v in row.items()} for row in family.to_dict("records")]


def paper_data(out: Path) -> dict:
    """Everything the paper quotes, computed from the committed studies."""
    from ..analyses.budget import budget_table, load_budget_runs
    from ..core.corpora.data import load_corpus
    from ..studies.seed_study import SEED_STUDY_TABLE1
    from .replication import replication_table

    main_runs = load_runs(MAIN, out)
    data: dict = {"runs_commits": sorted({str(c)[:12] for c in main_runs["git_commit"]}), "regimes": {}}
    for scope in REGIMES:
        decision = read_json(study_dir_for(MAIN, out).analysis / scope / "decision.json")
        runs = load_runs(MAIN, out)
        runs = runs[runs["cfg.preset"] == scope]
        family = family_rows(MAIN, scope, out)
        data["regimes"][scope.replace("-", "_")] = {
            "family": family, "overall": decision["overall"],
            "seeds": seeds_behind([r for r in family if r["metric"] == "val_loss"], f"{MAIN} {scope}"),
            "iters": int(runs["cfg.max_iters"].iloc[0]),
            "n_layer": int(runs["cfg.n_layer"].iloc[0]), "n_embd": int(runs["cfg.n_embd"].iloc[0]),
            "params_none": int(runs.loc[runs["variant"] == "none", "n_params"].iloc[0])}
    from .. import stats
    from ..core.config import RunConfig
    from ..core.corpora.data import TRAIN_FRACTION
    from ..core.scoring import calibration

    data["protocol"] = {"mei": stats.MEI, "alpha": stats.ALPHA, "ece_bins": calibration.N_BINS,
                        "train_percent": round(100 * TRAIN_FRACTION), "ci_percent": 95,
                        "p_floor": 0.001,  # smaller p-values are written "p < 0.001"
                        "power_percent": round(100 * stats.MDE_POWER),
                        # a loss spike: a training loss above this factor times the median of the window's steps before
                        "spike_factor": RunConfig.spike_factor, "spike_window": RunConfig.spike_window}
    data["external"] = EXTERNAL_FACTS
    from ..tools.baselines import load as load_baselines

    # a count bigram on the same split: the abstract's "count-bigram level" states its number (reviewer)
    data["char_bigram"] = load_baselines()["tinyshakespeare/char"]["bigram_nats_per_token"]
    prelim = load_runs(PRELIM, out)
    rep = replication_table(prelim)
    data["replication"] = {v: {k: json_safe(x) for k, x in row.items()} for v, row in rep.iterrows()}
    data["replication_setup"] = {"n_layer": int(prelim["cfg.n_layer"].iloc[0]), "n_embd": int(prelim["cfg.n_embd"].iloc[0]),
                                 "iters": int(prelim["cfg.max_iters"].iloc[0]),
                                 "emb_init_std": json_safe(prelim["cfg.emb_init_std"].iloc[0])}
    data["seed_study_table1"] = SEED_STUDY_TABLE1
    budget = budget_table(load_budget_runs(out), len(load_corpus().train))
    data["budget"] = [{k: json_safe(v) for k, v in row.items()} for row in budget.to_dict("records")]
    data["compute"] = compute_spent(out)
    data["lr_boundary"] = {key: lr_boundary_data(study, out) for key, study in BOUNDARY_KEYS.items()
                           if has_index(study, out)}
    if has_index(SCALE, out):
        data["scale_vs_norm"] = scale_data(out)
    if has_index(H1B, out):
        data["h1b"] = h1b_data(out)
        data["length"] = length_data(out)
    throughput = out / "throughput.json"
    if throughput.is_file():
        t = read_json(throughput)
        data["throughput"] = {"summary": t["summary"], "rounds": t["rounds"], "preset": t["preset"],
                              "threads": t["threads"]}
    gpu = gpu_check_data(out)
    if gpu:
        data["gpu_check"] = gpu
    zeroshot = zeroshot_data(out)
    if zeroshot:
        data["zeroshot_v2"] = zeroshot
    if has_index(LADDER_LR, out):
        data[LADDER] = ladder_data(out)
        data["design_limits"] = design_limits(out)
    data["registration"] = registration_data(out)
    data["recipes"] = recipes_data(out)
    return published(data)  # rounded: the same data.json on every CPU


def recipes_data(out: Path) -> dict:
    """The training recipe of the studies the paper quotes (paper_sources.RECIPE_ROWS), as runs/RECIPES.md reads it
    from their configs: one row per study and preset, and the settings every committed run shares."""
    from ..publishing.recipe_table import COLUMNS, recipe_table, shared_settings
    from ..studies.paper_sources import RECIPE_ROWS

    table = recipe_table(out)
    shared = shared_settings(table)
    rows = table[table["study"].isin(list(RECIPE_ROWS))]
    shown = [c for c in COLUMNS if c not in shared and c != "precision"]
    return {"shared": {k: str(v) for k, v in shared.items()}, "columns": shown,
            "rows": [{"role": RECIPE_ROWS[r["study"]], "runs": int(r["runs"]),
                      **{c: str(r[c]).replace("`", "") for c in shown}} for r in rows.to_dict("records")]}


def registration_data(out: Path) -> list[dict]:
    """REGISTRATION with, per claim, the commits its studies' runs recorded (sorted), for the test against git."""
    rows = []
    for claim in REGISTRATION:
        commits = sorted({str(c)[:12] for study in claim["studies"] if has_index(study, out)
                          for c in load_runs(study, out)["git_commit"]})
        rows.append({**claim, "run_commits": commits})
    return rows


def design_limits(out: Path) -> dict:
    """The design's limits that the paper discloses, computed from the committed runs (issue 72): the character
    ladder's data-bound rungs (none's final validation and training loss per rung, passes over the training split),
    the LR grid's resolution beside the arm effects, the reuse of the LR check's seeds, the clipping asymmetry, and
    a count bigram model on subword tokens as the floor the subword ladder should be read against."""
    from ..analyses import ladder
    from ..core.config import LADDER_RUNGS, LADDER_TOKENS_PER_ITER, PRESETS
    from ..core.corpora.data import load_corpus

    train_chars = len(load_corpus().train)
    runs = load_runs(LADDER, out)
    rungs = []
    for rung in range(len(LADDER_RUNGS)):
        at = runs[runs["cfg.preset"] == f"ladder-{rung}"]
        none = at[at["variant"] == "none"]
        if none.empty:
            continue
        tuning = none[none["seed"].isin(TUNING_SEEDS)]["val_loss"].mean()
        fresh = none[~none["seed"].isin(TUNING_SEEDS)]["val_loss"].mean()
        clip = at.groupby("variant")["clipped_frac"].mean()
        rungs.append({"rung": rung, "params": int(none["n_params"].iloc[0]),
                      "passes": PRESETS[f"ladder-{rung}"]["max_iters"] * LADDER_TOKENS_PER_ITER / train_chars,
                      "none_val": float(none["val_loss"].mean()), "none_train": float(none["final_train_loss"].mean()),
                      "tuning_seed_gap": float(tuning - fresh),
                      "clipped": {v: float(x) for v, x in clip.items()}})
    # adjacent LR points of the check: how much the loss moves between neighbouring rates of a factor-2 grid, beside
    # the size of the arm effects the ladder resolves
    check = ladder.lr_check(load_runs(LADDER_LR, out))
    steps = []
    for (rung, _variant), sub in check[check["tokenizer"] == "char"].groupby(["rung", "variant"]):
        losses = sub.sort_values("factor")["val_loss_mean"].dropna().to_numpy()
        best = int(np.argmin(losses))
        steps += [abs(losses[j] - losses[best]) for j in (best - 1, best + 1) if 0 <= j < len(losses) and rung >= 1]
    family = ladder.finished(ladder.primary(ladder.rung_table(runs)))
    effects = family[family["preset"] != "ladder-0"]["mean_diff"].abs()
    return {"rungs": rungs, "tuning_seeds": list(TUNING_SEEDS), "adjacent_lr_step_min": float(min(steps)),
            "adjacent_lr_step_max": float(max(steps)), "arm_effect_max": float(effects.max()),
            "adjacent_lr_steps": len(steps), "adjacent_lr_steps_above_effect": int(sum(x > effects.max() for x in steps)),
            "bigram": subword_bigram(out)}


def gpu_check_data(out: Path) -> dict | None:
    """The main study re-trained on a GPU (runs/bench-gpu.json, `bench_gpu study main` then `bench_gpu compare
    main`), beside the committed runs: exploratory, a check of the instrument rather than a registered analysis."""
    path = out / "bench-gpu.json"
    if not path.is_file():
        return None
    bench = read_json(path)
    part = bench.get("parts", {}).get("study:main", {})
    compared = part.get("against_committed_cpu")
    if not compared:
        return None
    paired = compared["paired_diff_to_none_by_arm"]
    return {"gpu": bench["gpu"], "runs": part["runs"], "failures": part["failures"],
            "study_wall_s": part["study_wall_s"], "runs_compared": compared["runs_compared"],
            "max_abs_val_loss_diff": compared["max_abs_val_loss_diff"],
            "same_sign_every_seed": all(arm["same_sign_every_seed"] for arm in paired.values()),
            "paired": {scope.replace("-", "_"): {variant: {"gpu": paired[f"{variant}_preset={scope}"]["here_mean"],
                                                           "cpu": paired[f"{variant}_preset={scope}"]["committed_mean"]}
                                                 for variant in ("ln", "rms")}
                       for scope in REGIMES}}


# the exploratory LR searches: the base model with / without clipping, and the deeper model (clipping on)
def compute_spent(out: Path) -> list[dict]:
    """Per committed study: its runs, those trained here (not copied from an identical run), the sum of their
    wall-clock hours (each at its own thread count), the threads per run, and the commits that produced them."""
    from ..runner.results import reused_mask

    rows = []
    for name in STUDIES:
        if not has_index(name, out):
            continue
        runs = load_runs(name, out)
        trained = runs[~reused_mask(runs)]
        threads = sorted({int(t) for t in trained.get("cfg.torch_threads", pd.Series(dtype=float)).dropna()})
        rows.append({"study": name, "runs": len(runs), "trained": len(trained),
                     "run_hours": float(trained["wall_s"].sum() / 3600) if "wall_s" in trained else None,
                     "threads": threads, "commits": sorted({str(c)[:12] for c in runs["git_commit"]})})
    return rows


def lr_boundary_data(study: str, out: Path) -> dict:
    """One exploratory LR search: its grid, the failures per arm and LR, each arm's max stable LR per seed, and
    each arm at its own best LR against none at none's (paired, Holm)."""
    from ..analyses.boundary import (
        best_lr_of_complete_seeds,
        complete_seed_runs,
        failure_escapes,
        max_stable_lr_per_seed,
        phase_table,
        search_label,
        search_precision,
    )

    runs = load_runs(study, out)
    curves = complete_seed_runs(runs)  # each arm's best LR from the seeds that finished the whole grid
    best = best_lr_of_complete_seeds(curves)
    phase = phase_table(runs)
    grid = STUDIES[study].cells()
    lrs = sorted({c.config().lr for c in grid})
    return {"runs": len(runs), "planned": len(grid), "lr_points": len(lrs), "lr_min": lrs[0], "lr_max": lrs[-1],
            "seeds": int(runs["seed"].nunique()), "iters": int(runs["cfg.max_iters"].iloc[0]),
            "layers": int(runs["cfg.n_layer"].iloc[0]), "grad_clip": json_safe(runs["cfg.grad_clip"].iloc[0]),
            "precision": search_precision(runs), "label": search_label(runs),
            "escapes": json_records(failure_escapes(phase), ["variant", "cfg.lr"]),
            "phase": json_records(phase, ["variant", "cfg.lr", "failed", "runs", "val_loss_not_failed"]),
            "failures": json_records(phase[phase["failed"] > 0], ["variant", "cfg.lr", "failed", "runs"]),
            "max_stable_lr": {v: sorted({json_safe(x) for x in sub["max_stable_lr"]})
                              for v, sub in max_stable_lr_per_seed(runs).query("complete").groupby("variant")},
            "curve_seeds": int(curves["seed"].nunique()),
            "best_lr": json_records(best, ["variant", "best_lr", "loss", "none_loss", "delta_vs_none", "ci_low",
                                       "ci_high", "p_holm", "significant"]) if len(best) else []}


def length_data(out: Path) -> dict:
    """Exploratory: each arm's loss difference from none early and late in the window (the tuned runs)."""
    from ..analyses.length import EARLY, LATE, band_summary, position_deltas, tuned_positions

    positions = tuned_positions(out)
    if positions.empty:
        return {}
    bands = band_summary(position_deltas(positions)).set_axis(["variant", "early", "late"], axis=1)
    return {"seeds": sorted(int(s) for s in positions["seed"].unique()), "bands": json_records(bands, list(bands.columns)),
            "early": list(EARLY), "late": list(LATE)}


def scale_data(out: Path) -> dict:
    """Exploratory: per init regime (embedding std x tied/untied head) each arm's paired difference from none, with
    block 1's input norm at init; normalizing (ln_matched) against rescaling (scaled_unit, scaled)."""
    from ..analyses.scale import STUDY, init_input_norms, normalizing_share, regime_table

    runs = load_runs(STUDY, out)
    table = regime_table(runs, init_input_norms(STUDY, out))
    shares = normalizing_share(table, runs)
    keep = [c for c in ("emb_init_std", "head", "variant", "seeds", "init_block1_input_norm", "delta_vs_none",
                        "ci_low", "ci_high", "p_holm", "significant") if c in table]
    return {"runs": len(runs), "planned": len(STUDIES[STUDY].cells()), "rows": json_records(table, keep),
            "shares": json_records(shares, list(shares.columns))}


def zeroshot_data(out: Path, study: str = MAIN) -> dict:
    """Confirmatory (amendments 1 and 3): suite v2's zero-shot family per regime of the main study that it scored,
    keyed like `regimes` (the preset, with underscores)."""
    from ..analyses import zeroshot

    found = {}
    for regime, d in zeroshot.analyse(study, out, bootstrap=False).items():
        family = json_records(d["family"], ["variant", "task", "n", "none", "variant_acc", "mean_diff", "ci_low",
                                        "ci_high", "p_holm", "significant"])
        key = regime.removeprefix("preset=").replace("-", "_")
        found[key] = {"study": study, "seeds": d["seeds"], "arms": d["arms"], "family": family,
                      "difficulty": json_records(d["difficulty"], ["task", "none_acc", "above_chance", "below_ceiling"]),
                      "mde": max(json_safe(x) for x in d["mde"]["mde_at_seeds_used"]), "tasks": len(d["difficulty"]),
                      "items_min": min(d["items"].values()), "chance": zeroshot.CHANCE}
    return found


def h1b_data(out: Path) -> dict:
    """The confirmatory H1b study (amendment 2): per regime its family and decision rule 3, on the seeds whose
    every cell has finished."""
    from ..analyses import h1b
    from .boundary import fisher_vs_none

    d = h1b.analyse(out)
    regimes = {}
    for clip, (family, decision) in d["confirmatory"].items():
        failures = family[family["endpoint"] == "failures"].iloc[0]
        n, none_failed = int(failures["n"]), int(failures["none_value"])
        regimes["clip" if clip else "noclip"] = {
            "family": json_records(family, ["variant", "endpoint", "variant_value", "none_value", "mean_diff", "ci_low",
                                        "ci_high", "n", "p_holm", "significant"]),
            "decision": json.loads(json.dumps(decision, default=json_safe)),
            # the failure test's reach at these seeds: an arm that never failed, against none's count, before Holm
            "fisher_p_if_never_failed": json_safe(fisher_vs_none(0, n, none_failed, n))}
    return {"runs": len(d["every"]), "planned": len(STUDIES[h1b.STUDY].cells()), "seeds": d["seeds"],
            "lr": h1b.CONFIRMATORY_LR, "best_lr": h1b.H1B_BEST_LR, "regimes": regimes}


def write_inputs(out: Path, paper_dir: Path, data: dict | None = None, figures=tuple(PAPER_FIGURES)) -> dict:
    """paper/data.json and the paper's figures from `data` (default: the committed studies' paper_data); `figures`
    names which of PAPER_FIGURES to draw."""
    data = paper_data(out) if data is None else data
    return write_paper_inputs(paper_dir, data, {name: PAPER_FIGURES[name] for name in figures})


def build(out_dir=None, paper_dir=None, pages_png: str | None = None, data: dict | None = None) -> Path:
    """data.json and figures from the runs (or from `data`, paper_data's answer for those runs), then paper.pdf
    (and, for looking at, one PNG per page) and the LaTeX export."""
    out = runs_root(out_dir)
    return compile_paper(Path(paper_dir or repo_root() / PAPER_DIR), paper_data(out) if data is None else data,
                         PAPER_FIGURES, pages_png)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=None)
    p.add_argument("--pages", default=None, help="also write page images, e.g. /tmp/page{p}.png")
    args = p.parse_args(argv)
    print(f"wrote {build(args.out_dir, pages_png=args.pages)}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
