import pytest
import torch

from embnorm_lib.core.corpora import data
from embnorm_lib.core.corpora.data import BatchSampler, DataError, load_corpus, resolve_data_path, validation_windows


def test_corpus_is_verified_and_split_90_10(corpus):
    n = len(corpus.text)
    assert n == data.CORPUS_BYTES  # pure ASCII: one character per byte
    assert corpus.vocab_size == 65
    assert len(corpus.train) == int(0.9 * n) and len(corpus.train) + len(corpus.val) == n
    assert corpus.decode(corpus.train[:14]) == corpus.text[:14]
    assert corpus.decode(corpus.val[:50]) == corpus.text[len(corpus.train):len(corpus.train) + 50]


def test_checksum_mismatch_is_refused_with_one_line_error(data_path, tmp_path):
    bad = tmp_path / "input.txt"
    payload = bytearray(open(data_path, "rb").read())
    payload[1000] ^= 0x01
    bad.write_bytes(bytes(payload))
    with pytest.raises(DataError) as err:
        load_corpus(bad)
    assert "checksum mismatch" in str(err.value) and str(bad) in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_path_is_named(tmp_path):
    with pytest.raises(DataError, match="data file not found: .*nope.txt; allowed: an existing corpus file"):
        resolve_data_path(tmp_path / "nope.txt")


def test_resolution_order_param_then_env_then_cache_then_download(data_path, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(data.ENV_CACHE, str(cache))
    monkeypatch.setenv(data.ENV_DATA, data_path)
    assert resolve_data_path(None) == resolve_data_path(data_path)  # env var used when no parameter
    monkeypatch.delenv(data.ENV_DATA)
    # nothing cached, but a shared copy beside the checkout: it is used, nothing is downloaded
    shared = tmp_path / "shared" / "input.txt"
    shared.parent.mkdir()
    shared.write_bytes(open(data_path, "rb").read())
    monkeypatch.setattr(data, "shared_copy", lambda: shared)
    monkeypatch.setattr(data.download, "__defaults__", ("file:///nonexistent/input.txt",))
    assert resolve_data_path(None) == shared
    monkeypatch.setattr(data, "shared_copy", lambda: tmp_path / "no-shared" / "input.txt")
    # nothing cached and no shared copy: the download runs (served here from a file:// URL of the shared copy)
    monkeypatch.setattr(data, "CORPUS_URL", f"file://{data_path}")
    monkeypatch.setattr(data.download, "__defaults__", (f"file://{data_path}",))
    fetched = resolve_data_path(None)
    assert fetched == cache / "tinyshakespeare" / "input.txt" and fetched.is_file()
    # now cached: no download needed even if the URL is dead
    monkeypatch.setattr(data.download, "__defaults__", ("file:///nonexistent/input.txt",))
    assert resolve_data_path(None) == fetched


def test_corrupt_download_is_refused_and_not_cached(data_path, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(open(data_path, "rb").read()[:-10])
    dest = tmp_path / "cache" / "input.txt"
    with pytest.raises(DataError, match="sha256"):
        data.download(dest, url=f"file://{bad}")
    assert not dest.exists()


def test_sampler_is_deterministic_per_seed(corpus):
    a, b, c = (BatchSampler(corpus.train, 32, 4, seed) for seed in (7, 7, 8))
    for _ in range(5):
        xa, ya = a.next_batch()
        xb, yb = b.next_batch()
        xc, _ = c.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb) and not torch.equal(xa, xc)
        assert torch.equal(xa[:, 1:], ya[:, :-1])  # targets are inputs shifted by one


def test_sampler_state_round_trip(corpus):
    a = BatchSampler(corpus.train, 32, 4, 1)
    a.next_batch()
    state = a.state_dict()
    expected = a.next_batch()
    b = BatchSampler(corpus.train, 32, 4, 99)
    b.load_state_dict(state)
    assert torch.equal(b.next_batch()[0], expected[0])


def test_validation_windows_cover_the_split_once(corpus):
    x, y = validation_windows(corpus.val, 128)
    assert x.shape == y.shape == ((len(corpus.val) - 1) // 128, 128)
    assert torch.equal(x.flatten()[1:], y.flatten()[:-1])
    assert torch.equal(x.flatten(), corpus.val[: x.numel()])
