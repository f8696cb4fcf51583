"""Shared zero-shot scoring across runs (issue 75): one batched forward serves every member; each member's harness
run gives the answers the harness gives on that run alone."""
import pytest
import torch
from conftest import tiny

from embnorm_lib.core.nets.model import GPT
from embnorm_lib.core.scoring.fleet_lmeval import MemberLM, SharedScores, score_runs, stack_members
from embnorm_lib.core.scoring.lm_eval_adapter import CharLM, evaluate_lm


def sharpened(cfg) -> GPT:
    """A model with weights far from init, so its answers are not near ties that rounding could flip."""
    model = GPT(cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def members():
    cfgs = [tiny(variant=v, seed=s, block_size=64) for v, s in (("ln", 1), ("none", 2), ("rms", 3))]
    return cfgs, [sharpened(c) for c in cfgs]


def test_shared_scoring_gives_each_runs_own_harness_answers(members, data_path, corpus):
    cfgs, models = members
    w, consts, order = stack_members(cfgs, [m.state_dict() for m in models])
    assert [cfgs[i].variant for i in order] == ["none", "ln", "rms"]  # arms contiguous, in the fleet's order
    shared = SharedScores(w, consts, cfgs[0], batch_size=7)
    for k, i in enumerate(order):
        alone = evaluate_lm(CharLM(models[i], corpus.chars, batch_size=7), shots=(0,), data_path=data_path,
                            suite="v2", limit=12)
        together = evaluate_lm(MemberLM(shared, k, models[i], corpus.chars), shots=(0,), data_path=data_path,
                               suite="v2", limit=12)
        assert together["items"] == alone["items"], cfgs[i].variant
        assert together["tasks"] == alone["tasks"] and together["truncated_requests"] == alone["truncated_requests"]


def test_shared_log_likelihoods_follow_each_models_own_to_rounding(members, corpus):
    cfgs, models = members
    w, consts, order = stack_members(cfgs, [m.state_dict() for m in models])
    shared = SharedScores(w, consts, cfgs[0], batch_size=3)
    text = corpus.val_text[:400]
    stoi = {c: i for i, c in enumerate(corpus.chars)}
    pairs = [([stoi[c] for c in text[a:a + 20]], [stoi[c] for c in text[a + 20:a + 20 + n]])
             for a, n in ((0, 3), (37, 1), (90, 8), (200, 5), (5, 2))]
    for k, i in enumerate(order):
        lm = CharLM(models[i], corpus.chars, batch_size=3)
        own = lm._score(pairs)
        got = MemberLM(shared, k, models[i], corpus.chars)._score(pairs)
        assert [g for _, g in got] == [g for _, g in own]
        assert [lp for lp, _ in got] == pytest.approx([lp for lp, _ in own], rel=1e-5, abs=1e-5)
    assert len(shared.cache) == 1  # one pass for all three members


def test_shared_scoring_refuses_an_unfinished_run_in_one_line(tmp_path):
    from embnorm_lib.core.errors import ConfigError

    with pytest.raises(ConfigError, match="needs summary.json, model.pt"):
        score_runs([tmp_path])


def test_a_fleet_sweep_scores_its_runs_together_and_writes_what_a_single_run_writes(tmp_path, data_path, monkeypatch):
    from embnorm_lib.core.records.io import read_json
    from embnorm_lib.core.scoring import fleet_lmeval
    from embnorm_lib.runner import sweep
    from embnorm_lib.runner.sweep import main as sweep_main

    monkeypatch.setattr(sweep, "check_fleet_device", lambda fleet: None)  # the CLI takes --fleet on CUDA only

    calls = []
    real = fleet_lmeval.score_runs
    monkeypatch.setattr(fleet_lmeval, "score_runs", lambda dirs, *a, **k: calls.append(len(dirs)) or real(dirs, *a, **k))
    scored = fleet_lmeval.evaluate_lm
    monkeypatch.setattr(fleet_lmeval, "evaluate_lm", lambda lm, **k: scored(lm, **{**k, "limit": 4}))  # seconds
    rc = sweep_main(["fleet-lm", "--preset", "tiny", "--variants", "none,ln", "--seeds", "0", "--set", "max_iters=3",
                     "--set", "eval_at_init=false", "--set", "diag_interval=0", "--fleet", "--lm-eval",
                     "--out-dir", str(tmp_path), "--data-path", data_path, "--threads", "1"])
    assert rc == 0 and calls == [2]
    for variant in ("none", "ln"):
        result = read_json(next(tmp_path.glob(f"fleet-lm/{variant}*/seed0/lm_eval.json")))
        assert set(result["macro"]) and result["item_limit"]
