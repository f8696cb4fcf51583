"""Setting up the prose ladder before any of its runs (issue 112; amendment 17).

    python -m embnorm_lib.studies.prose_setup tokenizer --data-path data/open-prose.txt
    python -m embnorm_lib.studies.prose_setup steptimes --data-path data/open-prose.txt   # ~15 min on 2 cores
    python -m embnorm_lib.studies.prose_setup estimate

`tokenizer` trains the byte-level BPE on the training split (kept under runs/tokenizers/, committed) and writes its
record, docs/tokenizer-open-prose.json: the file's sha256, the vocabulary, the tokens and bytes of each split.
`steptimes` times short real runs of every preset, two processes side by side on one thread each (as the lanes
train), and writes docs/prose-step-times.json: per preset, ms per training step, seconds per interim and final
evaluation, and the start-up (reading and tokenizing the corpus). `estimate` turns them into core-hours for the
registered design (the amendment quotes its output)."""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.errors import ConfigError, DataError, entry
from ..core.presets import PRESETS, PROSE_EVALS, PROSE_RECORD, PROSE_TOKENIZER, PROSE_TOKENIZER_RECORD
from ..core.records.io import atomic_write_text, repo_root
from ..stats.baselines import count_bigram
from . import prose

STEP_TIMES = repo_root() / "docs" / "prose-step-times.json"
TIMING_ITERS = 40  # steps per timing run
TIMING_EVERY = 10  # an interim evaluation every this many steps


def write_tokenizer_record(data_path: str) -> dict:
    from ..core.corpora.data import load_corpus

    corpus_record = json.loads(PROSE_RECORD.read_text())
    corpus = load_corpus(data_path, tokenizer=PROSE_TOKENIZER, corpus_sha256=corpus_record["sha256"],
                         train_chars=corpus_record["train_chars"])
    record = {"name": PROSE_TOKENIZER, "corpus_sha256": corpus.sha256, "sha256": corpus.tokenizer_sha256,
              "vocab_size": corpus.vocab_size, "train_tokens": len(corpus.train), "val_tokens": len(corpus.val),
              "train_bytes": len(corpus.train_text), "val_bytes": len(corpus.val_text),
              "bytes_per_token_train": len(corpus.train_text) / len(corpus.train),
              "bytes_per_token_val": len(corpus.val_text) / len(corpus.val)}
    # the baseline a trained model must be well past (amendment 17): a count bigram on the same split, per byte
    bigram = count_bigram(corpus.train.numpy(), corpus.val.numpy(), corpus.vocab_size)
    record.update(bigram_unigram_weight=bigram["unigram_weight"],
                  bigram_bits_per_byte=bigram["nll"] / math.log(2) / len(corpus.val_text))
    atomic_write_text(PROSE_TOKENIZER_RECORD, json.dumps(record, indent=2) + "\n")
    return record


def _timing_command(preset: str, out: Path, data_path: str) -> list[str]:
    return [sys.executable, "-m", "embnorm_lib", "run", "--preset", preset, "--variant", "ln", "--seed", "999",
            "--study", "steptimes", "--out-dir", str(out), "--data-path", data_path,
            "--set", f"max_iters={TIMING_ITERS}", "--set", f"eval_interval={TIMING_EVERY}",
            "--set", f"checkpoint_interval={TIMING_ITERS}", "--set", "torch_threads=1"]


def measure_step_times(data_path: str) -> dict:
    """Every prose preset at base budget, timed in pairs side by side (two single-thread processes share the 2
    cores, as two lanes do)."""
    presets = [prose.preset_name(r, str(k)) for k in range(len(prose.PROSE_RUNGS)) for r in prose.RECIPE_NAMES]
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in (presets[i:i + 2] for i in range(0, len(presets), 2)):
            started = time.perf_counter()
            procs = {p: subprocess.Popen(_timing_command(p, Path(tmp) / p, data_path), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True) for p in pair}
            ends = {}
            try:
                for p, proc in procs.items():
                    _, err = proc.communicate()
                    if proc.returncode:
                        last = (err.strip().splitlines() or ["(no message)"])[-1]
                        raise RuntimeError(f"timing run of {p} failed: {last}")
                    ends[p] = time.perf_counter() - started
            finally:  # a failed pair leaves no process behind
                for proc in procs.values():
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            for p in pair:
                run = next((Path(tmp) / p).rglob("summary.json")).parent
                summary = json.loads((run / "summary.json").read_text())
                evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
                interim = [e["eval_s"] for e in evals[:-1]]
                train_s = summary["train_ms_per_iter"] * TIMING_ITERS / 1000
                found[p] = {"ms_per_iter": summary["train_ms_per_iter"], "interim_eval_s": sum(interim) / len(interim),
                            "final_eval_s": evals[-1]["eval_s"],
                            "startup_s": ends[p] - train_s - sum(e["eval_s"] for e in evals),
                            "cpu_model": summary["cpu_model"], "cpu_capability": summary["cpu_capability"]}
    record = {"iters_timed": TIMING_ITERS, "side_by_side": 2, "threads": 1, "presets": found}
    atomic_write_text(STEP_TIMES, json.dumps(record, indent=2) + "\n")
    return record


def run_hours(preset: str, times: dict) -> float:
    """One run's estimated wall hours: start-up, every step, PROSE_EVALS interim and one final evaluation (a size's
    step times serve both its budgets)."""
    t = times["presets"][preset.removesuffix("-x4")]
    n = PRESETS[preset]["max_iters"]
    return (t["startup_s"] + n * t["ms_per_iter"] / 1000 + PROSE_EVALS * t["interim_eval_s"] + t["final_eval_s"]) / 3600


def estimate(times: dict) -> list[dict]:
    """Core-hours per level (a size at one budget) for the registered design before any grid extension (one core
    per run): its tuning grid, and its confirmatory seeds (added seeds included) where it is a main level or the
    budget control."""
    rows = []
    for level in prose.LEVELS:
        tuning = confirm = 0.0
        for recipe in prose.RECIPE_NAMES:
            hours = run_hours(prose.preset_name(recipe, level), times)
            tuning += len(prose.ARMS) * (2 * prose.GRID_HALF_WIDTH[level] + 1) * len(prose.TUNING_SEEDS) * hours
            if level in prose.MAIN_LEVELS or level == prose.BUDGET_LEVEL:
                confirm += len(prose.ARMS) * len(prose.confirmatory_seeds(recipe, level)) * hours
        n_layer, n_embd, _ = prose.PROSE_RUNGS[prose.rung_of(level)]
        rows.append({"level": level, "shape": f"{n_layer} x {n_embd}",
                     "params": prose.non_embedding_params(prose.rung_of(level)),
                     "iters": PRESETS[prose.preset_name("gpt2", level)]["max_iters"],
                     "run_hours": run_hours(prose.preset_name("gpt2", level), times),
                     "tuning": tuning, "confirmatory": confirm,
                     "role": "budget control" if level == prose.BUDGET_LEVEL else "confirmatory"})
    return rows


def projection(times: dict, wall_s: dict[str, list[float]], every_level_added: bool = False) -> dict:
    """The design's core-hours at the run times measured so far: `wall_s` is preset -> the wall seconds of its landed
    runs (runs.csv). A level's run takes its presets' measured mean where runs exist, else the estimate times the
    measured-to-estimated ratio pooled over the presets that have runs; tuning counts the grid extensions too.
    `every_level_added`: as if seeds 6-9 were added at every main level (amendment 20's test for size 2)."""
    measured = {p: sum(v) / len(v) / 3600 for p, v in wall_s.items() if v}
    ratio = (sum(measured.values()) / sum(run_hours(p, times) for p in measured)) if measured else 1.0
    hours = {"spent": sum(sum(v) for v in wall_s.values()) / 3600, "ratio": ratio, "levels": {}}
    for level in prose.LEVELS:
        tuning = confirm = 0.0
        for recipe in prose.RECIPE_NAMES:
            preset = prose.preset_name(recipe, level)
            per_run = measured.get(preset, run_hours(preset, times) * ratio)
            extra = sum(len(v) for v in prose.EXTENSIONS.get((recipe, level), {}).values())
            points = len(prose.ARMS) * (2 * prose.GRID_HALF_WIDTH[level] + 1) + extra
            tuning += points * len(prose.TUNING_SEEDS) * per_run
            if level in prose.MAIN_LEVELS or level == prose.BUDGET_LEVEL:
                seeds = prose.confirmatory_seeds(recipe, level)
                if every_level_added and level in prose.MAIN_LEVELS:
                    seeds = prose.CONFIRMATORY_SEEDS + prose.EXTRA_SEEDS
                confirm += len(prose.ARMS) * len(seeds) * per_run
        hours["levels"][level] = {"tuning": tuning, "confirmatory": confirm}
    hours["total"] = sum(v["tuning"] + v["confirmatory"] for v in hours["levels"].values())
    return hours


def landed_wall_seconds() -> dict[str, list[float]]:
    """preset -> wall seconds of the prose ladder's landed runs (every study's runs.csv that exists)."""
    import pandas as pd

    found: dict[str, list[float]] = {}
    for study in ("prose-lr", "prose", "prose-budget"):
        path = repo_root() / "runs" / study / "runs.csv"
        if path.is_file():
            for preset, rows in pd.read_csv(path).groupby("cfg.preset"):
                found.setdefault(preset, []).extend(rows["wall_s"].astype(float))
    return found


def largest_fed(train_tokens: int | None = None) -> int:
    """The most parameters (counted as the budget counts them) the training split feeds at PROSE_TOKENS_PER_PARAM
    tokens each within PROSE_MAX_PASSES passes: a larger rung, on a GPU too, would repeat the text more often than
    the protocol allows (issue 112 item 9 asks for >= 10M non-embedding parameters)."""
    from ..core.presets import PROSE_MAX_PASSES, PROSE_TOKENS_PER_PARAM, prose_records

    tokens = prose_records()[1]["train_tokens"] if train_tokens is None else train_tokens
    return PROSE_MAX_PASSES * tokens // PROSE_TOKENS_PER_PARAM


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("tokenizer", "steptimes", "estimate"))
    p.add_argument("--data-path", default=None, help="the open-prose corpus file (prosecorpus --out)")
    args = p.parse_args(argv)
    if args.what in ("tokenizer", "steptimes") and not args.data_path:
        print(f"error: {args.what} needs --data-path; allowed: the file prosecorpus wrote", file=sys.stderr)
        return 2
    if args.what == "estimate" and args.data_path is not None:
        raise ConfigError(f"estimate reads no corpus (--data-path {args.data_path!r}); allowed: estimate alone")
    if args.data_path is not None and not Path(args.data_path).is_file():
        raise DataError(f"data file not found: {args.data_path}; allowed: the file prosecorpus wrote")
    if args.what == "tokenizer":
        print(json.dumps(write_tokenizer_record(args.data_path), indent=2))
    elif args.what == "steptimes":
        print(json.dumps(measure_step_times(args.data_path), indent=2))
    else:
        rows = estimate(json.loads(STEP_TIMES.read_text()))
        for r in rows:
            print(f"- {r['level']}: {r['shape']}, {r['params']:,} non-embedding parameters, {r['iters']:,} "
                  f"iterations, ~{r['run_hours']:.2f} h per run; tuning {r['tuning']:.1f}, {r['role']} "
                  f"{r['confirmatory']:.1f} core-hours")
        total = sum(r["tuning"] + r["confirmatory"] for r in rows)
        print(f"- total {total:.1f} core-hours before any grid extension")
        proj = projection(json.loads(STEP_TIMES.read_text()), landed_wall_seconds())
        print(f"At the run times measured so far ({proj['spent']:.1f} core-hours spent; runs take "
              f"{proj['ratio']:.2f}x the estimate), with the grid extensions registered so far:")
        for level, h in proj["levels"].items():
            print(f"- {level}: tuning {h['tuning']:.1f}, confirmatory or budget control {h['confirmatory']:.1f}")
        print(f"- total {proj['total']:.1f} core-hours")
        every = projection(json.loads(STEP_TIMES.read_text()), landed_wall_seconds(), every_level_added=True)
        print(f"With seeds 6-9 at every size: {every['total']:.1f} core-hours (the limit for adding them at size 2: "
              f"{prose.COMPUTE_LIMIT_HOURS})")
        print(f"The training split feeds at most {largest_fed():,} counted parameters at 20 tokens each within 4 "
              "passes (largest_fed): a larger rung needs more text, on any device.")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
