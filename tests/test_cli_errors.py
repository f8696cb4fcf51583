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
