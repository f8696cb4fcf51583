"""Suite v2 (issue 17): multiple-choice tasks from the validation split, sized so that the suite can see an effect.

Same rules as suite v1 (build.py): items only from the validation split, few-shot pool from its first
POOL_FRACTION and test items from the rest, items whose context + answer occur verbatim in the training split
dropped, bytes pinned by sha256 (manifest_v2.json). What changes: thousands of items per task (target spans of
one task never overlap), a 40-character context, every choice of a task the same length where the task allows
(so the summed log-likelihood compares like with like), and tasks chosen on a pilot so that a weak model sits
between chance and ceiling (`python -m embnorm_lib.lmtasks.pilot`). An item fits a 1-shot prompt in a
128-character window and a 0-shot prompt in a 64-character one."""
from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ..core.corpora.data import load_corpus
from ..core.records.io import write_json
from .build import POOL_FRACTION, _ok, to_jsonl
from .build import _item as build_v1_item

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest_v2.json"
SEED = 20261123
CONTEXT = 40
MAX_ITEM_CHARS = 56  # context + longest choice: (1 shot + query) x (56 + 1) <= 128 + 1, and 56 <= 64 + 1
N_TEST, N_POOL = 2000, 32


def _item(context: str, true: str, distractors: list[str], rng: random.Random, position: int) -> dict:
    return build_v1_item(context, true, distractors, rng, position, max_chars=MAX_ITEM_CHARS)


def _spread(spots: list[int], width: int, n: int, accept: Callable[[int], dict | None]) -> list[dict]:
    """Items at the given positions (already shuffled) whose target spans [p, p + width) do not overlap."""
    taken: set[int] = set()
    items = []
    for p in spots:
        if any(q in taken for q in range(p - width + 1, p + width)):
            continue
        item = accept(p)
        if item is None:
            continue
        taken.add(p)
        items.append(item)
        if len(items) == n:
            break
    return items


def _word_cloze(text: str, offset: int, train: str, rng: random.Random, n: int) -> list[dict]:
    """The true next word vs 3 words of similar frequency rank, each of the same length."""
    freq = Counter(w for w in re.findall(r"[A-Za-z]+", text) if 3 <= len(w) <= 8)
    ranked = [w for w, _ in freq.most_common()]
    rank = {w: i for i, w in enumerate(ranked)}
    spots = [m.start() for m in re.finditer(r"(?<= )[A-Za-z]{3,8}(?![A-Za-z])", text) if m.start() >= CONTEXT]
    rng.shuffle(spots)

    def accept(p):
        word = re.match(r"[A-Za-z]+", text[p:]).group(0)
        context = text[p - CONTEXT:p]
        if word not in rank or not _ok(train, context + word):
            return None
        near = [w for w in ranked[max(0, rank[word] - 40): rank[word] + 41]
                if len(w) == len(word) and w.lower() != word.lower()]
        if len(near) < 3:
            return None
        return _item(context, word, rng.sample(near, 3), rng, offset + p)
    return _spread(spots, 8, n, accept)


def _word_completion(text: str, offset: int, train: str, rng: random.Random, n: int) -> list[dict]:
    """After the first two letters of a word of 5-9 letters: its remaining letters vs the remainders of 3 other
    words of the validation text with the same two-letter start and the same length."""
    words = sorted({w for w in re.findall(r"[A-Za-z]+", text) if 5 <= len(w) <= 9})
    by_start: dict[tuple[str, int], list[str]] = {}
    for w in words:
        by_start.setdefault((w[:2], len(w)), []).append(w)
    spots = [m.start() + 2 for m in re.finditer(r"(?<![A-Za-z])[A-Za-z]{5,9}(?![A-Za-z])", text)
             if m.start() >= CONTEXT]
    rng.shuffle(spots)

    def accept(p):
        word = re.match(r"[A-Za-z]+", text[p - 2:]).group(0)
        others = [w for w in by_start.get((word[:2], len(word)), []) if w != word]
        context = text[p - CONTEXT:p]
        if len(others) < 3 or not _ok(train, context + word[2:]):
            return None
        return _item(context, word[2:], [w[2:] for w in rng.sample(others, 3)], rng, offset + p)
    return _spread(spots, 8, n, accept)


def _continuation(text: str, offset: int, train: str, rng: random.Random, n: int, width: int = 10) -> list[dict]:
    """At the start of a word: the true next `width` characters vs 3 spans of the validation text that also start
    a word with the same letter (so the first character carries no information); no line breaks."""
    starts = [m.start() for m in re.finditer(r"(?<= )[A-Za-z]", text)
              if m.start() >= CONTEXT and "\n" not in text[m.start():m.start() + width]]
    by_letter: dict[str, list[int]] = {}
    for p in starts:
        by_letter.setdefault(text[p], []).append(p)
    spots = list(starts)
    rng.shuffle(spots)

    def accept(p):
        true, context = text[p:p + width], text[p - CONTEXT:p]
        if not _ok(train, context + true):
            return None
        pool = by_letter[text[p]]
        distractors: set[str] = set()
        for _ in range(50):
            q = rng.choice(pool)
            span = text[q:q + width]
            if abs(q - p) >= width and span != true:
                distractors.add(span)
            if len(distractors) == 3:
                break
        if len(distractors) < 3:
            return None
        return _item(context, true, sorted(distractors), rng, offset + p)
    return _spread(spots, width, n, accept)


def _swapped(text: str, offset: int, train: str, rng: random.Random, n: int, width: int = 8) -> list[dict]:
    """The true next `width` characters vs 3 copies in which one pair of neighbouring, different characters is
    swapped (a typo-like edit: only local spelling knowledge tells them apart); no line breaks."""
    spots = [p for p in range(CONTEXT, len(text) - width) if "\n" not in text[p:p + width]]
    rng.shuffle(spots)

    def accept(p):
        true, context = text[p:p + width], text[p - CONTEXT:p]
        pairs = [i for i in range(width - 1) if true[i] != true[i + 1]]
        if len(pairs) < 3 or not _ok(train, context + true):
            return None
        edits = [true[:i] + true[i + 1] + true[i] + true[i + 2:] for i in rng.sample(pairs, 3)]
        if len(set(edits)) < 3:
            return None
        return _item(context, true, edits, rng, offset + p)
    return _spread(spots, width, n, accept)


def _punctuation(text: str, offset: int, train: str, rng: random.Random, n: int) -> list[dict]:
    """After a word followed in the text by a punctuation mark: the true mark and the character after it vs the
    3 other marks of , . ; : ! ? (the most frequent first) with the same following character."""
    marks = [m for m, _ in Counter(c for c in text if c in ",.;:!?").most_common()]
    spots = [m.start() for m in re.finditer(r"(?<=[A-Za-z])[,.;:!?](?=[ \n])", text) if m.start() >= CONTEXT]
    rng.shuffle(spots)

    def accept(p):
        true, context = text[p:p + 2], text[p - CONTEXT:p]
        if not _ok(train, context + true):
            return None
        others = [m + true[1] for m in marks if m != true[0]][:3]
        return _item(context, true, others, rng, offset + p)
    return _spread(spots, 2, n, accept)


# candidate tasks: the pilot measures each; TASKS (frozen after the pilot) names those the suite keeps
CANDIDATES = {
    "word_cloze": (_word_cloze, "next word: the true word vs 3 words of the same length and similar frequency"),
    "word_completion": (_word_completion, "word completion: after a word's first two letters, its rest vs the "
                                          "rests of 3 other words with the same start and length"),
    "continuation": (_continuation, "continuation: the true next 10 characters from a word start vs 3 spans "
                                    "starting a word with the same letter"),
    "swapped": (_swapped, "spelling: the true next 8 characters vs 3 copies with two neighbouring characters "
                          "swapped"),
    "punctuation": (_punctuation, "punctuation: the true mark after a word vs the 3 other most frequent marks"),
}
CHANCE = 0.25


def build_tasks(val_text: str, train_text: str, names, n_test: int = N_TEST, n_pool: int = N_POOL,
                seed: int = SEED) -> dict[str, dict[str, list[dict]]]:
    """{task: {"test": items, "fewshot": items}} for the named candidates; `val_offset` locates each item."""
    cut = int(POOL_FRACTION * len(val_text))
    out = {}
    for name in names:
        builder = CANDIDATES[name][0]
        i = list(CANDIDATES).index(name)
        out[name] = {"fewshot": builder(val_text[:cut], 0, train_text, random.Random(seed + 2 * i), n_pool),
                     "test": builder(val_text[cut:], cut, train_text, random.Random(seed + 2 * i + 1), n_test)}
    return out


def digests(suite: dict) -> dict[str, str]:
    return {f"{task}/{split}": hashlib.sha256(to_jsonl(items)).hexdigest()
            for task, splits in suite.items() for split, items in splits.items()}


def frozen_tasks() -> list[str]:
    return list(json.loads(MANIFEST.read_text())["tasks"]) if MANIFEST.is_file() else []


@functools.lru_cache(maxsize=4)
def verified_suite(data_path=None) -> dict:
    """Suite v2 from the (checksum-verified) corpus, checked against its pinned hashes."""
    corpus = load_corpus(data_path)
    suite = build_tasks(corpus.val_text, corpus.train_text, frozen_tasks())
    got, want = digests(suite), json.loads(MANIFEST.read_text())["sha256"]
    bad = sorted(k for k in want if got.get(k) != want[k])
    if bad or set(got) != set(want):
        raise RuntimeError(f"task suite v2 does not match its pinned hashes ({', '.join(bad) or 'task set'}); "
                           f"allowed: the suite from embnorm_lib/lmtasks/build_v2.py at seed {SEED}")
    return suite


def write_manifest(names, data_path=None, pilot: dict | None = None) -> dict:
    """Freeze suite v2: the chosen tasks, their item counts and hashes (and the pilot that chose them)."""
    corpus = load_corpus(data_path)
    suite = build_tasks(corpus.val_text, corpus.train_text, names)
    manifest = {"seed": SEED, "n_test": N_TEST, "n_pool": N_POOL, "context_chars": CONTEXT,
                "tasks": {n: CANDIDATES[n][1] for n in names}, "chance": {n: CHANCE for n in names},
                "counts": {f"{t}/{s}": len(items) for t, sp in suite.items() for s, items in sp.items()},
                "sha256": digests(suite), "pilot": pilot or {}}
    write_json(MANIFEST, manifest)
    return manifest
