"""Inference throughput: paired rounds, ratios to none (a measurement, never a pass/fail on speed)."""
import pytest

from embnorm_lib.tools import throughput


def test_every_arm_gets_a_paired_ratio_per_round_and_none_is_the_reference():
    result = throughput.measure("tiny", rounds=3, windows=8, streams=2)
    for kind in ("scoring", "generation"):
        assert set(result["summary"][kind]) == {"none", "ln", "rms"}
        assert all(len(v) == 3 and min(v) > 0 for v in result["raw"][kind].values())
        none = result["summary"][kind]["none"]
        assert none["ratio_to_none_median"] == none["ratio_to_none_min"] == none["ratio_to_none_max"] == 1.0
    with pytest.raises(ValueError, match="includes none"):
        throughput.measure("tiny", arms=("ln", "rms"), rounds=1)
