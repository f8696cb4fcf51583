"""An openly licensed English corpus of ~50M characters, built offline from Debian packages (issue 76).

    python -m embnorm_lib opencorpus --out data/open-english.txt [--debs DIR]

Tiny Shakespeare (1 MB) starves every model above ~0.8M parameters at 20 tokens per parameter, so the adequate-data
ladder trains on this file instead. Its sources are dictionaries and quotation collections that Debian ships as
packages (a registry this project's machines reach), pinned by version and by the sha256 of each .deb:

- GCIDE (1913 Webster plus later additions), FOLDOC, the Jargon File, the Devil's Dictionary, WordNet 3.0 (all in
  dictd format: an index of headwords and byte ranges into the text); the fortune quotation files;
- tiny Shakespeare (shared/ or the cache, as for every run), split into speeches.

A *document* is one dictionary entry, one quotation, or one speech. Each is cleaned of its format's markup (dictd
pronunciation keys, source tags, cross-reference braces, WordNet's relation lists, indentation), folded to printable
ASCII, and de-duplicated. A document goes to validation when its sha256 falls in 1/40 of the hash range, so the
validation text is unseen text, not the tail of a document the model trained on. The file is the training
documents in source order, then the validation documents; the record (`--record`, JSON) gives the split point
(`train_chars`, which a run's config takes as its own field), the sha256, counts per source, the package versions,
the .deb checksums and the licences. The text itself is never committed: anyone can rebuild it bit for bit.

Its successor for natural prose (corpus v2, issue 112) is prosecorpus.py, which reuses this module's package reader,
ASCII folding and fortune and Shakespeare splitting."""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError, entry
from ..records.io import atomic_write_bytes, atomic_write_text, repo_root
from .data import resolve_data_path

RECIPE_VERSION = 1  # bump when a cleaning rule changes: the sha256 changes with it
VALIDATION_SHARE = 40  # one document in 40 (by its sha256) is validation
REGISTERED_RECORD = repo_root() / "docs" / "corpus-open-english.json"


@dataclass(frozen=True)
class Source:
    name: str  # the record's name for the text
    package: str  # Debian package, version and .deb checksum (bookworm)
    version: str
    deb_sha256: str
    kind: str  # "dictd" or "fortune"
    paths: tuple[str, ...]  # inside the package: dictd basenames, or fortune files
    licence: str  # as the package's copyright file states it


SOURCES = (
    Source("gcide", "dict-gcide", "0.48.5+nmu2", "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f",
           "dictd", ("usr/share/dictd/gcide",), "GPL-2+ (GCIDE); the 1913 Webster text is in the public domain"),
    Source("wordnet", "dict-wn", "1:3.0-37", "ed99e0bf162815dc1cc69de3727eedd7112ddf170badf83dbde26209e0724a8c",
           "dictd", ("usr/share/dictd/wn",), "WordNet 3.0 licence (permissive, Princeton University)"),
    Source("foldoc", "dict-foldoc", "20230119-1", "745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3",
           "dictd", ("usr/share/dictd/foldoc",), "GNU FDL 1.1 or later"),
    Source("jargon", "dict-jargon", "4.4.7-3.1", "405f8168d7994ed2cb71407bb95493daec2e9aa66fc0461dafa74a9d6728a8c1",
           "dictd", ("usr/share/dictd/jargon",), "public domain"),
    Source("devil", "dict-devil", "1.0-13.1", "6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154",
           "dictd", ("usr/share/dictd/devil",), "public domain (copyright expired)"),
    Source("fortunes", "fortunes", "1:1.99.1-7.3", "41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5",
           "fortune", ("usr/share/games/fortunes/",), "BSD fortune files (see the package's copyright file)"),
    Source("fortunes-min", "fortunes-min", "1:1.99.1-7.3",
           "9eed5b45064e41133dae0967cf3a17588ad77c014fcc7bf1527fa3ea48e44d07", "fortune",
           ("usr/share/games/fortunes/",), "BSD fortune files (see the package's copyright file)"),
)


def dictionary_share(record: dict) -> float:
    """The share of a built corpus's characters (training and validation) that come from dictionaries and glossaries
    (the dictd sources), from its record's per-source counts: the corpus is mostly reference text, not prose."""
    kinds = {s.name: s.kind for s in SOURCES}
    chars = {r["source"]: r["chars_train"] + r["chars_val"] for r in record["per_source"]}
    return sum(n for name, n in chars.items() if kinds.get(name) == "dictd") / sum(chars.values())


# -- reading a .deb without dpkg: an `ar` archive whose data.tar.* member holds the files -----------------------


def deb_files(deb: bytes, prefix: str) -> dict[str, bytes]:
    """The regular files under `prefix` (a path inside the package, no leading '/') of a .deb's data archive."""
    if not deb.startswith(b"!<arch>\n"):
        raise DataError("invalid .deb: not an ar archive")
    pos, data = 8, None
    while pos + 60 <= len(deb):
        name, size = deb[pos:pos + 16].decode().strip(), int(deb[pos + 48:pos + 58].decode().strip())
        if name.rstrip("/").startswith("data.tar"):
            data = deb[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)  # members are 2-byte aligned
    if data is None:
        raise DataError("invalid .deb: no data.tar member")
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:  # gz, xz or bz2, detected
        for member in tar:
            path = member.name.removeprefix("./")
            if member.isfile() and path.startswith(prefix):
                out[path] = tar.extractfile(member).read()
    return out


# -- documents per format ------------------------------------------------------------------------------------------

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64(number: str) -> int:
    value = 0
    for c in number:
        value = value * 64 + _B64[c]
    return value


def dictd_entries(index: bytes, dict_dz: bytes) -> Iterator[str]:
    """Each entry of a dictd dictionary once (headwords that share a byte range share an entry), in file order;
    the dictionary's own metadata (headwords '00-...') is left out."""
    text = gzip.decompress(dict_dz)  # dictzip is gzip with a random-access table in its header
    ranges, metadata = set(), set()
    for line in index.decode("utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            # '00-database-info', '00-gcide-long', '00databaseurl'...: the same metadata under several names
            (metadata if re.match(r"00-?[a-z]", parts[0]) else ranges).add((_b64(parts[1]), _b64(parts[2])))
    for start, length in sorted(ranges - metadata):
        yield text[start:start + length].decode("utf-8", errors="replace")


def fortune_entries(payload: bytes) -> Iterator[str]:
    yield from re.split(r"(?m)^%\s*$", payload.decode("utf-8", errors="replace"))


def shakespeare_speeches(text: str) -> Iterator[str]:
    yield from re.split(r"\n\s*\n", text)


# -- cleaning ------------------------------------------------------------------------------------------------------

# GCIDE's character codes: a letter with a diacritic mark before or after it ([=a], ['e], [i^]), and a few names
_MARKED_LETTER = re.compile(r"\[[=.~\-\"`',^]([A-Za-z]{1,2})\]|\[([A-Za-z]{1,2})[\^\"~]\]")
_NAMED = {"[ae]": "ae", "[AE]": "AE", "[oe]": "oe", "[OE]": "OE", "[imac]": "i", "[aum]": "a", "[asl]": "a",
          "[udd]": "u", "[eth]": "th", "[th]": "th", "[ng]": "ng", "[deg]": " degrees", "[sect]": "section ",
          "[root]": "root "}
_PRONUNCIATION = re.compile(r"\s*\\[^\\\n]{1,80}\\\s*(\([^()\n]{0,120}\))?")  # \Ab"a*ca\ ([a^]b"[.a]*k[.a])
_SOURCE_TAG_LINE = re.compile(r"(?m)^\s*\[[^\]\n]*\]\s*$")  # [1913 Webster], [PJC], [WordNet 1.5] ...
_WORDNET_RELATIONS = re.compile(r"\[(?:syn|ant|also|see|pertainym|derived|domain)[a-z ]*:[^\]]*\]", re.S)
_FOLD = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2014": "--", "\u2013": "-",
                       "\t": " ", "\u00a0": " ", "\u00df": "ss", "\u00e6": "ae", "\u00c6": "AE", "\u0153": "oe",
                       "\u00f8": "o", "\u00d8": "O", "\u0142": "l"})
_PRINTABLE = set(chr(c) for c in range(32, 127)) | {"\n"}


def fold_ascii(text: str) -> tuple[str, int]:
    """Printable ASCII and newlines: accents dropped (NFKD), typographic quotes and dashes mapped; returns the text
    and how many characters had no ASCII form and were left out."""
    folded = unicodedata.normalize("NFKD", text.translate(_FOLD))
    kept = [c for c in folded if c in _PRINTABLE or unicodedata.combining(c)]
    kept = [c for c in kept if not unicodedata.combining(c)]
    dropped = sum(1 for c in folded if c not in _PRINTABLE and not unicodedata.combining(c))
    return "".join(kept), dropped


def clean(doc: str, kind: str) -> str:
    """One document without its format's markup, one space between words, no blank-line runs."""
    if kind == "dictd":
        first, _, rest = doc.lstrip().partition("\n")  # the headword line: "Abaca \\Ab"a*ca\\ ([a^]b...), n."
        first = re.sub(r" +([,.;:])", r"\1", _PRONUNCIATION.sub(" ", first, count=1))
        doc = first + "\n" + rest
        doc = _SOURCE_TAG_LINE.sub("", doc)
        doc = _WORDNET_RELATIONS.sub("", doc)
        doc = _MARKED_LETTER.sub(lambda m: m.group(1) or m.group(2), doc)
        for code, plain in _NAMED.items():
            doc = doc.replace(code, plain)
        doc = doc.replace("{", "").replace("}", "")
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in doc.splitlines()]
    return re.sub(r"\n{2,}", "\n", "\n".join(lines)).strip()


def is_validation(doc: str) -> bool:
    return int(hashlib.sha256(doc.encode("utf-8")).hexdigest()[:8], 16) % VALIDATION_SHARE == 0


# -- assembling ----------------------------------------------------------------------------------------------------


def fetch_debs(directory: Path, sources=SOURCES) -> None:
    """`apt-get download` each pinned package into `directory` (Debian's own client; needs apt and a mirror)."""
    wanted = [f"{s.package}={s.version}" for s in sources]
    try:
        subprocess.run(["apt-get", "download", *wanted], cwd=directory, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise DataError("apt-get not found: download the pinned .deb files elsewhere and pass --debs DIR") from None
    except subprocess.CalledProcessError as e:
        last = (e.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise DataError(f"apt-get download failed ({last}); run 'apt-get update' first, or pass --debs DIR") from None


def read_deb(directory: Path, source: Source) -> bytes:
    matches = sorted(directory.glob(f"{source.package}_*.deb"))
    for path in matches:
        payload = path.read_bytes()
        if hashlib.sha256(payload).hexdigest() == source.deb_sha256:
            return payload
    found = ", ".join(p.name for p in matches) or "none"
    raise DataError(f"no {source.package} {source.version} .deb with sha256 {source.deb_sha256[:12]}... in "
                    f"{directory} (found: {found}); allowed: the pinned package file")


def source_documents(source: Source, deb: bytes) -> Iterator[str]:
    files = deb_files(deb, source.paths[0] if source.kind == "fortune" else "usr/share/dictd/")
    if source.kind == "dictd":
        base = source.paths[0]
        yield from dictd_entries(files[base + ".index"], files[base + ".dict.dz"])
        return
    for path in sorted(files):  # plain fortune files: no .dat (an index) or .u8 (a UTF-8 duplicate) siblings
        if "." not in Path(path).name and "/off/" not in path:
            yield from fortune_entries(files[path])


def build(debs_dir: Path, shakespeare: Path) -> tuple[str, dict]:
    """The corpus text and its record."""
    seen: set[str] = set()
    train, val, per_source = [], [], []
    dropped_total = 0
    streams = [(s.name, s.kind, source_documents(s, read_deb(debs_dir, s))) for s in SOURCES]
    streams.append(("tinyshakespeare", "speech", shakespeare_speeches(shakespeare.read_text(encoding="utf-8"))))
    for name, kind, docs in streams:
        counts = {"source": name, "documents_train": 0, "documents_val": 0, "chars_train": 0, "chars_val": 0,
                  "duplicates": 0}
        for raw in docs:
            doc, dropped = fold_ascii(clean(raw, kind))
            dropped_total += dropped
            doc = clean(doc, "text")  # folding can leave double spaces (a dropped symbol between words)
            if len(doc) < 2:
                continue
            if doc in seen:
                counts["duplicates"] += 1
                continue
            seen.add(doc)
            side = "val" if is_validation(doc) else "train"
            (val if side == "val" else train).append(doc)
            counts[f"documents_{side}"] += 1
            counts[f"chars_{side}"] += len(doc) + 1
        per_source.append(counts)
    train_text = "".join(d + "\n" for d in train)
    text = train_text + "".join(d + "\n" for d in val)
    payload = text.encode("ascii")
    record = {
        "name": "open-english", "recipe_version": RECIPE_VERSION, "characters": len(text),
        "train_chars": len(train_text), "val_chars": len(text) - len(train_text),
        "vocab_size": len(set(text)), "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload),
        "validation_rule": f"a document whose sha256's first 8 hex digits are 0 modulo {VALIDATION_SHARE}",
        "characters_without_ascii_form_dropped": dropped_total,
        "sources": [{"package": s.package, "version": s.version, "deb_sha256": s.deb_sha256, "licence": s.licence}
                    for s in SOURCES] + [{"package": "tinyshakespeare", "licence": "public domain (Shakespeare)",
                                          "sha256": hashlib.sha256(shakespeare.read_bytes()).hexdigest()}],
        "per_source": per_source,
    }
    return text, record


def train_flags(record: dict, out: str | Path) -> str:
    return (f"--set corpus_sha256={record['sha256']} --set vocab_size={record['vocab_size']} "
            f"--set train_chars={record['train_chars']} --data-path {out}")


def writable_parent(path: Path) -> bool:
    """Whether the file's folder exists and can be written, or can be created (its nearest existing ancestor is a
    folder that can be written)."""
    existing = next(p for p in path.absolute().parents if p.exists())
    return existing.is_dir() and os.access(existing, os.W_OK)


def build_command(argv, doc: str, build_text, sources, registered_record: Path, download_size: str
                  ) -> tuple[Path, dict, str] | None:
    """A corpus builder's command line (this module's and prosecorpus.py's): the paths checked before the build
    (minutes: a path that cannot be written would lose it, or keep the text without its record), the pinned
    packages fetched or read, `build_text(debs, shakespeare)` run, the text and its record written. Returns (out,
    record, how it compares with the registered record), or None after a one-line error."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the text file to write")
    p.add_argument("--record", default=None, help="where to write the JSON record (default: OUT.json)")
    p.add_argument("--debs", default=None, help="a folder holding the pinned .deb files (default: apt-get download)")
    p.add_argument("--shakespeare", default=None, help="tiny Shakespeare's input.txt (default: the usual places)")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        record_path = Path(args.record or str(out) + ".json")
        for flag, path in (("--out", out), ("--record", record_path)):
            if (flag == "--out" and path.suffix == ".json") or path.is_dir() or not writable_parent(path):
                raise DataError(f"invalid {flag} {path}; allowed: a file path in a folder that can be written "
                                "(or created)" + (" (the text, not its .json record)" if flag == "--out" else ""))
        if record_path.resolve() == out.resolve():
            raise DataError(f"invalid --record {record_path}: it is --out itself; allowed: another file path")
        shakespeare = resolve_data_path(args.shakespeare)
        with tempfile.TemporaryDirectory() as tmp:
            debs = Path(args.debs) if args.debs else Path(tmp)
            if not debs.is_dir():
                raise DataError(f"invalid --debs {debs}; allowed: a folder of .deb files")
            if not args.debs:
                print(f"downloading the pinned Debian packages (apt-get download, {download_size})...",
                      file=sys.stderr)
                fetch_debs(debs, sources)
            text, record = build_text(debs, shakespeare)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    atomic_write_bytes(out, text.encode("ascii"))
    record["file"] = out.name
    atomic_write_text(record_path, json.dumps(record, indent=2) + "\n")
    if registered_record.is_file():
        registered = json.loads(registered_record.read_text())["sha256"]
        same = "the registered corpus" if registered == record["sha256"] else f"NOT the registered {registered[:12]}"
    else:
        same = "no registered record to compare"
    return out, record, same


def main(argv=None) -> int:
    built = build_command(argv, __doc__, build, SOURCES, REGISTERED_RECORD, "~32 MB")
    if built is None:
        return 2
    out, record, same = built
    print(f"wrote {out}: {record['characters']:,} characters ({record['train_chars']:,} training, "
          f"{record['val_chars']:,} validation), {record['vocab_size']} symbols, sha256 {record['sha256']} "
          f"({same})\ntrain on it with: {train_flags(record, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
