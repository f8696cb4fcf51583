"""Deterministic multiple-choice tasks built only from the validation split of tiny Shakespeare.

Each item is {"context", "choices" (4), "label"}; every prompt is short enough that a 3-shot prompt
(4 items) fits a 128-character window. Items whose context or correct continuation appears verbatim in
the training split are dropped. The few-shot pool comes from the first POOL_FRACTION of the
validation split, test items from the rest, so no few-shot example overlaps a test item.

The JSONL bytes are pinned by sha256 in manifest.json and checked whenever a task is loaded."""
from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

from ..core.corpora.data import load_corpus
from ..core.records.io import write_json

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
SEED = 20261122
N_TEST, N_POOL = 100, 24
POOL_FRACTION = 0.2
MAX_ITEM_CHARS = 31  # context + longest choice; (3 shots + query) x (31 + 1 delimiter) <= 128

TASKS = {
    "word_cloze": "next word: the true word vs 3 distractors of similar frequency and length",
    "shuffled": "continuation: the true next 8 characters vs 3 shuffles of the same characters",
    "next_line": "next line: after the end of a line, the start of the true next line vs those of 3 other lines",
    "next_speaker": "next speaker: which of 4 speakers of the same play opens the next speech",
}
CHANCE = {name: 0.25 for name in TASKS}


def _ok(train_text: str, *parts: str) -> bool:
    return all(len(p) < 6 or p not in train_text for p in parts)


def _word_cloze(text: str, offset: int, train_text: str, rng: random.Random, n: int) -> list[dict]:
    words = re.findall(r"[A-Za-z]+", text)
    freq = Counter(w for w in words if 3 <= len(w) <= 8)
    ranked = [w for w, _ in freq.most_common()]
    rank = {w: i for i, w in enumerate(ranked)}
    spots = [m for m in re.finditer(r"(?<= )([A-Za-z]{3,8})(?![A-Za-z])", text) if m.start() >= 20]
    rng.shuffle(spots)
    items = []
    for m in spots:
        word, p = m.group(1), m.start()
        context = text[p - 20:p]
        if word not in rank or not _ok(train_text, context + word):
            continue
        r = rank[word]
        near = [w for w in ranked[max(0, r - 30): r + 31] if w != word and abs(len(w) - len(word)) <= 1
                and w.lower() != word.lower()]
        if len(near) < 3:
            continue
        items.append(_item(context, word, rng.sample(near, 3), rng, offset + p))
        if len(items) == n:
            break
    return items


def _shuffled(text: str, offset: int, train_text: str, rng: random.Random, n: int) -> list[dict]:
    items = []
    starts = list(range(20, len(text) - 8))
    rng.shuffle(starts)
    for p in starts:
        context, true = text[p - 20:p], text[p:p + 8]
        if "\n" in true or len(set(true)) < 6 or not _ok(train_text, context + true):
            continue
        shuffles = set()
        for _ in range(50):
            s = "".join(rng.sample(true, len(true)))
            if s != true:
                shuffles.add(s)
            if len(shuffles) == 3:
                break
        if len(shuffles) < 3:
            continue
        items.append(_item(context, true, sorted(shuffles), rng, offset + p))
        if len(items) == n:
            break
    return items


def _lines(text: str) -> list[tuple[int, str]]:
    out, pos = [], 0
    for line in text.split("\n"):
        out.append((pos, line))
        pos += len(line) + 1
    return out


def _next_line(text: str, offset: int, train_text: str, rng: random.Random, n: int) -> list[dict]:
    lines = _lines(text)
    verse = [(i, p, line) for i, (p, line) in enumerate(lines) if len(line) >= 10 and not line.endswith(":")]
    pool = [line[:10] for _, _, line in verse]
    pairs = [(p, lines[i][1], lines[i + 1][1]) for i, (p, line) in enumerate(lines[:-1])
             if len(line) >= 10 and not line.endswith(":") and len(lines[i + 1][1]) >= 10
             and not lines[i + 1][1].endswith(":")]
    rng.shuffle(pairs)
    items = []
    for p, first, second in pairs:
        context, true = first[-18:] + "\n", second[:10]  # the tail of one line, the head of the next
        if not _ok(train_text, context + true):
            continue
        distractors = set()
        while len(distractors) < 3:
            d = rng.choice(pool)
            if d != true:
                distractors.add(d)
        items.append(_item(context, true, sorted(distractors), rng, offset + p))
        if len(items) == n:
            break
    return items


def _next_speaker(text: str, offset: int, train_text: str, rng: random.Random, n: int) -> list[dict]:
    turns = [(m.start(), m.group(1)) for m in re.finditer(r"\n\n([A-Z][A-Z ]{1,9}):\n", text)]
    items, candidates = [], list(range(1, len(turns)))
    rng.shuffle(candidates)
    for t in candidates:
        p, name = turns[t]
        context = text[max(0, p - 18):p] + "\n\n"
        if "\n\n" in context[:-2] or len(context) < 12:
            continue
        # distractors: other speakers of the same stretch of the play (the 40 turns around this one)
        nearby = sorted({nm for _, nm in turns[max(0, t - 20): t + 20]} - {name})
        if len(nearby) < 3 or not _ok(train_text, context + name + ":"):
            continue
        items.append(_item(context, name + ":", [d + ":" for d in rng.sample(nearby, 3)], rng, offset + p))
        if len(items) == n:
            break
    return items


BUILDERS = {"word_cloze": _word_cloze, "shuffled": _shuffled, "next_line": _next_line,
            "next_speaker": _next_speaker}


def _item(context: str, true: str, distractors: list[str], rng: random.Random, position: int,
          max_chars: int = MAX_ITEM_CHARS) -> dict:
    """One multiple-choice item, the true answer at a random place among the distractors (suite v1 and v2)."""
    choices = [true, *distractors]
    rng.shuffle(choices)
    item = {"context": context, "choices": choices, "label": choices.index(true), "val_offset": position}
    assert len(context) + max(map(len, choices)) <= max_chars, item
    return item


def build_all(val_text: str, train_text: str, seed: int = SEED) -> dict[str, dict[str, list[dict]]]:
    """{task: {"test": items, "fewshot": items}}; `val_offset` locates each item in the validation split."""
    cut = int(POOL_FRACTION * len(val_text))
    out = {}
    for i, (name, builder) in enumerate(BUILDERS.items()):
        out[name] = {
            "fewshot": builder(val_text[:cut], 0, train_text, random.Random(seed + 2 * i), N_POOL),
            "test": builder(val_text[cut:], cut, train_text, random.Random(seed + 2 * i + 1), N_TEST),
        }
    return out


def to_jsonl(items: list[dict]) -> bytes:
    return "".join(json.dumps(it, sort_keys=True) + "\n" for it in items).encode("utf-8")


def digests(suite: dict) -> dict[str, str]:
    return {f"{task}/{split}": hashlib.sha256(to_jsonl(items)).hexdigest()
            for task, splits in suite.items() for split, items in splits.items()}


def pinned() -> dict[str, str]:
    return json.loads(MANIFEST.read_text())["sha256"]


@functools.lru_cache(maxsize=4)
def verified_suite(data_path=None) -> dict:
    """Build the suite from the (checksum-verified) corpus and check it against the pinned hashes."""
    corpus = load_corpus(data_path)
    suite = build_all(corpus.val_text, corpus.train_text)
    got, want = digests(suite), pinned()
    bad = sorted(k for k in want if got.get(k) != want[k])
    if bad or set(got) != set(want):
        raise RuntimeError(f"task suite does not match its pinned hashes ({', '.join(bad) or 'task set'}); "
                           f"allowed: the suite from embnorm_lib/lmtasks/build.py at seed {SEED}")
    return suite


def write_manifest(data_path=None) -> dict:
    corpus = load_corpus(data_path)
    suite = build_all(corpus.val_text, corpus.train_text)
    manifest = {"seed": SEED, "n_test": N_TEST, "n_pool": N_POOL, "tasks": TASKS, "chance": CHANCE,
                "counts": {f"{t}/{s}": len(items) for t, sp in suite.items() for s, items in sp.items()},
                "sha256": digests(suite)}
    write_json(MANIFEST, manifest)
    return manifest


if __name__ == "__main__":
    print(json.dumps(write_manifest(), indent=2))
