"""Count baselines a trained model must beat on the same split: how far past a bigram a regime is (issue 113)."""
from __future__ import annotations

import numpy as np

UNIGRAM_WEIGHTS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)  # tried on a held-out tail of the training split


def _nll(fit: np.ndarray, score: np.ndarray, vocab: int, weight: float) -> float:
    counts = np.zeros((vocab, vocab))
    np.add.at(counts, (fit[:-1], fit[1:]), 1)
    unigram = (np.bincount(fit, minlength=vocab) + 1.0) / (len(fit) + vocab)
    rows = counts.sum(1, keepdims=True)
    prob = (1 - weight) * counts / np.maximum(rows, 1) + weight * unigram[None, :]
    return float(-np.log(prob[score[:-1], score[1:]]).sum())


def count_bigram(train: np.ndarray, val: np.ndarray, vocab: int) -> dict:
    """A count bigram interpolated with the add-one unigram: the weight chosen on the last tenth of the training
    ids (fitted on the first nine tenths), then the counts taken over all of them; the validation ids' total
    negative log-likelihood (nats) and the weight."""
    cut = int(0.9 * len(train))
    weight = min(UNIGRAM_WEIGHTS, key=lambda w: _nll(train[:cut], train[cut:], vocab, w))
    return {"nll": _nll(train, val, vocab, weight), "unigram_weight": weight, "val_tokens_scored": len(val) - 1}
