"""Stability v2, scale vs normalization (issue 16, item 4): does an embedding LayerNorm act by normalizing or by
rescaling what enters block 1, in each init regime?

    python -m embnorm_lib.analyses.scale     # SCALE.md in the scale-vs-normalization study's runs/<study>/

Exploratory (docs/PROTOCOL.md amendment 1). Regimes: embedding init std (0.02, GPT-2; 1.0, PyTorch's default) x
output head tied / untied (with a tied head, std-1 embeddings also make the output logits huge). Arms: `ln`
normalizes and rescales (block 1's input norm rises to ~sqrt(d)); `ln_matched` normalizes without rescaling (its
gain starts at none's input norm); `scaled` and `scaled_unit` rescale without normalizing. Per regime, each arm's
paired difference in final validation loss from `none` (95% t interval over seeds), one Holm family per regime."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from .. import stats
from ..core.cli import report_main
from ..core.errors import entry
from ..core.records.io import git_commit, runs_root, write_text_stable
from ..core.records.rundir import study_dir_for
from ..publishing.render import compact_markdown
from ..runner.results import load_runs, load_series
from ..stats import signed
from ..studies import STUDIES
from ..studies.paper_sources import SCALE
from .stability import VARIANT_ORDER

STUDY = SCALE
REGIME = ["cfg.emb_init_std", "cfg.tie_embeddings"]


def with_regime(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs written before `tie_embeddings` existed (the copies of the v1 init-scale study's runs) had a tied head."""
    tie = runs["cfg.tie_embeddings"] if "cfg.tie_embeddings" in runs else pd.Series(True, index=runs.index)
    return runs.assign(**{"cfg.tie_embeddings": tie.fillna(True).astype(bool)})


def init_input_norms(study: str, out: Path) -> pd.DataFrame:
    """Block 1's input norm at the first step of each run (what the arm feeds block 1 at init)."""
    metrics = load_series(study, "metrics", out)
    first = metrics.sort_values("step").groupby(["arm", "seed"]).head(1)
    return first[["arm", "seed", "block1_input_norm"]].rename(columns={"block1_input_norm": "init_block1_input_norm"})


def regime_table(runs: pd.DataFrame, input_norms: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per regime and arm: seeds, mean loss at init and final val loss, block 1's input norm at init, failures, and
    the paired difference in final val loss from none with its t interval; Holm within each regime."""
    runs = with_regime(runs)
    if input_norms is not None and len(input_norms):
        runs = runs.merge(input_norms, on=["arm", "seed"], how="left")
    tables = []
    for (std, tie), sub in runs.groupby(REGIME):
        rows = []
        for variant in [v for v in VARIANT_ORDER if v in set(sub["variant"])]:
            vals = sub[sub["variant"] == variant]
            row = {"emb_init_std": std, "head": "tied" if tie else "untied", "variant": variant, "seeds": len(vals),
                   "init_val_loss": vals["init_val_loss"].mean(), "val_loss": vals["val_loss"].mean(),
                   "failed": int(vals["failed"].astype(bool).sum())}
            if "init_block1_input_norm" in vals:
                row["init_block1_input_norm"] = vals["init_block1_input_norm"].mean()
            if variant != "none" and "none" in set(sub["variant"]):
                c = stats.compare(sub, "val_loss", variant)
                row.update({"delta_vs_none": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_t": c.p_t})
            rows.append(row)
        table = pd.DataFrame(rows)
        if "p_t" in table:
            tested = table["p_t"].notna()
            reject, adjusted = stats.holm(table.loc[tested, "p_t"].to_numpy(float))
            table.loc[tested, "p_holm"], table.loc[tested, "significant"] = adjusted, reject
        tables.append(table)
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def attribution(table: pd.DataFrame) -> pd.DataFrame:
    """Per regime: LayerNorm's effect next to its two halves' (normalize only: ln_matched; rescale only:
    scaled_unit, scaled), each as 'raises' / 'lowers' / 'not resolved' from its Holm decision."""
    def word(row) -> str:
        if row is None or pd.isna(row.get("p_holm", np.nan)):
            return "not run"
        if not bool(row["significant"]):
            return f"not resolved ({signed(row['delta_vs_none'])})"
        return f"{'raises' if row['delta_vs_none'] > 0 else 'lowers'} it by {abs(row['delta_vs_none']):.3f}"

    rows = []
    for (std, head), sub in table.groupby(["emb_init_std", "head"], sort=False):
        by = {r["variant"]: r for _, r in sub.iterrows()}
        rows.append({"emb_init_std": std, "head": head,
                     **{f"{v} vs none": word(by.get(v)) for v in ("ln", "ln_matched", "scaled_unit", "scaled")}})
    return pd.DataFrame(rows)


def attribution_lines(attributed: pd.DataFrame) -> list[str]:
    """`attribution`'s rows as sentences: per regime, LayerNorm and its halves against none (final val loss)."""
    return [f"Embeddings N(0, {r['emb_init_std']:g}), {r['head']} head, final validation loss vs `none`: "
            + "; ".join(f"`{column.removesuffix(' vs none')}` {r[column]}" for column in attributed.columns
                        if column.endswith(" vs none") and r[column] != "not run") + "."
            for _, r in attributed.iterrows()]


def normalizing_share(table: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per regime where LayerNorm's difference from none is resolved (Holm): its difference, normalizing alone's
    (ln_matched), the share |ln_matched| / |ln|, and block 1's input norm at init for none and for ln; where the study
    ran scaled_unit (rescaling without normalizing), its difference, its input norm at init and `scale_share`,
    scaled_unit / ln with its sign (negative where rescaling alone moves the loss the other way). The shares are
    ratios of two noisy means, a description; with `runs`, each half's own paired difference from `ln` (final val
    loss, by seed, 95% t interval) says whether that half is resolved apart from the whole norm."""
    rows = []
    for (std, head), sub in table.groupby(["emb_init_std", "head"], sort=False):
        by = {r["variant"]: r for _, r in sub.iterrows()}
        if not {"none", "ln", "ln_matched"} <= set(by) or not bool(by["ln"].get("significant", False)):
            continue
        gaps = {}
        if runs is not None:
            regime = with_regime(runs)
            regime = regime[(regime["cfg.emb_init_std"] == std) & (regime["cfg.tie_embeddings"] == (head == "tied"))]
            for half in ("ln_matched", "scaled_unit"):
                if half in by:
                    c = stats.compare(regime, "val_loss", half, baseline="ln")
                    gaps.update({f"{half}_vs_ln": c.mean_diff, f"{half}_vs_ln_low": c.ci_low,
                                 f"{half}_vs_ln_high": c.ci_high, f"{half}_vs_ln_seeds": c.n})
        rows.append({"emb_init_std": std, "head": head, "ln_delta": by["ln"]["delta_vs_none"],
                     "ln_matched_delta": by["ln_matched"]["delta_vs_none"],
                     "share": abs(by["ln_matched"]["delta_vs_none"] / by["ln"]["delta_vs_none"]),
                     "none_input_norm": by["none"].get("init_block1_input_norm", np.nan),
                     "ln_input_norm": by["ln"].get("init_block1_input_norm", np.nan),
                     **({"scaled_unit_delta": by["scaled_unit"]["delta_vs_none"],
                         "scaled_unit_input_norm": by["scaled_unit"].get("init_block1_input_norm", np.nan),
                         "scale_share": by["scaled_unit"]["delta_vs_none"] / by["ln"]["delta_vs_none"] + 0.0}  # no "-0%"
                        if "scaled_unit" in by else {}), **gaps})
    return pd.DataFrame(rows)


def write_report(out_dir=None, study: str = STUDY, answer: list[str] | None = None) -> Path:
    """SCALE.md; `answer`: the finding its header quotes (findings.scale_finding, passed in by its publisher)."""
    out = runs_root(out_dir)
    runs = load_runs(study, out)
    table = regime_table(runs, init_input_norms(study, out))
    done, expected = len(runs), len(STUDIES[study].cells())
    from ..publishing.study_header import header_lines

    lines = [f"# Stability v2: scale vs normalization (`{study}`)", "",
             *header_lines(study, list(answer or [])
                           + attribution_lines(attribution(table)) if done >= expected else []),
             f"Written by `python -m embnorm_lib.analyses.scale` at commit {git_commit()[:12]} from "
             f"`runs/{study}/runs.csv` ({done} of {expected} registered runs finished"
             + ("" if done == expected else "; **partial**: numbers will change") + ").", "",
             "**Exploratory** (docs/PROTOCOL.md amendment 1). " + STUDIES[study].description + " "
             + STUDIES[study].note, "",
             "## Final validation loss by regime", "",
             "Paired differences from none (nats/char, 95% t interval over seeds); each regime is one Holm family. "
             "`init_block1_input_norm`: what the arm feeds block 1 at the first step.", "",
             compact_markdown(table), "",
             "## Which half of LayerNorm carries its effect", "",
             "Each arm's difference from none in words, only where the Holm decision of its regime resolves it.", "",
             compact_markdown(attribution(table)), ""]
    shares = normalizing_share(table, runs)
    if len(shares):
        lines += ["## Normalizing alone and rescaling alone, as shares of LayerNorm's difference", "",
                  "Regimes where LayerNorm's difference is resolved: `share` = |ln_matched| / |ln|, beside block 1's "
                  "input norm at init without a norm and with LayerNorm; `scale_share` = scaled_unit / ln (signed), "
                  "beside the input norm scaled_unit gives block 1 at init (a description: no test of the shares). "
                  "`ln_matched_vs_ln` and `scaled_unit_vs_ln`: each half's paired difference from `ln` itself "
                  "(by seed, with its 95% t interval): where the interval excludes 0, that half alone does not "
                  "reproduce the whole norm's loss.",
                  "", compact_markdown(shares), ""]
    return write_text_stable(study_dir_for(study, out).root / "SCALE.md", "\n".join(lines))


def main(argv=None) -> int:
    from ..runner.registry import write_own_report

    return report_main(argv, __doc__, [STUDY], lambda study, a: write_own_report(study, a.out_dir), options=())


if __name__ == "__main__":
    sys.exit(entry(main))
