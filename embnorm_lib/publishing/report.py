"""Tables from a study's runs.csv, and runs/README.md (what each study is, how it was made).

    python -m embnorm_lib report summary <study>     # per-arm table on stdout
    python -m embnorm_lib report runs-readme         # rewrite runs/README.md from the committed runs
    python -m embnorm_lib report recipes             # rewrite runs/RECIPES.md (publishing.recipe_table)

runs/README.md walks the registry: its sections, their headings and how each lists a study are the study layer's
data (runner.registry.Site.sections); each study's paragraph comes from its description and its runs."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from ..core.errors import entry
from ..core.records.io import runs_root, write_bytes_if_changed
from ..runner.registry import ANALYSES, STUDIES, Section, planned_runs, site
from ..runner.results import arm_order, has_index, load_runs, reused_mask, study_provenance
from .render import compact_markdown, layouts_text, markdown_arm_table

METRICS = ["val_loss", "val_ppl", "val_acc", "ece_equal_width", "brier", "final_grad_norm",
           "final_block1_input_norm", "spike_count"]


def arm_table(runs: pd.DataFrame, metrics: list[str] = METRICS) -> pd.DataFrame:
    """Mean and SD over seeds of each metric, per arm, with run and divergence counts."""
    metrics = [m for m in metrics if m in runs.columns]
    grouped = runs.groupby("arm", sort=False)
    table = grouped[metrics].agg(["mean", "std"])
    table.columns = [f"{m}_{s}" for m, s in table.columns]
    table.insert(0, "runs", grouped.size())
    table.insert(1, "diverged", grouped["diverged"].sum().astype(int))
    return table.loc[sorted(table.index, key=arm_order)]


def layouts(prov: dict) -> str:
    return layouts_text(prov["layouts"]) or "no sweep log"


def commits_words(prov: dict) -> str:
    return ", ".join(c[:12] for c in prov["commits"])


def compute_words(runs: pd.DataFrame, prov: dict) -> str:
    """A study's compute: the runs' own wall time summed (what it would cost serially), and the sweeps' wall time
    with their layouts (a sweep stopped part-way logs no wall time, so the runs' sum is the complete figure)."""
    run_hours = float(pd.to_numeric(runs["wall_s"], errors="coerce").sum()) / 3600 if "wall_s" in runs else 0.0
    return (f"compute {run_hours:.1f} h of run time summed over runs, {prov['sweep_wall_s'] / 60:.0f} min of logged "
            f"sweep wall time ({layouts(prov)})")


def not_run_yet(study: str) -> list[str]:
    return [f"- `{study}`: {STUDIES[study].description} Not run yet: `python -m embnorm_lib sweep {study}`.", ""]


def reused_data(study: str, out: Path) -> dict:
    """A run study's counts: runs finished of those registered, copied from identical runs, diverged; the commits
    and the sweeps' wall time its provenance records."""
    runs = load_runs(study, out)
    prov = study_provenance(study, out)
    return {"finished": prov["runs"], "planned": planned_runs(study), "reused": int(reused_mask(runs).sum()),
            "diverged": int(runs["diverged"].astype(bool).sum()), "sweep_wall_s": prov["sweep_wall_s"], "prov": prov}


def reused_entry(study: str, out: Path, section: Section) -> list[str]:
    """One study as a list item: its description, provenance, copied runs and divergences."""
    if not has_index(study, out):
        return not_run_yet(study)
    d = reused_data(study, out)
    return [f"- `{study}`: {STUDIES[study].description} Produced by `python -m embnorm_lib sweep {study}` at commit(s) "
            f"{commits_words(d['prov'])}; {d['finished']} of {d['planned']} runs finished "
            f"({d['reused']} copied from identical runs), {d['sweep_wall_s'] / 60:.1f} min of sweep wall time; "
            f"{d['diverged']} diverged"
            + (f"; zero-shot suite v2 on its scored runs: [`{study}/ZEROSHOT.md`]({study}/ZEROSHOT.md)"
               if (out / study / "ZEROSHOT.md").is_file() else "") + ".", ""]


def listed_entry(study: str, out: Path, section: Section) -> list[str]:
    """One study as a list item: its description, finished and failed runs, commits, compute, and its reports (the
    section's report files, where present)."""
    if not has_index(study, out):
        return not_run_yet(study)
    runs = load_runs(study, out)
    reports = [f"[`{study}/{name}`]({study}/{name})" for name in section.links if (out / study / name).is_file()]
    design, registered = planned_runs(study), len(STUDIES[study].cells())
    so_far = f", {registered} registered so far" if registered < design else ""
    return [f"- `{study}`: {STUDIES[study].description} {len(runs)} of {design} runs finished{so_far} "
            f"(commit(s) {', '.join(sorted({str(c)[:12] for c in runs['git_commit']}))}), "
            f"{int(runs['failed'].astype(bool).sum()) if 'failed' in runs else 0} failed; "
            f"{compute_words(runs, study_provenance(study, out))}"
            + (f"; report: {', '.join(reports)}" if reports else "") + ".", ""]


HEADER = ["# Committed study results",
          "",
          "Each study directory holds one run directory per cell (`<variant>[_<axis>=<value>]/seed<k>/`) "
          "with `config.json`, `metrics.parquet` (every step), `evals.jsonl` (full-validation passes), "
          "`diagnostics.parquet` (runs not yet converted by `embnorm_lib.tools.compact_logs`: `metrics.jsonl` and "
          "`diagnostics.jsonl`; either form reads through `embnorm_lib.core.records.steplog.read_step_log`), `calibration.json`, "
          "`positions.json` (runs trained since it exists), `summary.json` and "
          "the executed `02_train.ipynb` (packed with the study's others into `notebooks.tar.xz` by "
          "`embnorm_lib.tools.compact_logs`; `python -m embnorm_lib extract-notebooks <study>` puts them back); "
          "`runs.csv` indexes them and is the single source for every table. Checkpoints and weights are "
          "not committed. This file is written by `python -m embnorm_lib report runs-readme`.", "",
          "How every study trained (model, context, batch, iterations, warm-up, optimizer, clipping, embeddings, "
          "tokens, each arm's peak LR), from its runs' configs: [RECIPES.md](RECIPES.md).", ""]


def runs_readme(out_dir: str | Path | None = None) -> str:
    """runs/README.md: per section of the site, its heading, then each of its studies (registry order, grouped by
    analysis kind in the kinds' order), then the benchmark files."""
    out = runs_root(out_dir)
    parts = list(HEADER)
    for section in site().sections:
        parts += list(section.heading)
        entry_lines = section.entry
        for kind in (a.kind for a in ANALYSES.values() if a.section == section.key):
            for study in (s.name for s in STUDIES.values() if s.analysis == kind):
                parts += entry_lines(study, out, section)
    parts += bench_lines(out) + inference_throughput_lines(out)
    return "\n".join(parts)


def bench_lines(out: Path) -> list[str]:
    """runs/bench.json: where a run's time goes on this machine (`python -m embnorm_lib bench`)."""
    bench = out / "bench.json"
    if not bench.is_file():
        return []
    b = json.loads(bench.read_text())
    parts = ["## Throughput", "",
             f"`python -m embnorm_lib bench` at commit {b['git_commit'][:12]}: "
             f"{b['ms_per_iter']:.0f} ms/iteration on the {b['preset']} model ({b['threads']} threads, fp32), "
             f"{b['achieved_gflops']:.1f} GFLOP/s against a measured fp32 matmul peak of {b['peak_gflops']:.1f} "
             f"(MFU {b['mfu']:.2f}); full-validation eval {b['full_val_eval_s']:.1f} s; peak RSS "
             f"{b['peak_rss_mib']:.0f} MiB.", ""]
    if "eval_s_per_run" in b:
        e1 = b["eval"]["1"]
        study = b.get("study") or {}
        parts += [f"Per run in the sweep's layout ({b['machine_it_per_s']:.2f} training iterations/s for the machine, "
                  f"one single-threaded worker per core): evaluation {b['eval_s_per_run']:.1f} s with the interim "
                  f"subset ({e1['eval_s_per_run_committed_plan']:.1f} s as the committed runs evaluated), "
                  f"{b['run_overhead_s']:.1f} s outside the training loop besides lm-eval, lm-eval "
                  f"{b['lm_eval_s_per_run']:.1f} s"
                  + (f"; the whole `{study['study']}` study end to end {study['study_wall_s'] / 60:.1f} min "
                     f"(commit {study['git_commit'][:12]})." if study else "."), ""]
    if isinstance(b.get("packed"), dict):
        by = b["packed"]["machine_it_per_s_by_members"]
        parts += [f"Packed jobs (seeds of one config in one process, {b['packed']['threads']} threads): "
                  + ", ".join(f"{k} seeds {v:.2f} iterations/s" for k, v in by.items())
                  + f"; the best is {b['packed_speedup']:.2f}x the sweep's default layout on this "
                  f"{b['packed']['device'].upper()} (measured before the packed engine was retired: on a GPU the fleet "
                  "batches runs now).", ""]
    return parts


def inference_throughput_lines(out: Path) -> list[str]:
    """runs/throughput.json (the seed plan's tie-breaker) as a table: per arm and kind, the ratio to none."""
    path = out / "throughput.json"
    if not path.is_file():
        return []
    t = json.loads(path.read_text())
    rows = [{"kind": kind, "arm": arm, "tokens_per_s_median": s["tokens_per_s_median"],
             "ratio_to_none_median": s["ratio_to_none_median"], "ratio_min": s["ratio_to_none_min"],
             "ratio_max": s["ratio_to_none_max"]}
            for kind, arms in t["summary"].items() for arm, s in arms.items()]
    return ["## Inference throughput", "",
            f"`python -m embnorm_lib throughput` at commit {t['git_commit'][:12]} ({t['preset']} model, "
            f"{t['threads']} thread(s), {t['rounds']} interleaved rounds in one process): scoring is the forward pass "
            f"over full windows, generation greedy decoding of {t['generated_tokens']} tokens in "
            f"{t['generation_streams']} streams; the ratio to `none` per round, its median and range.", "",
            compact_markdown(pd.DataFrame(rows)), ""]


def write_runs_readme(out: Path) -> Path:
    """runs/README.md: the one writer of that file (rewritten only when its text changes)."""
    return write_bytes_if_changed(out / "README.md", (runs_readme(out) + "\n").encode())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary")
    s.add_argument("study")
    s.add_argument("--out-dir", default=None)
    r = sub.add_parser("runs-readme")
    r.add_argument("--out-dir", default=None)
    c = sub.add_parser("recipes", help="rewrite runs/RECIPES.md, every study's training recipe")
    c.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    if args.command == "recipes":
        from .recipe_table import write_recipes

        print(f"wrote {write_recipes(runs_root(args.out_dir))}")
        return 0
    if args.command == "summary":
        runs = load_runs(args.study, args.out_dir)
        print(f"study {args.study}: {len(runs)} runs ({runs_root(args.out_dir) / args.study})")
        print(markdown_arm_table(arm_table(runs)))
        return 0
    print(f"wrote {write_runs_readme(runs_root(args.out_dir))}")
    return 0




if __name__ == "__main__":
    sys.exit(entry(main))
