"""The README's main job: a study from a fresh clone, and proof that its committed numbers are real.

    python -m embnorm_lib job                # the registry's default study: what `bash scripts/study.sh` runs
    python -m embnorm_lib job <study> --fresh   # the whole study again, into runs/scratch/fresh-<time>/

When the study's results are committed, the job re-trains one random cell per arm (through the training
notebook, in a temporary directory, with the committed thread count) and says whether each reproduces
the committed numbers bit for bit; then it re-publishes the study (which, on unchanged runs, rewrites
nothing) and prints the findings. When results are missing it runs the sweep first. `--fresh` trains
every cell again into a new runs directory, publishes there, and compares with the committed numbers."""
from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.errors import BRIEF_ERRORS, entry
from ..core.records.io import default_runs_dir, read_json, repo_root, shown_path
from ..core.records.rundir import RunDir, recorded_seconds
from ..core.records.steplog import read_step_log
from ..publishing.publish import publish
from ..runner import sweep
from ..runner.kernels import execute_notebook
from ..runner.registry import default_study, site, study_cells
from ..runner.results import load_runs

TIMING_KEYS = {"step_ms", "wall_s", "eval_s"}
# summary fields that are results (not timings, versions or provenance): compared bit for bit
RESULT_KEYS = ("steps", "diverged", "val_loss", "val_acc", "val_ppl", "val_bpc", "best_val_loss", "init_val_loss",
               "final_train_loss", "final_grad_norm", "peak_grad_norm", "clipped_frac", "spike_count",
               "ece_equal_width", "ece_equal_mass", "brier")  # lm-eval scores: compared in lm_eval.json
OVERHEAD_S = 25.0  # kernel start, imports, calibration and plots per run (measured 15-27 s here)


def sample_cells(cells, rng: random.Random) -> list:
    """One random cell per arm (variant and any tagged axes)."""
    by_arm: dict[str, list] = {}
    for cell in cells:
        by_arm.setdefault(f"{cell.variant}{cell.tag}", []).append(cell)
    return [rng.choice(group) for group in by_arm.values()]


def estimate_s(run_dirs: list[Path], workers: int) -> float:
    """Wall time of re-running these runs, from what they took when they were committed."""
    per_run = []
    for run in run_dirs:
        per_run.append(recorded_seconds(RunDir(run)) + OVERHEAD_S)
    per_run.sort(reverse=True)
    lanes = [0.0] * max(1, workers)
    for t in per_run:
        lanes[lanes.index(min(lanes))] += t
    return max(lanes)


# Same config, seed and thread count give bit-identical numbers on one CPU. On another host, oneDNN/MKL may
# pick other kernels (cache sizes, ISA) and sum in another order: the last bits differ and, over hundreds of
# steps, drift. Beyond this relative difference a run's outcomes (final losses, accuracy, calibration) are not the
# same outcomes.
FLOAT_TOLERANCE = 1e-4
# Readings of single steps (every logged step, diagnostic and gradient norm) carry the drift itself: re-running
# committed seeds-final runs on another CPU, their final val_loss agreed to <= 2.7e-8 while a step's attention-logit
# maximum or Adam second moment moved by up to 3.0e-4. A code or data change moves them by far more (a changed batch
# or init shows at the first step).
DRIFT_TOLERANCE = 1e-2
STEP_KEYS = ("final_grad_norm", "peak_grad_norm", "clipped_frac")  # summary fields that are single-step readings
EXACT_KEYS = ("steps", "diverged", "spike_count")
# Binned calibration errors jump when a rounding-level change moves a prediction across a bin edge (the equal-mass
# edges are themselves quantiles of the confidences): measured across hosts, 2.7e-6 absolute on an ECE of 0.011,
# i.e. 2.4e-4 relative while the val_loss agreed to 1.3e-8. For these fractions in [0, 1] the tolerance is absolute.
BINNED_KEYS = ("ece_equal_width", "ece_equal_mass")


def _rel(a, b) -> float:
    if a == b:
        return 0.0
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or isinstance(a, bool) or isinstance(b, bool):
        return math.inf
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def _abs(a, b) -> float:
    rel = _rel(a, b)  # inf for non-numbers and non-finite values
    return abs(a - b) if math.isfinite(rel) else rel


def _max_rel(rows_a: list[dict], rows_b: list[dict]) -> float:
    if len(rows_a) != len(rows_b):
        return math.inf
    worst = 0.0
    for ra, rb in zip(rows_a, rows_b):
        for k in set(ra) | set(rb):
            if k not in TIMING_KEYS:
                worst = max(worst, _rel(ra.get(k), rb.get(k)))
    return worst


def compare_runs(committed: Path, reproduced: Path) -> dict:
    """Compare what a run computed (logs without wall-clock fields, result scalars, lm-eval scores) with a
    re-run: 'bitwise'; 'rounding' (outcomes within FLOAT_TOLERANCE, relative or, for the binned calibration
    errors, absolute; single-step readings within DRIFT_TOLERANCE; counts equal; no lm-eval answer changed);
    else 'differs'."""
    differences, worst, drift = [], 0.0, 0.0
    ours, theirs = RunDir(committed), RunDir(reproduced)
    for log in ("metrics", "evals", "diagnostics"):
        rel = _max_rel(read_step_log(ours, log), read_step_log(theirs, log))
        if rel:
            differences.append(f"the {log} log")  # in whichever form (JSONL or Parquet) each run holds it
            drift = max(drift, rel)
    a, b = read_json(ours.summary), read_json(theirs.summary)
    for k in RESULT_KEYS:
        if k in a and a.get(k) != b.get(k):
            differences.append(k)
            if k in EXACT_KEYS:
                worst = math.inf
            elif k in STEP_KEYS:
                drift = max(drift, _rel(a.get(k), b.get(k)))
            else:
                worst = max(worst, _abs(a.get(k), b.get(k)) if k in BINNED_KEYS else _rel(a.get(k), b.get(k)))
    lm_flips = 0
    if ours.lm_eval.is_file():
        la = read_json(ours.lm_eval)
        lb = read_json(theirs.lm_eval) if theirs.lm_eval.is_file() else {}
        pairs = [(la["tasks"][t][k]["acc"], lb.get("tasks", {}).get(t, {}).get(k, {}).get("acc"))
                 for t in la.get("tasks", {}) for k in la["tasks"][t]]
        lm_flips = sum(x != y for x, y in pairs)
        if lm_flips:
            differences.append(ours.lm_eval.name)
    within = worst <= FLOAT_TOLERANCE and drift <= DRIFT_TOLERANCE and not lm_flips
    status = "bitwise" if not differences else ("rounding" if within else "differs")
    return {"status": status, "differences": differences, "max_rel_diff": worst, "max_step_drift": drift,
            "lm_accuracies_changed": lm_flips,
            "val_loss_committed": a.get("val_loss"), "val_loss_reproduced": b.get("val_loss"),
            "cpu_committed": a.get("cpu_model", "not recorded"), "cpu_here": b.get("cpu_model", "not recorded")}


def prepare_data(data_path: str | None) -> None:
    """01_data: locate and verify the corpus; its executed copy is scratch, its figure is committed."""
    with tempfile.TemporaryDirectory(prefix="embnorm-data-") as tmp:
        execute_notebook(str(repo_root() / "notebooks" / "01_data.ipynb"), str(Path(tmp) / "01_data.ipynb"),
                         parameters={"data_path": data_path or ""}, progress_bar=False,
                         cwd=str(repo_root() / "notebooks"))


def reproduce_sample(study: str, out: Path, data_path: str | None, seed: int | None) -> list[dict]:
    cells = study_cells(study)
    rng = random.Random(seed)
    sample = sample_cells(cells, rng)
    committed = [c.run_dir(out) for c in sample]
    threads = {read_json(RunDir(run).config).get("torch_threads", 0) for run in committed}
    thread_count = threads.pop() if len(threads) == 1 else 0
    workers, _ = sweep.resolve_parallelism(0, thread_count)
    print(f"reproduction check: re-training {len(sample)} cell(s) of {study} ({', '.join(c.label() for c in sample)}) "
          f"in a temporary directory, {workers} worker(s) x {thread_count or 'default'} thread(s), "
          f"at most about {estimate_s(committed, workers) / 60:.0f} min (the committed runs' own timings)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="embnorm-reproduce-") as tmp:
        report = sweep.run_sweep(sample, Path(tmp), data_path, workers=workers, threads=thread_count,
                                 echo=lambda *a: None, reuse=False)
        failed = {r["cell"]: r.get("error", "") for r in report.failures}
        for cell, run in zip(sample, committed):
            if cell.label() in failed:
                rows.append({"cell": cell.label(), "status": "failed", "differences": [failed[cell.label()]]})
                continue
            rows.append({"cell": cell.label(), **compare_runs(run, cell.run_dir(Path(tmp)))})
    return rows


def print_check(rows: list[dict]) -> None:
    for r in rows:
        if r["status"] == "bitwise":
            print(f"  {r['cell']:24s} reproduces bit for bit: every logged step, diagnostic, result and lm-eval score "
                  f"(val_loss {r['val_loss_committed']!r})")
        elif r["status"] == "rounding":
            print(f"  {r['cell']:24s} reproduces to float rounding, not bit for bit: outcomes within "
                  f"{r['max_rel_diff']:.1e} (<= {FLOAT_TOLERANCE:g}), single steps within {r['max_step_drift']:.1e} "
                  f"(<= {DRIFT_TOLERANCE:g}), in {', '.join(r['differences'])}; val_loss "
                  f"{r['val_loss_committed']!r} committed, {r['val_loss_reproduced']!r} here; lm-eval accuracies "
                  f"unchanged. Bitwise equality holds on the CPU that made the run (committed: "
                  f"{r['cpu_committed']}; here: {r['cpu_here']}).")
        elif r["status"] == "failed":
            print(f"  {r['cell']:24s} FAILED to re-run: {r['differences'][0]}")
        else:
            print(f"  {r['cell']:24s} DIFFERS: outcomes differ by up to {r['max_rel_diff']:.1e} (relative), single "
                  f"steps by up to {r['max_step_drift']:.1e}, in "
                  f"{', '.join(r['differences'])}; {r['lm_accuracies_changed']} lm-eval accuracies changed; val_loss "
                  f"{r['val_loss_committed']!r} committed, {r['val_loss_reproduced']!r} here")


def dirty_files() -> list[str]:
    """Committed files that differ from HEAD; a user's own untracked files (a log beside the clone) are not ours."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_root(),
                             capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return []
    return [line[3:] for line in out.splitlines() if line.strip()]


def changed_files_note(changed: list[str]) -> str:
    """What a user should know when publishing the committed runs changed committed files. A figure PDF whose
    drawing moved only in a last decimal (numpy's vector code differs between CPUs) is not rewritten
    (io.write_figure_if_changed), so every file named here really changed."""
    return f"note: publishing changed {len(changed)} committed file(s): {', '.join(changed[:8])}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", nargs="?", default=None, help="a registered study (default: the registry's default)")
    p.add_argument("--fresh", action="store_true", help="re-run the whole study into a new runs directory")
    p.add_argument("--data-path", default=None)
    p.add_argument("--out-dir", default=None, help="runs directory holding the study (default: the committed runs/)")
    p.add_argument("--sample-seed", type=int, default=None, help="fix which cells the reproduction check draws")
    args = p.parse_args(argv)
    args.study = args.study or default_study()
    try:
        cells = study_cells(args.study)
        committed_out = Path(args.out_dir).resolve() if args.out_dir else default_runs_dir()
        finished = [c for c in cells if sweep.cell_status(c, committed_out) == "done"]
        workers, threads = sweep.resolve_parallelism(0, 0)
        if args.fresh:
            out = committed_out / "scratch" / f"fresh-{args.study}-{time.strftime('%Y%m%d-%H%M%S')}"
            est = estimate_s([c.run_dir(committed_out) for c in finished], workers) if finished else float("nan")
            print(f"embnorm: training all {len(cells)} cells of {args.study} again into {shown_path(out)} "
                  f"({workers} worker(s) x {threads} thread(s)); about {est / 60:.0f} min here, then publishing there",
                  flush=True)
        elif len(finished) == len(cells):
            out = committed_out
            print(f"embnorm: {args.study} is committed ({len(cells)} of {len(cells)} runs); checking that a sample "
                  f"reproduces bit for bit, re-publishing (changes nothing on unchanged runs) and printing the "
                  f"findings; at most about {estimate_s([c.run_dir(out) for c in sample_cells(cells, random.Random(0))], workers) / 60 + 1.5:.0f} min",
                  flush=True)
        else:
            out = committed_out
            print(f"embnorm: {args.study} has {len(finished)} of {len(cells)} runs; running the rest "
                  f"({workers} worker(s) x {threads} thread(s)), then publishing", flush=True)
        prepare_data(args.data_path)
        check = []
        if args.fresh or len(finished) < len(cells):
            report = sweep.run_sweep(cells, out, args.data_path, reuse=not args.fresh)
            if report.failures:
                return 1
        else:
            check = reproduce_sample(args.study, out, args.data_path, args.sample_seed)
            print_check(check)
        separate = args.fresh or out != default_runs_dir()  # figures beside the runs they were drawn from
        written = publish(args.study, out, out / "figures" / args.study if separate else None)
        print(f"published: {', '.join(shown_path(p) for p in written.values())}")
        print(f"\nFindings ({args.study}, from {shown_path(out / args.study / 'REPORT.md')}):")
        print(site().findings(out, (args.study,)))
        if args.fresh:
            ours, theirs = load_runs(args.study, out), load_runs(args.study, committed_out)
            merged = ours.merge(theirs, on="run_dir", suffixes=("", "_committed"))
            same = int((merged["val_loss"] == merged["val_loss_committed"]).sum())
            print(f"\nfresh vs committed: {same} of {len(merged)} runs have bit-identical final val_loss")
        changed = dirty_files() if not separate else []  # only the committed tree is under git
        if changed:
            print(f"\n{changed_files_note(changed)}")
    except BRIEF_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if all(r["status"] in ("bitwise", "rounding") for r in check) else 1


if __name__ == "__main__":
    sys.exit(entry(main, trains=True))
