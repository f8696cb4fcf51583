"""Packed runs: K members computed as one must each follow its single run."""
import pytest
import torch
from conftest import strip_timing, tiny

from embnorm_lib.core.checkpoint import ResumeError
from embnorm_lib.core.config import RunConfig
from embnorm_lib.core.errors import ConfigError
from embnorm_lib.core.model import GPT
from embnorm_lib.core.packed import check_packable, pack_configs, packed_forward, train_packed
from embnorm_lib.core.rundir import RunDir
from embnorm_lib.core.steplog import read_step_log
from embnorm_lib.core.train import train
from embnorm_lib.core.variants import VARIANTS
from embnorm_lib.runner.reuse import _identity_key, finished_runs_by_identity


@pytest.mark.parametrize("variant,tie", [(v, True) for v in VARIANTS] + [("ln", False)])
def test_packed_forward_equals_each_members_own_forward(variant, tie):
    models = [GPT(tiny(variant=variant, seed=s, tie_embeddings=tie)) for s in (0, 1, 2)]
    idx = torch.randint(0, 65, (3, 4, 32), generator=torch.Generator().manual_seed(0))
    logits, loss, b1 = packed_forward(models, idx, idx)
    for j, m in enumerate(models):
        own_logits, own_loss, own_b1 = m(idx[j], idx[j])
        torch.testing.assert_close(logits[j], own_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(loss[j], own_loss, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(b1[j], own_b1, rtol=1e-6, atol=1e-6)


def _pack(tmp_path, name, seeds=(0, 1, 2), **overrides):
    """Tiny members scored on 32 validation windows (a whole-split pass every 10 steps would dominate the test)."""
    cfgs = pack_configs(tiny(**{"variant": "ln", "max_iters": 50, "eval_windows": 32, "torch_threads": 1,
                                **overrides}), seeds)
    return cfgs, [tmp_path / name / "ln" / f"seed{c.seed}" for c in cfgs]


def test_each_packed_member_follows_its_single_run_for_50_steps(tmp_path, data_path):
    """A packed job's members are whole runs (own init, batches, optimizer, clipping, logs, summary) that follow
    the single runs of their seeds to float rounding."""
    cfgs, dirs = _pack(tmp_path, "packed")
    summaries = train_packed(cfgs, dirs, data_path, progress=False)
    worst = 0.0
    for cfg, run_dir, summary in zip(cfgs, dirs, summaries):
        single_dir = tmp_path / "single" / f"seed{cfg.seed}"
        single = train(cfg.replace(execution="single"), single_dir, data_path, progress=False)
        assert (summary["execution"], summary["pack_seeds"], summary["steps"]) == ("packed", [0, 1, 2], 50)
        assert RunConfig.load(RunDir(run_dir).config).execution == "packed"
        assert RunDir(run_dir).final_model.is_file() and not RunDir(run_dir).checkpoint.is_file()
        for name in ("metrics", "evals", "diagnostics"):
            packed_rows = strip_timing(read_step_log(run_dir, name))
            single_rows = strip_timing(read_step_log(single_dir, name))
            assert [r["step"] for r in packed_rows] == [r["step"] for r in single_rows]
            for a, b in zip(packed_rows, single_rows):
                for key, value in b.items():
                    if isinstance(value, float) and value:
                        worst = max(worst, abs(a[key] - value) / abs(value))
        assert summary["val_loss"] == pytest.approx(single["val_loss"], rel=1e-5)
    print(f"largest relative difference of any logged number over 50 steps: {worst:.1e}")
    assert worst < 1e-3


def test_a_killed_packed_job_resumes_bitwise(tmp_path, data_path):
    cfgs, whole = _pack(tmp_path, "whole", seeds=(3, 4))
    train_packed(cfgs, whole, data_path, progress=False)
    _, parts = _pack(tmp_path, "parts", seeds=(3, 4))
    assert train_packed(cfgs, parts, data_path, progress=False, until_step=20) == [
        {"finished": False, "step": 20}] * 2
    train_packed(cfgs, parts, data_path, progress=False)
    for a, b in zip(whole, parts):
        for name in ("metrics", "evals", "diagnostics"):
            assert strip_timing(read_step_log(a, name)) == strip_timing(read_step_log(b, name))
        wa, wb = (torch.load(RunDir(d).final_model, weights_only=True) for d in (a, b))
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_member_ahead_of_the_pack_waits_for_it(tmp_path, data_path):
    """An interruption between two members' checkpoints leaves them at different steps: the job goes on."""
    cfgs, dirs = _pack(tmp_path, "p", seeds=(0, 1), max_iters=30)
    train_packed(cfgs, dirs, data_path, progress=False, until_step=10)
    train_packed(cfgs[:1], dirs[:1], data_path, progress=False, until_step=20)  # seed 0 alone gets ahead
    summaries = train_packed(cfgs, dirs, data_path, progress=False)
    for d, s in zip(dirs, summaries):
        assert s["steps"] == 30
        assert [r["step"] for r in read_step_log(d, "metrics")] == list(range(1, 31))


def test_the_execution_mode_is_recorded_resumed_in_kind_and_part_of_the_reuse_key(tmp_path, data_path):
    """Like the thread count, the mode is how a run was computed: same run, but rounding differs between modes."""
    cfgs, dirs = _pack(tmp_path, "p", seeds=(0,), max_iters=10)
    single = cfgs[0].replace(execution="single")
    train_packed(cfgs, dirs, data_path, progress=False, until_step=5)
    with pytest.raises(ResumeError, match="written by a packed job, this is a single one"):
        train(single, dirs[0], data_path, progress=False)
    assert _identity_key(cfgs[0]) != _identity_key(single)
    train_packed(cfgs, dirs, data_path, progress=False)
    assert finished_runs_by_identity(tmp_path).keys() == {_identity_key(cfgs[0])}


def test_a_bad_pack_is_refused_before_anything_is_written(tmp_path, data_path):
    base = tiny(variant="ln")
    bad = [
        ([base.replace(execution="packed"), base.replace(seed=1, lr=1e-2, execution="packed")], "differ in lr"),
        (pack_configs(base, [0, 0]), "distinct seeds"),
        ([base, base.replace(seed=1)], "execution='single'"),
        (pack_configs(base.replace(grad_accum=2), [0, 1]), "grad_accum"),
    ]
    for cfgs, message in bad:
        with pytest.raises(ConfigError, match=message):
            train_packed(cfgs, [tmp_path / "x" / str(i) for i in range(len(cfgs))], data_path, progress=False)
    assert not (tmp_path / "x").exists()


def test_a_pack_of_different_architectures_or_with_dropout_is_refused():
    with pytest.raises(ConfigError, match="differ in variant"):
        check_packable([GPT(tiny(variant="ln")), GPT(tiny(variant="rms", seed=1))])
    with pytest.raises(ConfigError, match="dropout"):
        check_packable([GPT(tiny(dropout=0.1)), GPT(tiny(dropout=0.1, seed=1))])


def test_a_seed_outside_the_pack_is_refused_rather_than_ignored():
    from embnorm_lib.core.notebook import job_configs

    cfg = tiny()
    assert [c.seed for c in job_configs(cfg.replace(seed=2), "1-2")] == [1, 2]
    assert [c.seed for c in job_configs(cfg, "1-2")] == [1, 2]  # seed left at its default
    with pytest.raises(ConfigError, match="invalid seed=7 with pack_seeds='1-2'.*allowed: seed left at 0 or one of 1, 2"):
        job_configs(cfg.replace(seed=7), "1-2")
