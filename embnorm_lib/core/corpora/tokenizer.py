"""The tokenizer registry (issue 18): characters, or BPE subwords trained on the training split only.

Each entry is one line of `TOKENIZERS`. A BPE tokenizer is trained with Hugging Face `tokenizers` on the training
split's text (spaces become "▁" and start a word; no normalization, so decoding gives the text back exactly), once
per corpus and vocabulary size, and kept as `<runs directory>/tokenizers/<name>-<corpus sha256[:12]>.json`
(committed under runs/: a run is reproducible even if a later `tokenizers` release trains differently); every run
records the file's sha256, and scoring loads the file by it.
Losses are reported per token and, for subword tokenizers, per character, so tokenizations compare."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, DataError
from ..records.io import atomic_write_bytes, runs_root

if TYPE_CHECKING:  # imported where used: the char path never loads it
    from tokenizers import Tokenizer


@dataclass(frozen=True)
class TokenizerSpec:
    name: str
    description: str
    bpe_vocab_size: int = 0  # 0: characters
    byte_level: bool = False  # GPT-2's byte-level BPE (every byte a base token, its regex pre-split)


TOKENIZERS: dict[str, TokenizerSpec] = {t.name: t for t in (
    TokenizerSpec("char", "one token per character of the corpus (the committed studies)"),
    TokenizerSpec("bpe-512", "BPE, 512 tokens, trained on the training split", 512),
    TokenizerSpec("bpe-4096", "BPE, 4096 tokens, trained on the training split", 4096),
    # the prose ladder (issue 112): byte-level as GPT-2's, 4,096 tokens so that the output layer of a 96-256 wide
    # model stays a modest share of a CPU step (its cost grows with vocabulary x width)
    TokenizerSpec("bytebpe-4096", "byte-level BPE (GPT-2's pre-split), 4096 tokens, trained on the training split",
                  4096, byte_level=True),
    # issue 115: ids tokenized elsewhere (nanoGPT's train.bin/val.bin, llm.c/FineWeb shards; shards.py), whose
    # vocabulary is the tokenizer that wrote them: vocab_size is the config's, at least the largest id + 1
    TokenizerSpec("shards", "token ids read from shard files (--data-path DIR); tokenized by their own tokenizer"),
)}


def byte_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (byte-level BPE's alphabet): printable Latin-1 bytes stand for
    themselves, the others (space, newline, control bytes...) for code points from 256 up, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def token_texts(tok: Tokenizer, spec: TokenizerSpec) -> list[str]:
    """Each token id's text, one character per byte for a byte-level tokenizer (Latin-1: the text itself for the
    ASCII corpora here), so that a token's length is its bytes and losses per character are per byte."""
    vocab = [tok.id_to_token(i) for i in range(tok.get_vocab_size())]
    if not spec.byte_level:
        return vocab
    back = {c: b for b, c in byte_alphabet().items()}
    return [bytes(back[c] for c in token).decode("latin-1") for token in vocab]


def encode_text(tok: Tokenizer, spec: TokenizerSpec, text: str) -> list[int]:
    """A text's token ids. A byte-level tokenizer encodes line by line (its pre-split already ends a word at a
    newline), so a 100M-character corpus never becomes one pre-tokenized object."""
    if not spec.byte_level:
        return tok.encode(text).ids
    ids: list[int] = []
    for encoding in tok.encode_batch(text.splitlines(keepends=True)):
        ids.extend(encoding.ids)
    return ids


def check_tokenizer(name: str) -> TokenizerSpec:
    if name not in TOKENIZERS:
        raise ConfigError(f"invalid tokenizer={name!r}; allowed: {', '.join(TOKENIZERS)}")
    return TOKENIZERS[name]


def tokenizer_path(name: str, corpus_sha256: str, out_dir=None) -> Path:
    return runs_root(out_dir) / "tokenizers" / f"{name}-{corpus_sha256[:12]}.json"


def bpe_tokenizer(name: str, train_text: str, corpus_sha256: str, out_dir=None) -> tuple[Tokenizer, str]:
    """The registered BPE tokenizer for this corpus: the file under the runs directory a command works in (`out_dir`,
    else the checkout's runs/), else the checkout's committed one (so a scratch runs directory tokenizes as the
    committed runs did), else trained on `train_text` and written under the command's own runs directory, never
    the checkout's when it works elsewhere. Returns (tokenizers.Tokenizer, sha256 of its file)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    spec = check_tokenizer(name)
    own, committed = tokenizer_path(name, corpus_sha256, out_dir), tokenizer_path(name, corpus_sha256)
    path = committed if committed.is_file() and not own.is_file() else own
    if not path.is_file() and spec.byte_level:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=spec.bpe_vocab_size, show_progress=False, special_tokens=[],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(train_text.splitlines(keepends=True), trainer)
        atomic_write_bytes(path, tok.to_str(pretty=True).encode())
    elif not path.is_file():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
        alphabet = sorted(set(train_text.replace(" ", "▁")))
        trainer = trainers.BpeTrainer(vocab_size=spec.bpe_vocab_size, initial_alphabet=alphabet,
                                      show_progress=False, special_tokens=[])
        tok.train_from_iterator(train_text.splitlines(keepends=True), trainer)
        atomic_write_bytes(path, tok.to_str(pretty=True).encode())
    payload = path.read_bytes()
    return Tokenizer.from_str(payload.decode()), hashlib.sha256(payload).hexdigest()


def recorded_tokenizer(name: str, corpus_sha256: str, tokenizer_sha256: str, run_dir) -> Tokenizer:
    """The tokenizer a run trained with, found by the sha256 its summary recorded: in a `tokenizers/` folder above
    the run (its runs directory) or among the checkout's committed ones. Never trained here: a later `tokenizers`
    release could train another, and the run's scores would silently change meaning."""
    from tokenizers import Tokenizer

    file = tokenizer_path(name, corpus_sha256).name
    for place in [p / "tokenizers" / file for p in Path(run_dir).resolve().parents] + [tokenizer_path(name, corpus_sha256)]:
        if place.is_file() and hashlib.sha256(payload := place.read_bytes()).hexdigest() == tokenizer_sha256:
            return Tokenizer.from_str(payload.decode())
    raise DataError(f"invalid tokenizer for run {run_dir}: no {file} with sha256 {tokenizer_sha256[:12] or '(none recorded)'} "
                    f"in a tokenizers/ folder above the run or in the checkout's runs/tokenizers; allowed: the file "
                    f"the run trained with, beside its runs directory")
