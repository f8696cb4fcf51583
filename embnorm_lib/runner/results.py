"""The results of finished runs as tables: runs/<study>/runs.csv (this module is its only writer and reader)
and tidy frames of the per-step logs. One source: the files the runs wrote.

runs.csv has one row per finished run: its directory and arm, `reused_from`, every config field (`cfg.*`),
every summary scalar, and the scalars of lm_eval.json when the run was scored."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..core.config import TRAIN_CHARS_TINY_SHAKESPEARE, RunConfig
from ..core.errors import RunDirError
from ..core.nets.variants import arm_variant, variant_rank
from ..core.records.io import atomic_write_text, read_json, runs_root
from ..core.records.rundir import RunDir, StudyDir, finished_run_dirs, study_dir_for
from ..core.records.seal import check_run_identity, check_summary_outcome, run_dirs_of, verify_run
from ..core.records.steplog import LOGS, read_step_log
from ..core.scoring.diagnostics import after_warmup


def study_dir(study: str, out_dir: str | Path | None = None) -> Path:
    path = runs_root(out_dir) / study
    if not path.is_dir():
        raise FileNotFoundError(f"no study directory {path}; run `python -m embnorm_lib sweep {study}` first")
    return path


def lm_summary_fields(result: dict, prefix: str = "lm") -> dict:
    """Scalars of one suite's results for runs.csv: lm_macro_acc (suite v1, zero-shot) is the protocol's secondary
    metric; suite v2's columns start with lm2 (lm2_macro_acc: amendment 1's zero-shot v2 endpoint), suite v3's with
    lm3 (lm3_macro_acc: the prose ladder's primary endpoint, amendment 17 item 7)."""
    fields = {}
    for k, macro in result["macro"].items():
        suffix = "" if k == "0shot" else f"_{k}"
        fields[f"{prefix}_macro_acc{suffix}"] = macro["acc"]
        fields[f"{prefix}_macro_acc_norm{suffix}"] = macro["acc_norm"]
    for task, by_k in result["tasks"].items():
        short = task.removeprefix("shakespeare_").removeprefix("shakespeare2_").removeprefix("prose3_")
        for k, entry in by_k.items():
            fields[f"{prefix}.{short}.{k}.acc"] = entry["acc"]
    fields[f"{prefix}_eval_s"] = result["seconds"]
    return fields


def index_row(run: RunDir, study_root: Path) -> dict:
    cfg = read_json(run.config)
    summary = read_json(run.summary)
    check_summary_outcome(run, summary)
    check_run_identity(run, cfg, summary)
    reused_from = read_json(run.reused_from)["run_dir"] if run.reused_from.is_file() else ""
    row = {"run_dir": str(run.root.relative_to(study_root)), "arm": run.arm, "reused_from": reused_from}
    row.update({f"cfg.{k}": v for k, v in cfg.items()})
    row.update({k: v for k, v in summary.items() if not isinstance(v, (list, dict))})
    if run.lm_eval.is_file():
        row.update(lm_summary_fields(read_json(run.lm_eval)))
    if run.lm_eval_v2.is_file():
        row.update(lm_summary_fields(read_json(run.lm_eval_v2), prefix="lm2"))
    if run.lm_eval_v3.is_file():
        row.update(lm_summary_fields(read_json(run.lm_eval_v3), prefix="lm3"))
    row.update(derived_fields(RunConfig.from_dict(cfg), read_step_log(run, "metrics"), summary))
    return row


def derived_fields(cfg: RunConfig, metrics: list[dict], summary: dict) -> dict:
    """Columns computed from a run's own files (docs/PROTOCOL.md amendment 1): stability after the warm-up, and
    `failed`: a non-finite loss or a final validation loss above the loss at initialisation."""
    init, final = summary.get("init_val_loss"), summary.get("val_loss")  # null in JSON where not measured
    worse_than_init = bool(isinstance(init, float) and isinstance(final, float) and math.isfinite(init)
                           and math.isfinite(final) and final > init)
    return {**after_warmup(metrics, cfg.warmup_iters, cfg.spike_factor, cfg.spike_window),
            "failed": bool(summary.get("diverged")) or worse_than_init,
            # passes over the training split, for runs on a corpus whose split point is recorded (train_chars: the
            # adequate-data ladder); the committed tiny-Shakespeare indexes keep their columns
            **({"epochs": epochs(cfg, summary)} if cfg.train_chars else {})}


def epochs(cfg: RunConfig, summary: dict) -> float:
    """Passes over the training split (characters; NaN for subword runs, whose split length is in the tokenizer)."""
    train = cfg.train_chars or (TRAIN_CHARS_TINY_SHAKESPEARE if not cfg.corpus_sha256 else 0)
    tokens = summary.get("tokens")
    if cfg.tokenizer != "char" or not train or not isinstance(tokens, (int, float)):
        return float("nan")
    return tokens / train


def build_index(study: str, out_dir: str | Path | None = None, drop_missing: bool = False) -> pd.DataFrame:
    """Write runs/<study>/runs.csv from the study's finished runs and return it. Every finished run is checked
    against its seal first (seal.verify_run): a missing, truncated, altered or unreadable file stops the index in
    one line naming the run and the file, and runs.csv is left as it was (never a smaller study). A run the index
    lists whose directory is gone (or no longer finished) stops it too, unless `drop_missing` says so on purpose."""
    from .design import check_design

    root = runs_root(out_dir) / study
    check_design(study, out_dir)  # exactly the registered cells, nothing linked in (issue 117)
    rows = []
    for run in run_dirs_of(root):
        verify_run(run)
        try:
            rows.append(index_row(run, root))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RunDirError(f"run {run.root}: cannot be indexed ({type(e).__name__}: {str(e)[:120]}); allowed: the "
                              f"files a finished run writes (restore them from git, or retrain the run)") from None
    table = pd.DataFrame(rows)
    if rows and not drop_missing:  # with no finished run at all the index is kept as it is (a code-only copy)
        check_nothing_dropped(StudyDir(root).index, {row["run_dir"] for row in rows}, study)
    if rows:
        table = table.sort_values(["arm", "seed"]).reset_index(drop=True)
        atomic_write_text(StudyDir(root).index, table.to_csv(index=False))
    return table


def check_nothing_dropped(index: Path, found: set[str], study: str) -> None:
    """A rebuilt index never silently lists fewer runs than the one it replaces (issue 117 #5): a deleted or
    half-restored run directory would otherwise shrink every number published from it."""
    if not index.is_file():
        return
    try:
        listed = set(pd.read_csv(index, usecols=["run_dir"])["run_dir"].astype(str))
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return  # an unreadable index is rebuilt: nothing trustworthy to compare with
    gone = sorted(listed - found)
    if gone:
        raise RunDirError(f"{index} lists {len(gone)} run(s) that are no longer finished on disk, first "
                          f"runs/{study}/{gone[0]}; allowed: restore them (git checkout -- runs/{study}) or drop them "
                          f"on purpose: python -m embnorm_lib sweep {study} --index-only --drop-missing")


def load_runs(study: str, out_dir: str | Path | None = None) -> pd.DataFrame:
    """A study's runs.csv as a table, parsed once per content: a publication quotes each study from many paragraphs
    (the README's first screen, FINDINGS.md, the paper), and each asks here. The file is read every time and parsed
    only when its bytes are new (_PARSED, keyed on its path and their sha256), so a rewritten index is never served
    stale; every caller gets its own copy to change."""
    import hashlib
    import io

    path = study_dir_for(study, out_dir).index
    if not path.is_file():
        raise FileNotFoundError(f"no runs.csv for study {study!r} at {path}; run the sweep first")
    content = path.read_bytes()
    key = (str(path.resolve()), hashlib.sha256(content).hexdigest())
    if key not in _PARSED:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))  # the oldest
        try:
            table = pd.read_csv(io.BytesIO(content))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise RunDirError(f"{path} cannot be read as an index ({type(e).__name__}: {str(e)[:80]}); allowed: the "
                              f"runs.csv a sweep writes (rebuild it: python -m embnorm_lib sweep {study} "
                              "--index-only)") from None
        _PARSED[key] = check_outcomes(table, study, path)
    return _PARSED[key].copy()


_PARSED: dict[tuple[str, str], pd.DataFrame] = {}  # load_runs' parsed indexes, by (path, sha256 of the bytes)
_PARSED_MAX = 64  # more than the registry's studies: one publication parses each index once


OUTCOMES = ("diverged", "failed")  # what a run counts as in every stability count and decision (docs/PROTOCOL.md)


def check_outcomes(runs: pd.DataFrame, study: str, source: str | Path) -> pd.DataFrame:
    """`runs`, once every `diverged` and `failed` cell is True or False. Readers count them with a cast to bool, which
    would make an empty cell (NaN) a failure, and the failure definition (amendment 1) cannot be applied to a run
    whose outcome is unknown: such a table is refused, naming the run."""
    for column in OUTCOMES:
        if column in runs:
            bad = runs[~runs[column].isin([True, False])]
            if len(bad):
                where = bad["run_dir"].iloc[0] if "run_dir" in bad else f"row {bad.index[0]}"
                raise RunDirError(f"{source}: {column}={bad[column].iloc[0]!r} for run {where} ({len(bad)} run(s) "
                                  f"in all); allowed: True or False (rebuild the index: python -m embnorm_lib sweep "
                                  f"{study} --index-only)")
    return runs


def reused_mask(runs: pd.DataFrame) -> pd.Series:
    """True for runs copied from a bitwise-identical run of another study (runs.csv's reused_from)."""
    if "reused_from" not in runs:
        return pd.Series(False, index=runs.index)
    col = runs["reused_from"]
    return col.notna() & (col.astype(str).str.len() > 0)


def study_provenance(study: str, out_dir: Path) -> dict:
    """Commits, run count, sweep wall time and parallelism of a study, from runs.csv and sweeps.jsonl."""
    log = study_dir_for(study, out_dir).sweep_log
    commits, walls, layouts = set(), [], set()
    if log.is_file():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            commits.add(entry["git_commit"])
            walls.append(entry["wall_s"])
            if entry.get("executed"):
                layouts.add((entry["workers"], entry["threads"]))
    runs = load_runs(study, out_dir)
    commits |= set(runs["git_commit"].astype(str))
    return {"commits": sorted(commits), "sweep_wall_s": sum(walls), "runs": len(runs), "layouts": sorted(layouts)}


def arm_order(arm: str) -> tuple:
    """Variants in registry order (none, ln, rms, scaled: the study's A, B, C, D), then the rest alphabetically; an
    arm is its longest variant prefix (`ln_matched_lr=1` sorts with ln_matched, not ln)."""
    return (variant_rank(arm_variant(arm)), arm)


def has_index(study: str, out_dir: str | Path | None = None) -> bool:
    return study_dir_for(study, out_dir).index.is_file()


def load_series(study: str, log: str, out_dir: str | Path | None = None, arm_filter=None) -> pd.DataFrame:
    """All rows of one per-step log ("metrics", "evals" or "diagnostics") across runs, with arm and seed."""
    if log not in LOGS:
        raise ValueError(f"unknown log {log!r}; allowed: {', '.join(LOGS)}")
    frames = []
    for run in finished_run_dirs(study_dir(study, out_dir)):
        if arm_filter and not arm_filter(run.arm):
            continue
        rows = read_step_log(run, log)
        if rows:
            frame = pd.DataFrame(rows)
            frame.insert(0, "arm", run.arm)
            frame.insert(1, "seed", run.seed)
            frames.append(frame)
    return pd.concat(sorted(frames, key=lambda f: arm_order(f["arm"].iat[0])), ignore_index=True) if frames \
        else pd.DataFrame(columns=["arm", "seed", "step"])


def load_calibration(study: str, out_dir: str | Path | None = None, arm_filter=None) -> pd.DataFrame:
    rows = []
    for run in finished_run_dirs(study_dir(study, out_dir)):
        if run.calibration.is_file() and (not arm_filter or arm_filter(run.arm)):
            rows.append({"arm": run.arm, "seed": run.seed, "calibration": read_json(run.calibration)})
    return pd.DataFrame(sorted(rows, key=lambda r: (arm_order(r["arm"]), r["seed"])))


def load_positions(study: str, out_dir: str | Path | None = None) -> pd.DataFrame:
    """Per run and position in the window (1-based): the final pass's val loss and accuracy (positions.json; runs
    trained before it existed have none and are left out)."""
    frames = []
    for run in finished_run_dirs(study_dir(study, out_dir)):
        if run.positions.is_file():
            data = read_json(run.positions)
            frames.append(pd.DataFrame({"arm": run.arm, "seed": run.seed,
                                        "position": range(1, len(data["val_loss"]) + 1),
                                        "val_loss": data["val_loss"], "val_acc": data["val_acc"]}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["arm", "seed", "position", "val_loss", "val_acc"])


def arms(study: str, out_dir: str | Path | None = None) -> list[str]:
    return sorted({run.arm for run in finished_run_dirs(study_dir(study, out_dir))}, key=arm_order)
