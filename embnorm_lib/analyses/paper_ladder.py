"""The paper's data on the size ladders (issue 19): the character ladder's LR check and per-size comparison, the
subword ladder with its tokens, budget and count-bigram baseline, their replications and the trend across sizes, as
the `ladder` entry of paper/data.json (analyses/paper.py gathers every entry)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.errors import RunDirError
from ..publishing.paper import json_records, json_safe
from ..runner.results import has_index, load_runs
from ..studies import STUDIES, registered_seeds
from ..studies.paper_sources import BPE_REP, BPE_REP2, BPE_SCALE, LADDER, LADDER_BPE, LADDER_DATA, LADDER_LR

TUNING_SEEDS = (0, 1)  # the LR check's seeds, reused as the ladder's seeds 0-1 (amendment 5, item 3)



BIGRAM_TOKENIZER = "bpe-4096"



def subword_bigram(out: Path) -> dict:
    """A count bigram on BIGRAM_TOKENIZER tokens, interpolated with the unigram (stats.baselines.count_bigram),
    scored on the validation split in nats per character; beside it none's final validation loss per character at
    the subword ladder's rung 1."""
    from ..core.corpora.data import load_corpus
    from ..stats.baselines import count_bigram

    corpus = load_corpus(tokenizer=BIGRAM_TOKENIZER)
    bigram = count_bigram(corpus.train.numpy(), corpus.val.numpy(), corpus.vocab_size)
    runs = load_runs(LADDER_BPE, out)
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
            raise RunDirError(f"{LADDER_BPE}'s {tokenizer} runs train on {sorted(tokens)} tokens; allowed: one budget "
                                f"for every rung (the pass cap)")
        rungs = sorted(int(p.split("-")[1]) for p in sub["cfg.preset"].unique())
        found.append({"tokenizer": tokenizer, "tokens": int(tokens[0]),
                      "passes": float(tokens[0] / _train_tokens(tokenizer)),
                      "tokens_per_param": {str(r): float(tokens[0] / non_embedding_params(*LADDER_RUNGS[r][:2]))
                                           for r in rungs}})
    return found



def ladder_data(out: Path) -> dict:
    """The size ladder so far: the LR check's best factor per checked rung and arm, and each ladder's (char and BPE)
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

    check_runs = load_runs(LADDER_LR, out)
    # the character ladder's budget per rung, from its presets: where the 10-pass cap binds, size and tokens per
    # parameter move together, which any trend across sizes mixes in
    tokens = [PRESETS[f"ladder-{r}"]["max_iters"] * LADDER_TOKENS_PER_ITER for r in range(len(LADDER_RUNGS))]
    per_param = [t / non_embedding_params(a, b) for t, (a, b, _) in zip(tokens, LADDER_RUNGS, strict=True)]
    capped = [r for r, t in enumerate(tokens) if t < LADDER_TOKENS_PER_PARAM * non_embedding_params(*LADDER_RUNGS[r][:2])]
    check = ladder.lr_check(check_runs) if len(check_runs) else pd.DataFrame()
    best = ladder.best_factors(check) if len(check) else pd.DataFrame()
    found = {"rungs": len(LADDER_RUNGS), "check_runs": len(check_runs),
             "check_planned": len(STUDIES[LADDER_LR].cells()),
             "best": json_records(best, list(best.columns)) if len(best) else [],
             "check": json_records(check, ["tokenizer", "rung", "variant", "factor", "seeds", "failed", "val_loss_mean"])
             if len(check) else [],
             "params": {str(r): non_embedding_params(a, b) for r, (a, b, _) in enumerate(LADDER_RUNGS)},
             "shape": {str(r): f"{a} × {b}" for r, (a, b, _) in enumerate(LADDER_RUNGS)},
             "budget": {"tokens_per_param_rule": LADDER_TOKENS_PER_PARAM, "epoch_cap": LADDER_EPOCH_CAP,
                        "first_capped": capped[0] if capped else None, "capped_tokens": tokens[capped[0]] if capped else None,
                        "tokens_per_param": {str(r): v for r, v in enumerate(per_param)}}}
    family, scale, found["subword_runs"] = [], [], 0
    found["subword_planned"] = len(STUDIES[LADDER_BPE].cells())
    finished_rungs: set[int] = set()
    for study in (LADDER, LADDER_BPE):  # each size's comparison in nats per character, whatever the tokens
        if not has_index(study, out):
            continue
        runs = load_runs(study, out)
        if study == LADDER_BPE:
            found["subword_runs"] = len(runs)
            found["subword_budget"] = subword_budget(runs)
        sizes = ladder.rung_table(runs)
        table = ladder.finished(ladder.primary(sizes))  # only sizes with all their registered seeds, as the README
        if len(table):
            family += json_records(table, ["tokenizer", "params", "preset", "variant", "seeds", "mean_diff", "ci_low",
                                       "ci_high", "p_holm", "significant"])
            answers = ladder.scale_answer(sizes)
            scale += json_records(answers, ["tokenizer", "variant", "sizes", "params_min", "params_max", "answer",
                                        "slope_per_decade", "slope_ci_low", "slope_ci_high", "at_params",
                                        "extrapolated_diff", "extrapolated_ci_low", "extrapolated_ci_high"]) \
                if len(answers) else []
            if study == LADDER:
                finished_rungs = {int(p.split("-")[1]) for p in table["preset"]}
            # exploratory (outside the registered analysis): gradient-norm peaks at the sizes quoted above
            peaks = ladder_sections.peak_table(runs)
            if len(peaks):
                quoted = set(zip(table["tokenizer"], table["preset"], strict=True))
                peaks = peaks[[k in quoted for k in zip(peaks["tokenizer"], peaks["preset"], strict=True)]]
                found["peaks"] = found.get("peaks", []) + [
                    {**r, "params": found["params"][r["preset"].split("-")[1]]}
                    for r in json_records(peaks, ["tokenizer", "preset", "variant", "seeds", "ratio", "ratio_ci_low",
                                              "ratio_ci_high", "p_holm", "significant"])]
    if family:
        found["family"] = family
    found["scale"] = scale
    found["unfinished_rungs"] = [r for r in range(len(LADDER_RUNGS)) if r not in finished_rungs]
    from .answer import data_ladder_progress, size_data

    # size_data holds data_ladder_progress too (~6 s of tables): computed once here
    size = size_data(out) if has_index(LADDER, out) else None
    if size:  # the first data-bound rung, by the answer's rule (README, FINDINGS say the same)
        found["plateau_from"] = size["plateau_from"]
    if has_index(LADDER_DATA, out):  # amendment 16: each rung once all its registered runs have finished
        found["data_ladder"] = size["data_ladder"] if size else data_ladder_progress(out)
        # the 1 MB ladder's smallest size beside the adequate-data ladder's: shape, iterations, passes over its text
        found["rung0_1mb"] = {"shape": found["shape"]["0"], "iters": PRESETS["ladder-0"]["max_iters"],
                               "passes": tokens[0] / TRAIN_CHARS_TINY_SHAKESPEARE}
    if has_index(BPE_REP, out):  # amendment 9's replication on fresh seeds, quoted once it has finished
        rep = ladder.finished(ladder.primary(ladder.rung_table(load_runs(BPE_REP, out))),
                              registered_seeds(BPE_REP))
        if len(rep):
            found["replication"] = json_records(rep, ["tokenizer", "params", "preset", "variant", "seeds", "mean_diff",
                                                  "ci_low", "ci_high", "p_holm", "significant"])
    if has_index(BPE_REP2, out):  # amendment 11: rung 2 on fresh seeds, the loss and the peaks confirmatory
        runs2 = load_runs(BPE_REP2, out)
        rep2 = ladder.finished(ladder.primary(ladder.rung_table(runs2)), registered_seeds(BPE_REP2))
        if len(rep2):
            found["replication2"] = json_records(rep2, ["tokenizer", "params", "preset", "variant", "seeds", "mean_diff",
                                                    "ci_low", "ci_high", "p_holm", "significant"])
            found["replication2_peaks"] = json_records(ladder_sections.peak_table(runs2), [
                "variant", "seeds", "ratio", "ratio_ci_low", "ratio_ci_high", "p_holm", "significant"])
    if has_index(BPE_SCALE, out):  # amendment 10, exploratory: what carries the subword gain
        scale_rows = ladder.finished(ladder.primary(ladder.rung_table(load_runs(BPE_SCALE, out))),
                                     registered_seeds(BPE_SCALE))
        if len(scale_rows):
            found["subword_scale"] = json_records(scale_rows, ["tokenizer", "params", "variant", "seeds", "mean_diff",
                                                           "ci_low", "ci_high", "p_holm", "significant"])
            # validation minus training loss per arm (none included; a description), so a gain that comes with a
            # wider gap to the training split is read as such
            fit = ladder_sections.fit_table(load_runs(BPE_SCALE, out))
            found["subword_scale_gap"] = {r.variant: json_safe(r.gap) for r in fit.itertuples()} if "gap" in fit else {}
    # the exploratory subword LR checks (amendment 8 at rung 1, 13 at rung 2), each arm once its grid is complete
    for study, amendment in ladder.SUBWORD_LR_CHECKS.items():
        if not has_index(study, out):
            continue
        _, sub_best, at_best = ladder.check_summary(load_runs(study, out))
        found.setdefault("subword_check", []).extend(
            {**r, "amendment": amendment} for r in (json_records(sub_best, list(sub_best.columns)) if len(sub_best) else []))
        found.setdefault("subword_at_best", []).extend(
            json_records(at_best.dropna(subset=["diff_vs_none"]), list(at_best.columns)) if len(at_best) else [])
    return found
