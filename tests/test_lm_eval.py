import json
import math
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny
from scipy.stats import binomtest
from torch.nn import functional as F

from embnorm_lib.core.nets.model import GPT
from embnorm_lib.core.scoring.lm_eval_adapter import CharLM, evaluate_lm, fits, score_if_asked
from embnorm_lib.core.training.train import train
from embnorm_lib.lmtasks import build
from embnorm_lib.runner.results import lm_summary_fields


def request(*args):
    return SimpleNamespace(args=args)


def direct_logprob(model, chars, context, continuation):
    stoi = {c: i for i, c in enumerate(chars)}
    ids = [stoi[c] for c in context + continuation]
    logits, _, _ = model(torch.tensor([ids[:-1]]))
    lp = F.log_softmax(logits[0], -1)
    n = len(continuation)
    return sum(lp[len(ids) - 1 - n + i, ids[len(ids) - n + i]].item() for i in range(n))


@pytest.fixture(scope="module")
def lm(corpus):
    return CharLM(GPT(tiny(seed=5)), corpus.chars, batch_size=3)


def test_loglikelihood_equals_the_models_own_summed_logprobs(lm):
    pairs = [("ROMEO:\nBut soft", ", what light"), ("To be, or not ", "to be"), ("a", "b"), ("Thou ", "art")]
    got = lm.loglikelihood([request(c, x) for c, x in pairs])  # batch of 3: exercises padding and reordering
    for (ctx, cont), (lp, _) in zip(pairs, got):
        assert lp == pytest.approx(direct_logprob(lm.model, lm.chars, ctx, cont), abs=1e-4)


def test_context_is_cut_from_the_left_to_the_window(lm):
    block = lm.block_size
    long_ctx = "x" * 10 + "First Citizen:\nBefore we proceed any further, hear me speak."[: block - 3]
    cont = "abc"
    (lp, _), = lm.loglikelihood([request(long_ctx, cont)])
    kept = (long_ctx + cont)[-(block + 1):]
    assert lp == pytest.approx(direct_logprob(lm.model, lm.chars, kept[:-3], cont), abs=1e-4)
    assert lm.truncated >= 1


def test_rolling_loglikelihood_covers_every_character(lm):
    text = "Now is the winter of our discontent\nMade glorious summer by this sun of York;"
    (total,) = lm.loglikelihood_rolling([request(text)])
    B, expected = lm.block_size, 0.0
    for start in range(0, len(text), B):  # each window keeps as much preceding text as the model can see
        window = text[start:start + B]
        context = text[max(0, start - (B + 1 - len(window))):start] or "\n"
        expected += direct_logprob(lm.model, lm.chars, context, window)
    assert len(text) > 2 * B and total == pytest.approx(expected, abs=1e-3)


def test_greedy_generation_is_deterministic_and_stops(lm):
    out1 = lm.generate_until([request("KING:\n", {"until": ["\n"], "max_gen_toks": 12})])
    out2 = lm.generate_until([request("KING:\n", {"until": ["\n"], "max_gen_toks": 12})])
    assert out1 == out2 and len(out1[0]) <= 12 and "\n" not in out1[0]


def test_out_of_vocabulary_characters_are_named(lm):
    with pytest.raises(ValueError, match=r"outside the model's vocabulary: \['é'\]"):
        lm.loglikelihood([request("café", " au lait")])


def test_suite_is_byte_identical_across_generations_and_matches_the_pins(corpus):
    a = build.build_all(corpus.val_text, corpus.train_text)
    b = build.build_all(corpus.val_text, corpus.train_text)
    assert build.digests(a) == build.digests(b) == build.pinned()
    assert build.digests(build.verified_suite.__wrapped__(None)) == build.pinned()  # the suite runs use


def test_no_item_contains_training_text_and_pool_is_disjoint(corpus):
    suite = build.build_all(corpus.val_text, corpus.train_text)
    cut = int(build.POOL_FRACTION * len(corpus.val_text))
    for task, splits in suite.items():
        assert len(splits["test"]) == build.N_TEST and len(splits["fewshot"]) == build.N_POOL
        for split, items in splits.items():
            for it in items:
                true = it["choices"][it["label"]]
                passage = it["context"] + true
                assert passage not in corpus.train_text, (task, passage)
                assert passage in corpus.val_text, (task, passage)  # a contiguous validation passage
                assert (it["val_offset"] < cut) == (split == "fewshot")
                assert len(it["context"]) + max(map(len, it["choices"])) <= build.MAX_ITEM_CHARS
                assert len(set(it["choices"])) == 4


def test_three_shot_prompts_fit_a_128_window_and_not_a_64_one():
    assert fits(128, 3) and fits(128, 1) and fits(64, 1)
    assert not fits(64, 3)


def test_trained_model_beats_chance_where_an_untrained_one_does_not(tmp_path, data_path, corpus):
    untrained = evaluate_lm(CharLM(GPT(tiny(seed=2)), corpus.chars), shots=(0,), data_path=data_path)
    for task, by_k in untrained["tasks"].items():
        assert binomtest(round(by_k["0shot"]["acc"] * 100), 100, 0.25, alternative="greater").pvalue > 0.001, task
    cfg = tiny(seed=2, max_iters=150, eval_interval=0, eval_at_init=False, diag_interval=0, lm_eval=True)
    train(cfg, tmp_path / "run", data_path, progress=False)
    assert not (tmp_path / "run" / "lm_eval.json").exists()  # scoring is the stage after training, not inside it
    scored = lm_summary_fields(score_if_asked(cfg, tmp_path / "run", data_path))
    shuffled = scored["lm.shuffled.0shot.acc"]
    assert binomtest(round(shuffled * 100), 100, 0.25, alternative="greater").pvalue < 1e-4
    assert scored["lm_macro_acc"] > untrained["macro"]["0shot"]["acc"]
    assert math.isfinite(scored["lm_eval_s"])
    assert (tmp_path / "run" / "lm_eval.json").is_file()
    if not torch.cuda.is_available():  # scored on the CPU: the file keeps the committed runs' shape
        assert "device" not in json.loads((tmp_path / "run" / "lm_eval.json").read_text())
    fields = lm_summary_fields(untrained)
    assert "lm_macro_acc" in fields and "lm_macro_acc_3shot" not in fields  # 3-shot does not fit block 32


def test_suite_v2_is_its_pinned_items_from_the_validation_split(corpus):
    from embnorm_lib.lmtasks import build_v2
    from embnorm_lib.lmtasks.build import POOL_FRACTION

    suite = build_v2.verified_suite()
    manifest = json.loads(build_v2.MANIFEST.read_text())
    assert list(suite) == list(manifest["tasks"]) and len(suite) >= 3
    cut = int(POOL_FRACTION * len(corpus.val_text))
    for task, splits in suite.items():
        assert len(splits["test"]) == manifest["counts"][f"{task}/test"] >= 1000, task
        for split, items in splits.items():
            spans = []
            for it in items:
                true = it["choices"][it["label"]]
                start = it["val_offset"]
                assert corpus.val_text[start - len(it["context"]):start + len(true)] == it["context"] + true
                assert len(set(it["choices"])) == 4 and len(it["context"]) + max(map(len, it["choices"])) <= 56
                assert (start < cut) == (split == "fewshot")
                spans.append((start, start + len(true)))
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), f"{task}: overlapping answers"


def test_suite_v2_keeps_every_items_answer_through_the_harness(data_path, corpus):
    from embnorm_lib.core.scoring.lm_eval_adapter import get_suite

    model = GPT(tiny(seed=3, block_size=64))
    result = evaluate_lm(CharLM(model, corpus.chars), shots=(0,), data_path=data_path, suite="v2", limit=24)
    assert result["suite"] == "v2" and set(result["items"]) == set(get_suite("v2").tasks)
    for task, by_k in result["items"].items():
        bits = by_k["0shot"]
        assert len(bits) == 24 and set(bits) <= {"0", "1"}
        assert result["tasks"][task]["0shot"]["acc"] == pytest.approx(bits.count("1") / 24)
    fields = lm_summary_fields(result, prefix="lm2")
    assert "lm2_macro_acc" in fields and not any(k.startswith("lm_") for k in fields)


def test_scoring_skips_lm_evals_environment_report(data_path, corpus, monkeypatch):
    """The report (torch's collect_env: pip and nvidia-smi subprocesses) cost about a second per shot count and
    nothing of it is kept; the scores do not depend on it."""
    import torch.utils.collect_env

    calls = []  # recorded, not raised: lm-eval catches any error of the report and carries on
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: calls.append(1) or "")
    result = evaluate_lm(CharLM(GPT(tiny(seed=3, block_size=64)), corpus.chars), shots=(0,), data_path=data_path,
                         suite="v2", limit=4)
    assert set(result["macro"]) == {"0shot"} and calls == []
