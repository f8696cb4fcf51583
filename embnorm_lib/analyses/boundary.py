"""Stability v2, the learning-rate boundary (issue 16): where does each arm stop training, and what grows first?

    python -m embnorm_lib publish <study>   # runs/<study>/BOUNDARY.md of an LR search (clipped, unclipped, bf16, deep)

Exploratory (docs/PROTOCOL.md amendment 1: the search for a regime in which the baseline is unstable). A run
**failed** if its loss became non-finite or its final validation loss is above its loss at initialisation
(`failed` in runs.csv). Per seed, the **max stable LR** is the largest grid LR at which that seed's run did not
fail; an arm's is summarised on the log10 scale (mean, 95% t interval) and compared with `none` paired by seed.
Every table with tests is one Holm family; a direction is stated only where its test is significant. The
analysis returns data frames; `write_report` renders them."""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import stats
from ..core.cli import report_main
from ..core.errors import entry
from ..core.records.io import default_figures_dir, fingerprint, git_commit, runs_root, write_text_stable
from ..core.records.rundir import study_dir_for
from ..publishing import plots
from ..publishing.render import PARTIAL, compact_markdown
from ..publishing.study_header import header_lines
from ..runner.results import has_index, load_runs, load_series
from ..studies import STUDIES, studies_of
from ..studies.paper_sources import BOUNDARY_KEYS
from . import plots as analysis_plots
from .stability import VARIANT_ORDER, _order, best_lr_paired, capped_loss, lr_sensitivity, paired_sensitivity, with_holm

STUDY = BOUNDARY_KEYS["clip"]  # the first LR search (with clipping), the one the others vary
BOUNDARY_STUDIES = tuple(studies_of("boundary"))  # the LR searches, in registry order (the first is STUDY)
WORTSMAN_RANGE = (3e-4, 3e-1)  # the LR range over which Wortsman et al. 2023 measure sensitivity


def phase_table(runs: pd.DataFrame, out_logits: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per arm and LR: runs, failures, divergences, the final loss of the runs that did not fail, the largest
    attention logit (diagnostic probes) and the last probe's largest output logit, the share of clipped steps."""
    frame = runs.assign(failed=runs["failed"].astype(bool), diverged=runs["diverged"].astype(bool))
    frame["loss_ok"] = frame["val_loss"].where(~frame["failed"])
    if out_logits is not None and len(out_logits):
        frame = frame.merge(out_logits, on=["run_dir"], how="left")
    aggregations = dict(runs=("seed", "size"), failed=("failed", "sum"), diverged=("diverged", "sum"),
                        val_loss_not_failed=("loss_ok", "mean"), max_attn_logit=("max_attn_logit", "mean"),
                        clipped_frac=("clipped_frac", "mean"))
    if "final_out_logit_max" in frame:
        aggregations["final_out_logit_max"] = ("final_out_logit_max", "mean")
    return _order(frame.groupby(["variant", "cfg.lr"]).agg(**aggregations).reset_index())


def final_out_logits(study: str, out: Path) -> pd.DataFrame:
    """Each run's largest output logit at its last diagnostics probe (output-logit growth, Wortsman et al.)."""
    diags = load_series(study, "diagnostics", out)
    if "out_logit.max" not in diags:
        return pd.DataFrame(columns=["run_dir", "final_out_logit_max"])
    last = diags.sort_values("step").groupby(["arm", "seed"]).tail(1)
    return pd.DataFrame({"run_dir": [f"{a}/seed{s}" for a, s in zip(last["arm"], last["seed"], strict=True)],
                         "final_out_logit_max": last["out_logit.max"].to_numpy()})


def max_stable_lr_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm and seed: the largest grid LR whose run did not fail (NaN if every LR failed), and the smallest
    LR that failed (NaN if none did)."""
    rows = []
    for (variant, seed), sub in runs.assign(failed=runs["failed"].astype(bool)).groupby(["variant", "seed"]):
        ok, bad = sub.loc[~sub["failed"], "cfg.lr"], sub.loc[sub["failed"], "cfg.lr"]
        rows.append({"variant": variant, "seed": seed, "lr_points": len(sub),
                     "max_stable_lr": ok.max() if len(ok) else np.nan,
                     "first_failed_lr": bad.min() if len(bad) else np.nan})
    frame = pd.DataFrame(rows)
    # a seed whose sweep has not reached every LR yet would report the top of its partial grid: left out
    return frame.assign(log10_max_stable_lr=stats.log10(frame["max_stable_lr"]),
                        complete=frame["lr_points"] == runs["cfg.lr"].nunique())


def boundary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm: the max stable LR over seeds (geometric mean with a 95% t interval on log10), the seeds whose
    run failed somewhere on the grid, and the paired difference in log10(max stable LR) from none."""
    per_seed = max_stable_lr_per_seed(runs)
    per_seed = per_seed[per_seed["complete"]]
    rows = []
    for variant, sub in per_seed.groupby("variant"):
        logs = sub["log10_max_stable_lr"].dropna().to_numpy()
        low, high = stats.t_interval(logs) if len(logs) > 1 else (np.nan, np.nan)
        row = {"variant": variant, "seeds": len(sub), "seeds_with_a_failure": int(sub["first_failed_lr"].notna().sum()),
               "max_stable_lr_by_seed": " ".join(f"{v:g}" for v in sub["max_stable_lr"]),
               "max_stable_lr_geo_mean": 10 ** logs.mean() if len(logs) else np.nan,
               "ci_low": 10 ** low, "ci_high": 10 ** high}
        if variant != "none" and "none" in set(per_seed["variant"]):
            c = stats.compare(per_seed.rename(columns={"log10_max_stable_lr": "metric"}), "metric", variant)
            row.update({"delta_log10_vs_none": c.mean_diff, "d_ci_low": c.ci_low, "d_ci_high": c.ci_high,
                        "p_t": c.p_t})
        rows.append(row)
    table = _order(pd.DataFrame(rows))
    return with_holm(table) if "p_t" in table else table


def sensitivity_in_range(runs: pd.DataFrame, lo: float = WORTSMAN_RANGE[0], hi: float = WORTSMAN_RANGE[1]
                         ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """LR sensitivity (stability.lr_sensitivity) over [lo, hi] only, and each arm's paired difference from none."""
    inside = runs[(runs["cfg.lr"] >= lo * (1 - 1e-9)) & (runs["cfg.lr"] <= hi * (1 + 1e-9))]
    return lr_sensitivity(inside), paired_sensitivity(inside)


def fisher_vs_none(failed: int, runs: int, none_failed: int, none_runs: int) -> float:
    """Fisher's exact test of an arm's failure count against none's."""
    from scipy.stats import fisher_exact

    return fisher_exact([[failed, runs - failed], [none_failed, none_runs - none_failed]]).pvalue


def unstable_baseline_lrs(phase: pd.DataFrame) -> list[float]:
    """The LRs at which `none` is unstable by the amendment's definition (any failure among its runs)."""
    base = phase[phase["variant"] == "none"]
    return [float(lr) for lr in base.loc[base["failed"] > 0, "cfg.lr"]]


def h1b_candidates(runs: pd.DataFrame, phase: pd.DataFrame) -> pd.DataFrame:
    """At each LR where none fails: every arm's failures with Fisher's exact test against none's (one Holm
    family). These locate the regime for a confirmatory H1b study; they are not that study."""
    rows = []
    for lr in unstable_baseline_lrs(phase):
        at = phase[np.isclose(phase["cfg.lr"], lr)].set_index("variant")
        for variant in [v for v in at.index if v != "none"]:
            rows.append({"cfg.lr": lr, "variant": variant, "failed": int(at.loc[variant, "failed"]),
                         "none_failed": int(at.loc["none", "failed"]), "runs": int(at.loc[variant, "runs"]),
                         "p_fisher": fisher_vs_none(int(at.loc[variant, "failed"]), int(at.loc[variant, "runs"]),
                                                    int(at.loc["none", "failed"]), int(at.loc["none", "runs"]))})
    if not rows:
        return pd.DataFrame(columns=["cfg.lr", "variant", "failed", "none_failed", "runs", "p_fisher"])
    frame = pd.DataFrame(rows)
    reject, adjusted = stats.holm(frame["p_fisher"].to_numpy(float))
    return frame.assign(p_holm=adjusted, significant=reject)


def h1b_family(runs: pd.DataFrame, mei: float = stats.MEI, tuned: pd.DataFrame | None = None
               ) -> tuple[pd.DataFrame, dict]:
    """The registered H1b test (amendment 1, item 6) on the runs of one regime (one LR of one study; run it on a
    confirmatory study registered for that regime, not on the search that found it). Per variant vs none: failures
    (Fisher's exact test), loss spikes after the warm-up (paired t) and the final validation loss of seed pairs in
    which neither run failed (paired t); one Holm family over variant x endpoint; then decision rule 3: a variant
    is adopted if the baseline is unstable, the variant fixes it (no failure, fewer spikes after the warm-up than
    the baseline) and the upper end of its loss difference's 95% interval is within the MEI.

    With `tuned` (every arm's runs at its own best LR, same seeds; amendment 2) a fourth endpoint joins the family,
    the tuned cost (the variant's final loss at its best LR minus none's at its best, paired t), and rule 3 judges
    the cost by it: at an LR where the baseline fails, few or no pairs of non-failed runs may be left."""
    frame = runs.assign(failed=runs["failed"].astype(bool))
    base = frame[frame["variant"] == "none"]
    rows = []
    for variant in [v for v in VARIANT_ORDER if v in set(frame["variant"]) and v != "none"]:
        arm = frame[frame["variant"] == variant]
        failed, none_failed = int(arm["failed"].sum()), int(base["failed"].sum())
        rows.append({"variant": variant, "endpoint": "failures", "variant_value": failed, "none_value": none_failed,
                     "mean_diff": failed - none_failed, "ci_low": np.nan, "ci_high": np.nan,
                     "p": fisher_vs_none(failed, len(arm), none_failed, len(base)), "n": len(arm)})
        c = stats.compare(frame, "spike_count_post_warmup", variant)
        rows.append({"variant": variant, "endpoint": "spike_count_post_warmup", "variant_value": c.variant_mean,
                     "none_value": c.baseline_mean, "mean_diff": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high,
                     "p": c.p_t, "n": c.n})
        both_ok = set(arm.loc[~arm["failed"], "seed"]) & set(base.loc[~base["failed"], "seed"])
        pairs = frame[frame["seed"].isin(both_ok) & frame["variant"].isin(["none", variant])]
        c = stats.compare(pairs, "val_loss", variant) if len(both_ok) >= 2 else None
        rows.append({"variant": variant, "endpoint": "val_loss_not_failed",
                     "variant_value": c.variant_mean if c else np.nan, "none_value": c.baseline_mean if c else np.nan,
                     "mean_diff": c.mean_diff if c else np.nan, "ci_low": c.ci_low if c else np.nan,
                     "ci_high": c.ci_high if c else np.nan, "p": c.p_t if c else np.nan, "n": len(both_ok)})
        if tuned is not None:
            c = stats.compare(tuned[tuned["variant"].isin(["none", variant])], "val_loss", variant)
            rows.append({"variant": variant, "endpoint": "tuned_cost", "variant_value": c.variant_mean,
                         "none_value": c.baseline_mean, "mean_diff": c.mean_diff, "ci_low": c.ci_low,
                         "ci_high": c.ci_high, "p": c.p_t, "n": c.n})
    family = pd.DataFrame(rows)
    tested = family["p"].notna()
    reject, adjusted = stats.holm(family.loc[tested, "p"].to_numpy(float))
    family.loc[tested, "p_holm"] = adjusted
    family["significant"] = False
    family.loc[tested, "significant"] = reject
    base_spikes = base["spike_count_post_warmup"].mean()
    unstable = bool(base["failed"].any() or base_spikes >= 1)
    verdicts = {}
    for variant, sub in family.groupby("variant", sort=False):
        arm = frame[frame["variant"] == variant]
        fixes = bool(not arm["failed"].any() and arm["spike_count_post_warmup"].mean() < base_spikes)
        cost = "tuned_cost" if tuned is not None else "val_loss_not_failed"
        cost_high = sub.loc[sub["endpoint"] == cost, "ci_high"].iloc[0]
        adopt = unstable and fixes and bool(np.isfinite(cost_high) and cost_high <= mei)
        verdicts[variant] = {"verdict": f"adopt {variant}" if adopt else "keep baseline", "fixes": fixes,
                             "cost_endpoint": cost, "cost_ci_high": float(cost_high)}
    return family, {"baseline_unstable": unstable, "baseline_failures": int(base["failed"].sum()),
                    "baseline_spikes_post_warmup": float(base_spikes), "mei": mei, "variants": verdicts}


def complete_seed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the seeds that have finished every (arm, LR) cell of the grid: a seed-mean curve over a partial
    seed would weight LRs by different seeds and could move an arm's best LR."""
    cells = runs.groupby("seed").apply(lambda sub: len(set(zip(sub["variant"], sub["cfg.lr"], strict=True))),
                                       include_groups=False)
    full = runs["variant"].nunique() * runs["cfg.lr"].nunique()
    return runs[runs["seed"].isin(cells[cells == full].index)]


def best_lr_of_complete_seeds(curves: pd.DataFrame) -> pd.DataFrame:
    """best_lr_paired over the whole-grid seeds' runs (complete_seed_runs); empty while no seed has finished."""
    return best_lr_paired(curves) if len(curves) else pd.DataFrame()


def analyse(out: Path, study: str = STUDY) -> dict:
    runs = load_runs(study, out)
    phase = phase_table(runs, final_out_logits(study, out))
    curves = complete_seed_runs(runs)  # LR curves, best LRs and sensitivity: whole-grid seeds only
    best = best_lr_of_complete_seeds(curves)
    if len(curves):
        sensitivity, sensitivity_paired = sensitivity_in_range(curves)
        edge = best_lr_at_grid_edge(curves, lr_sensitivity(curves))
    else:  # no seed has finished the grid yet
        sensitivity = sensitivity_paired = pd.DataFrame()
        edge = {}
    return {"runs": runs, "phase": phase, "boundary": boundary_table(runs),
            "curve_seeds": [int(s) for s in sorted(curves["seed"].unique())], "per_seed": max_stable_lr_per_seed(runs),
            "sensitivity": sensitivity, "sensitivity_paired": sensitivity_paired, "best_lr": best,
            "best_lr_at_edge": edge, "h1b": h1b_candidates(runs, phase)}


def best_lr_at_grid_edge(runs: pd.DataFrame, sensitivity: pd.DataFrame) -> dict[str, float]:
    """Arms whose best LR (by seed-mean loss) is the smallest or largest LR of the grid they ran, with that LR:
    their tuned optimum may lie beyond the grid, so "at its own best LR" is then only the grid's best."""
    edges = {}
    for _, row in sensitivity.iterrows():
        lrs = runs.loc[runs["variant"] == row["variant"], "cfg.lr"]
        if np.isclose(row["best_lr"], lrs.min()) or np.isclose(row["best_lr"], lrs.max()):
            edges[row["variant"]] = float(row["best_lr"])
    return edges


def _curve_table(frame: pd.DataFrame) -> str:
    return compact_markdown(frame) if len(frame) else "_No seed has finished the whole grid yet._"


def _edge_words(edges: dict[str, float]) -> str:
    if not edges:
        return "Every arm's best LR lies inside the grid."
    listing = ", ".join(f"`{v}` ({lr:g})" for v, lr in edges.items())
    return (f"Best LR at the edge of the grid: {listing}; the tuned optimum of these arms may lie beyond it, so "
            "their row compares the grid's best, not a tuned optimum.")


def expected_cells(study: str = STUDY) -> int:
    return len(STUDIES[study].cells())


def _words(table: pd.DataFrame, value: str, low: str, high: str) -> str:
    parts = []
    for _, row in table.iterrows():
        if "p_holm" not in row or pd.isna(row.get("p_holm")):
            continue
        span = f"{stats.signed(row[value])} [{stats.signed(row[low])}, {stats.signed(row[high])}]"
        verdict = ("higher" if row[value] > 0 else "lower") if row["significant"] else "not resolved"
        parts.append(f"`{row['variant']}` {span} ({verdict}; Holm p = {stats.p_text(row['p_holm'])})")
    return "; ".join(parts) if parts else "no paired comparison yet"


def search_label(runs: pd.DataFrame) -> str:
    """What a search varied, from its runs' config: depth, clipping and (where set) precision."""
    clip = float(runs["cfg.grad_clip"].iloc[0])
    words = [f"{int(runs['cfg.n_layer'].iloc[0])} layers",
             f"gradient clipping at {clip:g}" if clip else "no gradient clipping"]
    precision = search_precision(runs)
    return ", ".join(words + ([precision] if precision != "fp32" else []))


def search_precision(runs: pd.DataFrame) -> str:
    """The precision a search asked for; `auto` resolves to fp32 on the CPU these searches ran on."""
    precision = str(runs["cfg.precision"].iloc[0]) if "cfg.precision" in runs else "auto"
    return "fp32" if precision in ("auto", "nan") else precision


def failure_escapes(phase: pd.DataFrame) -> pd.DataFrame:
    """The (arm, LR) cells of a phase table where `none` failed at least once and the arm never did: the only
    places a search could show an embedding norm buying stability (exploratory; H1b's test is registered)."""
    none_failed = set(phase.loc[(phase["variant"] == "none") & (phase["failed"] > 0), "cfg.lr"])
    keep = (phase["variant"] != "none") & (phase["failed"] == 0) & phase["cfg.lr"].isin(none_failed)
    return phase.loc[keep, ["variant", "cfg.lr"]].reset_index(drop=True)


def cpu_words(runs: pd.DataFrame) -> str:
    """Which CPUs trained the runs: config, seed and threads fix a run's batches and initial values on any CPU, but
    its last bits depend on the CPU's kernels, so a study trained on several says how many runs each trained."""
    if "cpu_model" not in runs:
        return "CPU: not recorded."
    counts = runs["cpu_model"].fillna("not recorded").value_counts()
    if len(counts) == 1:
        return f"CPU: every run trained on {counts.index[0]}."
    return ("CPUs (a run's last bits depend on the CPU; batches and initial values do not): "
            + "; ".join(f"{model}: {n} runs" for model, n in counts.items()) + ".")


def search_finding(study: str, out: Path) -> str:
    """One line for the README once every registered run of a search has finished: where each arm failed."""
    if not has_index(study, out):
        return ""
    runs = load_runs(study, out)
    return search_words(study, runs) if len(runs) >= expected_cells(study) else ""


def search_words(study: str, runs: pd.DataFrame) -> str:
    """Per arm, the LRs at which its runs failed (of how many), and the lowest LR with any failure."""
    phase = phase_table(runs)
    failed = phase[phase["failed"] > 0]
    per_arm = []
    for variant in _order(phase[["variant"]].drop_duplicates())["variant"]:
        sub = failed[failed["variant"] == variant]
        per_arm.append(f"`{variant}` " + ("did not fail" if sub.empty else "failed " + ", ".join(
            f"{int(r['failed'])} of {int(r['runs'])} at LR {r['cfg.lr']:g}" for _, r in sub.iterrows())))
    lrs = sorted(runs["cfg.lr"].unique())
    lowest = f"; no run failed below LR {failed['cfg.lr'].min():g}" if len(failed) else ""
    return (f"- {search_label(runs)} (`{study}`, peak LR {lrs[0]:g} to {lrs[-1]:g}, {runs['seed'].nunique()} seeds): "
            + "; ".join(per_arm) + lowest + ".")


def write_report(out_dir=None, figures_dir=None, study: str = STUDY) -> Path:
    out = runs_root(out_dir)
    fig_dir = Path(figures_dir or default_figures_dir(out, "stability-v2"))
    prefix = "" if study == STUDY else f"{study.removeprefix('stability-').removesuffix('-v2')}_"
    d = analyse(out, study)
    runs = d["runs"]
    footer = f"embnorm · {study} · runs.csv {fingerprint(study_dir_for(study, out).index)}"
    curves = runs.assign(capped=capped_loss(runs), arm=runs["variant"])
    for name, fig in (("lr_boundary_loss", analysis_plots.plot_lr_curves(curves)),
                      ("lr_boundary_growth", analysis_plots.plot_lr_growth(d["phase"]))):
        plots.save(fig, fig_dir / f"{prefix}{name}", footer)
        plt.close(fig)
    done, expected = len(runs), expected_cells(study)
    grid = sorted(runs["cfg.lr"].unique())
    unstable = unstable_baseline_lrs(d["phase"])
    seeds_words = ", ".join(str(s) for s in d["curve_seeds"]) or "none yet"
    lines = [f"# Stability v2: the learning-rate boundary (`{study}`)", "",
             *header_lines(study, [search_words(study, runs)] if done >= expected else []),
             f"Written by `python -m embnorm_lib.analyses.boundary` at commit {git_commit()[:12]} from "
             f"`runs/{study}/runs.csv` ({done} of {expected} registered runs finished"
             + ("" if done == expected else PARTIAL) + "). "
             "Figures: `figures/stability-v2/`.", "", cpu_words(runs), "",
             "**Exploratory** (docs/PROTOCOL.md amendment 1): the search for a regime in which the baseline is "
             "unstable. " + STUDIES[study].description + " " + STUDIES[study].note, "",
             "A run **failed** if its loss became non-finite or its final validation loss is above its loss at "
             "initialisation. Intervals are 95% t intervals over seeds; each table with tests is one Holm family, "
             "and a direction is stated only where its test is significant.", "",
             "## Phase diagram (arm x learning rate)", "",
             "Failures out of runs, the final validation loss of the runs that did not fail, the largest attention "
             "logit of the diagnostic probes, the largest output logit at the last probe, the share of steps whose "
             "gradient was clipped. Figures: `lr_boundary_loss.png` (final loss, a failed run counted at its loss "
             "at init), `lr_boundary_growth.png` (failures and logit growth).", "",
             compact_markdown(d["phase"]), "",
             "## Max stable learning rate", "",
             f"Per seed, the largest of the grid's LRs ({', '.join(f'{v:g}' for v in grid)}) whose run did not "
             "fail (a seed that failed nowhere has the top of the grid: a lower bound; a seed whose runs do not cover the "
             "whole grid yet is left out); per arm the geometric mean "
             "over seeds with its 95% t interval, and the paired difference of log10(max stable LR) from none (a "
             "difference of 0.5 is one grid step).", "",
             compact_markdown(d["boundary"]), "",
             "Paired difference in log10(max stable LR) from none: "
             + _words(d["boundary"], "delta_log10_vs_none", "d_ci_low", "d_ci_high") + ".", "",
             f"## LR sensitivity over Wortsman et al.'s range [{WORTSMAN_RANGE[0]:g}, {WORTSMAN_RANGE[1]:g}]", "",
             "Mean over the range's grid LRs of min(loss, loss at init) minus the best loss (a failed run counts at "
             "its loss at init); per arm, then each arm's paired difference from none. This section and the next use "
             f"the seeds that have finished the whole grid ({seeds_words}).", "",
             _curve_table(d["sensitivity"]), "", _curve_table(d["sensitivity_paired"]), "",
             "Sensitivity, paired difference from none: "
             + _words(d["sensitivity_paired"], "delta_vs_none", "ci_low", "ci_high") + ".", "",
             "## Each arm at its own best learning rate", "",
             "Final loss at each arm's best grid LR (by seed-mean loss) against none at none's best, paired by "
             "seed.", "", _curve_table(d["best_lr"]), "",
             "Loss at the arm's best LR minus none's at its best: "
             + _words(d["best_lr"], "delta_vs_none", "ci_low", "ci_high") + "."
             + (" " + _edge_words(d["best_lr_at_edge"]) if len(d["best_lr"]) else ""),
             "",
             "## Where the baseline fails (H1b's regime)", ""]
    if unstable:
        lines += [f"`none` failed at LR {', '.join(f'{v:g}' for v in unstable)}. Every arm's failures there, "
                  "with Fisher's exact test against none's (one Holm family). This locates the regime for the "
                  "registered H1b test (amendment 1, item 6); with 3 seeds per cell it cannot resolve a difference "
                  "in failure rate (the smallest Fisher p at 3 vs 3 runs is 0.1).", "",
                  compact_markdown(d["h1b"]), ""]
    else:
        lines += ["`none` did not fail at any LR of the grid" + (" so far" if done < expected else "") +
                  ": no regime for H1b in this study.", ""]
    return write_text_stable(study_dir_for(study, out).root / "BOUNDARY.md", "\n".join(lines))


def main(argv=None) -> int:
    return report_main(argv, __doc__, BOUNDARY_STUDIES, lambda study, a: write_report(a.out_dir, a.figures_dir, study))


if __name__ == "__main__":
    sys.exit(entry(main))
