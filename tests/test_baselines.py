"""Count baselines (issue 113): docs/baselines.json is what tools/baselines.py measures on the corpus every run reads,
and the answer marks a regime trained only where its `none` ends at least 10% below its own split's bigram."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO


def test_the_committed_tiny_shakespeare_baselines_are_what_the_split_gives():
    from embnorm_lib.core.corpora.data import load_corpus
    from embnorm_lib.tools.baselines import load, measure

    assert load()["tinyshakespeare/char"] == pytest.approx(measure())
    corpus = load_corpus()
    train, val = corpus.train.numpy(), corpus.val.numpy()
    # this file's own unigram: add-one counts of the training ids, scored on every validation id after the first
    p = (np.bincount(train, minlength=corpus.vocab_size) + 1) / (len(train) + corpus.vocab_size)
    assert load()["tinyshakespeare/char"]["unigram_nats_per_token"] == pytest.approx(-np.log(p[val[1:]]).mean())
    entry = load()["tinyshakespeare/char"]
    # the interpolation weight lies inside the grid tried, so the grid does not bound the bigram
    tried = entry["bigram_weights_tried"]
    assert min(tried) < entry["bigram_unigram_weight"] < max(tried)
    # ASCII: a token is a byte (per byte the total is over every validation byte, per token over the ids scored)
    assert entry["bigram_bits_per_byte"] == pytest.approx(entry["bigram_nats_per_token"] / math.log(2), rel=1e-4)


def test_a_planted_bigram_text_scores_its_own_entropy():
    """A first-order Markov text with known transitions: the count bigram recovers its entropy rate, the unigram does
    not (it is uniform here, log 3)."""
    from embnorm_lib.stats.baselines import UNIGRAM_WEIGHTS_WIDE, count_bigram, count_unigram

    rng = np.random.default_rng(0)
    step = np.array([[0.0, 0.9, 0.1], [0.1, 0.0, 0.9], [0.9, 0.1, 0.0]])
    cumulative, ids = step.cumsum(1), [0]
    for u in rng.random(200_000):  # one uniform a step, not rng.choice per step (~5 s)
        ids.append(int(np.searchsorted(cumulative[ids[-1]], u, side="right")))
    ids = np.array(ids)
    train, val = ids[:180_000], ids[180_000:]
    rate = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    bigram = count_bigram(train, val, 3, UNIGRAM_WEIGHTS_WIDE)
    assert bigram["nll"] / bigram["val_tokens_scored"] == pytest.approx(rate, abs=0.01)
    assert count_unigram(train, val, 3)["nll"] / (len(val) - 1) == pytest.approx(math.log(3), abs=0.01)


def test_the_bigram_scores_bitwise_as_the_whole_probability_matrix_does():
    """_nll gathers the interpolated probability at the scored pairs only: the same total, to the last bit, as the
    dense vocab x vocab matrix it replaced (the committed baselines must not move)."""
    from embnorm_lib.stats.baselines import _nll

    rng = np.random.default_rng(3)
    vocab = 50
    fit, score = rng.integers(0, vocab, 20_000) ** 2 % vocab, rng.integers(0, vocab, 5_000)
    for weight in (0.001, 0.2):
        counts = np.zeros((vocab, vocab))
        np.add.at(counts, (fit[:-1], fit[1:]), 1)
        unigram = (np.bincount(fit, minlength=vocab) + 1.0) / (len(fit) + vocab)
        dense = (1 - weight) * counts / np.maximum(counts.sum(1, keepdims=True), 1) + weight * unigram[None, :]
        assert _nll(fit, score, vocab, weight) == float(-np.log(dense[score[:-1], score[1:]]).sum())


def test_the_answer_marks_a_regime_trained_only_well_past_its_bigram():
    record = json.loads((REPO / "runs" / "answer.json").read_text())
    b = record["d"]["baselines"]
    for r in record["w"]["regimes"]:
        assert r["trained"] == (r["none_loss"] <= 0.9 * b["tinyshakespeare"]["bigram_nats_per_token"])
    for r in record["w"]["dl"]["rungs"]:
        assert r["trained"] == (r["none"] <= 0.9 * b["open_english"]["bigram_nats_per_token"])
    assert not record["w"]["head"]["trained"]  # the headline regime ends at the bigram's level


def test_a_missing_corpus_record_is_refused_in_one_line():
    done = subprocess.run([sys.executable, "-m", "embnorm_lib", "baselines", "--record", "nope.json"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "error: invalid --record nope.json: no such file; allowed: a corpus record (JSON)"]
