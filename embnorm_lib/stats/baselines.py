"""Count baselines a trained model must beat on the same split: how far past a bigram a regime is (issue 113)."""
from __future__ import annotations

import numpy as np

UNIGRAM_WEIGHTS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)  # tried on a held-out tail of the training split (amendment 17)
# the wider grid of tools/baselines.py: a character bigram has so much data per cell that its best weight lies below
# 0.05 (both character corpora chose the old grid's edge)
UNIGRAM_WEIGHTS_WIDE = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, *UNIGRAM_WEIGHTS)


def _scored(fit: np.ndarray, score: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At each scored pair: its count in `fit`, its first id's row total, and its second id's add-one unigram.
    Counted once; each unigram weight then reads them (the counts were taken again for every weight)."""
    # pair counts by one bincount (np.add.at took ~2 s at vocab 4,096), gathered only at the scored pairs
    pairs = fit[:-1].astype(np.int64) * vocab + fit[1:]
    counts = np.bincount(pairs, minlength=vocab * vocab).astype(float).reshape(vocab, vocab)
    unigram = (np.bincount(fit, minlength=vocab) + 1.0) / (len(fit) + vocab)
    rows = np.maximum(counts.sum(1), 1)
    before, after = score[:-1], score[1:]
    return counts[before, after], rows[before], unigram[after]


def _nll_at(scored: tuple[np.ndarray, np.ndarray, np.ndarray], weight: float) -> float:
    # the dense formula's order of operations, element by element, so the sum is bitwise the whole matrix's
    pair_counts, row_totals, unigram_after = scored
    prob = (1 - weight) * pair_counts / row_totals + weight * unigram_after
    return float(-np.log(prob).sum())


def _nll(fit: np.ndarray, score: np.ndarray, vocab: int, weight: float) -> float:
    return _nll_at(_scored(fit, score, vocab), weight)


def count_bigram(train: np.ndarray, val: np.ndarray, vocab: int, weights: tuple = UNIGRAM_WEIGHTS) -> dict:
    """A count bigram interpolated with the add-one unigram: the weight chosen on the last tenth of the training
    ids (fitted on the first nine tenths), then the counts taken over all of them; the validation ids' total
    negative log-likelihood (nats) and the weight."""
    cut = int(0.9 * len(train))
    held_out = _scored(train[:cut], train[cut:], vocab)
    weight = min(weights, key=lambda w: _nll_at(held_out, w))
    return {"nll": _nll(train, val, vocab, weight), "unigram_weight": weight, "val_tokens_scored": len(val) - 1}


def count_unigram(train: np.ndarray, val: np.ndarray, vocab: int) -> dict:
    """An add-one unigram fitted on all the training ids: the validation ids' total negative log-likelihood (nats),
    over the same ids the bigram scores (every id after the first)."""
    unigram = (np.bincount(train, minlength=vocab) + 1.0) / (len(train) + vocab)
    return {"nll": float(-np.log(unigram[val[1:]]).sum()), "val_tokens_scored": len(val) - 1}
