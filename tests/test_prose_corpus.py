"""The prose ladder's set-up (issue 112): markup to paragraphs, the prose filter, the 50-character overlap measure and
decontamination, the corpus builder on synthetic packages, the byte-level tokenizer and the two embedding recipes."""
from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
import torch

from embnorm_lib.core.config import RunConfig
from embnorm_lib.core.corpora import overlap, prosecorpus
from embnorm_lib.core.corpora.prose_markup import html_paragraphs, is_prose, pod_paragraphs
from embnorm_lib.core.errors import ConfigError, DataError
from embnorm_lib.core.nets.model import GPT
from embnorm_lib.core.recipes import RECIPES, get_recipe
from tests.test_ladder_data import make_deb

PAGE = """<html class="sidebar-visible"><head><title>T</title><script>var x = "no";</script></head><body>
<nav><p>Navigation text that is long enough to be a paragraph of prose, but it is navigation.</p></nav>
<div class="sphinxsidebar"><p>Sidebar text that is long enough to be a paragraph of prose, but it is a sidebar.</p></div>
<div class="body"><h1>A title</h1>
<p>The first paragraph explains how a <code>dict</code> keeps
its keys in insertion order, which matters here.</p>
<pre>for k in d:
    print(k)  # code, never prose</pre>
<ul><li>A list item that is a full sentence of prose about the library.</li></ul>
<table><tr><td>A table cell that would otherwise read like a sentence of prose.</td></tr></table>
<p>Second paragraph &amp; an entity, still one paragraph of running text.</p></div></body></html>"""


def test_html_keeps_paragraphs_and_drops_code_navigation_and_tables():
    paragraphs = html_paragraphs(PAGE)
    assert paragraphs[0] == ("The first paragraph explains how a dict keeps its keys in insertion order, which "
                             "matters here.")
    assert "A list item that is a full sentence of prose about the library." in paragraphs
    assert "Second paragraph & an entity, still one paragraph of running text." in paragraphs
    text = " ".join(paragraphs)
    for absent in ("print(k)", "Navigation", "Sidebar", "table cell", "A title", "var x"):
        assert absent not in text


def test_pod_keeps_text_drops_verbatim_and_resolves_codes():
    pod = ("=head1 NAME\n\nperlfoo - a page\n\n=head1 DESCRIPTION\n\nUse B<bold> and C<< $x->y >> with "
           "L<the manual|perlfunc> or L<https://www.perl.org/>, E<lt>tagE<gt>.\n\n    my $code = 1;\n\n"
           "=begin html\n\n<p>raw</p>\n\n=end html\n\nLast X<index>paragraph.\n\n=cut\n\nsub ignored {}\n")
    assert pod_paragraphs(pod) == [
        "perlfoo - a page",
        "Use bold and $x->y with the manual or https://www.perl.org/, <tag>.",
        "Last paragraph."]


@pytest.mark.parametrize(("text", "kept"), [
    ("This is a sentence of running prose with more than eight words.", True),
    ("Too short to count as prose.", False),
    ("This has enough words but does not end like a sentence at all", False),
    ("x = f(a[0], b[1]) + g(c[2], d[3]) * h(e[4]) - k(z[9]) / 2;", False),
])
def test_is_prose(text, kept):
    assert is_prose(text) is kept


def test_overlap_share_counts_characters_inside_shared_strings():
    train = b"a" * 10 + b"the quick brown fox jumps over the lazy dog and keeps running on" + b"b" * 10
    shared = b"the quick brown fox jumps over the lazy dog and ke"  # 50 characters, in training
    val = b"z" * 50 + shared + b"y" * 100
    hashes = overlap.training_set(train)
    assert overlap.covered_share(val, hashes) == pytest.approx(50 / 200)
    assert overlap.covered_share(b"q" * 200, hashes) == 0.0
    flags = overlap.contaminated_documents([val.decode(), "q" * 80, shared.decode()[:49]], hashes)
    assert flags == [True, False, False]  # 49 characters are not a 50-character string


def test_window_hashes_match_across_chunks(monkeypatch):
    data = bytes(range(256)) * 40
    whole = overlap.window_hashes(data)
    monkeypatch.setattr(overlap, "_CHUNK", 97)
    assert (overlap.window_hashes(data) == whole).all()


SHARED = "This sentence is shared by many pages and is long enough to be caught by the check."


def _sources(tmp_path):
    """Two tiny synthetic packages standing in for the registered ones, pinned by their own checksums."""
    import random

    words = ("apple", "river", "stone", "cloud", "method", "kernel", "window", "garden", "letter", "signal", "bridge",
             "forest", "number", "engine", "yellow", "silver", "market", "winter", "candle", "thread")

    def para(k, p):  # a sentence of its own: no 50-character string in common with another page's
        rng = random.Random(1000 * p + k)
        return "The " + " ".join(rng.choice(words) for _ in range(14)) + " ends here."

    shared = SHARED
    pages = {f"usr/share/doc/toy/html/page{p}.html":
             ("<p>" + "</p><p>".join(para(k, p) for k in range(3)) + "</p>"
              + (f"<p>{shared}</p><p>{shared} Then page {p} goes on.</p>" if p % 7 == 0 else "")).encode() for p in range(120)}
    pages["usr/share/doc/toy-doc/copyright"] = b"Format: x\n\nFiles: *\nLicense: MIT\n\nLicense: MIT\n"
    fortunes = {"usr/share/games/fortunes/toy": b"A fortune.\n%\nAnother fortune.\n%\nA fortune.\n"}
    out = []
    for name, package, kind, include, files in (
            ("toy", "toy-doc", "html", r"^usr/share/doc/toy/html/.*\.html$", pages),
            ("fortunes", "fortunes", "fortune", r"^usr/share/games/fortunes/[^.]+$", fortunes)):
        deb = make_deb(files)
        (tmp_path / f"{package}_1.0_all.deb").write_bytes(deb)
        out.append(prosecorpus.Source(name, package, "1.0", hashlib.sha256(deb).hexdigest(), kind, include))
    return tuple(out)


def test_build_splits_by_document_dedups_and_decontaminates(tmp_path, monkeypatch):
    monkeypatch.setattr(prosecorpus, "SOURCES", _sources(tmp_path))
    monkeypatch.setattr(prosecorpus, "VALIDATION_SHARE", 4)
    shakespeare = tmp_path / "input.txt"
    shakespeare.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n")
    text, record = prosecorpus.build(tmp_path, shakespeare)
    assert record["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    train, val = text[:record["train_chars"]], text[record["train_chars"]:]
    assert text.count("A fortune.") == 1  # paragraph-level deduplication
    assert text.splitlines().count(SHARED) == 1  # ... across documents too
    stats = {r["source"]: r for r in record["per_source"]}
    assert stats["toy"]["documents_val"] > 0 and stats["toy"]["documents_train"] > 0
    assert record["val_share_in_shared_string_after"] <= record["val_share_in_shared_string_before"]
    # a kept validation document (so each of its paragraphs) shares no 50-character string with training
    assert not any(overlap.contaminated_documents(val.splitlines(), overlap.training_set(train.encode())))
    assert stats["toy"]["documents_val_dropped"] + stats["toy"]["documents_val"] > 0
    licences = {s.get("name"): s["licences"] for s in record["sources"]}
    assert licences["toy"] == ["MIT"]


def test_build_refuses_a_package_with_another_checksum(tmp_path, monkeypatch):
    sources = _sources(tmp_path)
    monkeypatch.setattr(prosecorpus, "SOURCES", (dataclasses.replace(sources[0], deb_sha256="0" * 64),))
    with pytest.raises(DataError, match="no toy-doc 1.0 .deb with sha256 000000000000"):
        prosecorpus.build(tmp_path, tmp_path / "missing.txt")


def test_cli_refuses_bad_paths_in_one_line(tmp_path, capsys):
    assert prosecorpus.main(["--out", str(tmp_path / "x.json")]) == 2
    assert "invalid --out" in capsys.readouterr().err
    assert prosecorpus.main(["--out", str(tmp_path / "x.txt"), "--debs", str(tmp_path / "absent")]) == 2
    assert "invalid --debs" in capsys.readouterr().err


def test_registered_sources_are_pinned():
    for source in prosecorpus.SOURCES:
        assert len(source.deb_sha256) == 64, source.name
    assert len({s.name for s in prosecorpus.SOURCES}) == len(prosecorpus.SOURCES)


def test_committed_record_meets_the_issue():
    path = prosecorpus.REGISTERED_RECORD
    if not path.is_file():
        pytest.skip("no committed open-prose record")
    record = json.loads(path.read_text())
    assert record["characters"] >= 100_000_000
    shares = prosecorpus.source_shares(record)
    assert max(shares.values()) <= prosecorpus.MAX_SOURCE_SHARE
    assert record["val_share_in_shared_string_after"] < record["val_share_in_shared_string_before"]


# -- the byte-level tokenizer ----------------------------------------------------------------------------------------


def test_byte_alphabet_is_the_one_hf_tokenizers_uses():
    from tokenizers import pre_tokenizers

    from embnorm_lib.core.corpora.tokenizer import byte_alphabet

    table = byte_alphabet()
    assert len(set(table.values())) == 256
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert table[ord(" ")] == "\u0120" and table[ord("\n")] == "\u010a"


def test_byte_level_tokens_measure_bytes_and_round_trip(tmp_path):
    from embnorm_lib.core.corpora.tokenizer import TOKENIZERS, bpe_tokenizer, encode_text, token_texts

    spec = TOKENIZERS["bytebpe-4096"]
    text = "".join(f"Line {i} says that the model reads bytes, not characters.\n" for i in range(400))
    tok, sha = bpe_tokenizer("bytebpe-4096", text, "a" * 64, out_dir=tmp_path)
    texts = token_texts(tok, spec)
    ids = encode_text(tok, spec, text)
    assert "".join(texts[i] for i in ids) == text  # a token's text is its bytes: lengths are bytes
    assert sum(len(texts[i]) for i in ids) == len(text.encode())
    assert tok.decode(ids) == text
    assert len(sha) == 64


# -- the recipes -----------------------------------------------------------------------------------------------------


def test_recipes_set_up_the_embeddings_as_named():
    gpt2 = GPT(RunConfig(**{**dict(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=300),
                            **get_recipe("gpt2").overrides}))
    speed = GPT(RunConfig(**{**dict(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=300),
                             **get_recipe("speedrun").overrides}))
    assert gpt2.lm_head.weight is gpt2.wte.weight
    assert gpt2.wte.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert speed.lm_head.weight is not speed.wte.weight
    assert speed.wte.weight.std().item() == pytest.approx(1.0, rel=0.1)
    assert torch.count_nonzero(speed.lm_head.weight) == 0
    # the shared blocks draw the same values under both recipes (the embeddings are drawn first, same count)
    assert torch.equal(gpt2.blocks[0].attn.c_attn.weight, speed.blocks[0].attn.c_attn.weight)
    assert set(RECIPES) == {"gpt2", "speedrun"}


def test_zero_head_needs_an_untied_head():
    with pytest.raises(ConfigError, match="invalid head_init"):
        RunConfig(head_init="zero", tie_embeddings=True)
    with pytest.raises(ConfigError, match="invalid head_init"):
        RunConfig(head_init="ones", tie_embeddings=False)
    with pytest.raises(ConfigError, match="unknown recipe 'modded'"):
        get_recipe("modded")
