import pytest
import torch
from conftest import tiny

from embnorm_lib.core.config import preset_config
from embnorm_lib.core.corpora.data import validation_windows
from embnorm_lib.core.device import Precision
from embnorm_lib.core.nets.model import GPT
from embnorm_lib.core.records.io import read_jsonl
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.scoring.evaluate import FORWARD_WINDOWS, SUM_WINDOWS, evaluate
from embnorm_lib.core.training.train import train

FP32 = Precision("fp32", torch.device("cpu"))


def _perturbed_model(cfg):
    model = GPT(cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():  # away from the init, where every logit is almost the same
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


@pytest.mark.parametrize("threads", [1, 2])
def test_a_windows_logits_do_not_depend_on_how_many_windows_share_its_forward(corpus, threads):
    """What lets the evaluation forward 32 windows at a time and still reproduce the committed totals."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cfg = preset_config("seeds-final", variant="ln")
        x, _ = validation_windows(corpus.val, cfg.block_size, SUM_WINDOWS)  # as the committed runs forwarded them
        model = _perturbed_model(cfg).eval()
        with torch.inference_mode():
            whole = model(x)[0]
            for size in (FORWARD_WINDOWS, 16):
                assert torch.equal(torch.cat([model(c)[0] for c in x.split(size)]), whole), size
    finally:
        torch.set_num_threads(before)


def test_evaluation_totals_are_the_same_at_any_forward_size(corpus):
    cfg = tiny(variant="rms")
    x, y = validation_windows(corpus.val, cfg.block_size, 300)  # groups of 128, 128 and 44 windows
    model = _perturbed_model(cfg)
    reference, logits = evaluate(model, x, y, FP32, keep_logits=True, forward_windows=SUM_WINDOWS)
    for size in (64, 17):
        result, kept = evaluate(model, x, y, FP32, keep_logits=True, forward_windows=size)
        assert result == reference and torch.equal(kept, logits)
    assert reference["val_tokens"] == 300 * cfg.block_size


def test_evaluations_before_the_last_use_an_even_subset_and_the_final_one_every_window(tmp_path, data_path):
    full = train(tiny(max_iters=20), tmp_path / "full", data_path, progress=False)
    cheap = train(tiny(max_iters=20, interim_eval_windows=8), tmp_path / "cheap", data_path, progress=False)
    rows = read_jsonl(RunDir(tmp_path / "cheap").evals)
    full_rows = read_jsonl(RunDir(tmp_path / "full").evals)
    assert [r["step"] for r in rows] == [0, 10, 20]
    assert [r["val_tokens"] for r in rows] == [8 * 32, 8 * 32, 64 * 32]
    for before, cheaper in zip(full_rows[:2], rows[:2]):
        assert cheaper["val_loss"] != before["val_loss"]  # another estimate before the end ...
    assert abs(rows[0]["val_loss"] - full_rows[0]["val_loss"]) < 0.05  # (at init every window looks alike)
    for key in ("val_loss", "val_acc", "ece_equal_width", "ece_equal_mass", "brier"):
        assert cheap[key] == full[key], key  # ... and the same training and final metrics
    assert cheap["init_val_loss"] == rows[0]["val_loss"]
    assert cheap["best_val_loss"] == cheap["val_loss"]  # the only pass over the final pass's windows


def test_the_final_pass_records_loss_by_position_and_it_averages_to_the_val_loss(tmp_path, data_path):
    from embnorm_lib.core.config import preset_config
    from embnorm_lib.core.records.io import read_json
    from embnorm_lib.core.records.rundir import run_dir_for
    from embnorm_lib.core.training.train import train
    from embnorm_lib.runner.results import load_positions

    cfg = preset_config("tiny", variant="ln", max_iters=4, eval_interval=0, eval_windows=16, torch_threads=1)
    run = run_dir_for("pos", "ln", 0, tmp_path)
    summary = train(cfg, run, data_path, progress=False)
    positions = read_json(run / "positions.json")
    assert len(positions["val_loss"]) == cfg.block_size and positions["windows"] == 16
    assert sum(positions["val_loss"]) / cfg.block_size == pytest.approx(summary["val_loss"], rel=1e-6)
    assert sum(positions["val_acc"]) / cfg.block_size == pytest.approx(summary["val_acc"], rel=1e-9)
    frame = load_positions("pos", tmp_path)
    assert list(frame["position"]) == list(range(1, cfg.block_size + 1)) and set(frame["arm"]) == {"ln"}


def test_position_deltas_pair_each_arm_with_none_at_the_same_seed_and_position():
    import numpy as np
    import pandas as pd

    from embnorm_lib.analyses.length import position_deltas

    rows = [{"arm": arm, "seed": s, "position": p, "val_loss": 3.0 - 0.1 * np.log(p) + s * 0.01
             + (0.05 * (p == 1) if arm == "ln" else 0.0)} for arm in ("none", "ln") for s in range(4) for p in (1, 2, 3)]
    table = position_deltas(pd.DataFrame(rows)).set_index(["variant", "position"])
    assert table.loc[("ln", 1), "delta_vs_none"] == pytest.approx(0.05)
    assert table.loc[("ln", 3), "delta_vs_none"] == pytest.approx(0.0, abs=1e-12)
    assert table.loc[("ln", 1), "ci_low"] == pytest.approx(0.05) and table.loc[("none", 2), "seeds"] == 4


def test_an_arm_is_its_longest_variant_prefix_in_order_and_in_pairing():
    """`ln_matched_lr=1` is ln_matched's arm, not ln's: a first-underscore split would sort it among ln's arms and pool
    its positions with ln's."""
    import pandas as pd

    from embnorm_lib.analyses.length import position_deltas
    from embnorm_lib.core.nets.variants import arm_variant
    from embnorm_lib.runner.results import arm_order

    assert arm_variant("ln_matched_lr=1") == "ln_matched" and arm_variant("ln_lr=1") == "ln"
    assert arm_variant("scaled_unit") == "scaled_unit" and arm_variant("lnx") == ""
    arms = ["ln_matched_lr=1", "rms", "ln_lr=2", "none_lr=3", "scaled_unit_lr=1", "scaled"]
    assert sorted(arms, key=arm_order) == ["none_lr=3", "ln_lr=2", "rms", "scaled", "ln_matched_lr=1", "scaled_unit_lr=1"]
    rows = [{"arm": arm, "seed": s, "position": 1, "val_loss": 3.0 + shift} for arm, shift in
            (("none_lr=1", 0.0), ("ln_lr=1", 0.1), ("ln_matched_lr=1", 0.3)) for s in range(3)]
    table = position_deltas(pd.DataFrame(rows)).set_index(["variant", "position"])
    assert table.loc[("ln", 1), "delta_vs_none"] == pytest.approx(0.1)
    assert table.loc[("ln_matched", 1), "delta_vs_none"] == pytest.approx(0.3)
