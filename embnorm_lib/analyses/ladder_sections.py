"""LADDER.md's sections beside the registered comparison (exploratory readings of a ladder study's runs): the
budget each size trained on, the fit of each size's loss, the per-seed values, the gradient-norm peaks (a
registered test where CONFIRMATORY_PEAKS says so) and the norm-to-loss table. Each section is a table function that
returns data and a `*_section` that renders it; ladder_report.write_report places them."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from .. import stats
from ..core.config import LADDER_EPOCH_CAP, LADDER_TOKENS_PER_PARAM, non_embedding_params
from ..stats import signed
from .ladder import CONFIRMATORY_PEAKS, loss_per_char, rung_of, tokenizers_of, train_compute


def budget_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung and arm, what the note owes (issue 18): the shape, the training budget, the LR(s) run and
    the compute spent — finished runs, how many were trained for this study (the rest reused from another, e.g. the
    LR check's seeds 0-1), the median wall minutes per run and the summed run-hours of those trained here, with the
    device and threads per run. Wall time is per run: runs side by side overlap, so the sweep took less."""
    from ..runner.results import arm_order, reused_mask

    def column(name):
        return runs[name] if name in runs else pd.Series(np.nan, index=runs.index)

    frame = runs.assign(tokenizer=tokenizers_of(runs), here=~reused_mask(runs), wall=column("wall_s"),
                        device_=column("device"), threads=column("torch_threads"), lr_=column("cfg.lr"))
    rows = []
    for (tokenizer, preset, variant), sub in frame.groupby(["tokenizer", "cfg.preset", "variant"]):
        first, here = sub.iloc[0], sub[sub["here"]]
        tokens, _ = train_compute(first, 0)
        layers, width, iters = (first.get(k, np.nan) for k in ("cfg.n_layer", "cfg.n_embd", "cfg.max_iters"))
        shaped = pd.notna(layers) and pd.notna(width)
        rows.append({"tokenizer": tokenizer, "preset": preset, "variant": variant,
                     "n_layer": int(layers) if shaped else "–", "n_embd": int(width) if shaped else "–",
                     "params": non_embedding_params(int(layers), int(width)) if shaped else "–",
                     "iters": int(iters) if pd.notna(iters) else "–", "train_tokens": tokens,
                     "tokens_per_param": tokens / non_embedding_params(int(layers), int(width)) if shaped else np.nan,
                     "lr": ", ".join(f"{v:.3g}" for v in sorted(sub["lr_"].dropna().unique())) or "–",
                     "runs": len(sub), "trained_here": len(here),
                     "min_per_run": sub["wall"].median() / 60, "run_hours_here": here["wall"].sum(min_count=1) / 3600,
                     "device": ", ".join(sorted(sub["device_"].dropna().astype(str).unique())) or "–",
                     "threads": ", ".join(f"{t:g}" for t in sorted(sub["threads"].dropna().unique())) or "–"})
    return pd.DataFrame(sorted(rows, key=lambda r: (r["tokenizer"], rung_of(r["preset"]), arm_order(r["variant"]))))



def budget_section(runs: pd.DataFrame) -> list[str]:
    """The report's lines on sizes, budgets, LRs and compute (budget_table rendered, numbers rounded for reading)."""
    from ..publishing.render import compact_markdown

    table = budget_table(runs)
    if table.empty:
        return []
    def rounded(column, spec):
        return [format(v, spec) if pd.notna(v) else "–" for v in table[column]]

    shown = table.assign(train_tokens=rounded("train_tokens", ".0f"), tokens_per_param=rounded("tokens_per_param", ".1f"),
                         min_per_run=rounded("min_per_run", ".1f"), run_hours_here=rounded("run_hours_here", ".2f"))
    return ["## Sizes, budgets, LRs and compute", "",
            "Per rung and arm: the shape, iterations, training tokens and tokens per non-embedding parameter (the "
            f"rule asks {LADDER_TOKENS_PER_PARAM}; the {LADDER_EPOCH_CAP}-pass cap binds where it is lower), the LR(s) "
            "run, finished runs and those trained for this study (the rest reused bitwise from another study), median "
            "wall minutes per run and the summed run-hours of the runs trained here. Wall time is per run; runs side "
            "by side overlap. "
            + budget_words(table) + resume_words(runs), "", compact_markdown(shown), ""]



def resume_words(runs: pd.DataFrame) -> str:
    """A sentence where some runs were resumed on another CPU model than the one that began them: those agree with an
    uninterrupted run to float rounding, not bit for bit (each run's summary.json lists its CPUs, `trained_on`)."""
    moved = int(runs["cpu_changed_on_resume"].eq(True).sum()) if "cpu_changed_on_resume" in runs else 0
    return (f" {moved} run(s) were resumed on another CPU model than the one that began them, so they agree with an "
            "uninterrupted run to float rounding, not bit for bit (`trained_on` in each run's summary.json)."
            if moved else "")



def budget_words(table: pd.DataFrame) -> str:
    """One sentence of what a study's runs cost, from budget_table."""
    hours = table["run_hours_here"].sum(min_count=1)
    return (f"{int(table['runs'].sum())} runs finished, {int(table['trained_here'].sum())} of them trained for this "
            "study" + (f" ({hours:.1f} run-hours summed over runs)" if pd.notna(hours) else "") + ".")



def fit_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung, arm and LR, how closely the model fits its training split (a description): the mean
    over seeds of the training loss at the end (`final_train_loss`: the last ten training batches), the final and
    the best validation loss, the gap between final validation and training loss, and how far validation loss rose
    after its best. Per token, which for char runs is per character: both losses of a row share one unit. Where
    the index has it, also the mean norm of block 1's input at the end (`final_block1_input_norm`): the scale at
    which the embedding (normed, rescaled or neither) enters the first block."""
    from ..runner.results import arm_order

    frame = runs.assign(tokenizer=tokenizers_of(runs), lr_=runs["cfg.lr"] if "cfg.lr" in runs else np.nan)
    with_norm = "final_block1_input_norm" in frame
    frame = frame.assign(gap=frame["val_loss"] - frame["final_train_loss"],
                         val_rise=frame["val_loss"] - frame["best_val_loss"])
    rows = []
    for (tokenizer, preset, variant, lr), sub in frame.groupby(["tokenizer", "cfg.preset", "variant", "lr_"],
                                                               dropna=False):
        rows.append({"tokenizer": tokenizer, "preset": preset, "variant": variant, "lr": lr, "seeds": len(sub),
                     "train_loss": sub["final_train_loss"].mean(), "val_loss": sub["val_loss"].mean(),
                     "gap": sub["gap"].mean(), "best_val_loss": sub["best_val_loss"].mean(),
                     "val_rise": sub["val_rise"].mean(),
                     **({"block1_input_norm": sub["final_block1_input_norm"].mean()} if with_norm else {})})
    key = lambda r: (r["tokenizer"], rung_of(r["preset"]), arm_order(r["variant"]), r["lr"])  # noqa: E731
    return pd.DataFrame(sorted(rows, key=key))



def fit_words(table: pd.DataFrame) -> list[str]:
    """Per tokenizer, the gap between validation and training loss at each rung (mean over its rows), small first."""
    lines = []
    for tokenizer, sub in table.groupby("tokenizer"):
        by_rung = sub.assign(rung=sub["preset"].map(rung_of)).groupby("rung")["gap"].mean()
        unit = "nats/char" if tokenizer == "char" else "nats/token"
        lines.append(f"- {tokenizer}: validation minus training loss, mean over the rung's arms and LRs: "
                     + ", ".join(f"rung {r} {signed(g)}" for r, g in by_rung.items()) + f" {unit}.")
    return lines



def fit_section(runs: pd.DataFrame) -> list[str]:
    """The report's lines on the fit to the training split (fit_table rendered)."""
    from ..publishing.render import compact_markdown

    needed = {"final_train_loss", "val_loss", "best_val_loss"}
    if runs.empty or not needed <= set(runs):
        return []
    table = fit_table(runs)
    shown = table.assign(lr=[f"{v:.3g}" if pd.notna(v) else "–" for v in table["lr"]],
                         **{c: table[c].round(4) for c in ("train_loss", "val_loss", "gap", "best_val_loss",
                                                           "val_rise")},
                         **({"block1_input_norm": [f"{v:.2f}" for v in table["block1_input_norm"]]}
                            if "block1_input_norm" in table else {}))
    return ["## Fit to the training split (a description)", "",
            "Mean over seeds, per token (a character for char runs): `train_loss` is the mean of the last ten "
            "training batches, `val_loss` the final validation loss on the whole split, `gap` their difference and "
            "`val_rise` how far the final validation loss sits above the best one seen; `block1_input_norm` is the "
            "mean norm of block 1's input (the embedding after any norm or rescaling) at the end of training, where "
            "the index has it. The validation split is the "
            "corpus's last tenth (text the training split does not hold), so some gap is there at any size; a gap that "
            "grows with size while the budget is capped at ten passes says the larger models fit their training "
            "text in ways that do not carry over to unseen text.", "", *fit_words(table), "", compact_markdown(shown), ""]



def per_seed(runs: pd.DataFrame, column: str | None = None) -> pd.DataFrame:
    """Per tokenizer, rung and seed: each arm's final validation loss per character (`val_loss_per_char` for
    subword runs, `val_loss` for char runs), or the index's `column` where given, arms as columns in registry
    order."""
    from ..runner.results import arm_order

    frame = runs.assign(tokenizer=tokenizers_of(runs), value=loss_per_char(runs) if column is None else runs[column])
    wide = frame.pivot_table(index=["tokenizer", "cfg.preset", "seed"], columns="variant", values="value")
    wide = wide[sorted(wide.columns, key=arm_order)].reset_index().rename(columns={"cfg.preset": "preset"})
    wide.columns.name = None
    return wide



# The per-seed readings printed beside each run's loss, so a seed that ends apart from its arm can be read beside
# the scale at which its embedding entered the model and beside whether its training had a gradient spike: index
# column -> (the sentence above its table, the format of a value). A description, no test.
PER_SEED_READINGS = {
    "final_block1_input_norm": ("Each run's mean norm of block 1's input (the embedding after any norm or "
                                "rescaling) at the end of training.", "{:.2f}"),
    "peak_grad_norm_post_warmup": ("Each run's largest total gradient norm (before clipping) after the warm-up, the "
                                   "registered stability metric (docs/PROTOCOL.md amendment 1).", "{:.3g}"),
}



def per_seed_section(runs: pd.DataFrame) -> list[str]:
    """The report's per-seed lines: each run's final loss per character and, for each of `PER_SEED_READINGS` the
    index has, that reading per run (a description)."""
    from ..publishing.render import compact_markdown

    lines = ["## Per seed (a description)", "",
             "Each run's final validation loss per character: the spread behind each interval.", "",
             compact_markdown(per_seed(runs)), ""]
    for column, (sentence, fmt) in PER_SEED_READINGS.items():
        if column not in runs or not runs[column].notna().any():
            continue
        values = per_seed(runs, column)
        arms = [c for c in values.columns if c not in ("tokenizer", "preset", "seed")]
        lines += [sentence, "", compact_markdown(values.assign(**{a: [fmt.format(v) if pd.notna(v) else "–"
                                                                      for v in values[a]] for a in arms})), ""]
    return lines



def _in_ladder_order(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by tokenizer, then rung, then arm in registry order."""
    from ..runner.results import arm_order

    order = table.apply(lambda r: (r["tokenizer"], rung_of(r["preset"]), arm_order(r["variant"])), axis=1)
    return table.iloc[sorted(range(len(table)), key=lambda i: order.iloc[i])].reset_index(drop=True)



def peak_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung and arm (every arm but none): how each arm's peak total gradient norm after the warm-up
    (amendment 1's registered stability metric) compares with none's on the same seed, an exploratory reading of
    the ladder. Paired on log10 of the peak (peaks span orders of magnitude, so a ratio is the natural scale), the
    mean difference and its 95% t interval given back as a geometric-mean ratio; Holm within each size over its
    arms. Beside it, the mean share of clipped steps per arm (a confound: an arm that clips more runs in effect
    another optimiser) and the loss spikes after the warm-up summed over seeds."""
    from ..runner.results import arm_order

    needed = {"peak_grad_norm_post_warmup", "clipped_frac", "spike_count_post_warmup"}
    if runs.empty or not needed <= set(runs) or not runs["peak_grad_norm_post_warmup"].notna().any():
        return pd.DataFrame()
    frame = runs.assign(tokenizer=tokenizers_of(runs),
                        log10_peak_grad_norm=stats.log10(runs["peak_grad_norm_post_warmup"]))
    rows = []
    for (tokenizer, preset), sub in frame.groupby(["tokenizer", "cfg.preset"]):
        none = sub[sub["variant"] == "none"]
        block = []
        for variant in sorted(set(sub["variant"]) - {"none"}, key=arm_order):
            c = stats.compare(sub, "log10_peak_grad_norm", variant)
            arm = sub[sub["variant"] == variant]
            block.append({"tokenizer": tokenizer, "preset": preset, "variant": variant, "seeds": c.n,
                          "none_geomean": 10 ** c.baseline_mean, "variant_geomean": 10 ** c.variant_mean,
                          "ratio": 10 ** c.mean_diff, "ratio_ci_low": 10 ** c.ci_low, "ratio_ci_high": 10 ** c.ci_high,
                          "p_t": c.p_t, "clipped_none": none["clipped_frac"].mean(),
                          "clipped_variant": arm["clipped_frac"].mean(),
                          "spikes_none": int(none["spike_count_post_warmup"].sum()),
                          "spikes_variant": int(arm["spike_count_post_warmup"].sum())})
        if block:
            part = pd.DataFrame(block)
            reject, adjusted = stats.holm(part["p_t"].to_numpy(float))
            rows.append(part.assign(p_holm=adjusted, significant=reject))
    if not rows:
        return pd.DataFrame()
    table = pd.concat(rows, ignore_index=True)
    return _in_ladder_order(table)



def peak_section(runs: pd.DataFrame, study: str | None = None) -> list[str]:
    """The report's lines on gradient-norm peaks (peak_table rendered): an exploratory reading after the registered
    analysis, or, for a study that registered the peaks (CONFIRMATORY_PEAKS), its second confirmatory family."""
    from ..publishing.render import compact_markdown

    table = peak_table(runs)
    if table.empty:
        return []
    amendment = CONFIRMATORY_PEAKS.get(study)
    if amendment is None:
        heading, status = ("## Gradient-norm peaks per size (exploratory)",
                           "Not part of the ladder's registered analysis (the loss is): ")
    else:
        heading, status = (f"## Gradient-norm peaks (confirmatory, docs/PROTOCOL.md amendment {amendment})",
                           f"Registered by amendment {amendment} as this study's second family (Holm within it): ")
    shown = table.assign(**{c: [f"{v:.3g}" for v in table[c]] for c in ("none_geomean", "variant_geomean", "ratio",
                                                                          "ratio_ci_low", "ratio_ci_high")},
                         **{c: table[c].round(4) for c in ("p_t", "p_holm")},
                         **{c: table[c].round(3) for c in ("clipped_none", "clipped_variant")})
    return [heading, "",
            status + "each arm's peak total gradient norm after "
            "the warm-up (`peak_grad_norm_post_warmup`, before clipping; the stability metric amendment 1 registered "
            "for the stability studies) against `none`'s on the same seed, paired on log10 of the peak. `ratio` is "
            "the geometric mean of the seeds' ratios with its 95% t interval, the geometric means of each arm beside "
            "it; Holm within each size over its arms. `clipped_*` is the mean share of steps clipped (a confound), "
            "`spikes_*` the loss spikes after the warm-up summed over seeds.", "", compact_markdown(shown), ""]



def norm_loss_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per tokenizer, rung and arm: does a seed whose embedding entered block 1 at a larger scale end with a lower
    or a higher loss? Kendall's tau between each seed's final mean norm of block 1's input and its final validation
    loss per character, across the arm's seeds, with scipy's p (exact and two-sided at these n when no value ties).
    An exploratory reading of a lead seen in the subword replication at rung 1 (the normed seeds that gained least
    on `none` ended with the lowest block-1 norms): no Holm family, no decision, and no direction of cause (a seed
    that trains worse may simply grow its norm's gain less)."""
    if runs.empty or "final_block1_input_norm" not in runs or not runs["final_block1_input_norm"].notna().any():
        return pd.DataFrame()
    frame = runs.assign(tokenizer=tokenizers_of(runs), loss_per_char=loss_per_char(runs))
    frame = frame.dropna(subset=["final_block1_input_norm", "loss_per_char"])
    rows = []
    for (tokenizer, preset, variant), sub in frame.groupby(["tokenizer", "cfg.preset", "variant"]):
        if len(sub) < 3:  # two points always rank perfectly
            continue
        tau = scipy_stats.kendalltau(sub["final_block1_input_norm"], sub["loss_per_char"])
        rows.append({"tokenizer": tokenizer, "preset": preset, "variant": variant, "seeds": len(sub),
                     "norm_min": sub["final_block1_input_norm"].min(), "norm_max": sub["final_block1_input_norm"].max(),
                     "kendall_tau": float(tau.statistic), "p": float(tau.pvalue)})
    return _in_ladder_order(pd.DataFrame(rows)) if rows else pd.DataFrame()



def norm_loss_section(runs: pd.DataFrame) -> list[str]:
    """The report's exploratory lines on block-1 norm vs loss across seeds (norm_loss_table rendered)."""
    from ..publishing.render import compact_markdown

    table = norm_loss_table(runs)
    if table.empty:
        return []
    shown = table.assign(**{c: [f"{v:.2f}" for v in table[c]] for c in ("norm_min", "norm_max", "kendall_tau")},
                         p=[f"{v:.2g}" for v in table["p"]])
    return ["## Block-1 norm against loss across seeds (exploratory)", "",
            "Not part of the registered analysis: within each arm, Kendall's tau between a seed's final mean norm of "
            "block 1's input and its final validation loss per character (negative: the seeds whose embedding entered "
            "at a larger scale ended lower), with its two-sided p; the norms' range beside it. A lead to register, "
            "not a finding: no multiplicity correction, and the direction of cause is open.", "",
            compact_markdown(shown), ""]
