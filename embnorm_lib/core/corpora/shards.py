"""Token shards in the formats GPT-2-class training uses (issue 115): train on ids someone else tokenized.

    python -m embnorm_lib run --preset gpt2-124m --variant ln --seed 0 --data-path data/openwebtext/
    python -m embnorm_lib shards data/fineweb10B/        # the layout, token counts and the id runs record

Two layouts, detected when `--data-path` is a directory:
- **nanoGPT** (`data/<name>/prepare.py`): `train.bin` and `val.bin`, raw uint16 token ids, no header.
- **llm.c / modded-nanogpt** (FineWeb, `*_train_*.bin` and `*_val_*.bin`): each file a header of 256 int32 (magic
  20240520, version 1, token count) then that many uint16 ids. Shards of one split are read in name order as one
  sequence. llama-3 shards (magic 20240801, uint32 ids) are refused by name.

The files are memory-mapped: a batch reads its windows only. Every check is made before a run directory is written
and fails in one line: bad magic or version, a count that disagrees with the file's size, an empty split, an id at or
above the model's vocab_size (naming the smallest vocab_size that would hold it). A shard set is named by the sha256
of its files' names and contents (`shards_sha256`; recorded as the run's `corpus_sha256`), so a run resumed or
reproduced on other files is refused. Batches depend on the seed alone, so every arm of one seed sees the same ones."""
from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import DataError, entry

HEADER_INTS = 256
MAGIC = 20240520  # llm.c's GPT-2 token shards (uint16 ids)
VERSION = 1
MAGIC_LLAMA3 = 20240801  # llm.c's llama-3 shards (uint32 ids): another format
LAYOUTS = ("nanogpt", "fineweb")
ALLOWED = ("a directory holding nanoGPT's train.bin and val.bin, or llm.c/FineWeb shards *_train_*.bin and "
           "*_val_*.bin")


@dataclass(frozen=True)
class ShardSet:
    layout: str
    train: tuple[Path, ...]
    val: tuple[Path, ...]


def find_shards(directory: str | Path) -> ShardSet:
    """The layout of `directory` and its files per split (in name order)."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise DataError(f"invalid shard directory {directory}: not a directory; allowed: {ALLOWED}")
    if (directory / "train.bin").is_file() or (directory / "val.bin").is_file():
        missing = [n for n in ("train.bin", "val.bin") if not (directory / n).is_file()]
        if missing:
            raise DataError(f"invalid shard directory {directory}: {missing[0]} is missing; allowed: {ALLOWED}")
        return ShardSet("nanogpt", (directory / "train.bin",), (directory / "val.bin",))
    train = tuple(sorted(p for p in directory.glob("*_train_*.bin") if p.is_file()))
    val = tuple(sorted(p for p in directory.glob("*_val_*.bin") if p.is_file()))
    if not train and not val:
        found = sorted(p.name for p in directory.iterdir())[:5]
        raise DataError(f"invalid shard directory {directory}: no token shards (found: {', '.join(found) or 'nothing'})"
                        f"; allowed: {ALLOWED}")
    if not train or not val:
        raise DataError(f"invalid shard directory {directory}: no {'training' if not train else 'validation'} shard "
                        f"({'*_train_*.bin' if not train else '*_val_*.bin'}); allowed: {ALLOWED}")
    return ShardSet("fineweb", train, val)


def read_shard(path: Path, layout: str) -> np.ndarray:
    """A shard's token ids as a read-only memory map (uint16), its header checked against the file's size."""
    size = path.stat().st_size
    if layout == "nanogpt":
        if size == 0 or size % 2:
            raise DataError(f"invalid shard {path}: {size} bytes; allowed: a positive, even number of bytes "
                            f"(uint16 token ids, as nanoGPT's prepare.py writes them)")
        return np.memmap(path, dtype=np.uint16, mode="r")
    if size < HEADER_INTS * 4:
        raise DataError(f"invalid shard {path}: {size} bytes, shorter than the {HEADER_INTS * 4}-byte header; "
                        f"allowed: an llm.c token shard")
    header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    magic, version, count = int(header[0]), int(header[1]), int(header[2])
    if magic == MAGIC_LLAMA3:
        raise DataError(f"invalid shard {path}: magic {MAGIC_LLAMA3} is llm.c's llama-3 format (uint32 ids); allowed: "
                        f"GPT-2 token shards, magic {MAGIC}")
    if magic != MAGIC:
        raise DataError(f"invalid shard {path}: magic {magic}; allowed: {MAGIC} (llm.c / modded-nanogpt GPT-2 shards)")
    if version != VERSION:
        raise DataError(f"invalid shard {path}: version {version}; allowed: {VERSION}")
    if count <= 0 or size != HEADER_INTS * 4 + 2 * count:
        raise DataError(f"invalid shard {path}: the header says {count} tokens but the file holds "
                        f"{(size - HEADER_INTS * 4) / 2:g}; allowed: a header count equal to the ids after it")
    return np.memmap(path, dtype=np.uint16, mode="r", offset=HEADER_INTS * 4, shape=(count,))


class TokenStream:
    """One split's shards read as one sequence of ids. Indexing with a LongTensor gathers those positions only
    (what BatchSampler and the validation windows ask), as int64."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.offsets = np.cumsum([0] + [len(a) for a in arrays])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index) -> torch.Tensor:
        if not isinstance(index, torch.Tensor):
            raise TypeError("a TokenStream is read by a LongTensor of positions")
        flat = index.reshape(-1).numpy()
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"position out of range 0..{len(self) - 1}")
        which = np.searchsorted(self.offsets, flat, side="right") - 1
        out = np.empty(flat.shape, dtype=np.int64)
        for k in np.unique(which):
            at = which == k
            out[at] = self.arrays[k][flat[at] - self.offsets[k]]
        return torch.from_numpy(out).view(index.shape)

    def max_id(self) -> int:
        return max(int(a.max()) for a in self.arrays)


def shards_sha256(shards: ShardSet) -> str:
    """The sha256 of the shard set: per split, each file's name and the sha256 of its bytes, in order."""
    digest = hashlib.sha256(shards.layout.encode())
    for split, files in (("train", shards.train), ("val", shards.val)):
        for path in files:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
            digest.update(f"\n{split}\t{path.name}\t{h.hexdigest()}".encode())
    return digest.hexdigest()


@dataclass
class ShardCorpus:
    """Token shards in the place of a text corpus (data.Corpus's fields that training reads). There is no text: a
    loss per character equals the loss per token, and the diagnostics' token classes are empty."""

    train: TokenStream
    val: TokenStream
    path: Path
    sha256: str
    layout: str
    max_id: int
    tokenizer: str = "shards"
    tokenizer_sha256: str = ""
    chars: list[str] = field(default_factory=list)
    text: str = ""
    char_lengths: None = None
    n_train_chars: int = 0

    def check_vocab(self, vocab_size: int) -> None:
        if self.max_id >= vocab_size:
            raise DataError(f"invalid vocab_size={vocab_size} for the shards in {self.path}: they hold token id "
                            f"{self.max_id}; allowed: {self.max_id + 1} or more (nanoGPT pads GPT-2's 50,257 to "
                            f"50,304)")


_LOADED: dict[tuple, ShardCorpus] = {}


def load_shards(directory: str | Path, corpus_sha256: str = "") -> ShardCorpus:
    """The shards of `directory`, checked; `corpus_sha256` (a run's record), where given, must be theirs."""
    shards = find_shards(directory)
    files = shards.train + shards.val
    key = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _LOADED:
        train = TokenStream([read_shard(p, shards.layout) for p in shards.train])
        val = TokenStream([read_shard(p, shards.layout) for p in shards.val])
        _LOADED[key] = ShardCorpus(train, val, Path(directory).expanduser().resolve(), shards_sha256(shards),
                                   shards.layout, max(train.max_id(), val.max_id()))
    corpus = _LOADED[key]
    if corpus_sha256 and corpus_sha256 != corpus.sha256:
        raise DataError(f"invalid corpus_sha256={corpus_sha256[:12]}... for the shards in {corpus.path} (theirs: "
                        f"{corpus.sha256[:12]}...); allowed: the shard set the run was trained on")
    return corpus


def shard_overrides(data_path, overrides: dict) -> dict:
    """A `data_path` that is a directory of token shards sets tokenizer=shards and corpus_sha256 to the set's sha256
    (a value given for either is kept, and checked when the run loads the shards); any other path changes nothing."""
    if not isinstance(data_path, (str, Path)) or not data_path or not Path(data_path).expanduser().is_dir():
        return overrides
    tokenizer = overrides.get("tokenizer", "shards")
    if tokenizer != "shards":
        raise DataError(f"invalid tokenizer={tokenizer!r} with data_path {data_path}, a directory; allowed: shards "
                        "(token ids from shard files), or a text file as data_path")
    return {**overrides, "tokenizer": "shards",
            "corpus_sha256": overrides.get("corpus_sha256") or load_shards(data_path).sha256}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory")
    args = p.parse_args(argv)
    try:
        corpus = load_shards(args.directory)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"layout {corpus.layout}: {len(corpus.train):,} training and {len(corpus.val):,} validation tokens, "
          f"largest id {corpus.max_id} (vocab_size >= {corpus.max_id + 1})")
    print(f"corpus_sha256 {corpus.sha256}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
