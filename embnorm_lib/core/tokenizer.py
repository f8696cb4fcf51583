"""The tokenizer registry (issue 18): characters, or BPE subwords trained on the training split only.

Each entry is one line of `TOKENIZERS`. A BPE tokenizer is trained with Hugging Face `tokenizers` on the training
split's text (spaces become "▁" and start a word; no normalization, so decoding gives the text back exactly), once
per corpus and vocabulary size, and kept as `runs/tokenizers/<name>-<corpus sha256[:12]>.json` (committed: a run
is reproducible even if a later `tokenizers` release trains differently); every run records the file's sha256.
Losses are reported per token and, for subword tokenizers, per character, so tokenizations compare."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError
from .io import atomic_write_bytes, runs_root

if TYPE_CHECKING:  # imported where used: the char path never loads it
    from tokenizers import Tokenizer


@dataclass(frozen=True)
class TokenizerSpec:
    name: str
    description: str
    bpe_vocab_size: int = 0  # 0: characters


TOKENIZERS: dict[str, TokenizerSpec] = {t.name: t for t in (
    TokenizerSpec("char", "one token per character of the corpus (the committed studies)"),
    TokenizerSpec("bpe-512", "BPE, 512 tokens, trained on the training split", 512),
    TokenizerSpec("bpe-4096", "BPE, 4096 tokens, trained on the training split", 4096),
)}


def check_tokenizer(name: str) -> TokenizerSpec:
    if name not in TOKENIZERS:
        raise ConfigError(f"invalid tokenizer={name!r}; allowed: {', '.join(TOKENIZERS)}")
    return TOKENIZERS[name]


def tokenizer_path(name: str, corpus_sha256: str, out_dir=None) -> Path:
    return runs_root(out_dir) / "tokenizers" / f"{name}-{corpus_sha256[:12]}.json"


def bpe_tokenizer(name: str, train_text: str, corpus_sha256: str, out_dir=None) -> tuple[Tokenizer, str]:
    """The registered BPE tokenizer for this corpus: loaded from its committed file, else trained on `train_text`
    and written there. Returns (tokenizers.Tokenizer, sha256 of its file)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    spec = check_tokenizer(name)
    path = tokenizer_path(name, corpus_sha256, out_dir)
    if not path.is_file():
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
