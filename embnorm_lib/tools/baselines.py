"""Count baselines a trained model must be well past, per corpus split (issue 113): a count bigram (interpolated with
the unigram, stats.baselines) and an add-one unigram, in nats per token and bits per byte, written to
docs/baselines.json (this module is its only writer), one entry per corpus and tokenizer.

    python -m embnorm_lib baselines                                   # tiny Shakespeare, characters
    python -m embnorm_lib baselines --data-path data/open-english.txt --record docs/corpus-open-english.json

A regime whose baseline variant sits near the bigram is not a trained regime: the pages say so beside its result.
The corpus is read as every run reads it (load_corpus, its sha256 verified), so the numbers are on the same split."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from ..core.errors import DataError, entry
from ..core.records.io import atomic_write_text, repo_root
from ..stats.baselines import UNIGRAM_WEIGHTS_WIDE, count_bigram, count_unigram

BASELINES = repo_root() / "docs" / "baselines.json"


def measure(data_path: str | None = None, record: dict | None = None, tokenizer: str = "char") -> dict:
    """The baselines of one corpus split: the corpus's name (its record's, else tinyshakespeare), its sha256, the
    tokens and bytes scored, and each model's loss per token (nats) and per byte (bits)."""
    from ..core.corpora.data import load_corpus

    record = record or {}
    corpus = load_corpus(data_path, tokenizer=tokenizer, corpus_sha256=record.get("sha256", ""),
                         train_chars=record.get("train_chars", 0))
    train, val = corpus.train.numpy(), corpus.val.numpy()
    bigram = count_bigram(train, val, corpus.vocab_size, UNIGRAM_WEIGHTS_WIDE)
    unigram = count_unigram(train, val, corpus.vocab_size)
    scored = bigram["val_tokens_scored"]
    val_bytes = len(corpus.val_text.encode())  # per byte as prose_setup's bigram: the total over the split's bytes
    return {"corpus": record.get("name", "tinyshakespeare"), "corpus_sha256": corpus.sha256, "tokenizer": tokenizer,
            "vocab_size": corpus.vocab_size, "val_tokens_scored": scored,
            "bigram_unigram_weight": bigram["unigram_weight"], "bigram_weights_tried": list(UNIGRAM_WEIGHTS_WIDE),
            "bigram_nats_per_token": bigram["nll"] / scored, "unigram_nats_per_token": unigram["nll"] / scored,
            "bigram_bits_per_byte": bigram["nll"] / math.log(2) / val_bytes,
            "unigram_bits_per_byte": unigram["nll"] / math.log(2) / val_bytes}


def load() -> dict:
    """docs/baselines.json: '<corpus>/<tokenizer>' -> its baselines ({} before the first is measured)."""
    return json.loads(BASELINES.read_text()) if BASELINES.is_file() else {}


def write(entry: dict) -> Path:
    found = load()
    found[f"{entry['corpus']}/{entry['tokenizer']}"] = entry
    atomic_write_text(BASELINES, json.dumps(dict(sorted(found.items())), indent=2) + "\n")
    return BASELINES


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m embnorm_lib baselines", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-path", default=None, help="the corpus file (default: tiny Shakespeare)")
    p.add_argument("--record", default=None, help="the corpus's record (JSON: name, sha256, train_chars)")
    p.add_argument("--tokenizer", default="char", help="a registered tokenizer (default: char)")
    args = p.parse_args(argv)
    record = None
    if args.record:
        path = Path(args.record)
        if not path.is_file():
            raise SystemExit(f"error: invalid --record {args.record}: no such file; allowed: a corpus record (JSON)")
        record = json.loads(path.read_text())
    try:
        entry = measure(args.data_path, record, args.tokenizer)
    except DataError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"{write(entry)}: {entry['corpus']}/{entry['tokenizer']}: bigram {entry['bigram_nats_per_token']:.4f}, "
          f"unigram {entry['unigram_nats_per_token']:.4f} nats/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
