"""Corpus v2, natural English prose of ~100M characters, built offline from Debian packages (issue 112).

    python -m embnorm_lib prosecorpus --out data/open-prose.txt [--debs DIR]

The open-English corpus (opencorpus.py) is 94% dictionary and glossary entries. This one is paragraphs of running
text: the manuals Debian ships as HTML or POD (Python, PostgreSQL, Perl, the Linux kernel, Django, Octave, Node.js,
Git, Sphinx, Rust's books and standard library, the Debian handbook, reference and FAQ, the GNU coding standards),
the fortune files and tiny Shakespeare. Every package is pinned by version and by the sha256 of its .deb; its
licence is read from the package's own copyright file into the record.

Cleaning, in order:
1. **Markup to paragraphs**: HTML keeps the text of paragraph-like elements (p, li, dd, dt, blockquote) and drops
   code blocks (pre), tables, scripts, navigation and sidebars; POD keeps its text paragraphs and drops verbatim
   (code) ones and its commands, with formatting codes (B<>, C<>, L<text|link>...) reduced to their text.
2. **Prose only** (manual sources): a paragraph is kept when it has at least 8 words, ends like a sentence, and at
   least 70% of its characters are letters or spaces. Fortunes and Shakespeare's speeches are kept whole.
3. Folded to printable ASCII (opencorpus.fold_ascii), one space between words.
4. **Paragraph-level deduplication** across the whole corpus: a paragraph seen before is dropped (navigation text,
   licence footers, documentation that one library copies from another).
5. **Per-source cap** (`Source.max_chars`): no source is more than 35% of the corpus; a capped source keeps its
   documents in the order of their identity's sha256 until the cap.
6. **Document-level split**: a document (one HTML page, one POD file, one fortune, one speech) goes to validation
   when the sha256 of its identity (source and path) falls in 1/40 of the hash range.
7. **Decontamination**: a validation document that shares any 50-character string with the training text is
   dropped (overlap.py); the record gives the share of validation characters inside such a string before and after.

The file is the training documents, then the validation documents; the record names the split point
(`train_chars`), the sha256, counts per source and the overlap. The text itself is never committed."""
from __future__ import annotations

import hashlib
import io
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError, entry
from ..records.io import repo_root
from . import overlap
from .opencorpus import (
    build_command,
    clean,
    fold_ascii,
    fortune_entries,
    read_deb,
    shakespeare_speeches,
)
from .prose_markup import html_paragraphs, is_prose, pod_paragraphs
from .prose_sources import SOURCES, Source

RECIPE_VERSION = 1  # bump when a cleaning rule changes: the sha256 changes with it
VALIDATION_SHARE = 20  # one document in 20: decontamination then drops about half of them
MAX_SOURCE_SHARE = 0.35
REGISTERED_RECORD = repo_root() / "docs" / "corpus-open-prose.json"


def _data_tar(deb: bytes) -> tuple[str, bytes]:
    if not deb.startswith(b"!<arch>\n"):
        raise DataError("invalid .deb: not an ar archive")
    pos = 8
    while pos + 60 <= len(deb):
        name, size = deb[pos:pos + 16].decode().strip(), int(deb[pos + 48:pos + 58].decode().strip())
        if name.rstrip("/").startswith("data.tar"):
            return name, deb[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)
    raise DataError("invalid .deb: no data.tar member")


def deb_members(deb: bytes, include: str) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of the regular files of a .deb's data archive whose path matches `include`, streamed in archive
    order (a 500 MB documentation package is never held whole in memory)."""
    _, data = _data_tar(deb)
    pattern = re.compile(include)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
        for member in tar:
            path = member.name.removeprefix("./")
            if member.isfile() and pattern.search(path):
                yield path, tar.extractfile(member).read()


def package_licences(deb: bytes, package: str) -> list[str]:
    """What the package's copyright file says of its licences, read from the package, never typed here: the
    distinct short names of a machine-readable file's `License:` fields, in order, or the first line of a free-form
    one; where the package's doc folder is a link to another package's, that is said instead."""
    wanted = f"usr/share/doc/{package}"
    for _, payload in deb_members(deb, rf"^{re.escape(wanted)}/copyright$"):
        text = payload.decode("utf-8", errors="replace")
        names = list(dict.fromkeys(m.strip() for m in re.findall(r"(?m)^License:[ \t]+(\S[^\n]*)$", text)))
        return names or [next(line.strip() for line in text.splitlines() if line.strip())[:120]]
    for target in _links(deb, wanted):
        return [f"(its copyright file is the {target} package's: {wanted} links to it)"]
    return ["(no copyright file found)"]


def _links(deb: bytes, path: str) -> list[str]:
    """Where a symbolic link at `path` inside the package points."""
    _, data = _data_tar(deb)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
        return [m.linkname for m in tar if m.issym() and m.name.removeprefix("./") == path]


def source_documents(source: Source, deb: bytes) -> Iterator[tuple[str, list[str]]]:
    """(identity, paragraphs) per document, paragraphs already reduced to text but not yet folded or filtered."""
    for path, payload in deb_members(deb, source.include):
        if source.kind == "fortune":
            for k, entry in enumerate(fortune_entries(payload)):
                yield f"{source.name}:{path}#{k}", [entry]
        elif source.kind == "pod":
            yield f"{source.name}:{path}", pod_paragraphs(payload.decode("utf-8", errors="replace"))
        else:
            yield f"{source.name}:{path}", html_paragraphs(payload.decode("utf-8", errors="replace"))


def identity_hash(identity: str) -> int:
    return int(hashlib.sha256(identity.encode("utf-8")).hexdigest()[:8], 16)


def is_validation(identity: str) -> bool:
    return identity_hash(identity) % VALIDATION_SHARE == 0


def _clean_paragraph(paragraph: str, prose_only: bool) -> str:
    text, _ = fold_ascii(paragraph)
    text = clean(text, "text")
    if prose_only:
        text = " ".join(text.split())  # HTML line breaks inside a paragraph are not line breaks of the text
        return text if is_prose(text) else ""
    return text


def _documents(debs_dir: Path, shakespeare: Path) -> Iterator[tuple[Source | None, str, list[str]]]:
    for source in SOURCES:
        deb = read_deb(debs_dir, source)
        for identity, paragraphs in source_documents(source, deb):
            yield source, identity, paragraphs
    for k, speech in enumerate(shakespeare_speeches(shakespeare.read_text(encoding="utf-8"))):
        yield None, f"tinyshakespeare#{k}", [speech]


def _gather(debs_dir: Path, shakespeare: Path) -> tuple[dict[str, list[tuple[int, str, str]]], dict[str, dict]]:
    """Every source's documents, cleaned, filtered and deduplicated by paragraph across the corpus: (source ->
    [(identity hash, identity, text)], source -> counts)."""
    seen: set[bytes] = set()
    kept: dict[str, list[tuple[int, str, str]]] = {}
    stats: dict[str, dict] = {}
    for source, identity, paragraphs in _documents(debs_dir, shakespeare):
        name = source.name if source else "tinyshakespeare"
        counts = stats.setdefault(name, {"source": name, "paragraphs_kept": 0, "paragraphs_not_prose": 0,
                                         "paragraphs_duplicate": 0})
        prose_only = source is not None and source.kind in ("html", "pod")
        out = []
        for paragraph in paragraphs:
            text = _clean_paragraph(paragraph, prose_only)
            if len(text) < 2:
                counts["paragraphs_not_prose"] += 1
                continue
            key = hashlib.blake2b(text.encode("ascii"), digest_size=16).digest()
            if key in seen:
                counts["paragraphs_duplicate"] += 1
                continue
            seen.add(key)
            out.append(text)
            counts["paragraphs_kept"] += 1
        if out:
            kept.setdefault(name, []).append((identity_hash(identity), identity, "\n".join(out)))
    for counts in stats.values():  # a source whose every paragraph was dropped still reports its counts
        counts.update(documents_train=0, documents_val=0, chars_train=0, chars_val=0, documents_over_cap=0,
                      documents_val_dropped=0, chars_val_dropped=0)
    return kept, stats


def _split(kept: dict, stats: dict) -> tuple[list[tuple[int, str, str, str]], list[tuple[str, str]]]:
    """Each source within its cap (documents in identity-hash order), then split by identity: training documents
    as (source order, identity, source, text) in source then identity order (the file does not depend on an
    archive's member order), validation documents as (source, text)."""
    total = sum(len(doc) + 1 for docs in kept.values() for _, _, doc in docs)
    caps = {s.name: s.max_chars for s in SOURCES}
    order = {name: i for i, name in enumerate([s.name for s in SOURCES] + ["tinyshakespeare"])}
    train, val = [], []
    for name, docs in kept.items():
        counts, budget, used = stats[name], caps.get(name) or total, 0
        for _, identity, doc in sorted(docs):
            if used + len(doc) + 1 > budget:
                counts["documents_over_cap"] += 1
                continue
            used += len(doc) + 1
            if is_validation(identity):
                val.append((name, doc))
            else:
                train.append((order[name], identity, name, doc))
    train.sort()
    for _, _, name, doc in train:
        stats[name]["documents_train"] += 1
        stats[name]["chars_train"] += len(doc) + 1
    return train, val


def _decontaminate(train_text: str, val: list[tuple[str, str]], stats: dict) -> tuple[str, float, float]:
    """The validation text without every document that shares a 50-character string with the training text, and the
    share of validation characters inside such a string before and after."""
    train_hashes = overlap.training_set(train_text.encode("ascii"))
    before = overlap.covered_share("".join(doc + "\n" for _, doc in val).encode("ascii"), train_hashes)
    dirty = overlap.contaminated_documents([doc for _, doc in val], train_hashes)
    for (name, doc), is_dirty in zip(val, dirty, strict=True):
        side = "_val_dropped" if is_dirty else "_val"
        stats[name]["documents" + side] += 1
        stats[name]["chars" + side] += len(doc) + 1
    val_text = "".join(doc + "\n" for (_, doc), is_dirty in zip(val, dirty, strict=True) if not is_dirty)
    return val_text, before, overlap.covered_share(val_text.encode("ascii"), train_hashes)


def build(debs_dir: Path, shakespeare: Path) -> tuple[str, dict]:
    """The corpus text and its record."""
    kept, stats = _gather(debs_dir, shakespeare)
    train, val = _split(kept, stats)
    train_text = "".join(doc + "\n" for *_, doc in train)
    val_text, before, after = _decontaminate(train_text, val, stats)
    text = train_text + val_text
    payload = text.encode("ascii")
    record = {
        "name": "open-prose", "recipe_version": RECIPE_VERSION, "characters": len(text),
        "train_chars": len(train_text), "val_chars": len(val_text), "vocab_size": len(set(text)),
        "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload),
        "validation_rule": (f"a document whose identity's sha256 (source and path) has its first 8 hex digits 0 "
                            f"modulo {VALIDATION_SHARE}, kept only if it shares no {overlap.WIDTH}-character string "
                            f"with the training text"),
        "overlap_width": overlap.WIDTH,
        "val_share_in_shared_string_before": before, "val_share_in_shared_string_after": after,
        "sources": [source_entry(s, read_deb(debs_dir, s)) for s in SOURCES]
        + [{"package": "tinyshakespeare", "licences": ["public domain (Shakespeare)"],
            "sha256": hashlib.sha256(shakespeare.read_bytes()).hexdigest()}],
        "per_source": list(stats.values()),
    }
    return text, record


def source_entry(source: Source, deb: bytes) -> dict:
    return {"name": source.name, "package": source.package, "version": source.version,
            "deb_sha256": hashlib.sha256(deb).hexdigest(), "licences": package_licences(deb, source.package)}


def source_shares(record: dict) -> dict[str, float]:
    """Each source's share of the corpus's characters (training and validation)."""
    chars = {r["source"]: r["chars_train"] + r["chars_val"] for r in record["per_source"]}
    return {name: n / sum(chars.values()) for name, n in chars.items()}


def main(argv=None) -> int:
    built = build_command(argv, __doc__, build, SOURCES, REGISTERED_RECORD, "~505 MB")
    if built is None:
        return 2
    out, record, same = built
    print(f"wrote {out}: {record['characters']:,} characters ({record['train_chars']:,} training, "
          f"{record['val_chars']:,} validation), sha256 {record['sha256']} ({same}); validation characters inside a "
          f"{overlap.WIDTH}-character string also in training: {record['val_share_in_shared_string_before']:.1%} "
          f"before decontamination, {record['val_share_in_shared_string_after']:.2%} after")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
