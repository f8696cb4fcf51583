"""Per-step logs in Parquet (issue 73): lossless against the JSONL, byte-stable, read through one function that prefers
the Parquet form; compact_logs converts a finished run atomically (a kill at any point leaves whole files and a rerun
finishes it), reseals it and is idempotent."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

from embnorm_lib.core.errors import RunDirError, entry
from embnorm_lib.core.records import seal, steplog
from embnorm_lib.core.records.io import read_jsonl, write_jsonl
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.records.steplog import decode, encode, parquet_path, read_step_log, same_rows
from embnorm_lib.core.training import schedule
from embnorm_lib.tools import compact_logs

ODD_ROWS = [
    {"step": 1, "a": 1.5, "b": True, "c": None, "s": "x", "f32": 0.25},
    {"step": 2, "b": False, "a": float("nan"), "c": None, "f32": 3.0517578125e-05},  # keys missing, NaN
    {"a": -0.0, "step": 3, "n": [1, {"z": 2.0, "y": None}], "big": 2 ** 70, "m": 1},  # another key order, nested
    {"step": 4, "m": 1.0, "inf": float("-inf"), "é": "ü", "a": 0.1, "f32": None},  # 1 and 1.0 in one column
    {},
    {"step": 6, "i": -(2 ** 63), "j": 2 ** 63 - 1, "t": "", "bools": [True, False]},
]
# a diagnostics-like log: few rows, many keys (the long layout), a key set growing after step 0
WIDE = [{"step": 0, **{f"k{i:03d}": i / 7 for i in range(40)}}] + \
       [{"step": s, **{f"k{i:03d}": (s * i) % 5 / 3 for i in range(60)}, "flag": s % 2 == 0, "n": s} for s in (10, 20)]


def _json_text(rows):
    """json.dumps of each row with its own key order: equal texts mean equal keys, order, types and values."""
    return [json.dumps(r) for r in rows]


@pytest.mark.parametrize("rows", [ODD_ROWS, WIDE, [], [{}], [{"only": None}], [{"x": 1e300, "y": 1e-320}]],
                         ids=["odd", "wide", "empty", "empty-row", "all-null", "float64"])
def test_the_parquet_form_gives_back_every_row_exactly(rows):
    back = decode(encode(rows))
    assert same_rows(back, rows) and _json_text(back) == _json_text(rows)
    for a, b in zip(back, rows):
        for k in b:
            assert type(a[k]) is type(b[k]), k
            if isinstance(b[k], float) and math.isfinite(b[k]):
                assert a[k] == b[k] and math.copysign(1, a[k]) == math.copysign(1, b[k])


def test_same_rows_tells_types_order_missing_keys_and_nan_apart():
    assert same_rows([{"a": float("nan")}], [{"a": float("nan")}])
    for a, b in [({"a": 1}, {"a": 1.0}), ({"a": 1}, {"a": True}), ({"a": None}, {}), ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
                 ({"a": 0.0}, {"a": -0.0}), ({"a": [1]}, {"a": [1.0]})]:
        assert not same_rows([a], [b]), (a, b)


def test_the_bytes_depend_on_the_rows_only(tmp_path):
    payload = encode(ODD_ROWS)
    assert encode([dict(r) for r in ODD_ROWS]) == payload
    (tmp_path / "rows.json").write_text(json.dumps(ODD_ROWS))  # NaN/inf survive Python's json
    code = ("import json, sys; from embnorm_lib.core.records.steplog import encode; "
            "sys.stdout.buffer.write(encode(json.loads(open(sys.argv[1]).read())))")
    other = subprocess.run([sys.executable, "-c", code, str(tmp_path / "rows.json")], cwd=REPO, capture_output=True,
                           env={"PYTHONHASHSEED": "123", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=True)
    assert other.stdout == payload  # another process, another hash seed: the same bytes
    assert encode(ODD_ROWS[:-1]) != payload


def test_bad_rows_are_refused_in_one_line():
    for rows, message in (([[1, 2]], "JSON object with string keys"), ([{1: 2}], "string keys")):
        with pytest.raises(ValueError, match=message):
            encode(rows)


def test_the_reader_prefers_parquet_and_falls_back_to_jsonl(tmp_path):
    run = RunDir(tmp_path)
    assert read_step_log(run, "metrics") == []
    write_jsonl(run.metrics, [{"step": 1, "from": "jsonl"}])
    assert read_step_log(run, "metrics") == [{"step": 1, "from": "jsonl"}]
    steplog.write_parquet_log(parquet_path(run, "metrics"), [{"step": 1, "from": "parquet"}])
    assert read_step_log(tmp_path, "metrics") == [{"step": 1, "from": "parquet"}]  # a path works as well as a RunDir
    assert steplog.step_log_frame(run, "metrics")["from"].tolist() == ["parquet"]
    with pytest.raises(ValueError, match="unknown step log 'losses'; allowed: metrics, evals, diagnostics"):
        read_step_log(run, "losses")
    parquet_path(run, "metrics").write_bytes(b"PAR1 not really")
    with pytest.raises(RunDirError, match=r"unreadable step log .*metrics.parquet") as bad:
        read_step_log(run, "metrics")
    assert "\n" not in str(bad.value)


# -- compact_logs ---------------------------------------------------------------------------------------------------

def sealed_run(root, arm="ln", seed=0, steps=30) -> RunDir:
    """A finished, sealed run as an old trainer left it: every log as JSONL."""
    run = RunDir(root / arm / f"seed{seed}")
    run.root.mkdir(parents=True)
    run.config.write_text(json.dumps({"variant": arm, "seed": seed}))
    run.summary.write_text(json.dumps({"variant": arm, "seed": seed, "steps": steps}))
    write_jsonl(run.metrics, [{"step": s, "train_loss": 3.0 - s / 64, "clipped": s % 3 == 0,
                               "grad_norm_total": None if s == 7 else 0.5 + s / 1024} for s in range(1, steps + 1)])
    write_jsonl(run.diagnostics, WIDE)
    write_jsonl(run.evals, [{"step": steps, "val_loss": 2.0}])
    seal.seal_run(run)
    return run


def _logs(run):
    return {log: read_step_log(run, log) for log in steplog.LOGS}


def test_a_converted_run_reads_the_same_and_its_seal_is_the_one_sealing_it_now_would_write(tmp_path, capsys):
    run = sealed_run(tmp_path / "s")
    before, jsonl = _logs(run), {p: p.read_bytes() for p in (run.metrics, run.diagnostics)}
    outcome = compact_logs.convert_run(run)
    assert outcome.converted and outcome.jsonl_bytes == sum(map(len, jsonl.values())) > outcome.parquet_bytes > 0
    assert not run.metrics.exists() and not run.diagnostics.exists() and run.evals.is_file()
    after = _logs(run)
    assert all(same_rows(after[log], before[log]) for log in before)
    manifest = seal.verify_run(run)
    assert manifest["files"]["metrics.parquet"]["rows"] == 30 and manifest["files"]["diagnostics.parquet"]["rows"] == 3
    written = run.manifest.read_bytes()
    seal.seal_run(run)  # what sealing the converted run from scratch writes
    assert run.manifest.read_bytes() == written
    # the JSONL the run had, byte for byte, from the Parquet form (how the library writes JSONL)
    for path, data in jsonl.items():
        assert steplog.jsonl_text(read_step_log(run, path.stem)).encode() == data
    assert steplog.main([str(run.root), "diagnostics"]) == 0
    assert capsys.readouterr().out.encode() == jsonl[run.diagnostics]
    assert entry(steplog.main, [str(tmp_path), "metrics"]) == 2
    assert capsys.readouterr().err.startswith("error: no metrics log in ")


def test_converting_again_changes_nothing(tmp_path):
    run = sealed_run(tmp_path / "s")
    compact_logs.convert_run(run)
    files = {p.name: p.read_bytes() for p in run.root.iterdir()}
    again = compact_logs.convert_run(run)
    assert not again.converted and again.jsonl_bytes == again.parquet_bytes == 0
    assert {p.name: p.read_bytes() for p in run.root.iterdir()} == files


def _fail_at(monkeypatch, where):
    """Make the conversion die at one point: after the first Parquet file, before the seal, or after the seal."""
    def boom(*a, **k):
        raise KeyboardInterrupt("killed")

    if where == "after-first-parquet":
        real, calls = steplog.write_parquet_log, []

        def once(path, rows):
            if calls:
                boom()
            calls.append(path)
            return real(path, rows)
        monkeypatch.setattr(compact_logs, "write_parquet_log", once)
    elif where == "before-seal":
        monkeypatch.setattr(compact_logs, "reseal_replacing", boom)
    else:  # the seal names the Parquet files; the JSONL are not deleted yet
        real_reseal = seal.reseal_replacing

        def reseal_then_die(run, replaced):
            real_reseal(run, replaced)
            boom()
        monkeypatch.setattr(compact_logs, "reseal_replacing", reseal_then_die)


@pytest.mark.parametrize("where", ["after-first-parquet", "before-seal", "after-seal"])
def test_a_conversion_killed_part_way_leaves_whole_files_and_a_rerun_finishes_it(tmp_path, monkeypatch, capsys, where):
    run = sealed_run(tmp_path / "s")
    before = _logs(run)
    with monkeypatch.context() as m:
        _fail_at(m, where)
        with pytest.raises(KeyboardInterrupt):
            compact_logs.convert_run(run)
    after = _logs(run)
    assert all(same_rows(after[log], before[log]) for log in before)  # every reader gets the same rows meanwhile
    assert not [p.name for p in run.root.iterdir() if p.name.startswith(".")]  # no temp file left
    assert run.metrics.is_file() and run.diagnostics.is_file()  # nothing deleted before the seal named the Parquet
    with pytest.raises(seal.SealError, match="a conversion of its logs was interrupted.*python -m embnorm_lib compact-logs --study s`"):
        seal.verify_run(run)
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    assert "s: converted 1 run(s)" in capsys.readouterr().out
    seal.verify_run(run)
    assert not run.metrics.exists() and not run.diagnostics.exists()
    assert all(same_rows(read_step_log(run, log), rows) for log, rows in before.items())


def test_a_parquet_file_that_disagrees_with_its_jsonl_is_never_taken_for_it(tmp_path):
    run = sealed_run(tmp_path / "s")
    compact_logs.convert_run(run)
    write_jsonl(run.metrics, read_step_log(run, "metrics")[:-1])  # a stray JSONL beside the sealed Parquet
    with pytest.raises(RunDirError, match="metrics.parquet does not hold the rows of metrics.jsonl; nothing was "
                                          "deleted"):
        compact_logs.convert_run(run)
    assert run.metrics.is_file()


def test_damaged_unsealed_and_busy_runs_are_named_and_left_alone(tmp_path, capsys):
    study = tmp_path / "s"
    good, damaged, unsealed, busy = (sealed_run(study, seed=k) for k in range(4))
    damaged.metrics.write_text(damaged.metrics.read_text().replace('"step": 1,', '"step": 9,'))
    unsealed.manifest.unlink()
    files = {r: {p.name: p.read_bytes() for p in r.root.iterdir()} for r in (damaged, unsealed)}
    with busy.training_lock():
        assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("error: run ") for line in err)
    assert "metrics.jsonl was altered" in err[0] and "manifest.json is missing" in err[1] and "in use" in err[2]
    assert files == {r: {p.name: p.read_bytes() for p in r.root.iterdir()} for r in (damaged, unsealed)}
    assert parquet_path(good, "metrics").is_file() and busy.metrics.is_file()
    assert not good.lock.exists() and busy.lock.exists()  # the lock file this command made went again


def test_the_command_checks_its_arguments_and_keeps_to_the_budget(tmp_path, capsys):
    for arm, steps in (("big", 400), ("mid", 200), ("small", 20)):
        sealed_run(tmp_path / arm, steps=steps)
    sizes = {s: compact_logs.jsonl_bytes(tmp_path / s) for s in ("big", "mid", "small")}
    budget = (sizes["big"] + sizes["small"]) / 1e6  # mid does not fit beside big; small does
    chosen, left = compact_logs.choose_studies(tmp_path, [], budget)
    assert chosen == [("big", sizes["big"]), ("small", sizes["small"])] and left == [("mid", sizes["mid"])]
    assert compact_logs.main(["--budget-mb", str(budget), "--check", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "mid: left as JSONL" in out and f"JSONL {sizes['big'] + sizes['small']:,} bytes" in out
    assert not list(tmp_path.rglob("*.parquet"))  # --check writes nothing
    for argv, message in ((["--study", "nope"], "invalid study 'nope'"), (["--study", "../x"], "invalid study"),
                          (["--budget-mb", "0"], "invalid --budget-mb '0'")):
        assert entry(compact_logs.main, [*argv, "--out-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err


def test_a_finish_killed_after_its_parquet_logs_resumes_to_the_same_run(tmp_path, data_path, monkeypatch):
    from conftest import strip_timing, tiny

    from embnorm_lib.core.training import train as train_module

    cfg = tiny(max_iters=12, checkpoint_interval=6, eval_interval=6)
    train_module.train(cfg, tmp_path / "full", data_path, progress=False)
    with monkeypatch.context() as m:  # killed in _finish once the final logs are written (the checkpoint stays)
        m.setattr(train_module, "save_torch", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            train_module.train(cfg, tmp_path / "cut", data_path, progress=False)
    cut = RunDir(tmp_path / "cut")
    assert cut.checkpoint.is_file() and parquet_path(cut, "metrics").is_file() and not cut.summary.exists()
    train_module.train(cfg, cut.root, data_path, progress=False)
    for log in steplog.LOGS:
        assert strip_timing(read_step_log(cut, log)) == strip_timing(read_step_log(tmp_path / "full", log))
    seal.verify_run(cut)


@pytest.mark.committed
def test_committed_logs_convert_losslessly_to_the_byte():
    """The first and last run of every committed study still in JSONL: the Parquet form gives back the rows, and the
    rows give back the JSONL's bytes (so a converted log can be written out again exactly as it was)."""
    for study in sorted(p for p in (REPO / "runs").iterdir() if p.is_dir()):
        runs = seal.run_dirs_of(study)
        for run in runs[:1] + runs[-1:]:
            for log in steplog.COMPACTED:
                path = steplog.jsonl_path(run, log)
                if not path.is_file():
                    continue
                rows = read_jsonl(path)
                assert same_rows(decode(encode(rows)), rows), path
                assert steplog.jsonl_text(rows).encode() == path.read_bytes(), path


# -- timings at their stated resolution (decimal columns) ----------------------------------------------------------

def _timed_rows(n=200, places=None):
    """Metrics-like rows with timer-like step_ms/wall_s (rounded to `places` per key, or at full float precision)."""
    rows, wall = [], 3.0
    for s in range(1, n + 1):
        step_ms = 700.0 + 37.123456789 * math.sin(s) + s / 3
        wall += step_ms / 1e3
        rows.append({"step": s, "lr": 0.006 * min(1.0, s / 30), "train_loss": float(np.float32(4.2 - s / 100)),
                     "step_ms": step_ms, "wall_s": wall})
    return steplog.round_timings(rows) if places else rows


def _meta(payload):
    import pyarrow as pa
    import pyarrow.parquet as pq

    return json.loads(pq.ParquetFile(pa.BufferReader(payload)).metadata.metadata[steplog.META_KEY])


def test_timings_at_their_resolution_are_stored_as_decimals_and_read_back_exactly():
    fine, rounded = _timed_rows(), _timed_rows(places=True)
    assert all(r["step_ms"] == round(r["step_ms"], 2) and r["wall_s"] == round(r["wall_s"], 3) for r in rounded)
    assert not same_rows(fine, rounded)
    payload = encode(rounded)
    assert same_rows(decode(payload), rounded) and _json_text(decode(payload)) == _json_text(rounded)
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {f.name: f.type for f in pq.read_schema(pa.BufferReader(payload))}
    assert types["step_ms"] == pa.decimal128(18, 2) and types["wall_s"] == pa.decimal128(18, 3)
    assert types["lr"] == pa.float64() and types["train_loss"] == pa.float32()
    assert len(payload) < 0.8 * len(encode(fine))  # the point of it: fine timings stay float64, at ~2x the bytes
    assert pq.read_schema(pa.BufferReader(encode(fine))).field("step_ms").type == pa.float64()


@pytest.mark.parametrize("values", [[0.5, -0.0], [1.25, None, 2.5], [0.1 + 0.2], [1e-7], [2.0 ** 60 + 0.0],
                                    [float("nan"), 1.5], [-3.75, 0.0]])
def test_a_float_column_comes_back_as_the_same_floats_whether_or_not_it_is_decimal(values):
    rows = [{"x": v} for v in values]
    back = decode(encode(rows))
    assert same_rows(back, rows) and all(type(b["x"]) is type(r["x"]) for b, r in zip(back, rows))


def _fine_timed_run(root):
    """A sealed run whose metrics.parquet holds timings at full precision (as runs before the resolution wrote)."""
    run = sealed_run(root)
    compact_logs.convert_run(run)
    steplog.write_parquet_log(parquet_path(run, "metrics"), _timed_rows(n=30))
    seal.seal_run(run)
    return run


def test_compact_logs_re_encodes_fine_timings_once_and_reseals(tmp_path, capsys):
    run = _fine_timed_run(tmp_path / "s")
    before = _logs(run)
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path), "--check"]) == 0
    assert "would re-encode 1 run(s)' metrics.parquet" in capsys.readouterr().out
    assert same_rows(read_step_log(run, "metrics"), before["metrics"])  # --check changed nothing
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    assert "re-encoded 1 run(s)' metrics.parquet" in capsys.readouterr().out
    seal.verify_run(run)
    after = _logs(run)
    assert same_rows(after["metrics"], steplog.round_timings(before["metrics"]))
    assert same_rows(after["diagnostics"], before["diagnostics"]) and same_rows(after["evals"], before["evals"])
    files = {p.name: p.read_bytes() for p in run.root.iterdir()}
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    assert "re-encoded" not in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in run.root.iterdir()} == files  # a second pass changes nothing


@pytest.mark.parametrize("where", ["before-file", "before-seal"])
def test_a_re_encoding_killed_part_way_is_finished_by_a_rerun(tmp_path, monkeypatch, where):
    run = _fine_timed_run(tmp_path / "s")
    rows = steplog.round_timings(read_step_log(run, "metrics"))

    def boom(*a, **k):
        raise KeyboardInterrupt("killed")
    with monkeypatch.context() as m:
        m.setattr(compact_logs, "reseal" if where == "before-seal" else "atomic_write_bytes", boom, raising=False)
        if where == "before-file":
            import embnorm_lib.core.records.io as io_module
            m.setattr(io_module, "atomic_write_bytes", boom)
        with pytest.raises(KeyboardInterrupt):
            compact_logs.convert_locked(run)
    assert (run.root / compact_logs.RETIME_MARKER).is_file()
    compact_logs.convert_locked(run)
    assert not (run.root / compact_logs.RETIME_MARKER).exists()
    seal.verify_run(run)
    assert same_rows(read_step_log(run, "metrics"), rows)


def test_a_re_encoding_marker_beside_a_damaged_file_is_refused(tmp_path):
    run = _fine_timed_run(tmp_path / "s")
    (run.root / compact_logs.RETIME_MARKER).write_text(json.dumps({"sealed": "0" * 64, "new": "1" * 64}))
    with pytest.raises(RunDirError, match="neither the sealed file nor its re-encoding"):
        compact_logs.convert_locked(run)


def test_compact_logs_slims_the_executed_notebook_and_leaves_the_seal_alone(tmp_path, capsys):
    import nbformat

    from embnorm_lib.runner.notebook_archive import read_archived_notebook

    run = sealed_run(tmp_path / "s")
    compact_logs.convert_run(run)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("show()", metadata={"papermill": {"duration": 2.0, "start_time": "t0"}})
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/html": "<table/>", "text/plain": "table"})]
    nb.cells = [cell]
    nbformat.write(nb, run.notebook)
    manifest, before = run.manifest.read_bytes(), run.notebook.stat().st_size
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    slim = read_archived_notebook(run.root)  # slimmed, then packed into the study's archive
    assert f"slimmed 1 executed notebook(s), {before:,} -> {len(slim):,} bytes" in capsys.readouterr().out
    assert nbformat.reads(slim.decode(), as_version=4).cells[0].outputs[0].data == {"text/plain": "table"}
    assert run.manifest.read_bytes() == manifest  # the notebook is not sealed
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    assert "slimmed" not in capsys.readouterr().out


def test_a_re_encoding_killed_after_its_seal_leaves_a_marker_a_rerun_just_removes(tmp_path, monkeypatch):
    run = _fine_timed_run(tmp_path / "s")
    marker = run.root / compact_logs.RETIME_MARKER
    with monkeypatch.context() as m:
        real_unlink = type(marker).unlink

        def die_on_marker(self, *a, **k):
            if self.name == compact_logs.RETIME_MARKER:
                raise KeyboardInterrupt("killed")
            return real_unlink(self, *a, **k)
        m.setattr(type(marker), "unlink", die_on_marker)
        with pytest.raises(KeyboardInterrupt):
            compact_logs.convert_locked(run)
    assert marker.is_file()
    seal.verify_run(run)  # resealed: the run is whole
    files = {p.name: p.read_bytes() for p in run.root.iterdir() if p != marker}
    again = compact_logs.convert_locked(run)
    assert not marker.exists() and not again.retimed
    assert {p.name: p.read_bytes() for p in run.root.iterdir()} == files


@pytest.mark.parametrize("text", ["[1, 2]", "\"x\"", "{}"])
def test_a_marker_that_is_not_a_re_encoding_record_is_refused_in_one_line(tmp_path, text):
    run = _fine_timed_run(tmp_path / "s")
    (run.root / compact_logs.RETIME_MARKER).write_text(text)
    with pytest.raises(RunDirError, match="is not a re-encoding record") as bad:
        compact_logs.convert_locked(run)
    assert "\n" not in str(bad.value)


def test_a_missing_runs_directory_is_named_in_one_line(tmp_path, capsys):
    assert entry(compact_logs.main, ["--out-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid --out-dir ") and "allowed: a runs directory" in err and err.count("\n") == 1


# -- format 4: what a plain Parquet reader sees; formats 1-3 still read -----------------------------------------------

LEGACY = REPO / "tests" / "golden" / "steplog-format3"  # format-3/2 metrics (a resumed run's 30 rows) and format 1


def _legacy_rows():
    return [json.loads(line) for line in (LEGACY / "metrics.jsonl").read_text().splitlines()]


def same_as_plain(plain, ours, where="", as_json=()):
    """pandas.read_parquet's frame against step_log_frame's: the same columns in order, nulls in the same places and
    the same values elsewhere (a DECIMAL timing taken as float(), which is the logged float exactly; a column of
    mixed JSON values, `as_json`, as the JSON text of each)."""
    from decimal import Decimal

    assert list(plain.columns) == list(ours.columns), where
    for col in plain.columns:
        missing = plain[col].isna().to_numpy()
        assert (missing == ours[col].isna().to_numpy()).all(), (where, col)
        a, b = plain[col][~missing], ours[col][~missing]
        if a.dtype.kind in "biuf" and b.dtype.kind in "biuf":  # float32 against float64 compares the exact values
            assert (a.to_numpy() == b.to_numpy()).all(), (where, col)
            continue
        a = [float(v) if isinstance(v, Decimal) else json.loads(v) if col in as_json else v for v in a.tolist()]
        assert a == b.tolist(), (where, col)


def _mixed_rows():
    """Metrics-like rows as a resumed run logs them: timings at their resolution, lr off any float32, a second key
    order, a missing key, a null and a column of mixed JSON values."""
    rows = _timed_rows(n=60, places=True)
    rows[40:] = [{k: row[k] for k in sorted(row, reverse=True)} for row in rows[40:]]  # resumed: another key order
    rows[7].pop("train_loss")
    rows[8]["train_loss"] = None
    for i, row in enumerate(rows):
        row["note"] = [i] if i % 2 else "x"
    return rows


def test_plain_pandas_and_pyarrow_read_the_true_values(tmp_path):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _mixed_rows()
    path = steplog.write_parquet_log(tmp_path / "metrics.parquet", rows)
    assert same_rows(read_step_log(tmp_path, "metrics"), rows)
    same_as_plain(pd.read_parquet(path), steplog.step_log_frame(tmp_path, "metrics"), as_json=("note",))
    schema = pq.read_schema(path)
    assert schema.names == list(dict.fromkeys(k for row in rows for k in row))  # no private column
    assert schema.field("lr").type == pa.float64() and schema.field("train_loss").type == pa.float32()
    assert schema.field("step_ms").type == pa.decimal128(18, 2) and schema.field("wall_s").type == pa.decimal128(18, 3)
    assert pq.read_table(path).column("lr").to_pylist() == [row["lr"] for row in rows]
    meta = _meta(path.read_bytes())
    assert meta["format"] == 4 and meta["keyset_runs"] == [[0, 7], [1, 1], [0, 32], [2, 20]] and meta["json"] == ["note"]


@pytest.mark.parametrize("module", ["polars", "duckdb"])
def test_polars_and_duckdb_read_the_true_values(tmp_path, module):
    pytest.importorskip(module)
    import pandas as pd

    rows = _timed_rows(n=40, places=True)
    path = steplog.write_parquet_log(tmp_path / "metrics.parquet", rows)
    if module == "polars":
        import polars as pl

        frame = pl.read_parquet(path).to_pandas()
    else:
        import duckdb

        frame = duckdb.sql(f"SELECT * FROM read_parquet('{path}')").df()
    frame = pd.DataFrame({c: [float(v) if c in steplog.TIMING_DECIMALS else v for v in frame[c]] for c in frame})
    same_as_plain(frame, steplog.step_log_frame(tmp_path, "metrics"))


@pytest.mark.parametrize("values", [[12.34, -0.0], [0.5, None, 2.25], [1.005], [10.0 ** 16], [10.0 ** 15, None, 0.01],
                                    [float("nan"), 1.5], [float("inf")], [123.45, 6789.01]])
def test_a_timing_is_a_decimal_only_where_that_gives_back_the_very_floats(values):
    rows = [{"step_ms": v} for v in values]
    back = decode(encode(rows))
    assert same_rows(back, rows) and all(type(b["step_ms"]) is type(r["step_ms"]) for b, r in zip(back, rows))


def test_format_3_2_and_1_logs_still_read_as_their_rows(tmp_path):
    rows = _legacy_rows()
    assert len({tuple(row) for row in rows}) == 2  # a resumed run: two key orders, which __keys__ kept
    for name in ("metrics.parquet", "metrics-format2.parquet"):
        assert _meta((LEGACY / name).read_bytes())["format"] == (3 if name == "metrics.parquet" else 2)
        back = steplog.read_parquet_log(LEGACY / name)
        assert same_rows(back, rows) and _json_text(back) == _json_text(rows), name
        assert steplog.outdated(LEGACY / name)
    assert same_rows(steplog.read_parquet_log(LEGACY / "odd-format1.parquet"), ODD_ROWS)
    assert not steplog.outdated(LEGACY / "odd-format1.parquet")  # long: plain readers read it right already
    steplog.write_parquet_log(tmp_path / "metrics.parquet", rows)
    assert not steplog.outdated(tmp_path / "metrics.parquet")
    assert same_rows(steplog.read_parquet_log(tmp_path / "metrics.parquet"), rows)


def test_a_format_3_log_without_its_config_is_refused_in_one_line_naming_it(tmp_path):
    path = tmp_path / "run" / "metrics.parquet"
    path.parent.mkdir()
    path.write_bytes((LEGACY / "metrics.parquet").read_bytes())
    with pytest.raises(RunDirError, match=r"metrics.parquet .*need the run's config.json") as e:
        steplog.read_parquet_log(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="config.json"):
        decode(path.read_bytes())


def test_a_format_3_schedule_that_rounds_differently_on_reading_is_warned_of(monkeypatch):
    from embnorm_lib.core.config import RunConfig

    cfg = RunConfig.load(LEGACY / "config.json")
    lr_at = schedule.DERIVED["lr"]
    monkeypatch.setitem(schedule.DERIVED, "lr", lambda c, s: math.nextafter(lr_at(c, s), 0.0) if s == 400 else
                        lr_at(c, s))
    with pytest.warns(RuntimeWarning, match="'lr' recomputed from config.json differs"):
        decode((LEGACY / "metrics.parquet").read_bytes(), cfg)


def _format3_run(root):
    """A sealed run whose metrics.parquet is of format 3 (as every run committed before format 4 was)."""
    run = RunDir(root / "ln" / "seed101")
    run.root.mkdir(parents=True)
    run.config.write_bytes((LEGACY / "config.json").read_bytes())
    parquet_path(run, "metrics").write_bytes((LEGACY / "metrics.parquet").read_bytes())
    run.summary.write_text(json.dumps({"variant": "ln", "seed": 101, "steps": 1620}))
    seal.seal_run(run)
    return run


def test_compact_logs_rewrites_a_format_3_run_as_format_4_once_and_reseals(tmp_path, capsys):
    import pandas as pd

    run = _format3_run(tmp_path / "s")
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    assert "re-encoded 1 run(s)' metrics.parquet (as steplog format 4" in capsys.readouterr().out
    seal.verify_run(run)
    path = parquet_path(run, "metrics")
    assert _meta(path.read_bytes())["format"] == 4 and same_rows(read_step_log(run, "metrics"), _legacy_rows())
    same_as_plain(pd.read_parquet(path), steplog.step_log_frame(run, "metrics"))
    files = {p.name: p.read_bytes() for p in run.root.iterdir()}
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    assert "re-encoded" not in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in run.root.iterdir()} == files


def _committed_metrics_logs() -> list[str]:
    files = subprocess.run(["git", "ls-files", "runs/*metrics.parquet"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    assert len(files) > 1000
    return files


def _read_alike(files: list[str]) -> None:
    import pandas as pd

    for name in files:
        path = REPO / name
        same_as_plain(pd.read_parquet(path), steplog.step_log_frame(path.parent, "metrics"), name)


@pytest.mark.committed
def test_every_committed_metrics_log_is_of_the_format_plain_readers_read_and_a_sample_reads_alike():
    """Every committed run's log is format 4 (compact_logs migrates a landed run), and on every 8th log (and each
    study's first) pandas.read_parquet gives step_log_frame's columns, nulls and values (lr to the bit, timings as
    DECIMAL at their stated resolution). Every log is compared in the slow test below."""
    files = _committed_metrics_logs()
    old = [name for name in files if steplog.outdated(REPO / name)]
    assert not old, f"{len(old)} committed metrics logs are of a format before 4 (run compact-logs): {old[:3]}"
    firsts = {name.split("/")[1]: name for name in reversed(files)}
    _read_alike(sorted(set(files[::8]) | set(firsts.values())))


@pytest.mark.slow
@pytest.mark.committed
def test_plain_pandas_reads_every_committed_metrics_log_as_the_project_reader_does():
    """The sample above, on every committed metrics log (about 45 s on one core)."""
    _read_alike(_committed_metrics_logs())
