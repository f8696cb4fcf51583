"""One-line refusals instead of tracebacks or silent choices (issue 70, item 8): a study whose runs cannot be paired
(every baseline run diverged, two runs of one arm and seed), a sweep's duplicate --axis, a `diverged` or `failed`
that is neither True nor False, and an lm_eval_adapter --run-dir outside the runs directory."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, tiny

from embnorm_lib.analyses import paired as analysis
from embnorm_lib.core.cli import parse_axes
from embnorm_lib.core.errors import ConfigError, RunDirError, entry
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.scoring import lm_eval_adapter
from embnorm_lib.runner import sweep
from embnorm_lib.runner.results import index_row, load_runs

FAMILY = [m for m in analysis.DEFAULT_METRICS if m not in analysis.LM_METRICS]


def synthetic_study(root, name="tsyn", seeds=3, **changes):
    """runs.csv of a paired study on the tiny preset (none, ln x seeds) with every registered metric, no run dirs."""
    rng = np.random.default_rng(0)
    rows = [{"run_dir": f"{v}/seed{s}", "arm": v, "variant": v, "seed": s, "cfg.preset": "tiny", "cfg.lr": 1e-3,
             "cfg.lm_eval": False, "diverged": False, "failed": False,
             **{m: float(rng.normal(2.0, 0.1)) for m in FAMILY}} for v in ("none", "ln") for s in range(seeds)]
    table = pd.DataFrame(rows)
    for column, values in changes.items():
        table[column] = values
    (root / name).mkdir(parents=True, exist_ok=True)
    table.to_csv(root / name / "runs.csv", index=False)
    return table


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_a_study_whose_baseline_runs_all_diverged_is_refused_in_one_line(tmp_path, capsys):
    table = synthetic_study(tmp_path)
    none = table["variant"] == "none"
    table.loc[none, "diverged"] = table.loc[none, "failed"] = True  # a diverged run has no final metrics
    table.loc[none, FAMILY] = np.nan
    table.to_csv(tmp_path / "tsyn" / "runs.csv", index=False)
    assert entry(analysis.main, ["tsyn", "--out-dir", str(tmp_path)]) == 2
    err = one_line_error(capsys)
    assert "every `none` run diverged (3 of 3" in err and "at least one run that did not diverge" in err
    assert not (tmp_path / "tsyn" / "REPORT.md").exists()
    # one baseline run left: the analysis runs (the failures are the stability reports' to count)
    table.loc[table["run_dir"] == "none/seed0", ["diverged", "failed"]] = False
    table.loc[table["run_dir"] == "none/seed0", FAMILY] = 2.0
    table.to_csv(tmp_path / "tsyn" / "runs.csv", index=False)
    decision = analysis.analyse("tsyn", out_dir=tmp_path)[0].decision
    assert decision["baseline_stability"]["diverged"] == 2  # counted as failures (docs/PROTOCOL.md amendment 1)


def test_a_study_with_two_runs_of_one_arm_and_seed_is_refused_naming_how_they_differ(tmp_path, capsys):
    table = synthetic_study(tmp_path)
    twice = pd.concat([table, table.assign(**{"cfg.lr": 3e-3, "run_dir": table["run_dir"].str.replace(
        "/", "_lr=0.003/")})])  # what an ad-hoc sweep with an extra --axis lr=... indexes
    twice.to_csv(tmp_path / "tsyn" / "runs.csv", index=False)
    with pytest.raises(analysis.UnpairedStudyError, match=r"2 runs of `ln` seed 0 \(ln/seed0, ln_lr=0.003/seed0; "
                                                          r"they differ in cfg.lr\)"):
        analysis.analyse("tsyn", out_dir=tmp_path)
    assert entry(analysis.main, ["tsyn", "--out-dir", str(tmp_path)]) == 2
    assert "one run per variant and seed" in one_line_error(capsys)


@pytest.mark.parametrize("column", ["diverged", "failed"])
def test_an_empty_outcome_in_runs_csv_is_refused_not_counted(tmp_path, capsys, column):
    """A cast would count the empty cell as True (a failure); the failure definition cannot be applied to it."""
    synthetic_study(tmp_path, **{column: [True, False, None, False, False, False]})
    with pytest.raises(RunDirError, match=f"{column}=nan for run none/seed2 \\(1 run\\(s\\) in all\\); allowed: "
                                          f"True or False"):
        load_runs("tsyn", tmp_path)
    assert entry(analysis.main, ["tsyn", "--out-dir", str(tmp_path)]) == 2
    assert "none/seed2" in one_line_error(capsys)


@pytest.mark.parametrize("value", [math.nan, None, "yes"])
def test_a_summary_whose_diverged_is_not_a_boolean_is_not_indexed(tmp_path, value):
    run = RunDir(tmp_path / "tsyn" / "none" / "seed0")
    run.root.mkdir(parents=True)
    run.config.write_text(tiny().to_json())
    run.summary.write_text(json.dumps({"steps": 20, "val_loss": 2.0, "diverged": value}))
    with pytest.raises(RunDirError, match="summary.json has diverged=.*; allowed: true or false"):
        index_row(run, tmp_path / "tsyn")


@pytest.mark.parametrize("axes,message", [
    (["--axis", "lr=0.001", "--axis", "lr=0.003"], "field lr is given twice; allowed: one --axis per field"),
    (["--axis", "lr=0.001,0.001"], "value 0.001 is repeated; allowed: distinct values"),
    (["--set", "lr=0.001", "--axis", "lr=0.003"], "field lr is also fixed by --set"),
])
def test_a_sweep_refuses_an_axis_given_twice_a_repeated_value_or_a_fixed_field(tmp_path, capsys, axes, message):
    assert entry(sweep.main, ["tdup", "--preset", "tiny", *axes, "--list", "--out-dir", str(tmp_path)]) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "tdup").exists()
    assert parse_axes(["lr=0.001,0.003", "warmup_frac=0"], {}) == {"lr": [0.001, 0.003], "warmup_frac": [0]}


def test_lm_eval_run_dir_must_resolve_to_a_run_under_the_runs_directory(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    run = RunDir(runs / "tsyn" / "ln" / "seed0")
    run.root.mkdir(parents=True)
    run.config.write_text(tiny().to_json())
    (tmp_path / "evil").mkdir()
    monkeypatch.chdir(tmp_path)
    assert lm_eval_adapter.run_dir_argument("runs/tsyn/ln/seed0", str(runs)) == run.root.resolve()
    assert lm_eval_adapter.run_dir_argument(str(run.root), str(runs)) == run.root.resolve()
    for bad in ("runs/tsyn/ln/seed0/../../../evil", "evil", "runs/tsyn", "/tmp"):
        with pytest.raises(ConfigError, match=f"invalid --run-dir '{bad}': it resolves to .*, not a run directory "
                                              f"under"):
            lm_eval_adapter.run_dir_argument(bad, str(runs))
    (runs / "tsyn" / "none" / "seed9").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no run"):
        lm_eval_adapter.run_dir_argument("runs/tsyn/none/seed9", str(runs))
    (runs / "tsyn" / "rms").mkdir()
    (runs / "tsyn" / "rms" / "seed0").symlink_to(tmp_path / "evil")  # a link out of the runs directory
    assert entry(lm_eval_adapter.main, ["--run-dir", "runs/tsyn/rms/seed0", "--out-dir", str(runs)]) == 2
    assert "invalid --run-dir 'runs/tsyn/rms/seed0'" in one_line_error(capsys)
    assert not list((tmp_path / "evil").iterdir())


def test_failure_words_name_what_was_counted(tmp_path):
    """docs/PROTOCOL.md amendment 1: a run failed if its loss became non-finite or its final loss is above the loss at
    init. The ladder's LR check counts a worse-than-init run as failed (so its factor never wins), and the stability
    line says 'diverged' where an index predates the `failed` column (only divergences were counted)."""
    from test_ladder import check_runs

    from embnorm_lib.analyses import ladder

    runs = check_runs()
    worse = (runs["variant"] == "ln") & (runs["cfg.lr"] == runs[runs["variant"] == "ln"]["cfg.lr"].max())
    runs["failed"] = worse  # finite, not diverged, but above its loss at init
    check = ladder.lr_check(runs)
    assert check[check["failed"] > 0]["variant"].tolist() == ["ln"] and check["failed"].sum() == 2
    synthetic_study(tmp_path)
    words = "\n".join(analysis.plain_words(analysis.analyse("tsyn", out_dir=tmp_path)[0]))
    assert "failed = non-finite loss or final loss above the loss at init" in words and "0 failed of 3" in words
    synthetic_study(tmp_path, name="tolder").drop(columns="failed").to_csv(tmp_path / "tolder" / "runs.csv",
                                                                          index=False)
    words = "\n".join(analysis.plain_words(analysis.analyse("tolder", out_dir=tmp_path)[0]))
    assert "diverged = non-finite loss" in words and "0 diverged of 3" in words and "failed" not in words


@pytest.mark.parametrize("page", ["readme", "paper"])
@pytest.mark.parametrize("flag", ["--out-dir", "--figures-dir"])
def test_the_checkouts_pages_are_not_published_from_scratch_runs(tmp_path, capsys, page, flag):
    """README.md, FINDINGS.md, figures/ and paper/ quote the committed runs: `publish readme --out-dir X` rewrote them
    from X's runs, and --figures-dir was ignored."""
    from embnorm_lib.publishing import publish

    before = {p: p.read_bytes() for p in (REPO / "README.md", REPO / "FINDINGS.md")}
    assert publish.main([page, flag, str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path) in err and "allowed:" in err
    assert {p: p.read_bytes() for p in before} == before and not any(tmp_path.iterdir())


# -- from a fresh-eyes probe of the command lines (session 72) -------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["smoke", "--set", "lr=5"], "invalid --set for the registered study 'smoke'"),
    (["smoke", "--axis", "lr=1,2"], "invalid --axis for the registered study 'smoke'"),
    (["smoke", "--variants", "ln"], "invalid --variants for the registered study 'smoke'"),
    (["seeds-final", "--preset", "tiny"], "invalid study 'seeds-final' for an ad-hoc grid: it is a registered study"),
    (["tnew", "--preset", "tiny", "--seeds", "1,1"], "two cells would train into"),
    (["tnew", "--preset", "tiny", "--variants", "ln,layernorm", "--seeds", "0"], "two cells would train into"),
    (["tnew", "--preset", "tiny", "--seeds", ""], "invalid --seeds ''"),
    (["tnew", "--preset", "tiny", "--data-path", "/nonexistent/input.txt"], "invalid --data-path"),
    (["tnew", "--preset", "tiny", "--data-path", "/"], "invalid shard directory /: no token shards"),  # a folder: shards
    # issue 117, item 9: an empty --variants ran every arm; a relative --data-path is named as typed, up front
    (["tnew", "--preset", "tiny", "--variants", ""], "unknown variant ''; allowed: layernorm, ln, "),
    (["tnew", "--preset", "tiny", "--variants", "ln,"], "unknown variant ''; allowed: layernorm, ln, "),
    (["tnew", "--preset", "tiny", "--variants", "none, ln"], "unknown variant ' ln'; allowed: layernorm, ln, "),
    (["tnew", "--preset", "tiny", "--data-path", "no/such.txt"], "invalid --data-path 'no/such.txt': not a file"),
    (["t new", "--preset", "tiny"], "invalid study='t new'"),
    (["tnew", "--index-only"], "invalid study 'tnew' for --index-only: no folder"),  # said "0 runs indexed", exit 0
])
def test_sweep_flags_that_would_be_ignored_or_collide_are_refused_before_anything_is_written(tmp_path, capsys, args,
                                                                                            message):
    out = tmp_path / "runs"
    assert entry(sweep.main, [*args, "--out-dir", str(out), "--list"]) == 2
    assert message in one_line_error(capsys)
    assert not out.exists()


def test_the_index_and_the_seal_refuse_a_study_folder_that_is_not_there_in_the_same_words(tmp_path, capsys):
    from embnorm_lib.core.records import seal

    (tmp_path / "tmine").mkdir()
    assert entry(sweep.main, ["nosuch", "--index-only", "--out-dir", str(tmp_path)]) == 2
    index_error = one_line_error(capsys)
    assert entry(seal.main, ["nosuch", "--out-dir", str(tmp_path)]) == 2
    seal_error = one_line_error(capsys)
    assert seal_error == index_error.replace("for --index-only", "for seal")
    assert f"no folder {tmp_path / 'nosuch'}; allowed: a study with run directories under {tmp_path}" in seal_error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmine"]


def test_publishing_a_study_without_runs_names_what_can_be_published(tmp_path, capsys):
    from embnorm_lib.publishing import publish

    (tmp_path / "runs" / "tmine").mkdir(parents=True)
    synthetic_study(tmp_path / "runs", name="tmine")
    assert entry(publish.main, ["nosuch", "--out-dir", str(tmp_path / "runs")]) == 2
    err = one_line_error(capsys)
    assert "no runs of study 'nosuch' to publish" in err and "a study with runs (tmine)" in err
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["tmine"]  # no journal, nothing written


@pytest.mark.parametrize("tag", ["_matched", "_matched_lr=1", "lr=1", "_lr"])
def test_a_run_tag_that_could_read_as_a_variant_name_is_refused(tmp_path, tag):
    from embnorm_lib.core.records.rundir import run_dir_for

    # 'ln' + '_matched' would be the directory of variant ln_matched
    with pytest.raises(ConfigError, match=f"invalid run_tag='{tag}'; allowed: empty, or '_FIELD=VALUE' pairs"):
        run_dir_for("ok", "ln", 0, tmp_path, tag=tag)
    assert run_dir_for("ok", "ln", 0, tmp_path, tag="_preset=ladder-data-3_lr=0.001").parent.name == \
        "ln_preset=ladder-data-3_lr=0.001"


@pytest.mark.parametrize("tag,why", [
    ("_lr=0.5", "this run's lr is 0.001"),  # was arm ln_lr=0.5 of a run trained at lr 0.001
    ("_lr=0.0015", "this run's lr is 0.001"),  # the config's value is a prefix, not the value
    ("_lr=0.001_lr=0.001", "field lr is named twice"),
    ("_seed=3", "'seed' is not a config field a tag can name"),
    ("_lr=0.001_x=1", "'x' is not a config field a tag can name"),
    ("_preset=nanogpt-cpu", "this run's preset is tiny"),
])
def test_a_run_tag_must_name_the_runs_own_config(tmp_path, tag, why):
    """Issue 117, item 8: a tag is part of the arm's name, which the index, seal and figures trust."""
    from embnorm_lib.core.notebook import config_from_parameters, run_dir_from_parameters

    cfg = config_from_parameters("tiny", "ln", 3)
    with pytest.raises(ConfigError) as refused:
        run_dir_from_parameters(cfg, "ok", str(tmp_path), tag)
    assert str(refused.value) == (f"invalid run_tag={tag!r}: {why}; allowed: empty, or '_FIELD=VALUE' pairs of the "
                                  "run's config fields (not variant or seed) with its own values, as a sweep writes "
                                  "them")
    assert not any(tmp_path.iterdir())
    for ok in ("", "_lr=0.001", "_preset=tiny_lr=0.001", "_preset=tiny_batch_size=8"):
        assert run_dir_from_parameters(cfg, "ok", str(tmp_path), ok) == tmp_path / "ok" / f"ln{ok}" / "seed3"


def test_every_registered_cells_tag_names_its_own_config():
    from embnorm_lib.core.records.rundir import check_run_tag
    from embnorm_lib.runner.registry import STUDIES

    cells = [cell for study in STUDIES.values() for cell in study.cells()]
    assert len(cells) > 1000 and any(cell.tag for cell in cells)
    for cell in cells:
        assert check_run_tag(cell.tag, cell.config()) == cell.tag


@pytest.mark.parametrize("summary", [{"diverged": False}, {"diverged": False, "val_loss": float("nan")},
                                     {"diverged": False, "val_loss": None}, {"diverged": False, "val_loss": "abc"},
                                     {"diverged": True, "val_loss": "abc"}, {"diverged": False, "val_loss": True}])
def test_a_summary_whose_loss_the_index_cannot_count_is_neither_indexed_nor_sealed(tmp_path, capsys, summary):
    """A missing or NaN loss in a run that did not diverge was indexed as a run and averaged as none (n 2, mean of
    one); sealing it by hand vouched for it."""
    from embnorm_lib.core.records import seal

    run = RunDir(tmp_path / "tsyn" / "none" / "seed0")
    run.root.mkdir(parents=True)
    run.config.write_text(tiny().to_json())
    run.metrics.write_text("".join(json.dumps({"step": s, "train_loss": 2.0}) + "\n" for s in (1, 2)))
    run.summary.write_text(json.dumps({"steps": 2, **summary}))
    loss = repr(summary.get("val_loss", "missing"))
    with pytest.raises(RunDirError, match=f"summary.json has val_loss={loss}; allowed: a finite number"):
        index_row(run, tmp_path / "tsyn")
    assert entry(seal.main, ["tsyn", "--out-dir", str(tmp_path)]) == 2
    assert f"val_loss={loss}" in capsys.readouterr().err and not run.manifest.exists()
    # a diverged run's null loss is its result, and a finished run's number is indexed and sealed
    for good in ({"diverged": True, "val_loss": None}, {"diverged": False, "val_loss": 2.0}):
        run.summary.write_text(json.dumps({"steps": 2, **good}))
        assert index_row(run, tmp_path / "tsyn")["diverged"] is good["diverged"]
        assert entry(seal.main, ["tsyn", "--out-dir", str(tmp_path)]) == 0
        run.manifest.unlink()


@pytest.mark.parametrize("under", ["", "runs"])
def test_an_out_dir_where_a_file_stands_is_refused_in_one_line_by_every_command(tmp_path, capsys, under):
    from embnorm_lib.publishing import publish
    from embnorm_lib.runner import run as run_command

    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    out = str(blocker / under) if under else str(blocker)
    for main, argv in ((sweep.main, ["tnew", "--preset", "tiny", "--list"]), (publish.main, ["tnew"]),
                       (run_command.main, ["--preset", "tiny", "--variant", "ln", "--study", "tnew"])):
        assert entry(main, [*argv, "--out-dir", out]) == 2
        assert f"invalid out_dir {out!r}: {blocker} is a file; allowed: a directory" in one_line_error(capsys)
    assert blocker.read_text() == "not a folder"


def test_opencorpus_checks_where_it_writes_before_it_builds(tmp_path, capsys):
    from embnorm_lib.core.corpora import opencorpus

    blocker = tmp_path / "afile"
    blocker.write_text("")
    missing_debs = str(tmp_path / "no-debs")  # the build's first step would fail on it: the paths are checked first
    for argv, message in ((["--out", str(blocker / "x.txt")], f"invalid --out {blocker / 'x.txt'}"),
                          (["--out", str(tmp_path / "c.txt"), "--record", str(blocker / "r.json")], "invalid --record"),
                          (["--out", str(tmp_path / "c.txt"), "--record", str(tmp_path / "c.txt")], "is --out itself"),
                          (["--out", str(tmp_path)], "invalid --out")):
        assert opencorpus.main([*argv, "--debs", missing_debs]) == 2
        assert message in one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    # a folder that does not exist yet is created by the write: not refused (the .deb check speaks instead)
    assert opencorpus.main(["--out", str(tmp_path / "new" / "c.txt"), "--debs", missing_debs]) == 2
    assert "invalid --debs" in one_line_error(capsys)


def test_a_field_set_twice_and_a_step_before_the_first_are_refused(tmp_path, capsys):
    from embnorm_lib.runner import run as run_command

    twice = ["--set", "lr=1e-3", "--set", "lr=2e-3"]
    base = ["--preset", "tiny", "--variant", "ln", "--study", "tnew", "--out-dir", str(tmp_path)]
    for main, argv in ((sweep.main, ["tnew", "--preset", "tiny", "--list", "--out-dir", str(tmp_path), *twice]),
                       (run_command.main, [*base, *twice])):
        assert entry(main, argv) == 2  # a dict kept the last one without a word
        assert "invalid --set lr=2e-3: field lr is already set to 0.001; allowed: each field once" in \
            one_line_error(capsys)
    assert entry(run_command.main, [*base, "--until-step", "-3"]) == 2  # was read as 0: no step, a run "stopped"
    assert "invalid --until-step -3; allowed: a step >= 1" in one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", [b"", b"\xff\xfe not text", b'a,b\n"unclosed,1\n'])
def test_a_damaged_runs_csv_is_named_with_how_to_rebuild_it(tmp_path, content):
    (tmp_path / "tsyn").mkdir()
    (tmp_path / "tsyn" / "runs.csv").write_bytes(content)
    with pytest.raises(RunDirError, match=r"runs.csv cannot be read as an index \(.*\); allowed: the runs.csv a sweep "
                                          r"writes \(rebuild it: python -m embnorm_lib sweep tsyn --index-only\)"):
        load_runs("tsyn", tmp_path)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_a_device_this_machine_lacks_is_a_refusal_not_an_unexpected_error():
    from embnorm_lib.core.device import select_device

    with pytest.raises(ConfigError, match="invalid device='cuda': CUDA is not available on this machine; allowed"):
        select_device("cuda")


@pytest.mark.parametrize("arm,config,summary,message", [
    ("none", {"seed": 1}, {}, "config.json has seed=1 in directory seed0"),
    ("none", {}, {"seed": 1}, "summary.json has seed=1 in directory seed0"),
    ("none", {}, {"seed": True}, "summary.json has seed=True in directory seed0"),
    ("none", {"variant": "ln"}, {}, r"config.json has variant='ln' and summary.json variant='ln' in arm directory "
                                    r"none; allowed: the arm's variant \('none'\)"),
    ("none", {}, {"variant": "rms"}, "summary.json variant='rms' in arm directory none"),
    ("none", {"variant": None}, {}, "config.json has variant=None; allowed: a variant name"),
    ("none", {}, {"variant": None}, "summary.json has variant=None; allowed: a variant name"),
    ("ln_matched_lr=0.001", {"variant": "ln"}, {}, r"in arm directory ln_matched_lr=0.001; allowed: the arm's "
                                                   r"variant \('ln_matched'\)"),
])
def test_a_run_whose_files_name_another_seed_or_variant_than_its_directory_is_neither_indexed_nor_sealed(
        tmp_path, capsys, arm, config, summary, message):
    """A summary copied into another seed's directory and resealed by hand was indexed as a second seed; publish then
    stopped in pandas ('duplicate labels') instead of one line naming the run."""
    from embnorm_lib.core.records import seal

    run = RunDir(tmp_path / "tsyn" / arm / "seed0")
    run.root.mkdir(parents=True)
    run.config.write_text(json.dumps({**json.loads(tiny().to_json()), **config}))
    run.metrics.write_text("".join(json.dumps({"step": s, "train_loss": 2.0}) + "\n" for s in (1, 2)))
    run.summary.write_text(json.dumps({"steps": 2, "diverged": False, "val_loss": 2.0, **summary}))
    with pytest.raises(RunDirError, match=message):
        index_row(run, tmp_path / "tsyn")
    assert entry(seal.main, ["tsyn", "--out-dir", str(tmp_path)]) == 2
    assert message.split(" in ")[0].replace("\\", "") in capsys.readouterr().err and not run.manifest.exists()


@pytest.mark.parametrize("arm,variant", [("ln", "ln"), ("ln_lr=0.001", "layernorm"), ("ln_matched", "ln_matched"),
                                         ("ln_matched_preset=tiny", "ln_matched")])
def test_a_run_whose_files_agree_with_its_directory_is_indexed_and_sealed(tmp_path, arm, variant):
    from embnorm_lib.core.records import seal

    run = RunDir(tmp_path / "tsyn" / arm / "seed3")
    run.root.mkdir(parents=True)
    run.config.write_text(tiny(variant=variant, seed=3).to_json())
    run.metrics.write_text("".join(json.dumps({"step": s, "train_loss": 2.0}) + "\n" for s in (1, 2)))
    run.summary.write_text(json.dumps({"steps": 2, "diverged": False, "val_loss": 2.0, "seed": 3, "variant": variant}))
    assert index_row(run, tmp_path / "tsyn")["seed"] == 3
    assert entry(seal.main, ["tsyn", "--out-dir", str(tmp_path)]) == 0 and run.manifest.is_file()


@pytest.mark.parametrize("where", ["/etc/passwd", "a file", "a file/figures"])
def test_a_figures_dir_where_a_file_stands_is_refused_before_any_analysis(tmp_path, capsys, where):
    """Issue 117, item 9: `publish --figures-dir /etc/passwd` ran the study's analysis notebooks and ended in an empty
    `PapermillExecutionError:`; a report command failed inside its figure writes."""
    from embnorm_lib.core.cli import report_main
    from embnorm_lib.publishing import publish

    (tmp_path / "a file").write_text("not a directory")
    figures = where if where.startswith("/") else str(tmp_path / where)
    blocked = "/etc/passwd" if where.startswith("/") else str(tmp_path / "a file")
    synthetic_study(tmp_path / "runs", name="tsyn")
    message = f"invalid --figures-dir {figures!r}: {blocked} is a file; allowed: a directory (created where missing)"
    assert entry(publish.main, ["tsyn", "--out-dir", str(tmp_path / "runs"), "--figures-dir", figures]) == 2
    assert one_line_error(capsys) == f"error: {message}\n"
    written = []
    assert entry(lambda argv: report_main(argv, "doc", ["tsyn"], lambda study, args: written.append(study)),
                 ["--out-dir", str(tmp_path / "runs"), "--figures-dir", figures]) == 2
    assert one_line_error(capsys) == f"error: {message}\n" and written == []
    assert sorted(p.name for p in (tmp_path / "runs" / "tsyn").iterdir()) == ["runs.csv"]
