"""Subword tokens (issue 18): a BPE tokenizer trained on the training split only, its runs and losses per char."""
import pytest
import torch

from embnorm_lib.core.config import preset_config
from embnorm_lib.core.corpora import data as data_module
from embnorm_lib.core.corpora import tokenizer as tokenizer_module
from embnorm_lib.core.corpora.tokenizer import bpe_tokenizer
from embnorm_lib.core.errors import ConfigError
from embnorm_lib.core.records.io import read_json, read_jsonl
from embnorm_lib.core.training.train import train


def test_bpe_is_trained_on_the_training_split_deterministically_and_round_trips(tmp_path, corpus, monkeypatch):
    from embnorm_lib.core.records import io as io_module

    monkeypatch.setattr(io_module, "default_runs_dir", lambda: tmp_path / "checkout")  # trained, not the committed one
    tok, sha = bpe_tokenizer("bpe-512", corpus.train_text, corpus.sha256, out_dir=tmp_path / "a")
    again, sha_again = bpe_tokenizer("bpe-512", corpus.train_text, corpus.sha256, out_dir=tmp_path / "b")
    assert sha == sha_again and tok.get_vocab_size() == 512
    ids = tok.encode(corpus.val_text).ids
    assert tok.decode(ids) == corpus.val_text and len(ids) < 0.6 * len(corpus.val_text)
    assert sum(len(tok.id_to_token(i)) for i in ids) == len(corpus.val_text)  # characters per token add up
    # trained from the training split alone: a tokenizer trained on other text is another file
    other, other_sha = bpe_tokenizer("bpe-512", corpus.val_text, corpus.sha256, out_dir=tmp_path / "c")
    assert other_sha != sha


def test_a_bpe_run_records_its_tokenizer_and_its_loss_per_character(tmp_path, data_path, monkeypatch):
    monkeypatch.setattr(data_module, "_TOKENIZED", {})
    monkeypatch.setattr(tokenizer_module, "runs_root", lambda out_dir=None: tmp_path / "runs")  # not the repo's
    cfg = preset_config("tiny", tokenizer="bpe-512", vocab_size=512, max_iters=4, eval_windows=16, torch_threads=1)
    summary = train(cfg, tmp_path / "run", data_path, progress=False)
    corpus = data_module.load_corpus(data_path, "bpe-512")
    assert summary["tokenizer"] == "bpe-512" and summary["tokenizer_sha256"] == corpus.tokenizer_sha256
    assert (tmp_path / "runs" / "tokenizers").is_dir()
    last = read_jsonl(tmp_path / "run" / "evals.jsonl")[-1]
    assert last["val_loss_per_char"] == pytest.approx(last["val_loss"] * last["val_tokens"] / last["val_chars"])
    assert last["val_chars"] > last["val_tokens"]  # a subword spells more than one character on average
    assert summary["val_loss_per_char"] == last["val_loss_per_char"]
    with pytest.raises(ConfigError, match="invalid vocab_size=65; allowed: 512"):
        train(cfg.replace(vocab_size=65), tmp_path / "bad", data_path, progress=False)
    assert not (tmp_path / "bad").exists()
    assert read_json(tmp_path / "run" / "config.json")["tokenizer"] == "bpe-512"


def test_the_character_corpus_is_untouched_by_the_registry(data_path):
    chars = data_module.load_corpus(data_path)
    assert chars.tokenizer == "char" and chars.char_lengths is None and chars.vocab_size == 65
    assert torch.equal(chars.train[:5], torch.tensor(chars.encode(chars.text[:5])))


def _own_corpus(tmp_path):
    import hashlib

    rng = __import__("random").Random(0)
    words = ["alpha", "beta", "gamma", "delta", "eta", "theta", "iota", "kappa"]
    text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(600)) + "\n"
    path = tmp_path / "own.txt"
    path.write_text(text, encoding="utf-8")
    return path, hashlib.sha256(path.read_bytes()).hexdigest(), text


def test_a_corpus_of_your_own_is_named_by_its_sha256_split_deterministically_and_trained_on(tmp_path):
    path, sha, text = _own_corpus(tmp_path)
    vocab = len(set(text))
    cfg = preset_config("tiny", corpus_sha256=sha, vocab_size=vocab, max_iters=3, eval_windows=8, torch_threads=1)
    summary = train(cfg, tmp_path / "run", path, progress=False)
    assert summary["data_sha256"] == sha and summary["steps"] == 3
    corpus = data_module.load_corpus(path, corpus_sha256=sha)
    assert len(corpus.train) == int(0.9 * len(text)) and corpus.train_text + corpus.val_text == text
    # named by its checksum: another file, or none at all, is refused in one line before anything is written
    other = tmp_path / "other.txt"
    other.write_text(text + "more\n", encoding="utf-8")
    for data_path, message in ((other, "checksum mismatch"), (None, "names a corpus of your own")):
        with pytest.raises(data_module.DataError, match=message):
            train(cfg, tmp_path / "bad", data_path, progress=False)
    assert not (tmp_path / "bad").exists()
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe" * 1000)
    with pytest.raises(data_module.DataError, match="not UTF-8 text"):
        data_module.load_corpus(binary, corpus_sha256=__import__("hashlib").sha256(binary.read_bytes()).hexdigest())
    for bad, message in (("abc", "corpus_sha256='abc'"), (sha.upper(), "lowercase hex")):
        with pytest.raises(ConfigError, match=message):
            cfg.replace(corpus_sha256=bad)
    with pytest.raises(ConfigError, match="built from Shakespeare"):
        cfg.replace(lm_eval=True)


def test_subword_scoring_splits_at_the_context_boundary_and_obeys_the_chain_rule(tmp_path, corpus):
    from types import SimpleNamespace

    from embnorm_lib.core.nets.model import GPT
    from embnorm_lib.core.scoring.lm_eval_adapter import SubwordLM

    tok, _ = bpe_tokenizer("bpe-512", corpus.train_text, corpus.sha256, out_dir=tmp_path)
    lm = SubwordLM(GPT(preset_config("tiny", tokenizer="bpe-512", vocab_size=512, seed=3)), tok)
    req = lambda *args: SimpleNamespace(args=args)  # noqa: E731 (lm-eval's Instance carries .args)
    # at a word boundary the continuation is its own tokens
    context, continuation = "ROMEO:\nBut soft, what", " light"
    ctx, cont = lm.split(context, continuation)
    assert tok.decode(cont) == continuation and ctx == lm.encode(context)
    # mid-word, the token spanning the boundary is scored with the continuation, never cut
    ctx, cont = lm.split("the wor", "ld is")
    assert tok.decode(ctx + cont) == "the world is" and "the wor".startswith(tok.decode(ctx))
    assert len(tok.decode(cont)) >= len("ld is")
    # the score is log P(continuation's tokens | the tokens before them) under the whole string's tokenization
    for context, continuation in (("ROMEO:\nBut soft, what", " light"), ("the wor", "ld is")):
        ctx, cont = lm.split(context, continuation)
        assert ctx + cont == lm.encode(context + continuation)  # the tokens the whole string is written with
        logits, _, _ = lm.model(torch.tensor([ctx + cont]))
        logprobs = torch.log_softmax(logits[0, len(ctx) - 1:-1].float(), dim=-1)
        expected = logprobs.gather(-1, torch.tensor(cont)[:, None]).sum().item()
        (score, _), = lm.loglikelihood([req(context, continuation)])
        assert score == pytest.approx(expected, rel=1e-5)
    assert lm.token_text(tok.token_to_id("▁what")) == " what"


def test_a_bpe_tokenizer_is_kept_under_the_runs_directory_it_belongs_to_and_scored_only_by_its_sha256(
        tmp_path, data_path, monkeypatch):
    import hashlib
    import shutil

    from embnorm_lib.core.corpora.tokenizer import recorded_tokenizer
    from embnorm_lib.core.records import io as io_module
    from embnorm_lib.core.scoring.lm_eval_adapter import CharLM, SubwordLM

    monkeypatch.setattr(data_module, "_TOKENIZED", {})
    checkout, scratch = tmp_path / "checkout-runs", tmp_path / "scratch"
    monkeypatch.setattr(io_module, "default_runs_dir", lambda: checkout)  # a checkout without this tokenizer
    cfg = preset_config("tiny", tokenizer="bpe-512", vocab_size=512, max_iters=2, eval_windows=8, torch_threads=1)
    run_dir = scratch / "adhoc" / "ln" / "seed0"
    summary = train(cfg, run_dir, data_path, progress=False, out_dir=scratch)
    kept = scratch / "tokenizers" / f"bpe-512-{summary['data_sha256'][:12]}.json"
    assert kept.is_file() and not checkout.exists()  # trained for a scratch runs directory: nothing in the checkout
    assert summary["tokenizer_sha256"] == hashlib.sha256(kept.read_bytes()).hexdigest()
    assert isinstance(CharLM.from_run_dir(run_dir, data_path), SubwordLM)  # scoring finds the run's own file
    with pytest.raises(data_module.DataError, match="no bpe-512-.* with sha256 000000000000"):
        recorded_tokenizer("bpe-512", summary["data_sha256"], "0" * 64, run_dir)
    # a committed tokenizer is read, not copied, by a command working elsewhere
    (checkout / "tokenizers").mkdir(parents=True)
    shutil.move(kept, checkout / "tokenizers" / kept.name)
    monkeypatch.setattr(data_module, "_TOKENIZED", {})
    elsewhere = data_module.load_corpus(data_path, "bpe-512", out_dir=tmp_path / "elsewhere")
    assert elsewhere.tokenizer_sha256 == summary["tokenizer_sha256"] and not (tmp_path / "elsewhere").exists()
    assert isinstance(CharLM.from_run_dir(run_dir, data_path), SubwordLM)
    # with its file gone, scoring is refused rather than retraining a tokenizer that might differ
    (checkout / "tokenizers" / kept.name).unlink()
    with pytest.raises(data_module.DataError, match="the file the run trained with"):
        CharLM.from_run_dir(run_dir, data_path)
    assert not kept.exists() and not (checkout / "tokenizers" / kept.name).exists()
