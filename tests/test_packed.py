"""Packed runs: K members computed as one must each follow its single run."""
import pytest
import torch
from conftest import tiny

from embnorm_lib.data import BatchSampler
from embnorm_lib.errors import ConfigError
from embnorm_lib.io import read_jsonl
from embnorm_lib.model import GPT
from embnorm_lib.packed import check_packable, packed_forward
from embnorm_lib.rundir import RunDir
from embnorm_lib.train import lr_at, make_optimizer, train

CPU = torch.device("cpu")


@pytest.mark.parametrize("variant", ["none", "ln", "rms", "scaled"])
def test_packed_forward_equals_each_members_own_forward(variant):
    models = [GPT(tiny(variant=variant, seed=s)) for s in (0, 1, 2)]
    idx = torch.randint(0, 65, (3, 4, 32), generator=torch.Generator().manual_seed(0))
    logits, loss, b1 = packed_forward(models, idx, idx)
    for j, m in enumerate(models):
        own_logits, own_loss, own_b1 = m(idx[j], idx[j])
        torch.testing.assert_close(logits[j], own_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(loss[j], own_loss, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(b1[j], own_b1, rtol=1e-6, atol=1e-6)


def test_each_packed_member_follows_its_single_run_for_50_steps(tmp_path, data_path, corpus):
    """Same init (each member is an ordinary GPT of its seed), own batches, optimizer and clipping per member."""
    cfgs = [tiny(variant="ln", seed=s, max_iters=50, eval_interval=0, diag_interval=0) for s in (0, 1, 2)]
    singles = [read_jsonl(RunDir(train(c, tmp_path / f"s{c.seed}", data_path, progress=False) and
                                 tmp_path / f"s{c.seed}").metrics) for c in cfgs]
    torch.manual_seed(0)
    models = [GPT(c) for c in cfgs]
    check_packable(models)
    optimizers = [make_optimizer(m, c, CPU) for m, c in zip(models, cfgs)]
    samplers = [BatchSampler(corpus.train, c.block_size, c.batch_size, c.seed) for c in cfgs]
    worst = 0.0
    for step in range(1, 51):
        batches = [s.next_batch() for s in samplers]
        x, y = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
        _, losses, _ = packed_forward(models, x, y)
        losses.sum().backward()  # members share no parameter: each gets its own loss's gradient
        for m, opt, c, single in zip(models, optimizers, cfgs, singles):
            for group in opt.param_groups:
                group["lr"] = lr_at(c, step)
            norm = torch.nn.utils.clip_grad_norm_(m.parameters(), c.grad_clip, foreach=True).item()
            opt.step()
            opt.zero_grad(set_to_none=True)
            row = single[step - 1]
            assert row["step"] == step
            worst = max(worst, abs(norm - row["grad_norm_total"]) / row["grad_norm_total"])
        for j, single in enumerate(singles):
            assert losses[j].item() == pytest.approx(single[step - 1]["train_loss"], rel=1e-4)
    print(f"largest relative grad-norm difference over 50 steps: {worst:.1e}")
    assert worst < 1e-3


def test_a_pack_of_different_architectures_or_with_dropout_is_refused():
    with pytest.raises(ConfigError, match="differ in variant"):
        check_packable([GPT(tiny(variant="ln")), GPT(tiny(variant="rms", seed=1))])
    with pytest.raises(ConfigError, match="dropout"):
        check_packable([GPT(tiny(dropout=0.1)), GPT(tiny(dropout=0.1, seed=1))])
