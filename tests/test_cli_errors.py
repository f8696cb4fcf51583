"""Command lines answer in one line with exit code 2, never a traceback unless --debug asks for it; a config field given
twice with two values is refused (issue 70, item 6)."""
import pytest
from conftest import tiny

from embnorm_lib.core.errors import ConfigError, RunDirError, entry
from embnorm_lib.core.notebook import config_from_parameters
from embnorm_lib.core.records.io import RunLock
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.runner import run, sweep


def test_a_runtime_refusal_is_one_line_and_debug_shows_the_traceback(tmp_path, data_path, capsys):
    run_dir = RunDir(tmp_path / "adhoc" / "none" / "seed0")
    args = ["--preset", "tiny", "--study", "adhoc", "--out-dir", str(tmp_path), "--data-path", data_path]
    with RunLock(run_dir.lock):  # another process trains there
        assert entry(run.main, args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and "in use by another process" in err
        with pytest.raises(RunDirError):
            entry(run.main, [*args, "--debug"])


def test_an_unexpected_failure_is_one_line_too(capsys):
    def broken(argv):
        return {}["none"]

    assert entry(broken, []) == 2
    err = capsys.readouterr().err
    assert err == "error: KeyError: 'none' (unexpected; rerun with --debug for the traceback)\n"


def test_an_interrupt_speaks_of_checkpoints_only_where_the_command_trains(capsys):
    """A corpus build stopped by Ctrl-C said a training run would resume from its checkpoint; only commands that
    train say so, and a run's own stop names the step it checkpointed."""
    from embnorm_lib.core.training.interrupt import Interrupted, Terminated

    def stopped(error):
        def main(argv):
            raise error
        return main

    assert entry(stopped(KeyboardInterrupt()), []) == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"
    assert entry(stopped(Terminated("terminated (SIGTERM)")), []) == 143
    assert capsys.readouterr().err == "error: terminated (SIGTERM)\n"
    assert entry(stopped(KeyboardInterrupt()), [], trains=True) == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C); a run that was training resumes from its last " \
                                      "checkpoint\n"
    step = Interrupted("stopped by Ctrl-C at step 7 (checkpointed); run it again to resume")
    assert entry(stopped(step), [], trains=True) == 130
    assert capsys.readouterr().err == "error: stopped by Ctrl-C at step 7 (checkpointed); run it again to resume\n"
    # the commands that train say so
    from conftest import REPO
    training = {p.relative_to(REPO).as_posix() for p in (REPO / "embnorm_lib").rglob("*.py")
                if "entry(main, trains=True)" in p.read_text()}
    assert training == {"embnorm_lib/runner/run.py", "embnorm_lib/runner/sweep.py", "embnorm_lib/tools/job.py"}


def test_index_only_on_a_damaged_run_is_one_line(tmp_path, capsys):
    run_dir = RunDir(tmp_path / "tbad" / "ln" / "seed0")
    run_dir.root.mkdir(parents=True)
    run_dir.config.write_text("[1, 2]")  # config.json holding a list
    run_dir.summary.write_text("{}")
    assert entry(sweep.main, ["tbad", "--index-only", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tbad/ln/seed0" in err


@pytest.mark.parametrize("params,overrides", [
    (dict(max_iters=50), {"max_iters": 30}),
    (dict(device="cpu"), {"device": "cuda"}),
])
def test_a_field_given_as_a_parameter_and_an_override_must_agree(params, overrides):
    with pytest.raises(ConfigError, match=f"conflicting {next(iter(overrides))}"):
        config_from_parameters("tiny", "ln", 0, overrides=overrides, **params)
    assert config_from_parameters("tiny", "ln", 0, overrides={**overrides}, **{k: v for k, v in overrides.items()})


def test_device_and_preset_overrides_are_values_or_refusals_not_type_errors():
    assert config_from_parameters("tiny", "ln", 0, overrides={"device": "cpu"}).device == "cpu"
    assert config_from_parameters("tiny", "ln", 0, max_iters=7, overrides={"max_iters": 7}).max_iters == 7
    assert config_from_parameters("tiny", "ln", 0, overrides={"max_iters": 9}).max_iters == 9 != tiny().max_iters
    with pytest.raises(ConfigError, match="invalid overrides key\\(s\\) preset"):
        config_from_parameters("tiny", "ln", 0, overrides={"preset": "seeds-final"})


def test_every_module_command_line_goes_through_entry():
    """A module run as `python -m embnorm_lib.<module>` turns an error into one line only through `entry` (seven
    ended in a bare `sys.exit(main())`: a missing corpus printed a traceback)."""
    import re

    from conftest import REPO

    bare = []
    for path in sorted((REPO / "embnorm_lib").rglob("*.py")):
        tail = path.read_text().split('if __name__ == "__main__":', 1)
        if len(tail) == 2 and re.search(r"\bmain\(\)", tail[1]):
            bare.append(path.relative_to(REPO).as_posix())
    # the dispatcher runs each verb's module, which goes through entry; bench's main returns its record
    assert bare == ["embnorm_lib/__main__.py", "embnorm_lib/tools/bench.py"]


def test_prose_setup_refuses_a_missing_corpus_and_an_argument_estimate_does_not_read(capsys):
    from embnorm_lib.studies import prose_setup

    assert entry(prose_setup.main, ["steptimes", "--data-path", "/nope/x.txt"]) == 2
    assert capsys.readouterr().err == "error: data file not found: /nope/x.txt; allowed: the file prosecorpus wrote\n"
    assert entry(prose_setup.main, ["estimate", "--data-path", "x.txt"]) == 2
    assert "estimate reads no corpus (--data-path 'x.txt'); allowed: estimate alone" in capsys.readouterr().err


def test_a_failed_timing_run_leaves_no_partner_process(tmp_path, monkeypatch):
    """steptimes times two runs side by side: when one fails, the other is stopped, not left running."""
    import subprocess
    import sys

    from embnorm_lib.studies import prose_setup

    started = []

    def fake(preset, out, data_path):
        if not started:
            return [sys.executable, "-c", "import sys; sys.exit('boom')"]
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(prose_setup, "_timing_command", fake)
    monkeypatch.setattr(prose_setup.subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match="timing run of .* failed: boom"):
        prose_setup.measure_step_times(str(tmp_path / "corpus.txt"))
    assert len(started) == 2 and all(proc.poll() is not None for proc in started)


@pytest.mark.parametrize("text", ["1e400", "-1e999", "[1e400]"])
def test_a_number_beyond_a_float_is_named_as_typed_not_as_inf(text):
    from embnorm_lib.core.cli import parse_overrides

    with pytest.raises(ConfigError, match=f"invalid value '{text.strip('[]')}': beyond a 64-bit float's range"):
        parse_overrides([f"lr={text}"])


def test_index_only_and_compact_logs_refuse_a_folder_without_runs(tmp_path, capsys):
    """runs/tokenizers holds tokenizer files: `sweep --index-only` said "0 runs indexed" and wrote nothing."""
    from embnorm_lib.tools import compact_logs

    (tmp_path / "tokenizers").mkdir()
    (tmp_path / "tokenizers" / "bpe.json").write_text("{}")
    assert entry(sweep.main, ["tokenizers", "--index-only", "--out-dir", str(tmp_path)]) == 2
    assert "no finished run in" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "tokenizers").iterdir()) == ["bpe.json"]
    assert entry(compact_logs.main, ["--check", "--study", "tokenizers", "--out-dir", str(tmp_path)]) == 2
    assert "no run directory (<arm>/seed<k>)" in capsys.readouterr().err
    for budget in ("inf", "0", "abc", "nan"):
        assert entry(compact_logs.main, ["--check", "--budget-mb", budget, "--out-dir", str(tmp_path)]) == 2
        assert f"invalid --budget-mb '{budget}'; allowed: a finite number of MB above 0" in capsys.readouterr().err
