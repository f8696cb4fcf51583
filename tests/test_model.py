import pytest
import torch

from embnorm_lib.core.config import preset_config
from embnorm_lib.core.nets.model import GPT
from embnorm_lib.core.nets.variants import VARIANTS


def expected_params(cfg, variant):
    d, L = cfg.n_embd, cfg.n_layer
    per_block = 2 * (2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    emb_norm = {"none": 0, "scaled": 0, "ln": 2 * d, "rms": d}[variant]
    return cfg.vocab_size * d + cfg.block_size * d + L * per_block + 2 * d + emb_norm


@pytest.mark.parametrize("variant", ["none", "ln", "rms"])
def test_seeds_final_parameter_count(variant):
    cfg = preset_config("seeds-final", variant=variant)
    n = GPT(cfg).num_params()
    assert n == expected_params(cfg, variant)


def test_output_head_is_tied_to_token_embedding():
    model = GPT(preset_config("tiny"))
    assert model.lm_head.weight is model.wte.weight


def test_every_variant_shares_every_common_parameter_at_init():
    models = {v: GPT(preset_config("seeds-final", variant=v, seed=11)) for v in VARIANTS}
    base = models["none"].state_dict()
    for name, model in models.items():
        state = model.state_dict()
        shared = [k for k in base if k in state]
        assert len(shared) == len(base)
        for k in shared:
            assert torch.equal(base[k], state[k]), (name, k)
    other_seed = GPT(preset_config("seeds-final", variant="none", seed=12)).state_dict()
    assert not torch.equal(base["wte.weight"], other_seed["wte.weight"])


def test_embedding_norms_normalise_what_enters_block_1():
    idx = torch.randint(0, 65, (4, 128), generator=torch.Generator().manual_seed(0))
    none = GPT(preset_config("seeds-final", variant="none")).embed(idx)
    # LayerNorm (eps 1e-5): per-position mean 0 and variance v / (v + eps) of the raw sum's variance v
    ln = GPT(preset_config("seeds-final", variant="ln")).embed(idx)
    raw_var = none.var(-1, unbiased=False)
    assert ln.mean(-1).abs().max() < 1e-5
    assert torch.allclose(ln.var(-1, unbiased=False), raw_var / (raw_var + 1e-5), rtol=1e-4)
    # RMSNorm (eps 1e-6): per-position RMS sqrt(ms / (ms + eps))
    rms = GPT(preset_config("seeds-final", variant="rms")).embed(idx)
    raw_ms = none.pow(2).mean(-1)
    assert torch.allclose(rms.pow(2).mean(-1).sqrt(), (raw_ms / (raw_ms + 1e-6)).sqrt(), rtol=1e-4)
    assert torch.allclose(rms.pow(2).mean(-1).sqrt(), torch.ones(4, 128), atol=2e-3)
    # at unit-scale input the eps no longer matters: LayerNorm gives variance 1
    big = GPT(preset_config("seeds-final", variant="ln", emb_init_std=1.0)).embed(idx)
    assert torch.allclose(big.var(-1, unbiased=False), torch.ones(4, 128), atol=1e-4)


def test_scaled_variant_multiplies_token_embedding_by_sqrt_d():
    cfg = preset_config("tiny", variant="scaled")
    model = GPT(cfg)
    idx = torch.zeros(1, 3, dtype=torch.long)
    expected = model.wte.weight[0] * cfg.n_embd ** 0.5 + model.wpe.weight[:3]
    assert torch.allclose(model.embed(idx)[0], expected)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_registry_entry_trains_one_step(variant):
    model = GPT(preset_config("tiny", variant=variant))
    idx = torch.randint(0, 65, (2, 16))
    _, loss, block1 = model(idx, idx)
    loss.backward()
    assert torch.isfinite(loss) and block1 > 0
    assert all(p.grad is not None for p in model.parameters())


def test_sequence_longer_than_block_is_refused():
    model = GPT(preset_config("tiny"))
    with pytest.raises(ValueError, match="exceeds block_size"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_an_untied_head_is_drawn_last_and_leaves_every_other_parameter_as_tied():
    tied = GPT(preset_config("seeds-final", variant="ln", seed=3)).state_dict()
    untied_model = GPT(preset_config("seeds-final", variant="ln", seed=3, tie_embeddings=False))
    untied = untied_model.state_dict()
    assert untied_model.lm_head.weight is not untied_model.wte.weight
    assert all(torch.equal(tied[k], untied[k]) for k in tied if k != "lm_head.weight")
    assert not torch.equal(untied["lm_head.weight"], untied["wte.weight"])
    assert abs(untied["lm_head.weight"].std().item() - 0.02) < 1e-3
    # with std-1 embeddings the untied head keeps the GPT-2 scale: loss at init near uniform, not ~87 nats
    idx = torch.randint(0, 65, (4, 128), generator=torch.Generator().manual_seed(0))
    for tie, bound in ((False, 4.5), (True, None)):
        _, loss, _ = GPT(preset_config("seeds-final", emb_init_std=1.0, tie_embeddings=tie))(idx, idx.roll(1, 1))
        assert (loss.item() < bound) if bound else (loss.item() > 10)


@pytest.mark.parametrize("emb_init_std", [0.02, 1.0])
def test_scale_versus_normalization_arms_at_init(emb_init_std):
    """ln_matched normalizes without rescaling (block 1 sees none's input norm); scaled_unit rescales without
    normalizing (the token embedding enters at unit RMS)."""
    idx = torch.randint(0, 65, (4, 128), generator=torch.Generator().manual_seed(0))
    norms = {v: GPT(preset_config("seeds-final", variant=v, emb_init_std=emb_init_std))(idx)[2].item()
             for v in ("none", "ln", "ln_matched")}
    assert norms["ln_matched"] == pytest.approx(norms["none"], rel=0.02)
    assert norms["ln"] == pytest.approx(128 ** 0.5, rel=0.01)
    model = GPT(preset_config("seeds-final", variant="scaled_unit", emb_init_std=emb_init_std))
    token_part = model.embed(idx) - model.wpe.weight[:128]
    assert token_part.pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=0.05)
