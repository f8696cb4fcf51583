"""LADDER-DATA.md: the adequate-data ladder's report (docs/PROTOCOL.md amendment 16).

For its LR tuning: per rung and arm, the mean final validation loss of each LR over the tuning seeds, the best,
whether it is bracketed, and the grid point the registered rule asks for next. For its confirmatory study: per rung
with every registered run finished, the paired comparison (Holm within the rung), the MDE at the seeds used, the
data-bound check, and the trend across the rungs that pass it (exploratory)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import stats
from ..stats.equivalence import equivalence_columns
from ..studies import ladder_data

ENDPOINTS = ("val_loss", "best_val_loss")  # amendment 16 item 6: one Holm family per rung, 2 arms x 2 endpoints
# Item 6's MDE is at "the Holm-adjusted alpha for the family": read as alpha / m, the family's strictest level, which
# does not depend on how the p-values rank, so the seed rule built on it is a decision on the variance alone; the
# unadjusted MDE and the seeds needed at the MEI (amendment 1 item 4) are shown beside it.
VARIANTS = ("ln", "rms")  # each compared with `none`
FAMILY_ALPHA = stats.ALPHA / (len(VARIANTS) * len(ENDPOINTS))


def _rung_of(preset: str) -> int:
    return int(str(preset).removeprefix("ladder-data-"))


def tuning_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per rung, arm and LR on the registered grid: seeds finished, mean and SD of the final validation loss,
    failures, and the rung's verdict for that arm (best / bracketed / extend to)."""
    rows = []
    for rung in range(len(ladder_data.RUNGS)):
        found = ladder_data.best_lrs(runs, rung) if len(runs) else {}
        for arm in ladder_data.ARMS_TUNED:
            verdict = found.get(arm, {})
            for lr in ladder_data.grid(rung, arm):
                at = runs[(runs["cfg.preset"] == f"ladder-data-{rung}") & (runs["cfg.variant"] == arm)
                          & ((runs["cfg.lr"] - lr).abs() < 1e-12)] if len(runs) else runs
                losses = at["val_loss"].to_numpy(float) if len(at) else np.array([])
                rows.append({"rung": rung, "arm": arm, "lr": lr, "seeds": len(at),
                             "mean_val_loss": float(losses.mean()) if len(losses) else math.nan,
                             "sd": float(losses.std(ddof=1)) if len(losses) > 1 else math.nan,
                             "failed": int(at["failed"].astype(bool).sum()) if len(at) else 0,
                             "best": bool(verdict.get("complete") and verdict.get("best") == lr)})
    return pd.DataFrame(rows)


def runner_up_margin(runs: pd.DataFrame, rung: int, arm: str, found: dict) -> dict | None:
    """How far the best LR is ahead of the next best (exploratory: the rule picks the lowest mean, whatever the
    margin): the runner-up, its mean final validation loss minus the best's, paired by tuning seed, and that
    difference's standard error over the seeds."""
    means = found["means"]
    if len(means) < 2:
        return None
    best, second = sorted(means, key=means.get)[:2]

    diff = (_seed_losses(runs, rung, arm, second) - _seed_losses(runs, rung, arm, best)).dropna().to_numpy(float)
    if len(diff) < 2:
        return None
    return {"lr": second, "margin": float(diff.mean()), "se": float(diff.std(ddof=1) / math.sqrt(len(diff))),
            "seeds": len(diff)}


def _seed_losses(runs: pd.DataFrame, rung: int, arm: str, lr: float) -> pd.Series:
    at = runs[(runs["cfg.preset"] == f"ladder-data-{rung}") & (runs["cfg.variant"] == arm)
              & ((runs["cfg.lr"] - lr).abs() < 1e-12)]
    return at.groupby("cfg.seed")["val_loss"].mean()


def one_step_off(runs: pd.DataFrame, rung: int) -> pd.DataFrame:
    """`ln` minus `none` in tuning, paired by tuning seed (exploratory: 3 seeds), with both arms at their registered
    LR and then with one arm moved one sqrt(2) step down or up its grid, the other kept at its own. A step that
    leaves the grid or lands on a failed run is left out. Both arms must have finished tuning at this rung."""
    found = ladder_data.best_lrs(runs, rung) if len(runs) else {}
    if not all(found.get(arm, {}).get("complete") for arm in ladder_data.ARMS_TUNED):
        return pd.DataFrame()
    best = {arm: found[arm]["best"] for arm in ladder_data.ARMS_TUNED}
    rows = []
    for moved, step in ((None, 0), ("ln", -1), ("ln", 1), ("none", -1), ("none", 1)):
        lrs = dict(best)
        if moved is not None:
            means = found[moved]["means"]
            ladder = sorted(means)
            k = ladder.index(best[moved]) + step
            if not 0 <= k < len(ladder) or not math.isfinite(means[ladder[k]]):
                continue
            lrs[moved] = ladder[k]
        diff = (_seed_losses(runs, rung, "ln", lrs["ln"]) - _seed_losses(runs, rung, "none", lrs["none"])).dropna()
        diff = diff.to_numpy(float)
        rows.append({"rung": rung, "moved": moved or "neither", "step": step, "lr_none": lrs["none"],
                     "lr_ln": lrs["ln"], "mean_diff": float(diff.mean()),
                     "se": float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else math.nan,
                     "seeds": len(diff)})
    return pd.DataFrame(rows)


def shift_summary(shifted: pd.DataFrame) -> dict | None:
    """What one_step_off says in a clause: the difference at both registered LRs, the range over the one-step
    moves, and in how many of those moves the sign differs from the one at both registered LRs."""
    if shifted.empty or not (shifted["moved"] == "neither").any():
        return None
    at_best = float(shifted.loc[shifted["moved"] == "neither", "mean_diff"].iloc[0])
    moves = shifted[shifted["moved"] != "neither"]["mean_diff"].to_numpy(float)
    if not len(moves):
        return None
    return {"at_best": round(at_best, 6), "low": round(float(moves.min()), 6), "high": round(float(moves.max()), 6),
            "moves": len(moves), "sign_changes": int((np.sign(moves) != np.sign(at_best)).sum()),
            "seeds": int(shifted["seeds"].min())}


def confirmatory_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per finished rung (every arm with every confirmatory seed), variant and endpoint: the paired difference from
    none, its 95% t interval, Holm within the rung, and the MDE at 80% power for the family's smallest alpha."""
    rows = []
    if not len(runs):
        return pd.DataFrame()
    for preset, sub in runs.groupby("cfg.preset"):
        rung = _rung_of(preset)
        if not _has_seeds(sub, ladder_data.confirmatory_seeds(rung)):
            continue
        sub = confirmatory_only(sub, rung)
        block, diffs = [], []
        for variant in VARIANTS:
            left_out = failed_pairs(sub, variant)
            kept = sub[~sub["seed"].isin(left_out)]
            for metric in ENDPOINTS:
                c = stats.compare(kept, metric, variant)
                diffs.append(stats.paired_differences(kept, metric, variant)["diff"].to_numpy())
                mde, seeds_at_mei = stats.power_figures(c.sd_diff, c.n, alpha=FAMILY_ALPHA)
                block.append({"rung": rung, "params": ladder_data.non_embedding_params(rung),
                              "variant": variant, "metric": metric, "seeds": c.n, "none": c.baseline_mean,
                              "mean_diff": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_t": c.p_t,
                              "mde_80": mde, "mde_80_unadjusted": c.mde_80,
                              "seeds_at_mei": int(seeds_at_mei) if math.isfinite(seeds_at_mei) else pd.NA,
                              "failed_pairs": ", ".join(map(str, left_out))})
        part = pd.DataFrame(block)
        # amendment 18 (reporting): equivalence within +-MEI by TOST, Holm over the same family's TOSTs
        part["p_tost"], part["p_tost_holm"], part["equivalent"] = equivalence_columns(list(part["metric"]), diffs)
        reject, adjusted = stats.holm(part["p_t"].to_numpy(float))
        rows.append(part.assign(p_holm=adjusted, alpha_holm=stats.holm_alphas(part["p_t"].to_numpy(float)),
                                significant=reject,
                                endpoints_repeat=bool((sub["best_val_loss"] == sub["val_loss"]).all())))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def failed_pairs(sub: pd.DataFrame, variant: str) -> list[int]:
    """Seeds of one rung whose `none` or `variant` run failed (amendment 1 item 5: a non-finite loss, or a final
    validation loss above the loss at initialisation). The pair is left out, as amendment 2 registers for the
    stability study's final loss and amendment 16's clarification adopts, and the rung's line names it, so a failure
    cannot shrink n unseen."""
    pair = sub[sub["variant"].isin(("none", variant))]
    return sorted({int(seed) for seed in pair.loc[stats.failed_runs(pair), "seed"]})


def confirmatory_only(sub: pd.DataFrame, rung: int) -> pd.DataFrame:
    """One rung's runs at its confirmatory seeds; a tuning seed there is an error, not something to drop quietly."""
    tuning = set(sub["cfg.seed"]) & set(ladder_data.TUNING_SEEDS)
    if tuning:
        raise ValueError(f"rung {rung}'s confirmatory runs hold tuning seeds {sorted(tuning)}: the registered design "
                         f"keeps them apart (confirmatory seeds {list(ladder_data.confirmatory_seeds(rung))})")
    return sub[sub["cfg.seed"].isin(ladder_data.confirmatory_seeds(rung))]


def endpoint_note(runs: pd.DataFrame) -> str:
    """How often the secondary endpoint (best validation loss) repeats the primary (the final one), counted."""
    same = int((runs["best_val_loss"] == runs["val_loss"]).sum())
    windows = {ladder_data.preset(rung)["interim_eval_windows"] for rung in range(len(ladder_data.RUNGS))}
    if same < len(runs):
        return f"The best validation loss is below the final one in {len(runs) - same} of {len(runs)} runs."
    return (f"In all {len(runs)} runs the best validation loss equals the final one: the ladder's presets score the "
            f"whole validation split only at the end (interim evaluations use {', '.join(map(str, sorted(windows)))} "
            "windows), so the registered secondary endpoint repeats the primary, and each rung's Holm family of 4 "
            "holds 2 distinct tests counted twice. That makes its Holm p-values and MDEs conservative; they are kept "
            "as registered.")


def _has_seeds(sub: pd.DataFrame, seeds) -> bool:
    """Every confirmatory arm of one rung's runs has finished each of these seeds."""
    return all(set(seeds) <= set(sub.loc[sub["variant"] == v, "cfg.seed"]) for v in ladder_data.CONFIRMATORY_ARMS)


def seed_rule_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Amendment 16 item 6, per rung whose arms have all finished seeds 0-4: the larger MDE of `ln` and `rms` on the
    primary endpoint at those five seeds, whether it exceeds the limit, and whether seeds 5-9 are registered."""
    rows = []
    for preset, sub in (runs.groupby("cfg.preset") if len(runs) else []):
        rung, first = _rung_of(preset), ladder_data.CONFIRMATORY_SEEDS
        if not _has_seeds(sub, first):
            continue
        five = sub[sub["cfg.seed"].isin(first)]
        mde = max(stats.power_figures(c.sd_diff, c.n, alpha=FAMILY_ALPHA)[0]
                  for c in (stats.compare(five, "val_loss", variant) for variant in VARIANTS))
        rows.append({"rung": rung, "mde_80_at_5_seeds": mde, "above_limit": bool(mde > ladder_data.MDE_LIMIT),
                     "seeds_5_9_added": rung in ladder_data.SEEDS_ADDED,
                     "all_seeds_finished": _has_seeds(sub, ladder_data.confirmatory_seeds(rung))})
    return pd.DataFrame(rows)


def data_bound_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Amendment 16 item 7: `none`'s mean final loss per rung over its confirmatory seeds, and whether it fell from
    the rung below by more than the larger of the two rungs' seed SDs. Rung 0, the lowest, enters by definition; a
    higher rung is decided only once it and the rung below have `none` at every confirmatory seed (until then the
    verdict could change as seeds land: "pending"). Each rung's mean and SD are over its own seeds (5 or 10):
    seeds are not paired across rungs, and an SD does not shrink with n."""
    if not len(runs):
        return pd.DataFrame()
    none, complete = {}, {}
    for preset, sub in runs[runs["variant"] == "none"].groupby("cfg.preset"):
        rung = _rung_of(preset)
        seeds = ladder_data.confirmatory_seeds(rung)
        none[rung] = sub.loc[sub["cfg.seed"].isin(seeds), "val_loss"].agg(["mean", "std", "count", "min", "max"])
        complete[rung] = set(seeds) <= set(sub["cfg.seed"])
    rows = []
    for rung in sorted(none):
        r, below = none[rung], none.get(rung - 1)
        drop = float(below["mean"] - r["mean"]) if below is not None else math.nan
        margin = float(np.nanmax([below["std"], r["std"]])) if below is not None else math.nan
        if rung == 0:
            verdict = "enters (lowest rung)"
        elif below is None or not (complete[rung] and complete.get(rung - 1)):
            verdict = "pending (seeds still to finish)"
        else:
            verdict = "enters" if drop > margin else "data-bound"
        rows.append({"rung": rung, "none_mean": r["mean"], "none_sd": r["std"], "none_min": r["min"],
                     "none_max": r["max"], "seeds": int(r["count"]), "drop_from_below": drop, "margin": margin,
                     "trend": verdict})
    return pd.DataFrame(rows)


def quoted_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The rungs a summary (README, FINDINGS, paper) may quote, on the primary endpoint: every registered
    confirmatory run finished and item 6's seed rule settled (the MDE at seeds 0-4 within the limit, or seeds 5-9
    added and finished), each row with its rung's regime (shape, iterations, passes, each arm's registered LR) and
    its data-bound verdict. Each rung is its own registered Holm family, so a finished rung is quoted whole, and every
    finished rung is quoted."""
    table = confirmatory_table(runs)
    if not len(table):
        return table
    rule = seed_rule_table(runs)
    settled = {int(r.rung) for r in rule.itertuples()
               if not r.above_limit or (r.seeds_5_9_added and r.all_seeds_finished)}
    bound = data_bound_table(runs).set_index("rung")
    verdict = bound["trend"]
    rows = table[(table["metric"] == ENDPOINTS[0]) & table["rung"].isin(settled)]
    return rows.assign(
        shape=[f"{ladder_data.RUNGS[r][0]} × {ladder_data.RUNGS[r][1]}" for r in rows["rung"]],
        iters=[ladder_data.iters(r) for r in rows["rung"]], passes=[ladder_data.passes(r) for r in rows["rung"]],
        lr=[ladder_data.lr_of(r, v) for r, v in zip(rows["rung"], rows["variant"], strict=True)],
        lr_none=[ladder_data.lr_of(r, "none") for r in rows["rung"]],
        data_bound=[verdict.get(r, "pending") == "data-bound" for r in rows["rung"]],
        **{k: [bound.loc[r, k] for r in rows["rung"]] for k in ("none_sd", "none_min", "none_max")},
    ).reset_index(drop=True)


def compute_table(runs: pd.DataFrame, cells) -> pd.DataFrame:
    """Per rung: the runs finished and their run time (`wall_s`: training and evaluation, summed over resumes; every
    run uses one thread, so run-hours are core-hours), the measured median train-loop ms per iteration beside
    amendment 16 item 8's estimate (a train-loop figure too), and the registered runs still to train with the hours
    they need: the rung's median run time per run where runs have finished (evaluation included, like the hours
    spent), its estimated train-loop time where none has."""
    rows = []
    for rung in range(len(ladder_data.RUNGS)):
        preset = f"ladder-data-{rung}"
        done = runs[runs["cfg.preset"] == preset] if len(runs) else runs
        registered = sum(cell.preset == preset for cell in cells)
        if not registered and not len(done):
            continue
        estimate = ladder_data.committed_ms_per_iter(rung)
        measured = float(done["train_ms_per_iter"].median()) if len(done) else math.nan
        left = max(registered - len(done), 0)
        per_run_hours = (float(done["wall_s"].median()) / 3600 if len(done)
                         else ladder_data.iters(rung) * estimate / 3.6e6)
        rows.append({"rung": rung, "runs_finished": len(done),
                     "run_hours": float(done["wall_s"].sum()) / 3600 if len(done) else 0.0,
                     "ms_per_iter": measured, "ms_per_iter_estimated": estimate, "runs_left": left,
                     "hours_left": left * per_run_hours})
    return pd.DataFrame(rows)


def spend_table(runs: pd.DataFrame, tuning: pd.DataFrame, cells, confirmatory: pd.DataFrame | None = None
                ) -> pd.DataFrame:
    """Per rung, the whole ladder's core-hours beside amendment 16 item 8's estimate: tuning spent (the LR tuning study,
    grid extensions included), confirmatory spent and still needed (compute_table; seeds 5-9 included where added),
    their sum, the estimate (tuning before any extension, 5 confirmatory seeds) and the ratio of the two."""
    confirmatory = compute_table(runs, cells) if confirmatory is None else confirmatory
    estimate = ladder_data.estimate_hours(ladder_data.committed_ms_per_iter)
    rows = []
    for r in confirmatory.itertuples():
        tuned = tuning[tuning["cfg.preset"] == f"ladder-data-{r.rung}"] if len(tuning) else tuning
        tuning_hours = float(tuned["wall_s"].sum()) / 3600 if len(tuned) else 0.0
        total = tuning_hours + r.run_hours + r.hours_left
        rows.append({"rung": r.rung, "tuning_hours": tuning_hours, "confirmatory_hours": r.run_hours,
                     "confirmatory_hours_left": r.hours_left, "total_hours": total,
                     "estimated_hours": estimate[r.rung], "ratio": total / estimate[r.rung]})
    return pd.DataFrame(rows)


def trend_rungs(runs: pd.DataFrame) -> list[int]:
    """The rungs the trend covers: those quoted (quoted_table: every run in, item 6's seed rule settled) that the
    data-bound check lets in. A rung whose `none` seeds are in can pass the check before its other arms finish or
    before its added seeds do; it is not in the trend until it is quoted."""
    quoted, bound = quoted_table(runs), data_bound_table(runs)
    if not len(quoted) or not len(bound):
        return []
    entering = set(bound.loc[bound["trend"].str.startswith("enters"), "rung"])
    return sorted(entering & {int(r) for r in quoted["rung"]})


def trend_table(runs: pd.DataFrame, checked_only: bool = False) -> pd.DataFrame:
    """Amendment 16 item 7 (exploratory): per variant, the WLS line of each quoted rung's mean difference in the final
    validation loss on log10 non-embedding parameters, over the rungs the data-bound check lets in, with the 1 MB
    ladder's fit (`ladder.trend`: weights from each rung's standard error, Knapp-Hartung's truncation at 1); it
    needs 3 such rungs. The line's extrapolation is dropped: item 7 makes none beyond the largest rung."""
    from . import ladder

    table = confirmatory_table(runs)
    rungs = trend_rungs(runs)
    if checked_only:  # without the lowest rung, which enters by definition: no rung below can check it
        rungs = [r for r in rungs if r != 0]
    rows = table[(table["metric"] == "val_loss") & table["rung"].isin(rungs)].assign(tokenizer="char")
    if rows.empty:
        return pd.DataFrame()
    # trend_rungs keeps only quoted rungs; a rung whose failed runs left fewer than item 6's five pairs stays out
    fits = ladder.trend(rows, seeds=len(ladder_data.CONFIRMATORY_SEEDS))
    return fits.drop(columns=[c for c in fits.columns if c.startswith(("at_params", "extrapolated", "tokenizer"))])


def lr_margins(out) -> dict:
    """Per rung of the adequate-data ladder (as a string key) and tuned arm: how far its registered LR led the next
    best in tuning (ladder_data.runner_up_margin: paired over the tuning seeds, with its SE; exploratory)."""
    from ..runner.results import has_index, load_runs
    from ..studies.ladder_data import ARMS_TUNED, RUNGS, best_lrs
    from ..studies.paper_sources import LADDER_DATA_LR

    if not has_index(LADDER_DATA_LR, out):
        return {}
    tuning = load_runs(LADDER_DATA_LR, out)
    found = {}
    for rung in range(len(RUNGS)):
        best = best_lrs(tuning, rung)
        margins = {arm: runner_up_margin(tuning, rung, arm, best[arm]) for arm in ARMS_TUNED
                   if best.get(arm, {}).get("complete") and best[arm].get("bracketed")}
        if margins and all(margins.values()):
            found[str(rung)] = {arm: {k: round(v, 6) if isinstance(v, float) else v for k, v in m.items()}
                                for arm, m in margins.items()}
            found[str(rung)]["shift"] = shift_summary(one_step_off(tuning, rung))
    return found
