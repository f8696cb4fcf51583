"""Suite v3: zero-shot multiple-choice tasks for the prose ladder (amendment 17 item 7), drawn only from the open-prose
corpus's validation split.

    python -m embnorm_lib.lmtasks.build_prose --data-path data/open-prose.txt            # counts, nothing written
    python -m embnorm_lib.lmtasks.build_prose --data-path data/open-prose.txt --freeze   # pins manifest_v3.json

Three tasks, as amendment 17 item 7 names them (the validation text keeps paragraphs, one per line, but not the
boundaries of its documents, so "another document" is read as a paragraph at least FAR lines away):
- `next_sentence`: a passage (the sentences of a paragraph before the target, at most CONTEXT characters of them),
  then its true next sentence among 4; the 3 distractors are sentences of paragraphs at least FAR lines away, each
  within 20% of the true sentence's length.
- `last_word`: a sentence's last word held out among 4; the 3 distractors have a training-split frequency within 2x
  of the true word's and a length within 2 characters of it, and none occurs in the passage (case-insensitive).
- `order`: two consecutive sentences after their passage, in their original order or swapped (2 choices).
Accuracy by summed log-likelihood (lm-eval's `acc`). An item whose target sentence occurs verbatim in the training
split is dropped. The few-shot pool comes from the first POOL_FRACTION of the validation paragraphs, test items from
the rest; no two test items of a task share a target sentence. The JSONL bytes are pinned by sha256 once frozen."""
from __future__ import annotations

import argparse
import bisect
import functools
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

from ..core.errors import entry
from ..core.records.io import write_json
from .build import POOL_FRACTION, to_jsonl

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest_v3.json"
SEED = 20261206
CONTEXT = 240  # characters of passage before a target at most
# passage + longest choice: ~105 BPE-4096 tokens at the suite's ~3.9 characters each; a longer one is left-truncated by
# the adapter and counted (truncated_requests)
MAX_ITEM_CHARS = 400
MAX_ITEM_TOKENS = 128  # the prose presets' window: the zero-shot prompt fits it, a one-shot prompt does not
MIN_SENTENCE, MAX_SENTENCE = 24, 160
FAR = 200  # lines between a target's paragraph and a distractor's
LENGTH_TOLERANCE = 0.2  # next_sentence: a distractor within 20% of the true sentence's length
FREQUENCY_RATIO = 2.0  # last_word: a distractor within 2x of the true word's training frequency
N_POOL = 16
TASKS = {
    "next_sentence": "a passage's true next sentence among 4 (3 from paragraphs far away, within 20% of its length)",
    "last_word": "a sentence's held-out last word among 4 (3 of within 2x its training frequency, none in the passage)",
    "order": "two consecutive sentences after their passage: the original order or the swapped one",
}
CHANCE = {"next_sentence": 0.25, "last_word": 0.25, "order": 0.5}
SENTENCE_END = re.compile(r"(?<=[a-z0-9)]{2}[.!?])\s+(?=[A-Z])")
WORD = re.compile(r"[A-Za-z]+")
LAST_WORD = re.compile(r"(?<= )([a-z]{3,12})([.!?])$")


def sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences: split after . ! or ? that follows two lowercase letters, digits or ')' and precedes a
    capital (so 'e.g. Python' and 'v1.2' stay whole)."""
    return [s.strip() for s in SENTENCE_END.split(paragraph) if s.strip()]


def _usable(sentence: str) -> bool:
    return MIN_SENTENCE <= len(sentence) <= MAX_SENTENCE and sentence[-1] in ".!?"


def _passage(before: list[str], longest_choice: int) -> str:
    """The last sentences before a target that fit CONTEXT characters and leave room for the longest choice within
    MAX_ITEM_CHARS ('' if even the nearest does not)."""
    budget = min(CONTEXT, MAX_ITEM_CHARS - longest_choice)
    kept: list[str] = []
    for s in reversed(before):
        if len(" ".join([s, *kept])) > budget:
            break
        kept.insert(0, s)
    return " ".join(kept)


def _targets(lines: list[str], offset: int, seen: frozenset[str]) -> list[tuple[int, str, list[str]]]:
    """(line number, the sentences before the target, the paragraph's sentences from the target on) for every usable
    target: a sentence after at least one other of its paragraph, not verbatim in the training split."""
    out = []
    for k, line in enumerate(lines):
        parts = sentences(line)
        for i in range(1, len(parts)):
            if _usable(parts[i]) and parts[i] not in seen:
                out.append((offset + k, parts[:i], parts[i:]))
    return out


def _item(context: str, true: str, distractors: list[str], rng: random.Random, line: int) -> dict:
    choices = [true, *distractors]
    rng.shuffle(choices)
    return {"context": context, "choices": choices, "label": choices.index(true), "val_line": line}


def _next_sentence(targets, pool: list[tuple[int, str]], rng: random.Random) -> list[dict]:
    by_length = sorted((len(s), line, s) for line, s in pool)
    lengths = [n for n, _, _ in by_length]
    items = []
    for line, before, rest in targets:
        true = rest[0]
        lo = bisect.bisect_left(lengths, len(true) * (1 - LENGTH_TOLERANCE))
        hi = bisect.bisect_right(lengths, len(true) * (1 + LENGTH_TOLERANCE))
        near = [s for _, other, s in by_length[lo:hi] if abs(other - line) >= FAR and s != true]
        passage = _passage(before, 1 + max(len(true), *(len(s) for s in near))) if len(set(near)) >= 3 else ""
        if passage:
            items.append(_item(passage, " " + true, [" " + s for s in rng.sample(sorted(set(near)), 3)], rng, line))
    return items


def _last_word(targets, frequency: Counter, rng: random.Random) -> list[dict]:
    ranked = sorted((n, w) for w, n in frequency.items() if w.islower())
    counts = [n for n, _ in ranked]
    items = []
    for line, before, rest in targets:
        m = LAST_WORD.search(rest[0])
        if not m or frequency[m.group(1)] == 0:
            continue
        word, n = m.group(1), frequency[m.group(1)]
        passage = _passage(before, len(rest[0]) + 3)  # the target sentence is context here, its last word a choice
        if not passage:
            continue
        context = passage + " " + rest[0][:m.start(1)]
        present = {w.lower() for w in WORD.findall(context)} | {word}
        lo, hi = bisect.bisect_left(counts, n / FREQUENCY_RATIO), bisect.bisect_right(counts, n * FREQUENCY_RATIO)
        near = [w for _, w in ranked[lo:hi] if w not in present and abs(len(w) - len(word)) <= 2]
        if len(near) >= 3:
            items.append(_item(context, word + m.group(2), [w + m.group(2) for w in rng.sample(near, 3)], rng, line))
    return items


def _order(targets, rng: random.Random) -> list[dict]:
    items = []
    for line, before, rest in targets:
        if len(rest) < 2 or not _usable(rest[1]):
            continue
        first, second = rest[0], rest[1]
        passage = _passage(before, len(first) + len(second) + 2)
        if not passage:
            continue
        items.append(_item(passage, f" {first} {second}", [f" {second} {first}"], rng, line))
    return items


def _one_per_target(items: list[dict]) -> list[dict]:
    """No two items of a task share a true choice (a sentence repeated in the validation split counts once)."""
    seen, kept = set(), []
    for it in items:
        true = it["choices"][it["label"]]
        if true not in seen:
            seen.add(true)
            kept.append(it)
    return kept


def build_all(val_text: str, train_text: str, seed: int = SEED) -> dict[str, dict[str, list[dict]]]:
    """{task: {"test": items, "fewshot": items}}: every usable test item of the validation split (the pilot sizes the
    suite), and N_POOL few-shot items from its first POOL_FRACTION of paragraphs."""
    lines = val_text.split("\n")
    seen = frozenset(s for line in train_text.split("\n") for s in sentences(line) if _usable(s))
    frequency = Counter(WORD.findall(train_text))
    cut = int(POOL_FRACTION * len(lines))
    pool = [(k, s) for k, line in enumerate(lines) for s in sentences(line) if _usable(s)]
    out: dict[str, dict[str, list[dict]]] = {}
    for i, task in enumerate(TASKS):
        splits = {}
        for j, (name, part, offset) in enumerate((("fewshot", lines[:cut], 0), ("test", lines[cut:], cut))):
            rng = random.Random(seed + 2 * i + j)
            targets = _targets(part, offset, seen)
            rng.shuffle(targets)
            made = (_next_sentence(targets, pool, rng) if task == "next_sentence" else
                    _last_word(targets, frequency, rng) if task == "last_word" else _order(targets, rng))
            made = _one_per_target(made)
            splits[name] = made[:N_POOL] if name == "fewshot" else sorted(made, key=lambda it: it["val_line"])
        out[task] = splits
    return out


def frozen_tasks() -> list[str]:
    return list(json.loads(MANIFEST.read_text())["tasks"]) if MANIFEST.is_file() else []


def digests(suite: dict) -> dict[str, str]:
    return {f"{task}/{split}": hashlib.sha256(to_jsonl(items)).hexdigest()
            for task, splits in suite.items() for split, items in splits.items()}


def corpus_texts(data_path) -> tuple[str, str, str]:
    """(validation text, training text, corpus sha256) of the open-prose corpus at data_path, split where the prose
    presets split it."""
    from ..core.corpora.data import load_corpus
    from ..core.presets import PRESETS

    preset = PRESETS["prose-gpt2-0-x4"]
    corpus = load_corpus(data_path, corpus_sha256=preset["corpus_sha256"], train_chars=preset["train_chars"])
    return corpus.val_text, corpus.train_text, corpus.sha256


@functools.lru_cache(maxsize=2)
def corpus_sha256() -> str:
    """The corpus the suite's items are drawn from (its pinned manifest's record): runs on it are scored on v3."""
    return json.loads(MANIFEST.read_text())["corpus_sha256"]


def verified_suite(data_path) -> dict:
    """The suite built from the corpus, checked against the pinned hashes of manifest_v3.json."""
    val_text, train_text, _ = corpus_texts(data_path)
    suite = build_all(val_text, train_text)
    want = json.loads(MANIFEST.read_text())["sha256"]
    bad = sorted(k for k, v in digests(suite).items() if want.get(k) != v)
    if bad or set(want) != set(digests(suite)):
        raise RuntimeError(f"suite v3 does not match its pinned hashes ({', '.join(bad) or 'task set'}); allowed: "
                           f"the suite from embnorm_lib/lmtasks/build_prose.py at seed {SEED}")
    return suite


def manifest(suite: dict, corpus_sha256: str) -> dict:
    return {"seed": SEED, "corpus_sha256": corpus_sha256, "tasks": TASKS, "chance": CHANCE,
            "settings": {"context_chars": CONTEXT, "max_item_chars": MAX_ITEM_CHARS,
                         "sentence_chars": [MIN_SENTENCE, MAX_SENTENCE], "far_lines": FAR,
                         "length_tolerance": LENGTH_TOLERANCE, "frequency_ratio": FREQUENCY_RATIO,
                         "pool_fraction": POOL_FRACTION, "n_pool": N_POOL},
            "counts": {f"{t}/{s}": len(items) for t, sp in suite.items() for s, items in sp.items()},
            "sha256": digests(suite)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m embnorm_lib.lmtasks.build_prose", description=__doc__.splitlines()[0])
    p.add_argument("--data-path", required=True, help="the open-prose corpus file")
    p.add_argument("--freeze", action="store_true", help=f"write {MANIFEST.name} (pins the suite's bytes)")
    args = p.parse_args(argv)
    val_text, train_text, sha = corpus_texts(args.data_path)
    record = manifest(build_all(val_text, train_text), sha)
    if args.freeze:
        write_json(MANIFEST, record)
    print(json.dumps(record["counts"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
