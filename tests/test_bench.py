from embnorm_lib.tools import bench


def test_the_precision_benchmark_times_both_loops_and_reports_their_ratio(data_path, capsys):
    result = bench.precision_ratio("tiny", 3, data_path, threads=1, repeats=1)
    assert set(result["ms_per_iter"]) == {"fp32", "bf16"} and all(v > 0 for v in result["ms_per_iter"].values())
    assert result["bf16_over_fp32"] == result["ms_per_iter"]["bf16"] / result["ms_per_iter"]["fp32"]
    assert "bf16 / fp32 =" in capsys.readouterr().out
    assert result["threads"] == 1  # the loop's thread count, not the calling process's


def test_the_fleet_benchmark_times_one_fleet_of_the_three_arms(data_path, tmp_path, monkeypatch):
    import torch

    from embnorm_lib.core.training import fleet

    trained = []
    real = fleet.train_fleet
    monkeypatch.setattr(fleet, "train_fleet", lambda cfgs, dirs, data: trained.append(cfgs) or real(cfgs, dirs, data))
    torch.set_num_threads(1)
    rate = bench.fleet_it_per_s("tiny", 6, data_path)
    # the rate is a difference of two timings: its sign is not tested (two lanes beside this test made it negative)
    assert rate == rate and [c.max_iters for c in (cfgs[0] for cfgs in trained)] == [3, 3, 6]
    assert all([c.variant for c in cfgs] == list(bench.FLEET_ARMS) for cfgs in trained)
