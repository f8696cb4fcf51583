"""A Hugging Face dataset exported as a corpus of your own: deterministic bytes, a record, flags that train on it,
and one clear line for each thing that can go wrong. The loader is a stand-in (no network in tests)."""
import hashlib
import json
import random
import sys

import pytest

from embnorm_lib.core.config import preset_config
from embnorm_lib.core.corpora import corpus, data
from embnorm_lib.core.errors import DataError
from embnorm_lib.core.training.train import train


class FakeSplit:
    """What export_dataset reads of a `datasets.Dataset`: column names and a column by name."""

    def __init__(self, columns: dict):
        self.columns = columns
        self.column_names = list(columns)
        self._fingerprint = "f00d"

    def __getitem__(self, name):
        return self.columns[name]


def rows(n=400, seed=0):
    rng = random.Random(seed)
    words = ["ship", "sail", "storm", "harbour", "rope", "mast", "tide", "gull"]
    return [" ".join(rng.choice(words) for _ in range(10)) for _ in range(n)]


def loader(split, calls=None):
    def load(name, config, split_name, revision):
        if calls is not None:
            calls.append((name, config, split_name, revision))
        return split
    return load


def test_the_export_is_the_rows_joined_in_order_with_a_record_and_trains_by_its_checksum(tmp_path):
    text_rows, calls = rows(), []
    split = FakeSplit({"text": text_rows, "id": list(range(len(text_rows)))})
    out = tmp_path / "ships.txt"
    record = corpus.export_dataset("org/ships", out, config="small", split="train", revision="abc123",
                                   load=loader(split, calls))
    assert calls == [("org/ships", "small", "train", "abc123")]
    expected = "\n".join(text_rows)
    assert out.read_text(encoding="utf-8") == expected
    assert record["sha256"] == hashlib.sha256(expected.encode()).hexdigest() == data.sha256_of(out)
    assert record["vocab_size"] == len(set(expected)) and record["rows"] == len(text_rows)
    assert json.loads((tmp_path / "ships.txt.json").read_text()) == record
    again = corpus.export_dataset("org/ships", tmp_path / "again.txt", config="small", load=loader(split))
    assert again["sha256"] == record["sha256"]  # same rows, same bytes
    flags = corpus.train_flags(record, out)
    assert f"corpus_sha256={record['sha256']}" in flags and f"vocab_size={record['vocab_size']}" in flags
    cfg = preset_config("tiny", corpus_sha256=record["sha256"], vocab_size=record["vocab_size"], max_iters=2,
                        eval_windows=4, torch_threads=1)
    summary = train(cfg, tmp_path / "run", out, progress=False)
    assert summary["data_sha256"] == record["sha256"] and summary["steps"] == 2


@pytest.mark.parametrize("columns, column, message", [
    ({"text": rows()}, "body", "invalid column 'body' for dataset 'org/ships'; allowed: text"),
    ({"text": rows()[:3]}, "text", "allowed: at least 1,000"),
    ({"text": rows()[:200] + [None] + rows()[:200]}, "text", "row 200 is NoneType; allowed: a column of strings"),
])
def test_a_bad_column_or_too_little_text_is_refused_in_one_line_and_nothing_is_written(tmp_path, columns, column,
                                                                                      message):
    out = tmp_path / "ships.txt"
    with pytest.raises(DataError, match=message.replace("(", r"\(")) as e:
        corpus.export_dataset("org/ships", out, column=column, load=loader(FakeSplit(columns)))
    assert "\n" not in str(e.value) and list(tmp_path.iterdir()) == []


def test_without_the_datasets_package_or_network_the_command_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails as if not installed
    assert corpus.main(["org/ships", "--out", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: a Hugging Face dataset needs the `datasets` package") and err.count("\n") == 1

    class Offline:
        @staticmethod
        def load_dataset(*args, **kwargs):
            raise ConnectionError("Couldn't reach 'org/ships' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setitem(sys.modules, "datasets", Offline)
    assert corpus.main(["org/ships", "--out", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert "could not load Hugging Face dataset 'org/ships'" in err and "Couldn't reach" in err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []
