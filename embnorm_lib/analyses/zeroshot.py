"""Suite v2's item-level analysis (issue 17, item 2): every arm and seed answers the same items, so the paired
difference in accuracy varies with the seed and with the item; both are resampled.

The registered zero-shot v2 endpoint (docs/PROTOCOL.md amendment 1, item 6) is the per-seed macro accuracy,
paired t over seeds with Holm across variant x task; `two_way_bootstrap` is its labelled secondary: a percentile
interval from resampling seeds and, independently, items within each task (the same items for every seed, as
they were scored), which counts the finite item sample as a source of variance beside the seeds. The analysis
returns data frames; reports render them."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .. import stats
from ..core.errors import entry
from ..core.records.io import read_json
from ..core.records.rundir import finished_run_dirs
from ..publishing.render import percent
from ..runner.results import study_dir
from ..stats import signed
from ..studies.paired import ZEROSHOT_V2_CONFIRMATORY
from ..studies.paper_sources import H1B, MAIN


def item_matrix(study: str, out: Path, shots: str = "0shot") -> dict[str, dict[str, dict[int, np.ndarray]]]:
    """{task: {arm: {seed: 0/1 per item}}} from every finished run's lm_eval_v2.json (suite v2)."""
    matrix: dict = {}
    for run in finished_run_dirs(study_dir(study, out)):
        if not run.lm_eval_v2.is_file():
            continue
        for task, by_shots in read_json(run.lm_eval_v2)["items"].items():
            if shots in by_shots:
                bits = np.frombuffer(by_shots[shots].encode(), dtype=np.uint8) - ord("0")
                matrix.setdefault(task, {}).setdefault(run.arm, {})[run.seed] = bits.astype(np.int8)
    return matrix


def paired_item_differences(matrix: dict, variant: str, baseline: str = "none") -> dict[str, np.ndarray]:
    """Per task, a seeds x items array of correct(variant) - correct(baseline), over the seeds both arms have."""
    out = {}
    for task, arms in matrix.items():
        if variant not in arms or baseline not in arms:
            continue
        seeds = sorted(set(arms[variant]) & set(arms[baseline]))
        if seeds:
            out[task] = np.stack([arms[variant][s] - arms[baseline][s] for s in seeds]).astype(float)
    return out


def two_way_bootstrap(diffs: dict[str, np.ndarray], n_boot: int = 10_000, seed: int = 0,
                      level: float = 0.95) -> dict:
    """Macro (tasks weighted equally) mean paired difference with a percentile interval from resampling seeds and
    items within each task independently. Every task must have the same seeds (rows)."""
    tasks = sorted(diffs)
    n_seeds = {diffs[t].shape[0] for t in tasks}
    if len(n_seeds) != 1:
        raise ValueError(f"tasks have different seed counts {sorted(n_seeds)}; allowed: the same seeds for every task")
    n_s = n_seeds.pop()
    rng = np.random.default_rng(seed)
    seed_weights = rng.multinomial(n_s, np.full(n_s, 1 / n_s), size=n_boot)  # B x S resampling counts
    stat = np.zeros(n_boot)
    for t in tasks:
        d = diffs[t]
        n_i = d.shape[1]
        item_weights = rng.multinomial(n_i, np.full(n_i, 1 / n_i), size=n_boot)  # B x I
        stat += np.einsum("bs,si,bi->b", seed_weights, d, item_weights, optimize=True) / (n_s * n_i)
    stat /= len(tasks)
    alpha = 1 - level
    macro = float(np.mean([diffs[t].mean() for t in tasks]))
    return {"mean_diff": macro, "ci_low": float(np.quantile(stat, alpha / 2)),
            "ci_high": float(np.quantile(stat, 1 - alpha / 2)), "seeds": n_s,
            "items": {t: int(diffs[t].shape[1]) for t in tasks}, "method": "two-way bootstrap (seeds x items)"}


def item_table(matrix: dict, variants=("ln", "rms"), baseline: str = "none") -> pd.DataFrame:
    """Per variant: the macro difference from the baseline with the two-way bootstrap interval (secondary)."""
    rows = []
    for variant in variants:
        diffs = paired_item_differences(matrix, variant, baseline)
        if diffs:
            rows.append({"variant": variant, **{k: v for k, v in two_way_bootstrap(diffs).items() if k != "items"}})
    return pd.DataFrame(rows)


def item_sampling_mde(item_se: float, n_seeds: int = 10, tests: int = 10) -> float:
    """The suite's minimum detectable macro difference (80% power, paired t over n_seeds at the strictest Holm level
    alpha / tests) if the per-seed difference varied only as much as one seed pair's item-level spread gives
    (`item_se`: the standard error of its macro difference over items). A lower bound: a true effect that differs
    between seeds adds to it, and the measured MDE replaces it once the suite has scored the seeds."""
    return stats.power_figures(item_se, n_seeds, alpha=stats.ALPHA / tests)[0]


# -- the report ---------------------------------------------------------------------------------------------------
# runs.csv's column prefix of each suite (results.lm_summary_fields) and the manifest that froze its items
SUITE_PREFIX = {"v1": "lm", "v2": "lm2"}
SUITE_MANIFESTS = {"v1": Path(__file__).parents[1] / "lmtasks" / "manifest.json",
                   "v2": Path(__file__).parents[1] / "lmtasks" / "manifest_v2.json"}


def _task_columns(runs: pd.DataFrame, suite: str) -> dict[str, str]:
    prefix = SUITE_PREFIX[suite] + "."
    return {c.removeprefix(prefix).removesuffix(".0shot.acc"): c for c in sorted(runs.columns)
            if c.startswith(prefix) and c.endswith(".0shot.acc")}


def family_table(runs: pd.DataFrame, variants=("ln", "rms", "scaled"), suite: str = "v2") -> pd.DataFrame:
    """Per variant and task (and the macro): zero-shot accuracy minus none's, paired by seed (95% t interval),
    Holm over the variant x task tests; the macro rows are the endpoint, tested alongside. Suite v2 is the
    registered one (amendment 3); `suite="v1"` gives the superseded suite's table the same way, for comparison."""
    tasks = _task_columns(runs, suite)
    rows = []
    for variant in [v for v in variants if v in set(runs["variant"])]:
        for task, column in [("macro", f"{SUITE_PREFIX[suite]}_macro_acc"), *tasks.items()]:
            c = stats.compare(runs, column, variant)
            rows.append({"variant": variant, "task": task, "n": c.n, "none": c.baseline_mean,
                         "variant_acc": c.variant_mean, "mean_diff": c.mean_diff, "ci_low": c.ci_low,
                         "ci_high": c.ci_high, "p_t": c.p_t, "sd_diff": c.sd_diff})
    table = pd.DataFrame(rows)
    if len(table):
        reject, adjusted = stats.holm(table["p_t"].to_numpy(float))
        table = table.assign(p_holm=adjusted, significant=reject)
    return table


def measured_mde(table: pd.DataFrame, n_seeds: int = 10) -> pd.DataFrame:
    """Per variant: the macro difference's minimum detectable effect (80% power, paired t) at the seeds used and at
    n_seeds, at the strictest Holm level of the family, from the observed SD of the per-seed differences."""
    macro = table[table["task"] == "macro"]
    tests = len(table)
    return pd.DataFrame([{"variant": r.variant, "seeds": r.n, "sd_diff": r.sd_diff,
                          "mde_at_seeds_used": stats.power_figures(r.sd_diff, r.n, alpha=stats.ALPHA / tests)[0],
                          f"mde_at_{n_seeds}_seeds": stats.power_figures(r.sd_diff, n_seeds,
                                                                         alpha=stats.ALPHA / tests)[0]}
                         for r in macro.itertuples()])


REGISTERED = ZEROSHOT_V2_CONFIRMATORY  # amendment 1, item 6: zero-shot v2 is confirmatory here
CHANCE, MARGIN = 0.25, 0.05  # four choices per item; issue 17's "well between chance and ceiling"


def scored_runs(study: str, out: Path) -> pd.DataFrame:
    """The study's runs that suite v2 scored (a study may hold regimes that were not)."""
    from ..runner.results import has_index, load_runs

    if not has_index(study, out):
        return pd.DataFrame()
    runs = load_runs(study, out)
    return runs[runs["lm2_macro_acc"].notna()] if "lm2_macro_acc" in runs else runs.iloc[:0]


def difficulty(runs: pd.DataFrame, baseline: str = "none", suite: str = "v2") -> pd.DataFrame:
    """Per task, the baseline arm's mean zero-shot accuracy and its distance from chance and from 1."""
    base = runs[runs["variant"] == baseline]
    rows = []
    for task, c in _task_columns(runs, suite).items():
        acc = float(base[c].mean())
        rows.append({"task": task, "none_acc": acc, "chance": CHANCE,
                     "above_chance": acc - CHANCE, "below_ceiling": 1 - acc,
                     "well_inside": bool(acc - CHANCE >= MARGIN and 1 - acc >= MARGIN)})
    return pd.DataFrame(rows)


# the axes that belong to the arm in a study, not to its regime: H1b's tuned runs put each arm at its own best LR
# (studies.H1B_BEST_LR), so none at 1e-2 pairs with ln at 3e-3
ARM_AXES = {H1B: ("lr",)}


def regime_of(runs: pd.DataFrame, arm_axes=()) -> pd.Series:
    """Each run's training regime: its arm without the variant's name (e.g. `preset=nanogpt-cpu`) and without the
    axes that belong to the arm (`arm_axes`), empty for a study of one regime. Arms are paired only within a regime
    (a seed of one regime is not the same run as of another)."""
    if "arm" not in runs:
        return pd.Series("", index=runs.index)
    regimes = [a[len(v):].lstrip("_") if a.startswith(v) else a
               for a, v in zip(runs["arm"], runs["variant"], strict=True)]
    for axis in arm_axes:
        regimes = [re.sub(rf"(^|_){re.escape(axis)}=[^_]*", "", r).lstrip("_") for r in regimes]
    return pd.Series(regimes, index=runs.index)


def analyse(study: str, out: Path, bootstrap: bool = True) -> dict[str, dict]:
    """Everything ZEROSHOT.md, the README and the paper say about suite v2 on one study, as data: one entry per
    training regime that suite v2 scored (keyed by `regime_of`, in the runs' order). The two-way bootstrap (the
    slow part) only where asked: ZEROSHOT.md shows it, the README and the paper do not."""
    runs = scored_runs(study, out)
    if runs.empty:
        return {}
    matrix_all = item_matrix(study, out)
    found = {}
    for regime, sub in runs.groupby(regime_of(runs, ARM_AXES.get(study, ())), sort=False):
        if sub.duplicated(["variant", "seed"]).any():  # a pairing by seed needs one run per arm and seed
            raise ValueError(f"{study}: regime {regime!r} holds two runs of one variant and seed; allowed: one (name "
                             "the axes that differ between them as a regime, not in zeroshot.ARM_AXES)")
        table = family_table(sub)
        arm_variant = {r.rsplit("/", 1)[0]: v for r, v in zip(sub["run_dir"], sub["variant"], strict=True)}
        matrix = {t: {arm_variant[a]: by for a, by in arms.items() if a in arm_variant}
                  for t, arms in matrix_all.items()}
        found[regime] = {
            "study": study, "regime": regime, "runs": sub, "seeds": sorted(int(s) for s in sub["seed"].unique()),
            "arms": sorted(arm_variant), "confirmatory": study in REGISTERED, "family": table,
            "difficulty": difficulty(sub),
            "items": {t: len(next(iter(next(iter(arms.values())).values()))) for t, arms in matrix.items() if arms},
            "bootstrap": (item_table(matrix, list(table["variant"].unique())) if len(table) and bootstrap
                          else pd.DataFrame()),
            "mde": measured_mde(table) if len(table) else pd.DataFrame()}
    return found


def findings_line(d: dict) -> str:
    """The README's sentence: the macro endpoint per variant, worded by the Holm decision."""
    macro = d["family"][d["family"]["task"] == "macro"]
    parts = [f"`{r.variant}` {signed(r.mean_diff)} (95% t CI [{signed(r.ci_low)}, {signed(r.ci_high)}], Holm p = "
             f"{stats.p_text(r.p_holm)}, {'significant' if r.significant else 'direction not resolved'})"
             for r in macro.itertuples()]
    mde = d["mde"]
    where = f"`{d['study']}`" + (f" ({d['regime']})" if d["regime"] else "")
    return (f"Zero-shot suite v2 on [{where}](runs/{d['study']}/ZEROSHOT.md) ({len(d['seeds'])} seeds, "
            f"{', '.join(f'`{a}`' for a in d['arms'])}): `none` macro accuracy {macro['none'].iloc[0]:.3f}; "
            + "; ".join(parts) + f"; measured MDE at these seeds {mde['mde_at_seeds_used'].max():.4f}.")


def task_shares(d: dict) -> pd.DataFrame:
    """One regime's per-task rows (suite v2) with the share of the variant's macro difference each task carries: the
    macro is the tasks' plain mean, so a task carries its difference / number of tasks of it."""
    family = d["family"]
    tasks = family[family["task"] != "macro"]
    macro = family[family["task"] == "macro"].set_index("variant")["mean_diff"]
    n_tasks = tasks["task"].nunique()
    return tasks.assign(share=[r.mean_diff / n_tasks / macro[r.variant] for r in tasks.itertuples()])


def largest_regime(study: str, out: Path) -> dict | None:
    """The regime of a study that suite v2 scored on the most seeds (the README's and the paper's headline)."""
    found = analyse(study, out, bootstrap=False) if len(scored_runs(study, out)) else {}
    return max(found.values(), key=lambda d: len(d["seeds"])) if found else None


def task_breakdown_lines(out: Path, study: str = MAIN) -> list[str]:
    """Per variant: each task's difference and the share of the macro difference it carries, largest share first."""
    d = largest_regime(study, out)
    if d is None or not len(d["family"]):
        return []
    lines = []
    for variant, rows in task_shares(d).groupby("variant", sort=False):
        rows = rows.reindex(rows["share"].abs().sort_values(ascending=False).index)
        lines.append(f"- `{variant}` on `{study}` ({d['regime'] or 'one regime'}, {len(d['seeds'])} seeds): " + "; ".join(
            f"`{r.task}` {r.mean_diff:+.4f} [{r.ci_low:+.4f}, {r.ci_high:+.4f}] "
            f"({'significant' if r.significant else 'not resolved'}; {percent(r.share)} of the macro "
            "difference)"
            for r in rows.itertuples()) + ".")
    return lines


def reconciliation_words(out: Path, study: str = MAIN, d: dict | None = None) -> str:
    """Why suite v1 is superseded by v2 (amendment 3), from the same runs: v1's tasks against chance and ceiling,
    its items per task, and both suites' minimum detectable macro difference at the same seeds. `d`: the study's
    `largest_regime`, where the caller has it."""
    d = d or largest_regime(study, out)
    if d is None:
        return ("Suite v1 is superseded: suite v2 is the registered zero-shot endpoint (docs/PROTOCOL.md amendment 3); "
                "no run of this study was scored with suite v2, so no comparison.")
    runs = d["runs"]
    hard = difficulty(runs, suite="v1")
    at_chance = hard[hard["above_chance"] < MARGIN]
    at_ceiling = hard[hard["below_ceiling"] < MARGIN]
    v1_mde = measured_mde(family_table(runs, suite="v1"))["mde_at_seeds_used"].max()
    v2_mde = d["mde"]["mde_at_seeds_used"].max()
    items_v1 = read_json(SUITE_MANIFESTS["v1"])["n_test"]

    def listed(rows):
        return ", ".join(f"`{r.task}` {r.none_acc:.3f}" for r in rows.itertuples()) or "none"

    return (f"Suite v1, superseded: suite v2 is the registered zero-shot endpoint (docs/PROTOCOL.md amendment 3) and "
            f"counts where the two differ. On the same `{study}` runs ({d['regime'] or 'one regime'}, "
            f"{len(d['seeds'])} seeds), `none`'s suite-v1 accuracy sits within {MARGIN:g} of chance ({CHANCE:g}) on "
            f"{len(at_chance)} of {len(hard)} tasks ({listed(at_chance)}) and within {MARGIN:g} of the ceiling on "
            f"{len(at_ceiling)} ({listed(at_ceiling)}), with {items_v1} items per task against v2's "
            f"{min(d['items'].values())}; so v1's minimum detectable macro difference at these seeds is "
            f"{v1_mde:.4f}, v2's {v2_mde:.4f}.")


def reconciliation(out: Path, study: str = MAIN) -> str:
    """reconciliation_words, leading into suite v1's rows (FINDINGS.md lists them after it)."""
    d = largest_regime(study, out)
    words = reconciliation_words(out, study, d)
    return words.removesuffix(".") + ":" if d is None else words + " Suite v1's rows, for the record:"


def prints_suite_v1(study: str, out: Path) -> bool:
    """Whether the study's REPORT.md prints suite-v1 numbers: a paired study (suite v1's macro accuracy is in its
    registered family) whose runs carry suite-v1 scores."""
    from ..runner.results import has_index, load_runs
    from ..studies import STUDIES

    return (study in STUDIES and STUDIES[study].analysis == "paired" and has_index(study, out)
            and bool(_task_columns(load_runs(study, out), "v1")))


def macro_lines(found: dict[str, dict]) -> list[str]:
    """Per regime scored with suite v2: each variant's macro difference from none, worded by its Holm decision."""
    lines = []
    for regime, d in found.items():
        macro = d["family"][d["family"]["task"] == "macro"]
        if not len(macro):
            continue
        shares = task_shares(d)
        # the task that carries the largest share of each variant's macro difference (the macro is a plain mean)
        top = {v: rows.loc[rows["share"].abs().idxmax()] for v, rows in shares.groupby("variant") if len(rows)}
        parts = [f"`{r.variant}` {r.mean_diff:+.4f} [{r.ci_low:+.4f}, {r.ci_high:+.4f}] "
                 f"({('raises' if r.mean_diff > 0 else 'lowers') + ' it' if r.significant else 'direction not resolved'}"
                 f", Holm p = {stats.p_text(r.p_holm)}"
                 + (f"; {percent(top[r.variant]['share'])} of it from `{top[r.variant]['task']}`" if r.variant in top else "")
                 + ")" for r in macro.itertuples()]
        lines.append((f"`{regime}`" if regime else "") + f"{' (' if regime else ''}{len(d['seeds'])} seeds"
                     f"{')' if regime else ''}: suite-v2 macro accuracy of `none` {macro['none'].iloc[0]:.4f}; "
                     + "; ".join(parts) + ".")
    return lines


TITLES = {H1B: "every arm at its own best LR (the tuned runs)"}
QUESTION = ("Does an embedding norm change zero-shot accuracy on suite v2's four multiple-choice tasks (the registered "
            "zero-shot suite, docs/PROTOCOL.md amendment 3)?")


def write_report(study: str, out_dir=None) -> Path:
    """runs/<study>/ZEROSHOT.md: suite v2 on the study's runs that were scored with it."""
    from ..core.records.io import git_commit, runs_root, write_text_stable
    from ..core.records.rundir import study_dir_for
    from ..publishing.render import compact_markdown
    from ..publishing.study_header import header_lines

    out = runs_root(out_dir)
    found = analyse(study, out)
    label = ("**Confirmatory** (docs/PROTOCOL.md amendment 1, item 6, and amendment 3): the endpoint is the macro "
             "row, paired t over seeds" if study in REGISTERED else
             "**Exploratory** (this study did not register suite v2 as an endpoint)")
    title = TITLES.get(study, "")
    scored = sum(len(d["runs"]) for d in found.values())
    status = ("**Confirmatory** for this study (docs/PROTOCOL.md amendments 1 and 3: suite v2's macro accuracy is its "
              "registered zero-shot endpoint)" if study in REGISTERED else
              "**Exploratory** (this study did not register suite v2 as an endpoint)")
    header = header_lines(study, macro_lines(found), question=QUESTION, status=status,
                          pending="no regime of this study has suite-v2 scores for `none` and a variant")
    if prints_suite_v1(study, out):  # REPORT.md prints suite v1's rows: say here how the two relate
        header += [f"**Suite v1 and suite v2.** {reconciliation_words(out, study)} Suite v1's rows are in "
                   "[`REPORT.md`](REPORT.md).", ""]
    lines = [f"# Zero-shot suite v2 on `{study}`" + (f": {title}" if title else ""), "", *header,
             f"Written by `python -m embnorm_lib.analyses.zeroshot {study}` at commit {git_commit()[:12]} from "
             f"`runs/{study}/runs.csv` ({scored} runs scored with suite v2"
             + (f" in {len(found)} regimes: " + ", ".join(f"`{r}`" for r in found) if len(found) > 1 else "")
             + ").", "",
             f"{label}. Zero-shot accuracy on the four tasks (2,000 items each), paired by seed within a regime; one "
             "Holm family per regime over variant x (macro and each task); a direction only where the test is "
             "significant.", ""]
    for regime, d in found.items():
        sub = "###" if len(found) > 1 else "##"
        if len(found) > 1:
            lines += [f"## Regime `{regime}`", ""]
        lines += [f"{', '.join(f'`{a}`' for a in d['arms'])}; seeds {', '.join(map(str, d['seeds']))}.", "",
                  compact_markdown(d["family"].drop(columns=["sd_diff"])), "",
                  f"{sub} Difficulty for `none`", "",
                  f"Mean zero-shot accuracy of `none` per task against chance ({CHANCE:g}) and ceiling (1); "
                  f"`well_inside` is true where both margins are at least {MARGIN:g}.", "",
                  compact_markdown(d["difficulty"]), "",
                  f"{sub} Two-way bootstrap (seeds and items; labelled secondary)", "",
                  compact_markdown(d["bootstrap"]), "",
                  f"{sub} Power of the suite, measured", "",
                  "The minimum detectable macro difference (80% power, paired t at the strictest Holm level of the "
                  "family above) from the observed SD of the per-seed differences.", "",
                  compact_markdown(d["mde"]), ""]
    return write_text_stable(study_dir_for(study, out).root / "ZEROSHOT.md", "\n".join(lines))


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", nargs="?", default=H1B)
    p.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    print(write_report(args.study, args.out_dir).read_text())
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(entry(main))
