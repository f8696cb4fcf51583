from embnorm_lib.tools import bench


def test_the_precision_benchmark_times_both_loops_and_reports_their_ratio(data_path, capsys):
    result = bench.precision_ratio("tiny", 3, data_path, threads=1, repeats=1)
    assert set(result["ms_per_iter"]) == {"fp32", "bf16"} and all(v > 0 for v in result["ms_per_iter"].values())
    assert result["bf16_over_fp32"] == result["ms_per_iter"]["bf16"] / result["ms_per_iter"]["fp32"]
    assert "bf16 / fp32 =" in capsys.readouterr().out
    assert result["threads"] == 1  # the loop's thread count, not the calling process's
