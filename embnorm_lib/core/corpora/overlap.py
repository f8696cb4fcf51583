"""Verbatim overlap between a validation text and a training text, measured on 50-character strings (issue 112).

A validation character counts as *overlapping* when it lies inside some 50-character string of the validation text
that also occurs, byte for byte, somewhere in the training text. The share of such characters is the number the
audit of the open-English corpus reported (about 22%); the prose corpus drops every validation document that holds
such a string and records the share that remains, measured the same way on the validation text a run reads.

Strings are compared by a 64-bit polynomial hash of their bytes (numpy, wrapping arithmetic), so ~10^8 training
positions take seconds. Two different 50-byte strings share a hash with probability ~2^-64 per pair; over 10^8
training x 10^6 validation positions the chance of any false match is below 10^-5."""
from __future__ import annotations

import numpy as np

WIDTH = 50  # characters: the audit's string length
_BASE = np.uint64(1_099_511_628_211)  # an odd 64-bit multiplier (FNV's prime)
_CHUNK = 8_000_000  # positions hashed at a time: bounds the memory of the training side


def window_hashes(data: bytes, width: int = WIDTH) -> np.ndarray:
    """The hash of every `width`-byte window of `data`, in order (len(data) - width + 1 values; none if shorter)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    n = len(raw) - width + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    out = np.empty(n, dtype=np.uint64)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        part = raw[start:stop + width - 1].astype(np.uint64)
        h = np.zeros(stop - start, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for k in range(width):
                h = h * _BASE + part[k:k + stop - start]
        out[start:stop] = h
    return out


def training_set(train: bytes, width: int = WIDTH) -> np.ndarray:
    """The sorted distinct window hashes of the training text (the set validation windows are looked up in)."""
    return np.unique(window_hashes(train, width))


def shared_windows(val: bytes, train_hashes: np.ndarray, width: int = WIDTH) -> np.ndarray:
    """A boolean per validation window: whether its string also occurs in the training text."""
    hashes = window_hashes(val, width)
    if len(hashes) == 0 or len(train_hashes) == 0:
        return np.zeros(len(hashes), dtype=bool)
    at = np.searchsorted(train_hashes, hashes)
    at = np.minimum(at, len(train_hashes) - 1)
    return train_hashes[at] == hashes


def covered_share(val: bytes, train_hashes: np.ndarray, width: int = WIDTH) -> float:
    """The share of validation characters inside at least one shared window (the audit's measure)."""
    if not val:
        return 0.0
    hit = shared_windows(val, train_hashes, width)
    covered = np.zeros(len(val) + 1, dtype=np.int64)
    starts = np.flatnonzero(hit)
    np.add.at(covered, starts, 1)
    np.add.at(covered, starts + width, -1)
    return float((np.cumsum(covered[:-1]) > 0).mean())


def contaminated_documents(docs: list[str], train_hashes: np.ndarray, width: int = WIDTH) -> list[bool]:
    """For each validation document, whether any window inside it occurs in the training text."""
    flags = []
    for doc in docs:
        flags.append(bool(shared_windows(doc.encode("ascii"), train_hashes, width).any()))
    return flags
