import math

import numpy as np
import pytest
import torch
from conftest import tiny

from embnorm_lib.core.nets.model import GPT
from embnorm_lib.core.scoring import calibration as cal
from embnorm_lib.core.scoring import diagnostics as diag


def test_identical_vectors_have_cosine_one_and_orthogonal_zero():
    same = torch.ones(5, 8)
    assert diag.mean_pairwise_cosine(same) == pytest.approx(1.0)
    assert diag.mean_pairwise_cosine(torch.eye(6)) == pytest.approx(0.0, abs=1e-7)
    opposite = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert diag.mean_pairwise_cosine(opposite) == pytest.approx(-1.0)


def test_norm_distribution_of_known_vectors():
    x = torch.zeros(1, 100, 4)
    x[0, :, 0] = torch.arange(1, 101, dtype=torch.float)  # norms 1..100
    stats = diag.norm_distribution(x, "r")
    assert stats["r.mean"] == pytest.approx(50.5)
    assert stats["r.p50"] == pytest.approx(50.5)
    assert stats["r.p5"] == pytest.approx(5.95)


def test_spikes_are_steps_above_factor_times_running_median():
    losses = [2.0] * 30
    losses[25] = 3.5  # 1.75x the median
    losses[28] = 2.9  # 1.45x: below the default 1.5
    assert diag.find_spikes(losses, factor=1.5, window=20) == [25]
    assert diag.find_spikes(losses, factor=1.4, window=20) == [25, 28]
    assert diag.find_spikes([2.0, 2.0, float("nan")]) == []
    assert diag.find_spikes([2.0, 2.0, float("inf")]) == [2]


def test_parameter_groups_cover_every_parameter_once():
    model = GPT(tiny(variant="ln"))
    groups = diag.parameter_groups(model)
    ids = [id(p) for params in groups.values() for p in params]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert list(groups)[:3] == ["tok_emb", "pos_emb", "emb_norm"] and "block2.mlp" in groups
    assert "emb_norm" not in diag.parameter_groups(GPT(tiny(variant="none")))


def test_group_grad_norms_combine_to_the_total():
    model = GPT(tiny())
    idx = torch.randint(0, 65, (2, 16))
    model(idx, idx)[1].backward()
    norms = diag.grad_norms(diag.parameter_groups(model))
    total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()
    assert math.sqrt(sum(v ** 2 for v in norms.values())) == pytest.approx(total, rel=1e-5)


def test_update_ratio_of_a_known_step():
    w = torch.nn.Parameter(torch.full((4,), 2.0))
    groups = {"w": [w]}
    before = diag.snapshot(groups)
    with torch.no_grad():
        w.add_(0.2)
    assert diag.update_ratios(before, groups)["update_ratio.w"] == pytest.approx(0.1)


def test_probe_reads_every_block_and_class(corpus):
    model = GPT(tiny(variant="rms"))
    from embnorm_lib.core.corpora.data import validation_windows

    x, _ = validation_windows(corpus.val, 32)
    out = diag.probe(model, x[:4], corpus.chars)
    for key in ("resid.block1_input.p95", "resid.block2_output.mean", "attn_logit_max.block2",
                "out_logit.mean_logz", "tok_emb_norm.upper", "block1_input_norm.lower", "cosine.token_embeddings"):
        assert math.isfinite(out[key]), key
    # RMSNorm output has unit RMS, so its L2 norm is sqrt(d) at every position
    assert out["resid.block1_input.mean"] == pytest.approx(32 ** 0.5, rel=1e-3)


def test_max_attention_logit_matches_a_direct_computation():
    model = GPT(tiny())
    attn = model.blocks[0].attn
    x = torch.randn(2, 10, 32)
    q, k, _ = attn.heads(x)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    expected = max(scores[b, h, i, j].item() for b in range(2) for h in range(2) for i in range(10)
                   for j in range(i + 1))
    assert attn.max_logit(x).item() == pytest.approx(expected, rel=1e-6)


# -- calibration --------------------------------------------------------------------------------

def test_one_hot_correct_predictions_have_zero_brier_and_ece():
    targets = torch.tensor([0, 2, 1, 2])
    probs = torch.nn.functional.one_hot(targets, 3).float()
    assert cal.brier_score(probs, targets) == pytest.approx(0.0)
    assert cal.library_ece(probs, targets) == pytest.approx(0.0)


def test_brier_matches_scikit_learn_bit_for_bit_and_needs_no_scikit_learn(monkeypatch):
    """scikit-learn < 1.7 (Kaggle/Colab images) has no `labels=` in brier_score_loss and crashed every run before
    summary.json; the score is computed without it, in scikit-learn's own operations."""
    import sys

    g = torch.Generator().manual_seed(0)
    probs = (torch.randn(2000, 65, generator=g) * 3).softmax(-1)
    targets = torch.randint(0, 60, (2000,), generator=g)  # some classes never occur: why labels= was needed
    pytest.importorskip("sklearn", minversion="1.7")  # the reference: the first version with labels=
    from sklearn.metrics import brier_score_loss

    reference = brier_score_loss(targets.numpy(), (probs.double() / probs.double().sum(-1, keepdim=True))
                                 .numpy(), labels=np.arange(65), scale_by_half=False)
    monkeypatch.setitem(sys.modules, "sklearn", None)  # an image without it, or with one that lacks labels=
    monkeypatch.setitem(sys.modules, "sklearn.metrics", None)
    assert cal.brier_score(probs, targets) == reference


def test_brier_of_a_uniform_prediction():
    k = 4
    probs = torch.full((10, k), 1 / k)
    targets = torch.zeros(10, dtype=torch.long)
    assert cal.brier_score(probs, targets) == pytest.approx((1 - 1 / k) ** 2 + (k - 1) / k ** 2)


def test_perfectly_calibrated_toy_predictor_has_ece_near_zero():
    g = torch.Generator().manual_seed(0)
    n = 200_000
    confidence = torch.rand(n, generator=g) * 0.5 + 0.5  # top-label probability in [0.5, 1)
    correct = torch.rand(n, generator=g) < confidence     # right exactly that often
    for edges in (cal.equal_width_edges(confidence), cal.equal_mass_edges(confidence)):
        table = cal.reliability_table(confidence, correct, edges)
        assert cal.expected_calibration_error(table) < 0.01
        assert sum(table["count"]) == n
    overconfident = torch.rand(n, generator=g) < confidence - 0.2
    table = cal.reliability_table(confidence, overconfident, cal.equal_width_edges(confidence))
    assert cal.expected_calibration_error(table) == pytest.approx(0.2, abs=0.01)


def test_our_binning_agrees_with_torchmetrics_on_equal_width_bins():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(5000, 7, generator=g) * 2
    targets = torch.randint(0, 7, (5000,), generator=g)
    probs = logits.softmax(-1)
    confidence, prediction = probs.max(-1)
    table = cal.reliability_table(confidence, prediction == targets, cal.equal_width_edges(confidence))
    assert cal.expected_calibration_error(table) == pytest.approx(cal.library_ece(probs, targets), abs=1e-5)


def test_equal_mass_bins_hold_equal_counts():
    confidence = torch.linspace(0.01, 0.99, 1500)
    table = cal.reliability_table(confidence, confidence > 0.5, cal.equal_mass_edges(confidence, 15))
    assert max(table["count"]) - min(table["count"]) <= 2


def test_temperature_fit_recovers_a_known_temperature():
    g = torch.Generator().manual_seed(2)
    true_logits = torch.randn(20000, 5, generator=g) * 2
    targets = torch.distributions.Categorical(logits=true_logits).sample()
    t_opt, nll = cal.optimal_temperature(true_logits * 2.0, targets)  # twice too sharp
    assert t_opt == pytest.approx(2.0, rel=0.05)
    assert nll <= cal.nll_at_temperature(true_logits * 2.0, targets, 1.0)


def test_calibration_report_fields():
    g = torch.Generator().manual_seed(3)
    report = cal.calibration_from_logits(torch.randn(2, 50, 65, generator=g), torch.randint(0, 65, (2, 50), generator=g))
    for key in ("ece_equal_width", "ece_equal_mass", "brier", "temperature_opt", "nll_t_opt", "nll_t1"):
        assert math.isfinite(report[key])
    assert len(report["reliability_equal_width"]["count"]) == 15
    assert len(report["temperature_curve"]["nll"]) == len(cal.TEMPERATURE_GRID)


def test_arms_of_one_variant_differ_in_line_style_not_colour():
    from embnorm_lib.publishing import plots

    arms = ["none_preset=a", "none_preset=b", "ln_preset=a", "ln_preset=b"]
    styles = {a: plots.arm_linestyle(a, arms) for a in arms}
    assert styles["none_preset=a"] == styles["ln_preset=a"] != styles["none_preset=b"] == styles["ln_preset=b"]
    assert plots.arm_color("none_preset=a") == plots.arm_color("none_preset=b") != plots.arm_color("ln_preset=a")
    assert plots.arm_linestyle("none", ["none", "ln"]) == "-"


def test_a_diagnostics_step_reads_the_device_once_per_probe_not_once_per_value(corpus, monkeypatch):
    """One batched transfer per call instead of ~180 `.item()` syncs; the floats are what `.item()` gives."""
    from embnorm_lib.core.corpora.data import validation_windows
    from embnorm_lib.core.training.optimizer import make_optimizer

    model = GPT(tiny(variant="ln"))
    optimizer = make_optimizer(model, model.cfg, torch.device("cpu"))
    x, y = validation_windows(corpus.val, 32, 8)
    model(x, y)[1].backward()
    groups = diag.parameter_groups(model)
    before = diag.snapshot(groups)
    optimizer.step()
    values = {"a": torch.tensor(0.1), "b": torch.tensor(3.0, dtype=torch.float64), "c": 2.5}
    expected = {"a": torch.tensor(0.1).item(), "b": 3.0, "c": 2.5}
    calls = []
    real_item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: calls.append(1) or real_item(self))
    assert diag.fetch(values) == expected
    rows = [diag.grad_norms(groups), diag.update_ratios(before, groups), diag.adam_second_moments(optimizer, groups),
            diag.probe(model, x, corpus.chars)]
    assert calls == []
    assert len(rows[3]) > 30 and all(isinstance(v, float) for row in rows for v in row.values())
