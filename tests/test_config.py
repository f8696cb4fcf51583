import json

import pytest

from embnorm_lib.core.config import PRESETS, RunConfig, preset_config
from embnorm_lib.core.errors import ConfigError


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_validate_and_round_trip_through_json(name, tmp_path):
    cfg = preset_config(name, variant="rms", seed=4)
    path = tmp_path / "config.json"
    path.write_text(cfg.to_json())
    again = RunConfig.load(path)
    assert again == cfg
    assert json.loads(path.read_text())["preset"] == name


def test_seed_study_presets_match_the_protocol():
    prelim, final = preset_config("seeds-prelim"), preset_config("seeds-final")
    for cfg in (prelim, final):
        assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.block_size, cfg.batch_size, cfg.lr) == (8, 128, 8, 128, 16, 3e-4)
    assert (prelim.max_iters, final.max_iters) == (150, 300)
    cpu = preset_config("nanogpt-cpu")
    assert (cpu.n_layer, cpu.n_embd, cpu.n_head, cpu.block_size, cpu.batch_size, cpu.lr, cpu.max_iters,
            cpu.dropout) == (4, 128, 4, 64, 12, 1e-3, 2000, 0.0)
    assert final.token_budget == 300 * 16 * 128


@pytest.mark.parametrize("alias,canonical", [("layernorm", "ln"), ("rmsnorm", "rms"), ("none", "none")])
def test_variant_aliases(alias, canonical):
    assert RunConfig(variant=alias).variant == canonical


@pytest.mark.parametrize("name", [None, "None", "LN", " ln ", "ln\n", "RMSNorm", "", 0])
def test_a_variant_name_is_taken_exactly_or_refused(name):
    """Coerced, papermill's `-p variant None` (Python's None) trained `none`, and `LN` or ` ln ` trained `ln`: an
    arm the command never named (issue 117, item 8)."""
    with pytest.raises(ConfigError) as refused:
        RunConfig(variant=name)
    message = str(refused.value)
    assert message == f"unknown variant {name!r}; allowed: layernorm, ln, ln_matched, none, rms, rmsnorm, scaled, " \
                      "scaled_unit" and "\n" not in message


@pytest.mark.parametrize("changes,names", [
    (dict(variant="batchnorm"), ["batchnorm", "ln", "rms"]),
    (dict(seed=-1), ["seed=-1", "[0, 4294967295]"]),
    (dict(seed=3.5), ["seed=3.5", "an integer"]),
    (dict(seed=True), ["seed=True", "an integer"]),
    (dict(seed=2**32), ["seed=4294967296", "[0, 4294967295]"]),  # numpy's seed would overflow after writing
    (dict(max_iters=2.5), ["max_iters=2.5", "an integer > 0"]),
    (dict(lr=float("inf")), ["lr=inf", "a number > 0"]),
    (dict(lr=float("nan")), ["lr=nan", "a number > 0"]),
    (dict(grad_clip=float("inf")), ["grad_clip=inf", ">= 0"]),
    (dict(max_iters=0), ["max_iters=0", "> 0"]),
    (dict(max_iters=-5), ["max_iters=-5"]),
    (dict(n_embd=100, n_head=8), ["n_embd=100", "n_head=8"]),
    (dict(lr=0.0), ["lr=0.0"]),
    (dict(precision="fp8"), ["fp8", "bf16"]),
    (dict(bogus=1), ["bogus"]),
])
def test_bad_config_gets_one_line_error_naming_value_and_allowed(changes, names):
    with pytest.raises(ValueError) as err:
        RunConfig.from_dict({**RunConfig().to_dict(), **changes})
    message = str(err.value)
    assert "\n" not in message
    for name in names:
        assert name in message


@pytest.mark.parametrize("params,names", [
    (dict(seed=3.5), ["seed=3.5"]),
    (dict(seed=True), ["seed=True"]),
    (dict(max_iters=2.5), ["max_iters=2.5"]),
    (dict(overrides={"lr": float("inf")}), ["lr=inf"]),
    (dict(overrides='{"lr": 0.001}'), ["overrides=", "papermill -y"]),
    (dict(overrides={"seed": 2}), ["seed", "parameters of their own"]),
    (dict(overrides={"variant": "ln"}), ["variant", "parameters of their own"]),
])
def test_notebook_parameters_are_validated_not_coerced(params, names):
    from embnorm_lib.core.errors import ConfigError
    from embnorm_lib.core.notebook import config_from_parameters

    with pytest.raises(ConfigError) as err:
        config_from_parameters(**{"preset": "tiny", "variant": "ln", "seed": 0, **params})
    assert "\n" not in str(err.value) and all(n in str(err.value) for n in names)
    assert config_from_parameters("tiny", "ln", 3, max_iters=0).max_iters == 20  # 0 keeps the preset's


@pytest.mark.parametrize("switches", [dict(progress=5), dict(figures="no"), dict(progress=True, figures=None)])
def test_the_notebooks_on_off_parameters_are_true_or_false(switches):
    from embnorm_lib.core.errors import ConfigError
    from embnorm_lib.core.notebook import check_switches

    bad = next(k for k, v in switches.items() if not isinstance(v, bool))
    with pytest.raises(ConfigError, match=f"invalid {bad}={switches[bad]!r}; allowed: True or False"):
        check_switches(**switches)
    check_switches(progress=False, figures=True)


@pytest.mark.parametrize("study,tag", [("../../x", ""), ("ok", "/../../y"), (".hidden", ""), ("a/b", ""),
                                       ("", ""), ("ok", "_.."), ("new\nline", ""), ("a b", ""), ("ok", "_lr=1 2")])
def test_names_that_would_leave_the_runs_directory_are_refused(tmp_path, study, tag):
    from embnorm_lib.core.errors import ConfigError
    from embnorm_lib.core.records.rundir import run_dir_for

    with pytest.raises(ConfigError, match="allowed: a name without"):
        run_dir_for(study, "ln", 0, tmp_path, tag=tag)
    assert run_dir_for("ok", "ln", 0, tmp_path, tag="_lr=0.001") == tmp_path / "ok" / "ln_lr=0.001" / "seed0"


def test_unknown_preset_error():
    with pytest.raises(ValueError, match="unknown preset 'huge'.*seeds-final"):
        preset_config("huge")


def test_training_identity_ignores_execution_knobs_only():
    a = preset_config("tiny")
    assert a.training_identity() == a.replace(device="cpu", torch_threads=1, compile=True).training_identity()
    assert a.training_identity() != a.replace(lr=2e-3).training_identity()
