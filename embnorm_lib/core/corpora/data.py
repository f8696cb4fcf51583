"""Tiny Shakespeare: locate, verify, encode, split, and serve batches in a seed-fixed order."""
from __future__ import annotations

import hashlib
import io
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError, DataError
from ..records.io import atomic_write_bytes, repo_root

CORPUS_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
CORPUS_BYTES = 1_115_394
CORPUS_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TRAIN_FRACTION = 0.9
ENV_DATA = "EMBNORM_DATA"
ENV_CACHE = "EMBNORM_CACHE"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def verify(path: Path, sha256: str = CORPUS_SHA256) -> Path:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}; allowed: an existing corpus file (the config's corpus_sha256 "
                        f"names its content) or a folder of token shards")
    digest = sha256_of(path)
    if digest != sha256:
        what = f"tiny Shakespeare, {CORPUS_BYTES:,} bytes" if sha256 == CORPUS_SHA256 else "the config's corpus_sha256"
        raise DataError(f"checksum mismatch for {path}: sha256 {digest}, expected {sha256} ({what})")
    return path


def cache_path() -> Path:
    root = os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "embnorm"
    return Path(root) / "tinyshakespeare" / "input.txt"


def download(dest: Path, url: str = CORPUS_URL) -> Path:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            payload = response.read()
    except OSError as e:
        raise DataError(f"could not download {url} ({e}); set {ENV_DATA}=/path/to/input.txt "
                        f"or pass data_path") from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != CORPUS_SHA256:
        raise DataError(f"downloaded file from {url} has sha256 {digest}, expected {CORPUS_SHA256}")
    atomic_write_bytes(dest, payload)
    return dest


def token_cache(corpus_sha256: str, train_chars: int, tokenizer: str, tokenizer_sha256: str) -> Path:
    """Where a corpus's token ids under one tokenizer file are kept between runs (encoding ~100M characters takes
    ~45 s on one core): named by both checksums and the split point, so a file can only hold those ids."""
    root = Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "embnorm")
    return root / "tokens" / f"{corpus_sha256[:16]}-{train_chars}-{tokenizer}-{tokenizer_sha256[:16]}.npz"


def shared_copy() -> Path:
    """A copy kept beside the checkout (a workplace's shared/ folder), used before any download."""
    return repo_root().parent / "shared" / "data" / "tinyshakespeare" / "input.txt"


def data_candidates(data_path: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """Where the corpus is looked for, in order. The one rule every command, notebook and sweep uses."""
    if data_path:
        return [("data_path", Path(data_path).expanduser())]
    if os.environ.get(ENV_DATA):
        return [(f"${ENV_DATA}", Path(os.environ[ENV_DATA]).expanduser())]
    return [("cache", cache_path()), ("shared copy", shared_copy())]


def resolve_data_path(data_path: str | os.PathLike | None = None, corpus_sha256: str = "") -> Path:
    """An explicit path, else $EMBNORM_DATA, else the local cache, else ../shared/data beside the
    checkout, else a download into the cache. Whatever the source, the checksum is verified.

    Another corpus (any UTF-8 text file, issue 18) is named by its sha256 (`corpus_sha256`) and must be given
    explicitly (data_path or $EMBNORM_DATA): it is never looked for in tiny Shakespeare's places or downloaded."""
    if data_path is not None and not isinstance(data_path, (str, os.PathLike)):  # papermill's `-p data_path 5`
        raise ConfigError(f"invalid data_path={data_path!r}; allowed: a text file's path as text (\"\": ${ENV_DATA}, "
                          "the cache, ../shared/data, a download)")
    if corpus_sha256 and corpus_sha256 != CORPUS_SHA256:
        if not (data_path or os.environ.get(ENV_DATA)):
            raise DataError(f"corpus_sha256={corpus_sha256[:12]}... names a corpus of your own; give its file as "
                            f"data_path (or ${ENV_DATA})")
        return verify(Path(data_path or os.environ[ENV_DATA]).expanduser(), corpus_sha256)
    candidates = data_candidates(data_path)
    if candidates[0][1].is_dir() and (data_path or os.environ.get(ENV_DATA)):
        raise DataError(f"invalid data_path {candidates[0][1]}: a directory; allowed: a UTF-8 text file, or a directory "
                        "of token shards with tokenizer=shards (`run --data-path DIR` sets it)")
    if data_path or os.environ.get(ENV_DATA):
        return verify(candidates[0][1])
    for _, path in candidates:
        if path.is_file():
            return verify(path)
    return verify(download(cache_path()))


def encode_chars(chars: list[str], text: str) -> list[int]:
    """Character ids of `text` in the vocabulary `chars`; a character outside it is named, never dropped."""
    stoi = {c: i for i, c in enumerate(chars)}
    bad = sorted({c for c in text if c not in stoi})
    if bad:
        raise ValueError(f"characters outside the model's vocabulary: {bad!r}; allowed: the {len(chars)} "
                         f"characters of the corpus")
    return [stoi[c] for c in text]


@dataclass
class Corpus:
    """The encoded corpus with its vocabulary and the 90/10 split (made on characters, then each side encoded)."""

    text: str
    chars: list[str]  # the vocabulary's strings: characters, or a subword tokenizer's tokens ("▁" for a space)
    train: torch.Tensor  # int64 token ids
    val: torch.Tensor
    path: Path
    sha256: str = CORPUS_SHA256
    tokenizer: str = "char"
    tokenizer_sha256: str = ""  # of the tokenizer's file (subword tokenizers)
    n_train_chars: int = 0  # characters in the training split (0: one per token)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        if self.tokenizer != "char":
            raise ValueError(f"Corpus.encode is for characters; encode {self.tokenizer} text with its tokenizer")
        return encode_chars(self.chars, text)

    def decode(self, ids) -> str:
        text = "".join(self.chars[int(i)] for i in ids)
        return text if self.tokenizer == "char" else text.replace("▁", " ")

    @property
    def train_text(self) -> str:
        return self.text[: self.n_train_chars or len(self.train)]

    @property
    def val_text(self) -> str:
        return self.text[self.n_train_chars or len(self.train):]

    @property
    def char_lengths(self) -> torch.Tensor | None:
        """Characters per token id, for losses per character; None for characters (one each)."""
        if self.tokenizer == "char":
            return None
        return torch.tensor([len(t) for t in self.chars], dtype=torch.int64)


_CACHE: dict[tuple[Path, str, int], Corpus] = {}
_TOKENIZED: dict[tuple[Path, str, int, str], Corpus] = {}


def load_corpus(data_path: str | os.PathLike | None = None, tokenizer: str = "char",
                corpus_sha256: str = "", train_chars: int = 0, out_dir=None) -> Corpus:
    """The verified corpus (tiny Shakespeare, or the file whose sha256 is `corpus_sha256`), encoded by a registered
    tokenizer (tokenizer.py); characters unless asked. The split is the first `train_chars` characters for training
    (0: the first 90%; a corpus split by document records its own point, opencorpus.py). A subword tokenizer is
    looked up, or trained and kept, under the runs directory `out_dir` (tokenizer.bpe_tokenizer)."""
    if tokenizer == "shards":
        from .shards import load_shards

        if not data_path:
            raise DataError("tokenizer=shards needs data_path; allowed: a directory of token shards (nanoGPT's "
                            "train.bin and val.bin, or llm.c/FineWeb *_train_*.bin and *_val_*.bin)")
        return load_shards(data_path, corpus_sha256)
    if tokenizer != "char":
        chars = load_corpus(data_path, corpus_sha256=corpus_sha256, train_chars=train_chars)
        return _tokenized(chars, tokenizer, out_dir)
    path = resolve_data_path(data_path, corpus_sha256).resolve()
    key = (path, corpus_sha256 or CORPUS_SHA256, train_chars)  # verified just now: the file at `path` has this sha256
    if key not in _CACHE:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"invalid corpus file {path}: not UTF-8 text ({e.reason} at byte {e.start}); "
                            f"allowed: a UTF-8 text file") from None
        if len(text) < 1000:
            raise DataError(f"invalid corpus file {path}: {len(text)} characters; allowed: at least 1,000")
        chars = sorted(set(text))
        # code points -> ids through a lookup table: no per-character Python objects
        codes = torch.from_numpy(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64))
        lookup = torch.full((max(map(ord, chars)) + 1,), -1, dtype=torch.int64)
        lookup[torch.tensor([ord(c) for c in chars])] = torch.arange(len(chars))
        ids = lookup[codes]
        if train_chars and not 1000 <= train_chars <= len(ids) - 1000:
            raise DataError(f"invalid train_chars={train_chars} for {path.name} ({len(ids):,} characters); allowed: "
                            f"0 (the first {TRAIN_FRACTION:.0%}) or a split point leaving >= 1,000 on each side")
        n_train = train_chars or int(TRAIN_FRACTION * len(ids))
        _CACHE[key] = Corpus(text=text, chars=chars, train=ids[:n_train].clone(),
                             val=ids[n_train:].clone(), path=path, sha256=corpus_sha256 or CORPUS_SHA256)
    return _CACHE[key]


def _tokenized(chars: Corpus, name: str, out_dir=None) -> Corpus:
    """The character corpus's split, each side encoded by the subword tokenizer trained on its training side."""
    from .tokenizer import bpe_tokenizer, check_tokenizer, encode_text, token_texts

    key = (chars.path, chars.sha256, len(chars.train), name, str(out_dir or ""))
    if key not in _TOKENIZED:
        tok, tok_sha = bpe_tokenizer(name, chars.train_text, chars.sha256, out_dir)
        spec = check_tokenizer(name)
        encode = lambda text: torch.tensor(encode_text(tok, spec, text), dtype=torch.int64)  # noqa: E731
        vocab = token_texts(tok, spec)
        cached = token_cache(chars.sha256, len(chars.train_text), name, tok_sha) if spec.byte_level else None
        if cached is not None and cached.is_file():
            with np.load(cached, allow_pickle=False) as ids:
                train, val = torch.from_numpy(ids["train"].astype(np.int64)), torch.from_numpy(
                    ids["val"].astype(np.int64))
        else:
            train, val = encode(chars.train_text), encode(chars.val_text)
            if cached is not None:
                payload = io.BytesIO()
                np.savez(payload, train=train.numpy().astype(np.uint16), val=val.numpy().astype(np.uint16))
                atomic_write_bytes(cached, payload.getvalue())
        _TOKENIZED[key] = Corpus(text=chars.text, chars=vocab, train=train, val=val, path=chars.path,
                                 sha256=chars.sha256, tokenizer=name, tokenizer_sha256=tok_sha,
                                 n_train_chars=len(chars.train_text))
    return _TOKENIZED[key]


class BatchSampler:
    """Random training windows from a generator of its own, seeded by the run's seed alone.

    Every variant with the same seed therefore sees the same batches in the same order,
    and evaluation or diagnostics never disturb the stream. Its state is checkpointed."""

    def __init__(self, data: torch.Tensor, block_size: int, batch_size: int, seed: int):
        if len(data) <= block_size + 1:
            raise ValueError(f"data of length {len(data)} is too short for block_size {block_size}")
        self.data, self.block_size, self.batch_size = data, block_size, batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self._offsets = torch.arange(block_size + 1)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(self.data) - self.block_size - 1, (self.batch_size,), generator=self.generator)
        windows = self.data[starts[:, None] + self._offsets]
        return windows[:, :-1], windows[:, 1:]

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def validation_windows(val: torch.Tensor, block_size: int, max_windows: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping windows covering the validation split: every target is scored once. With `max_windows`
    (an evaluation budget for small test runs) only that many, evenly spaced over the split."""
    n = (len(val) - 1) // block_size
    keep = evenly_spaced(n, max_windows)
    if not isinstance(val, torch.Tensor):  # memory-mapped shards (shards.TokenStream): read the kept windows only
        starts = torch.arange(n)[keep] * block_size
        rows = val[starts[:, None] + torch.arange(block_size + 1)]
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
    x = val[: n * block_size].view(n, block_size)
    y = val[1: n * block_size + 1].view(n, block_size)
    return x[keep], y[keep]


def evenly_spaced(n: int, k: int) -> torch.Tensor | slice:
    """Indices of k of n items spread evenly from the first to the last (all n when k is 0 or >= n)."""
    if 0 < k < n:
        return torch.linspace(0, n - 1, k).round().long()
    return slice(None)
