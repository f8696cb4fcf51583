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

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..core.errors import RunDirError, entry
from ..core.io import published, read_json, repo_root, runs_root
from ..core.rundir import study_dir_for
from ..publishing.paper import (  # noqa: F401 (data_json, latex_export: importable from here as before)
    PAPER_DIR,
    compile_paper,
    data_json,
    latex_export,
    write_paper_inputs,
)
from ..runner.results import has_index, load_runs
from ..studies import STUDIES, registered_seeds

# Facts quoted from other papers (kept here, not typed into the source, so the source types no number at all)
EXTERNAL_FACTS = {"lescao_scale": "1.3B"}
FAMILY_METRICS = ("val_loss", "val_acc", "ece_equal_width", "brier", "lm_macro_acc")
METRIC_LABELS = {"val_loss": "validation loss (nats/char)", "val_acc": "next-char accuracy",
                 "ece_equal_width": "ECE (15 bins)", "brier": "Brier score",
                 "lm_macro_acc": "zero-shot macro acc. (suite v1)", "lm2_macro_acc": "zero-shot macro acc. (suite v2)"}


def _clean(value):
    """JSON-safe: numpy scalars to Python, NaN to None."""
    if isinstance(value, (np.floating, float)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value


def family_rows(study: str, scope: str, out: Path) -> list[dict]:
    """The registered family of one study/regime, as the analysis wrote it (analysis/<scope>/family.csv)."""
    family = pd.read_csv(study_dir_for(study, out).analysis / scope / "family.csv")
    keep = ["variant", "metric", "n", "baseline_mean", "variant_mean", "mean_diff", "ci_low", "ci_high", "p_holm",
            "significant"]
    family = family[family["metric"].isin(FAMILY_METRICS)][keep]
    return [{k: _clean(v) for k, v in row.items()} for row in family.to_dict("records")]


def paper_data(out: Path) -> dict:
    """Everything the paper quotes, computed from the committed studies."""
    from ..analyses.budget import budget_table, load_budget_runs
    from ..core.data import load_corpus
    from .findings import SEED_STUDY_TABLE1, replication_table

    main_runs = load_runs("main", out)
    data: dict = {"runs_commits": sorted({str(c)[:12] for c in main_runs["git_commit"]}), "regimes": {}}
    for scope in ("seeds-final", "nanogpt-cpu"):
        decision = read_json(study_dir_for("main", out).analysis / scope / "decision.json")
        runs = load_runs("main", out)
        runs = runs[runs["cfg.preset"] == scope]
        data["regimes"][scope.replace("-", "_")] = {
            "family": family_rows("main", scope, out), "overall": decision["overall"],
            "seeds": int(runs["seed"].nunique()), "iters": int(runs["cfg.max_iters"].iloc[0]),
            "n_layer": int(runs["cfg.n_layer"].iloc[0]), "n_embd": int(runs["cfg.n_embd"].iloc[0]),
            "params_none": int(runs.loc[runs["variant"] == "none", "n_params"].iloc[0])}
    from .. import stats
    from ..core import calibration
    from ..core.data import TRAIN_FRACTION

    data["protocol"] = {"mei": stats.MEI, "alpha": stats.ALPHA, "ece_bins": calibration.N_BINS,
                        "train_percent": round(100 * TRAIN_FRACTION), "ci_percent": 95,
                        "p_floor": 0.001,  # smaller p-values are written "p < 0.001"
                        "power_percent": round(100 * stats.MDE_POWER)}
    data["external"] = EXTERNAL_FACTS
    prelim = load_runs("seeds-prelim", out)
    rep = replication_table(prelim)
    data["replication"] = {v: {k: _clean(x) for k, x in row.items()} for v, row in rep.iterrows()}
    data["replication_setup"] = {"n_layer": int(prelim["cfg.n_layer"].iloc[0]), "n_embd": int(prelim["cfg.n_embd"].iloc[0]),
                                 "iters": int(prelim["cfg.max_iters"].iloc[0]),
                                 "emb_init_std": _clean(prelim["cfg.emb_init_std"].iloc[0])}
    data["seed_study_table1"] = SEED_STUDY_TABLE1
    budget = budget_table(load_budget_runs(out), len(load_corpus().train))
    data["budget"] = [{k: _clean(v) for k, v in row.items()} for row in budget.to_dict("records")]
    data["compute"] = compute_spent(out)
    data["lr_boundary"] = {key: lr_boundary_data(study, out) for key, study in BOUNDARY_KEYS.items()
                           if has_index(study, out)}
    if has_index("stability-scale-v2", out):
        data["scale_vs_norm"] = scale_data(out)
    if has_index("stability-h1b-v2", out):
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
    if has_index("ladder-lr", out):
        data["ladder"] = ladder_data(out)
        data["design_limits"] = design_limits(out)
    data["registration"] = registration_data(out)
    return published(data)  # rounded: the same data.json on every CPU


# -- what each claim's registration was (issue 72) -----------------------------------------------------------------
# Per claim of the paper: its status, the studies whose runs are its data (the first listed is where the data first
# existed), and the commit of docs/PROTOCOL.md that registered it. "before": registered before any of its runs was
# trained; "after": registered, but after (some of) its data existed; "exploratory": never registered as confirmatory.
# tests/test_paper.py checks each "before"/"after" against git ancestry of the runs' recorded commits.
REGISTRATION = (
    {"claim": "budget", "status": "exploratory", "studies": ["stability-budget", "stability-budget-v2"],
     "registered_by": None, "where": "amendment 1, item 6 (v1 stability studies exploratory)"},
    {"claim": "main_short", "status": "after", "studies": ["seeds-final", "main"], "registered_by": "7948277d",
     "where": "protocol; seeds 0-4 are the seeds-final runs, trained before it"},
    {"claim": "main_long", "status": "before", "studies": ["main"], "registered_by": "7948277d",
     "where": "protocol (interval method amended after, amendment 1)"},
    {"claim": "seed_study", "status": "after", "studies": ["seeds-prelim"], "registered_by": "7948277d",
     "where": "protocol, committed after the runs and their results"},
    {"claim": "scale", "status": "exploratory", "studies": ["stability-scale-v2"], "registered_by": None,
     "where": "exploratory throughout"},
    {"claim": "search", "status": "exploratory", "studies": ["stability-lr-v2", "stability-noclip-v2",
                                                             "stability-deep-v2"],
     "registered_by": None, "where": "amendment 1, item 6 (the search is exploratory)"},
    {"claim": "h1b", "status": "before", "studies": ["stability-h1b-v2"], "registered_by": "7a467f82",
     "where": "amendment 2"},
    {"claim": "zeroshot_v1", "status": "before", "studies": ["main"], "registered_by": "7948277d",
     "where": "protocol (secondary); superseded by amendment 3"},
    {"claim": "zeroshot_v2", "status": "before", "studies": ["main"], "registered_by": "89d30598",
     "where": "amendment 3 (scored after the runs were trained, before any was scored)"},
    {"claim": "ladder", "status": "before", "studies": ["ladder"], "registered_by": "04f27a2f",
     "where": "amendment 4 (per size; the trend across sizes exploratory)"},
    {"claim": "ladder_data", "status": "before", "studies": ["ladder-data"], "registered_by": "65fca37c",
     "where": "amendment 16 (per size; seeds 5-9 by its item 6 rule; the trend across sizes exploratory)"},
    {"claim": "bpe_ladder", "status": "after", "studies": ["ladder-bpe"], "registered_by": "53957780",
     "where": "amendment 7, written while rung 1 ran, before its analysis"},
    {"claim": "bpe_rep", "status": "before", "studies": ["ladder-bpe-rep"], "registered_by": "2ed72d0e",
     "where": "amendment 9"},
    {"claim": "bpe_rep2", "status": "before", "studies": ["ladder-bpe-rep2"], "registered_by": "f2b9dffa",
     "where": "amendment 11"},
    {"claim": "bpe_scale", "status": "exploratory", "studies": ["ladder-bpe-scale"], "registered_by": None,
     "where": "amendment 10 (exploratory)"},
)


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
    from ..core.data import load_corpus

    train_chars = len(load_corpus().train)
    runs = load_runs("ladder", out)
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
    check = ladder.lr_check(load_runs("ladder-lr", out))
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


TUNING_SEEDS = (0, 1)  # the LR check's seeds, reused as the ladder's seeds 0-1 (amendment 5, item 3)
BIGRAM_TOKENIZER = "bpe-4096"


def subword_bigram(out: Path) -> dict:
    """A count bigram on BIGRAM_TOKENIZER tokens, interpolated with the unigram (stats.baselines.count_bigram),
    scored on the validation split in nats per character; beside it none's final validation loss per character at
    the subword ladder's rung 1."""
    from ..core.data import load_corpus
    from ..stats.baselines import count_bigram

    corpus = load_corpus(tokenizer=BIGRAM_TOKENIZER)
    bigram = count_bigram(corpus.train.numpy(), corpus.val.numpy(), corpus.vocab_size)
    runs = load_runs("ladder-bpe", out)
    none = runs[(runs["variant"] == "none") & (runs["cfg.tokenizer"] == BIGRAM_TOKENIZER)
                & (runs["cfg.preset"] == "ladder-1")]
    return {"tokenizer": BIGRAM_TOKENIZER, "unigram_weight": bigram["unigram_weight"],
            "nats_per_char": bigram["nll"] / len(corpus.val_text),
            "none_rung1_per_char": float(none["val_loss_per_char"].mean()),
            "none_rung1_iters": int(none["cfg.max_iters"].iloc[0])}


def subword_budget(runs: pd.DataFrame) -> list[dict]:
    """Per tokenizer of the subword ladder: the tokens every run trains on (the same at every rung: the pass cap
    binds), the passes over the training split they make, and the tokens per non-embedding parameter per rung."""
    from ..core.config import LADDER_RUNGS, non_embedding_params
    from ..studies.ladder import _train_tokens

    found = []
    if not {"tokens", "cfg.tokenizer", "cfg.preset"} <= set(runs.columns):  # an index without them (planted)
        return found
    for tokenizer, sub in runs.groupby("cfg.tokenizer", sort=True):
        tokens = sub["tokens"].unique()
        if len(tokens) != 1:
            raise RunDirError(f"ladder-bpe's {tokenizer} runs train on {sorted(tokens)} tokens; allowed: one budget "
                                f"for every rung (the pass cap)")
        rungs = sorted(int(p.split("-")[1]) for p in sub["cfg.preset"].unique())
        found.append({"tokenizer": tokenizer, "tokens": int(tokens[0]),
                      "passes": float(tokens[0] / _train_tokens(tokenizer)),
                      "tokens_per_param": {str(r): float(tokens[0] / non_embedding_params(*LADDER_RUNGS[r][:2]))
                                           for r in rungs}})
    return found


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
                       for scope in ("seeds-final", "nanogpt-cpu")}}


def ladder_data(out: Path) -> dict:
    """The size ladder so far: ladder-lr's best factor per checked rung and arm, and each ladder's (char and BPE)
    per-size family in final validation loss per character (ladder.primary) where a size has all its registered
    seeds (ladder.finished; a partial size counts only among the runs so far)."""
    from ..analyses import ladder, ladder_sections
    from ..core.config import (
        LADDER_EPOCH_CAP,
        LADDER_RUNGS,
        LADDER_TOKENS_PER_ITER,
        LADDER_TOKENS_PER_PARAM,
        PRESETS,
        TRAIN_CHARS_TINY_SHAKESPEARE,
        non_embedding_params,
    )

    check_runs = load_runs("ladder-lr", out)
    # the character ladder's budget per rung, from its presets: where the 10-pass cap binds, size and tokens per
    # parameter move together, which any trend across sizes mixes in
    tokens = [PRESETS[f"ladder-{r}"]["max_iters"] * LADDER_TOKENS_PER_ITER for r in range(len(LADDER_RUNGS))]
    per_param = [t / non_embedding_params(a, b) for t, (a, b, _) in zip(tokens, LADDER_RUNGS, strict=True)]
    capped = [r for r, t in enumerate(tokens) if t < LADDER_TOKENS_PER_PARAM * non_embedding_params(*LADDER_RUNGS[r][:2])]
    check = ladder.lr_check(check_runs) if len(check_runs) else pd.DataFrame()
    best = ladder.best_factors(check) if len(check) else pd.DataFrame()
    found = {"rungs": len(LADDER_RUNGS), "check_runs": len(check_runs),
             "check_planned": len(STUDIES["ladder-lr"].cells()),
             "best": _records(best, list(best.columns)) if len(best) else [],
             "check": _records(check, ["tokenizer", "rung", "variant", "factor", "seeds", "failed", "val_loss_mean"])
             if len(check) else [],
             "params": {str(r): non_embedding_params(a, b) for r, (a, b, _) in enumerate(LADDER_RUNGS)},
             "shape": {str(r): f"{a} × {b}" for r, (a, b, _) in enumerate(LADDER_RUNGS)},
             "budget": {"tokens_per_param_rule": LADDER_TOKENS_PER_PARAM, "epoch_cap": LADDER_EPOCH_CAP,
                        "first_capped": capped[0] if capped else None, "capped_tokens": tokens[capped[0]] if capped else None,
                        "tokens_per_param": {str(r): v for r, v in enumerate(per_param)}}}
    family, scale, found["subword_runs"] = [], [], 0
    found["subword_planned"] = len(STUDIES["ladder-bpe"].cells())
    finished_rungs: set[int] = set()
    for study in ("ladder", "ladder-bpe"):  # each size's comparison in nats per character, whatever the tokens
        if not has_index(study, out):
            continue
        runs = load_runs(study, out)
        if study == "ladder-bpe":
            found["subword_runs"] = len(runs)
            found["subword_budget"] = subword_budget(runs)
        sizes = ladder.rung_table(runs)
        table = ladder.finished(ladder.primary(sizes))  # only sizes with all their registered seeds, as the README
        if len(table):
            family += _records(table, ["tokenizer", "params", "preset", "variant", "seeds", "mean_diff", "ci_low",
                                       "ci_high", "p_holm", "significant"])
            answers = ladder.scale_answer(sizes)
            scale += _records(answers, ["tokenizer", "variant", "sizes", "params_min", "params_max", "answer",
                                        "slope_per_decade", "slope_ci_low", "slope_ci_high", "at_params",
                                        "extrapolated_diff", "extrapolated_ci_low", "extrapolated_ci_high"]) \
                if len(answers) else []
            if study == "ladder":
                finished_rungs = {int(p.split("-")[1]) for p in table["preset"]}
            # exploratory (outside the registered analysis): gradient-norm peaks at the sizes quoted above
            peaks = ladder_sections.peak_table(runs)
            if len(peaks):
                quoted = set(zip(table["tokenizer"], table["preset"], strict=True))
                peaks = peaks[[k in quoted for k in zip(peaks["tokenizer"], peaks["preset"], strict=True)]]
                found["peaks"] = found.get("peaks", []) + [
                    {**r, "params": found["params"][r["preset"].split("-")[1]]}
                    for r in _records(peaks, ["tokenizer", "preset", "variant", "seeds", "ratio", "ratio_ci_low",
                                              "ratio_ci_high", "p_holm", "significant"])]
    if family:
        found["family"] = family
    found["scale"] = scale
    found["unfinished_rungs"] = [r for r in range(len(LADDER_RUNGS)) if r not in finished_rungs]
    if has_index("ladder", out):  # the first data-bound rung, by the answer's rule (README, FINDINGS say the same)
        from .answer import size_data

        found["plateau_from"] = size_data(out)["plateau_from"]
    if has_index("ladder-data", out):  # amendment 16: each rung once all its registered runs have finished
        from .answer import data_ladder_progress

        found["data_ladder"] = data_ladder_progress(out)
        # the 1 MB ladder's smallest size beside the adequate-data ladder's: shape, iterations, passes over its text
        found["rung0_1mb"] = {"shape": found["shape"]["0"], "iters": PRESETS["ladder-0"]["max_iters"],
                               "passes": tokens[0] / TRAIN_CHARS_TINY_SHAKESPEARE}
    if has_index("ladder-bpe-rep", out):  # amendment 9's replication on fresh seeds, quoted once it has finished
        rep = ladder.finished(ladder.primary(ladder.rung_table(load_runs("ladder-bpe-rep", out))),
                              registered_seeds("ladder-bpe-rep"))
        if len(rep):
            found["replication"] = _records(rep, ["tokenizer", "params", "preset", "variant", "seeds", "mean_diff",
                                                  "ci_low", "ci_high", "p_holm", "significant"])
    if has_index("ladder-bpe-rep2", out):  # amendment 11: rung 2 on fresh seeds, the loss and the peaks confirmatory
        runs2 = load_runs("ladder-bpe-rep2", out)
        rep2 = ladder.finished(ladder.primary(ladder.rung_table(runs2)), registered_seeds("ladder-bpe-rep2"))
        if len(rep2):
            found["replication2"] = _records(rep2, ["tokenizer", "params", "preset", "variant", "seeds", "mean_diff",
                                                    "ci_low", "ci_high", "p_holm", "significant"])
            found["replication2_peaks"] = _records(ladder_sections.peak_table(runs2), [
                "variant", "seeds", "ratio", "ratio_ci_low", "ratio_ci_high", "p_holm", "significant"])
    if has_index("ladder-bpe-scale", out):  # amendment 10, exploratory: what carries the subword gain
        scale_rows = ladder.finished(ladder.primary(ladder.rung_table(load_runs("ladder-bpe-scale", out))),
                                     registered_seeds("ladder-bpe-scale"))
        if len(scale_rows):
            found["subword_scale"] = _records(scale_rows, ["tokenizer", "params", "variant", "seeds", "mean_diff",
                                                           "ci_low", "ci_high", "p_holm", "significant"])
            # validation minus training loss per arm (none included; a description), so a gain that comes with a
            # wider gap to the training split is read as such
            fit = ladder_sections.fit_table(load_runs("ladder-bpe-scale", out))
            found["subword_scale_gap"] = {r.variant: _clean(r.gap) for r in fit.itertuples()} if "gap" in fit else {}
    # the exploratory subword LR checks (amendment 8 at rung 1, 13 at rung 2), each arm once its grid is complete
    for study, amendment in ladder.SUBWORD_LR_CHECKS.items():
        if not has_index(study, out):
            continue
        _, sub_best, at_best = ladder.check_summary(load_runs(study, out))
        found.setdefault("subword_check", []).extend(
            {**r, "amendment": amendment} for r in (_records(sub_best, list(sub_best.columns)) if len(sub_best) else []))
        found.setdefault("subword_at_best", []).extend(
            _records(at_best.dropna(subset=["diff_vs_none"]), list(at_best.columns)) if len(at_best) else [])
    return found


# the exploratory LR searches: the base model with / without clipping, and the deeper model (clipping on)
BOUNDARY_KEYS = {"clip": "stability-lr-v2", "noclip": "stability-noclip-v2", "deep": "stability-deep-v2",
                 "deep32": "stability-deep32-v2",
                 "bf16": "stability-bf16-v2"}


def _records(frame: pd.DataFrame, columns: list[str]) -> list[dict]:
    return [{k: _clean(v) for k, v in r.items()} for r in frame[columns].to_dict("records")]


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
            "layers": int(runs["cfg.n_layer"].iloc[0]), "grad_clip": _clean(runs["cfg.grad_clip"].iloc[0]),
            "precision": search_precision(runs), "label": search_label(runs),
            "escapes": _records(failure_escapes(phase), ["variant", "cfg.lr"]),
            "phase": _records(phase, ["variant", "cfg.lr", "failed", "runs", "val_loss_not_failed"]),
            "failures": _records(phase[phase["failed"] > 0], ["variant", "cfg.lr", "failed", "runs"]),
            "max_stable_lr": {v: sorted({_clean(x) for x in sub["max_stable_lr"]})
                              for v, sub in max_stable_lr_per_seed(runs).query("complete").groupby("variant")},
            "curve_seeds": int(curves["seed"].nunique()),
            "best_lr": _records(best, ["variant", "best_lr", "loss", "none_loss", "delta_vs_none", "ci_low",
                                       "ci_high", "p_holm", "significant"]) if len(best) else []}


def length_data(out: Path) -> dict:
    """Exploratory: each arm's loss difference from none early and late in the window (the tuned runs)."""
    from ..analyses.length import EARLY, LATE, band_summary, position_deltas, tuned_positions

    positions = tuned_positions(out)
    if positions.empty:
        return {}
    bands = band_summary(position_deltas(positions)).set_axis(["variant", "early", "late"], axis=1)
    return {"seeds": sorted(int(s) for s in positions["seed"].unique()), "bands": _records(bands, list(bands.columns)),
            "early": list(EARLY), "late": list(LATE)}


def scale_data(out: Path) -> dict:
    """Exploratory: per init regime (embedding std x tied/untied head) each arm's paired difference from none, with
    block 1's input norm at init; normalizing (ln_matched) against rescaling (scaled_unit, scaled)."""
    from ..analyses.scale import SMALL_SHARE, STUDY, init_input_norms, normalizing_share, regime_table

    runs = load_runs(STUDY, out)
    table = regime_table(runs, init_input_norms(STUDY, out))
    shares = normalizing_share(table)
    keep = [c for c in ("emb_init_std", "head", "variant", "seeds", "init_block1_input_norm", "delta_vs_none",
                        "ci_low", "ci_high", "p_holm", "significant") if c in table]
    return {"runs": len(runs), "planned": len(STUDIES[STUDY].cells()), "rows": _records(table, keep),
            "shares": _records(shares, list(shares.columns)), "small_share": SMALL_SHARE}


def zeroshot_data(out: Path, study: str = "main") -> dict:
    """Confirmatory (amendments 1 and 3): suite v2's zero-shot family per regime of the main study that it scored,
    keyed like `regimes` (the preset, with underscores)."""
    from ..analyses import zeroshot

    found = {}
    for regime, d in zeroshot.analyse(study, out, bootstrap=False).items():
        family = _records(d["family"], ["variant", "task", "n", "none", "variant_acc", "mean_diff", "ci_low",
                                        "ci_high", "p_holm", "significant"])
        key = regime.removeprefix("preset=").replace("-", "_")
        found[key] = {"study": study, "seeds": d["seeds"], "arms": d["arms"], "family": family,
                      "difficulty": _records(d["difficulty"], ["task", "none_acc", "above_chance", "below_ceiling"]),
                      "mde": max(_clean(x) for x in d["mde"]["mde_at_seeds_used"]), "tasks": len(d["difficulty"]),
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
            "family": _records(family, ["variant", "endpoint", "variant_value", "none_value", "mean_diff", "ci_low",
                                        "ci_high", "n", "p_holm", "significant"]),
            "decision": json.loads(json.dumps(decision, default=_clean)),
            # the failure test's reach at these seeds: an arm that never failed, against none's count, before Holm
            "fisher_p_if_never_failed": _clean(fisher_vs_none(0, n, none_failed, n))}
    return {"runs": len(d["every"]), "planned": len(STUDIES[h1b.STUDY].cells()), "seeds": d["seeds"],
            "lr": h1b.CONFIRMATORY_LR, "best_lr": h1b.H1B_BEST_LR, "regimes": regimes}


def forest_figure(data: dict) -> plt.Figure:
    """Paired difference from none per metric and arm, both regimes: mean and 95% t interval; filled = significant
    after Holm (within the regime's family; suite v2's macro rows within its own family, amendment 3)."""
    from ..publishing.plots import arm_color, interval_error

    rows_of = {m: {k: [r for r in e["family"] if r["metric"] == m] for k, e in data["regimes"].items()}
               for m in FAMILY_METRICS if m != "brier"}
    if data.get("zeroshot_v2"):
        rows_of["lm2_macro_acc"] = {k: [r for r in data["zeroshot_v2"].get(k, {}).get("family", [])
                                        if r["task"] == "macro"] for k in data["regimes"]}
    slots = [(regime, v) for regime in data["regimes"] for v in ("ln", "rms")]  # one row per arm, every panel
    # each row named by its regime as Table 2 names it (layers x width, iterations), not by its study's code name
    shapes = {k: f"{e['n_layer']}×{e['n_embd']}, {e['iters']} it." for k, e in data["regimes"].items()}
    labels = [f"{v}, {shapes[regime]}" for regime, v in slots]
    fig, axes = plt.subplots(1, len(rows_of), figsize=(2.1 * len(rows_of), 2.6))
    for ax, (metric, by_regime) in zip(axes, rows_of.items(), strict=True):
        for regime, rows in by_regime.items():
            for row in rows:
                color = arm_color(row["variant"])
                ax.errorbar(row["mean_diff"], slots.index((regime, row["variant"])), xerr=interval_error(row),
                            fmt="o", color=color, mfc=color if row["significant"] else "white", capsize=2)
        ax.axvline(0, color="0.6", lw=0.8)
        ax.set_yticks(range(len(slots)), labels if ax is axes[0] else [""] * len(slots), fontsize=7)
        ax.set_title(METRIC_LABELS[metric], fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(3))  # narrow panels: labels that do not run together
        ax.set_ylim(len(slots) - 0.5, -0.5)  # the first regime on top
    fig.supxlabel("paired difference from none (95% t interval; filled: significant after Holm)", fontsize=8)
    fig.tight_layout()
    return fig


def budget_figure(data: dict) -> plt.Figure:
    """The budget series: each norm's paired difference from none in final validation loss against the training
    budget (exploratory, on the nanoGPT CPU model), with the registered comparison on the same model (main, 2000
    iterations) as diamonds; a marker is filled where Holm resolves it, as in every other figure; passes over the
    training split on the top axis."""
    from ..publishing.plots import arm_color, interval_error

    frame = pd.DataFrame(data["budget"])
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    for variant, sub in frame.groupby("variant"):
        color = arm_color(variant)
        offset = 1.06 if variant == "rms" else 1 / 1.06  # the two arms side by side at each budget
        ax.errorbar(sub["max_iters"] * offset, sub["delta_final"],
                    yerr=[sub["delta_final"] - sub["ci_low_final"], sub["ci_high_final"] - sub["delta_final"]],
                    fmt="-", color=color, capsize=2, label=f"{variant} (budget series, {int(sub['seeds'].max())} "
                                                           "seeds)")
        ax.scatter(sub["max_iters"] * offset, sub["delta_final"], s=18, zorder=3, edgecolors=color,
                   facecolors=[color if resolved else "white" for resolved in sub["significant_final"]])
    registered = data["regimes"]["nanogpt_cpu"]
    for row in (r for r in registered["family"] if r["metric"] == "val_loss"):
        offset = 1.06 if row["variant"] == "rms" else 1 / 1.06
        color = arm_color(row["variant"])
        ax.errorbar(registered["iters"] * offset * 1.12, row["mean_diff"], yerr=interval_error(row), fmt="D",
                    mfc=color if row["significant"] else "white", color=color, capsize=2, ms=5,
                    label=f"{row['variant']} (registered, {registered['seeds']} seeds)")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set(xscale="log", xlabel="training iterations (4 × 128 model)", ylabel="Δ final val. loss (nats/char)")
    budgets = sorted(frame["max_iters"].unique())
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlim(budgets[0] / 1.6, budgets[-1] * 1.6)
    per_iter = frame["epochs"].iloc[0] / frame["max_iters"].iloc[0]  # passes per iteration, from the series
    top = ax.secondary_xaxis("top", functions=(lambda x: x * per_iter, lambda e: e / per_iter))
    top.set_xticks([b * per_iter for b in budgets], [f"{b * per_iter:.2g}" for b in budgets], fontsize=7)
    top.xaxis.set_minor_locator(plt.NullLocator())
    top.set_xlabel("passes over the training split", fontsize=8)
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    return fig


def ladder_figure(data: dict) -> plt.Figure:
    """The size ladder: on top the character ladder's LR check, one panel per rung (each arm's mean final loss
    against its LR factor, the registered best filled); below, one panel per tokenizer of each norm's difference
    from none against model size (95% t intervals, filled where significant after Holm), the two arms side by side,
    and the sizes trained at the 10-pass cap shaded."""
    from ..publishing.plots import arm_color, interval_error
    from .plots import plot_lr_check

    found = data.get("ladder", {})
    check = pd.DataFrame(found.get("check", []))
    check = check[check["tokenizer"] == "char"] if len(check) else check
    panels = check.groupby(["tokenizer", "rung"]).ngroups if len(check) else 0
    family = pd.DataFrame(found.get("family", []))
    tokenizers = list(dict.fromkeys(family["tokenizer"])) if len(family) else []
    fig = plt.figure(figsize=(7.6, 5.6))
    # explicit margins and gaps (tight_layout cannot lay out nested grids) keep each panel's ticks clear of the next
    outer = fig.add_gridspec(2, 1, height_ratios=(1, 1.1), hspace=0.42, left=0.1, right=0.985, top=0.95, bottom=0.09)
    top = outer[0].subgridspec(1, max(panels, 1), wspace=0.5)
    bottom = outer[1].subgridspec(1, max(len(tokenizers), 1), wspace=0.12)
    if panels:
        lr_axes = [fig.add_subplot(top[0, i]) for i in range(panels)]
        plot_lr_check(check, pd.DataFrame(found.get("best", [])), axes=lr_axes)
        lr_axes[0].set_ylabel("final val loss (nats/char)", fontsize=8)  # character rungs only: a token is a character
    capped = found.get("budget", {}).get("first_capped")
    capped_params = [p for r, p in found.get("params", {}).items() if capped is not None and int(r) >= capped]
    plateau = found.get("plateau_from")  # the first data-bound rung, by the answer's rule (README says the same)
    bound_params = [p for r, p in found.get("params", {}).items() if plateau is not None and int(r) >= plateau]
    first = None
    for i, tokenizer in enumerate(tokenizers):
        ax = fig.add_subplot(bottom[0, i], sharey=first)
        first = first or ax
        sub = family[family["tokenizer"] == tokenizer]
        for variant, rows in sub.groupby("variant", sort=False):
            color = arm_color(variant)
            offset = 1.08 if variant == "rms" else 1 / 1.08
            ax.errorbar(rows["params"] * offset, rows["mean_diff"], yerr=interval_error(rows), fmt="o-", ms=4,
                        color=color, mfc="white", capsize=2, label=variant)
            sig = rows[rows["significant"]]
            ax.plot(sig["params"] * offset, sig["mean_diff"], "o", ms=4, color=color, zorder=3)
        if tokenizer == "char" and capped_params:  # the cap binds from one rung, the baseline plateaus from a later
            cap = found["budget"]["epoch_cap"]
            ax.axvspan(min(capped_params) / 1.4, max(capped_params) * 1.4, color="0.94", zorder=0,
                       label=f"{cap} passes (capped)")
            if bound_params:
                ax.axvspan(min(bound_params) / 1.4, max(bound_params) * 1.4, color="0.84", zorder=0,
                           label=f"{cap} passes, data-bound")
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(f"{tokenizer} tokens", fontsize=8)
        ax.tick_params(labelsize=7)
        # a tick at each size: a subword panel spans less than a decade, where log ticks would show one label
        sizes = sorted(sub["params"].unique())
        ax.set_xticks(sizes, [f"{p / 1e6:.2f}M" if p < 1e6 else f"{p / 1e6:.2g}M" for p in sizes])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlabel("non-embedding parameters", fontsize=7)
        if i == 0:
            ax.set_ylabel("Δ final val. loss\nvs none (nats/char)", fontsize=7)
            ax.legend(fontsize=6, loc="lower left")
        else:
            ax.tick_params(labelleft=False)  # shared with the first panel
    return fig


def boundary_figure(data: dict) -> plt.Figure:
    """Share of runs failed against the peak LR per arm, one panel per exploratory search (clipping, depth,
    precision). Ticks at the grid's decades only, or at its rates when it spans less than two decades (the
    32-layer search has two rates), so that no tick labels run together."""
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    from ..publishing.plots import arm_color

    searches = data.get("lr_boundary", {})
    cols = min(max(len(searches), 1), 3)
    rows = max(-(-len(searches) // cols), 1)
    fig, axes = plt.subplots(rows, cols, figsize=(7.6, 2.5 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[len(searches):]:
        ax.set_visible(False)
    markers = {"none": "o", "ln": "s", "rms": "^", "scaled": "v"}
    for ax, search in zip(axes.flat, searches.values(), strict=False):
        frame = pd.DataFrame(search["phase"])
        arms = list(dict.fromkeys(frame["variant"]))
        for k, (variant, sub) in enumerate(frame.groupby("variant", sort=False)):
            color = arm_color(variant)
            # a small vertical step per arm: curves that coincide (every arm at 0 or 1) stay visible
            lift = 0.02 * (k - (len(arms) - 1) / 2)
            ax.plot(sub["cfg.lr"], sub["failed"] / sub["runs"] + lift, "-", marker=markers.get(variant, "o"),
                    color=color, label=variant, ms=3.5, mfc="white" if k % 2 else color)
        clipping = f"clipping at {search['grad_clip']}" if search["grad_clip"] else "no clipping"
        precision = "" if search.get("precision", "fp32") == "fp32" else f", {search['precision']} autocast"
        ax.set(xscale="log", ylim=(-0.1, 1.1))
        ax.set_xlabel("peak learning rate", fontsize=7)
        ax.set_title(f"{search['layers']} layers, {clipping}{precision}", fontsize=8)
        lrs = sorted(frame["cfg.lr"].unique())
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        if np.log10(lrs[-1] / lrs[0]) < 2:
            ax.set_xticks(lrs)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_xlim(lrs[0] / 2, lrs[-1] * 2)
        ax.tick_params(labelsize=7)
    for row in axes:
        row[0].set_ylabel("share of runs failed", fontsize=7)
    axes[0][0].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


PAPER_FIGURES = {"forest": forest_figure, "budget": budget_figure, "boundary": boundary_figure,
                 "ladder": ladder_figure}


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
