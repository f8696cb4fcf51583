"""The design card's quick check (02_train's `smoke` parameter): seconds, and marked as not a result."""
import pytest

from embnorm_lib.core.errors import ConfigError
from embnorm_lib.core.notebook import SMOKE, config_from_parameters
from embnorm_lib.core.training.train import train


def test_smoke_shortens_the_run_and_its_summary_says_it_is_not_comparable(tmp_path, data_path):
    cfg = config_from_parameters("seeds-final", "ln", 3, smoke=True, overrides={"torch_threads": 1})
    assert (cfg.max_iters, cfg.eval_windows, cfg.lm_eval) == (SMOKE["max_iters"], SMOKE["eval_windows"], False)
    assert config_from_parameters("seeds-final", "ln", 3, smoke=True).torch_threads == 1  # no OpenMP waiting
    assert config_from_parameters("seeds-final", "ln", 3).torch_threads == 0  # a study run keeps torch's default
    assert config_from_parameters("seeds-final", "ln", 3, max_iters=2, smoke=True).max_iters == 2  # yours wins
    assert config_from_parameters("seeds-final", "ln", 3).eval_windows == 0  # a study run scores the whole split
    short = config_from_parameters("seeds-final", "ln", 3, max_iters=2, smoke=True, overrides={"torch_threads": 1})
    summary = train(short, tmp_path / "run", data_path, progress=False)
    assert summary["comparable"] is False and "not comparable" in summary["evaluated_on"]
    with pytest.raises(ConfigError, match="invalid smoke='yes'"):
        config_from_parameters("seeds-final", "ln", 3, smoke="yes")
