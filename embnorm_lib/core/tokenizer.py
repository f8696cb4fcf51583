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

from .errors import ConfigError, DataError
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
    """The registered BPE tokenizer for this corpus: the file under the runs directory a command works in (`out_dir`,
    else the checkout's runs/), else the checkout's committed one (so a scratch runs directory tokenizes as the
    committed runs did), else trained on `train_text` and written under the command's own runs directory, never
    the checkout's when it works elsewhere. Returns (tokenizers.Tokenizer, sha256 of its file)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    spec = check_tokenizer(name)
    own, committed = tokenizer_path(name, corpus_sha256, out_dir), tokenizer_path(name, corpus_sha256)
    path = committed if committed.is_file() and not own.is_file() else own
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
