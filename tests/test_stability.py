import numpy as np
import pandas as pd
import pytest

from embnorm_lib import stability


def lr_runs():
    rows = []
    curves = {"none": [2.0, 1.5, 3.0], "ln": [1.8, 1.6, 1.7]}
    for variant, losses in curves.items():
        for seed in range(2):
            for lr, loss in zip([1e-3, 3e-3, 1e-2], losses):
                rows.append({"variant": variant, "seed": seed, "cfg.lr": lr, "val_loss": loss + 0.01 * seed,
                             "init_val_loss": 4.0, "diverged": False, "spike_count": 0, "peak_grad_norm": 1.0,
                             "diverged_step": np.nan})
    return pd.DataFrame(rows)


def test_lr_sensitivity_of_known_curves():
    table = stability.lr_sensitivity(lr_runs()).set_index("variant")
    assert table.loc["none", "lr_sensitivity"] == pytest.approx((2.0 + 1.5 + 3.0) / 3 - 1.5)
    assert table.loc["ln", "lr_sensitivity"] == pytest.approx((1.8 + 1.6 + 1.7) / 3 - 1.6)
    assert table.loc["none", "best_lr"] == 3e-3 and table.loc["ln", "best_lr"] == 3e-3


def test_diverged_and_worse_than_init_runs_count_at_the_init_loss():
    runs = lr_runs()
    runs.loc[(runs.variant == "none") & (runs["cfg.lr"] == 1e-2), ["diverged", "val_loss"]] = [True, np.nan]
    runs.loc[(runs.variant == "ln") & (runs["cfg.lr"] == 1e-2), "val_loss"] = 9.0  # worse than at init
    table = stability.lr_sensitivity(runs).set_index("variant")
    assert table.loc["none", "lr_sensitivity"] == pytest.approx((2.005 + 1.505 + 4.0) / 3 - 1.505)
    assert table.loc["ln", "lr_sensitivity"] == pytest.approx((1.805 + 1.605 + 4.0) / 3 - 1.605)
    assert table.loc["none", "diverged_runs"] == 2


def test_init_scale_sign_flip_is_detected():
    rows = []
    for std, shift in ((0.02, +0.2), (1.0, -0.1)):
        for seed in range(3):
            base = 2.5 + 0.01 * seed
            for variant, value in (("none", base), ("ln", base + shift + 0.001 * seed)):
                rows.append({"variant": variant, "seed": seed, "cfg.emb_init_std": std, "val_loss": value,
                             "diverged": False, "spike_count": 0})
    table = stability.axis_table(pd.DataFrame(rows), "cfg.emb_init_std")
    flip = stability.sign_flips(table)
    assert flip["flips"] and flip["by_init"] == {0.02: "hurts", 1.0: "helps"}


def test_divergence_table_counts_and_times():
    runs = pd.DataFrame([
        {"variant": "none", "seed": 0, "diverged": True, "diverged_step": 40, "spike_count": 3, "peak_grad_norm": 50.0, "val_loss": np.nan},
        {"variant": "none", "seed": 1, "diverged": True, "diverged_step": 60, "spike_count": 5, "peak_grad_norm": 70.0, "val_loss": np.nan},
        {"variant": "ln", "seed": 0, "diverged": False, "diverged_step": np.nan, "spike_count": 0, "peak_grad_norm": 2.0, "val_loss": 2.0},
        {"variant": "ln", "seed": 1, "diverged": False, "diverged_step": np.nan, "spike_count": 1, "peak_grad_norm": 3.0, "val_loss": 2.2},
    ])
    table = stability.divergence_table(runs).set_index("variant")
    assert table.loc["none", "diverged"] == 2 and table.loc["none", "median_step_to_divergence"] == 50
    assert table.loc["ln", "diverged"] == 0 and table.loc["ln", "spikes_per_run"] == 0.5
    assert table.loc["ln", "val_loss_mean_finished"] == pytest.approx(2.1)


def test_report_from_an_lr_study_on_disk(tmp_path):
    study = tmp_path / "stability-lr"
    study.mkdir()
    lr_runs().assign(arm=lambda d: d["variant"]).to_csv(study / "runs.csv", index=False)
    path = stability.write_report(tmp_path, tmp_path / "fig")
    text = path.read_text()
    assert "LR sensitivity" in text and "lowest for `ln`" in text
    assert "Not run yet" in text and "`stability-stress`" in text
    assert (tmp_path / "fig" / "lr_sensitivity.png").stat().st_size > 1000
