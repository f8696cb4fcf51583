"""Suite v3, the prose ladder's zero-shot tasks (lmtasks/build_prose.py): every item keeps the rules its docstring
states, on planted text; the pinned manifest matches the corpus where the corpus is on this machine."""
from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from embnorm_lib.lmtasks import build_prose as suite

WORDS = [f"{a}{b}" for a in ("tab", "mod", "fil", "rec", "pat", "ser", "lin", "obj") for b in
         ("le", "ule", "ter", "ord", "ch", "ver", "ker", "ject", "ing", "ed")]


def _sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, weights=[1 + (i % 7) ** 2 for i in range(len(WORDS))], k=rng.randint(5, 14))
    return words[0].capitalize() + " " + " ".join(words[1:]) + rng.choice(".!?")


def _text(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    return "".join(" ".join(_sentence(rng) for _ in range(rng.randint(1, 5))) + "\n" for _ in range(lines))


@pytest.fixture(scope="module")
def planted():
    train, val = _text(1, 3000), _text(2, 700)
    return train, val, suite.build_all(val, train)


def test_sentences_split_after_a_sentence_end_only():
    assert suite.sentences("See e.g. Python 3.11 here. Then it ends! Does it?") == [
        "See e.g. Python 3.11 here.", "Then it ends!", "Does it?"]


def test_every_item_keeps_its_tasks_rules(planted):
    train, val, built = planted
    lines = val.split("\n")
    cut = int(suite.POOL_FRACTION * len(lines))
    frequency = Counter(re.findall(r"[A-Za-z]+", train))
    seen = {s for line in train.split("\n") for s in suite.sentences(line)}
    for task, splits in built.items():
        assert len(splits["test"]) > 50 and len(splits["fewshot"]) == suite.N_POOL, task
        trues = [it["choices"][it["label"]] for it in splits["test"]]
        assert len(set(trues)) == len(trues)  # one item per target sentence
        for name, items in splits.items():
            for it in items:
                true = it["choices"][it["label"]]
                assert (it["val_line"] < cut) == (name == "fewshot")
                assert it["context"] and len(it["context"]) + max(map(len, it["choices"])) <= suite.MAX_ITEM_CHARS
                assert it["context"] in lines[it["val_line"]]
                if task == "next_sentence":
                    assert len(it["choices"]) == 4 and true.strip() not in seen
                    assert (it["context"] + true) in lines[it["val_line"]]
                    for other in it["choices"]:
                        assert abs(len(other) - len(true)) <= suite.LENGTH_TOLERANCE * len(true) + 1
                        assert other == true or other.strip() not in "\n".join(
                            lines[max(0, it["val_line"] - suite.FAR + 1): it["val_line"] + suite.FAR])
                elif task == "last_word":
                    assert len(it["choices"]) == 4 and (it["context"] + true) in lines[it["val_line"]]
                    present = {w.lower() for w in re.findall(r"[A-Za-z]+", it["context"])}
                    n = frequency[true[:-1]]
                    for other in it["choices"]:
                        if other != true:
                            word = other[:-1]
                            assert word not in present and n / 2 <= frequency[word] <= 2 * n
                            assert abs(len(word) - len(true[:-1])) <= 2 and other[-1] == true[-1]
                else:
                    assert len(it["choices"]) == 2 and (it["context"] + true) in lines[it["val_line"]]
                    wrong = it["choices"][1 - it["label"]]
                    assert sorted(wrong) == sorted(true) and wrong != true


def test_the_suite_is_the_same_bytes_each_time_and_moves_with_its_seed(planted):
    train, val, built = planted
    assert suite.digests(suite.build_all(val, train)) == suite.digests(built)
    assert suite.digests(suite.build_all(val, train, seed=suite.SEED + 1)) != suite.digests(built)


def test_a_sentence_seen_in_training_is_never_a_target(planted):
    train, val, built = planted
    target = built["next_sentence"]["test"][0]["choices"][built["next_sentence"]["test"][0]["label"]].strip()
    again = suite.build_all(val, train + target + "\n")
    assert all(it["choices"][it["label"]].strip() != target for task in again.values() for it in task["test"])


def test_the_pinned_manifest_records_the_rules_it_was_built_with():
    manifest = json.loads(suite.MANIFEST.read_text())
    assert manifest["seed"] == suite.SEED and manifest["tasks"] == suite.TASKS
    assert manifest["settings"]["max_item_chars"] == suite.MAX_ITEM_CHARS
    assert manifest["settings"]["far_lines"] == suite.FAR and manifest["chance"] == suite.CHANCE
    assert set(manifest["sha256"]) == {f"{t}/{s}" for t in suite.TASKS for s in ("fewshot", "test")}
    from embnorm_lib.core.scoring.lm_eval_adapter import get_suite

    assert sorted(get_suite("v3").tasks) == sorted(f"prose3_{t}" for t in suite.TASKS) and get_suite("v3").shots == (0,)
    for task in suite.TASKS:  # one lm-eval YAML per task, reading the suite through utils.load_items_v3
        text = (suite.HERE / f"prose3_{task}.yaml").read_text()
        assert f"task: prose3_{task}" in text and f"task_name: {task}" in text


PROSE = os.environ.get("EMBNORM_PROSE", str(Path(__file__).resolve().parents[2] / "data" / "open-prose.txt"))


@pytest.mark.slow  # ~75 s: reads and splits the 108 MB corpus
@pytest.mark.skipif(not Path(PROSE).is_file(), reason="the open-prose corpus is not on this machine ($EMBNORM_PROSE)")
def test_the_corpus_builds_the_pinned_suite():
    built = suite.verified_suite(PROSE)
    counts = json.loads(suite.MANIFEST.read_text())["counts"]
    assert {f"{t}/{s}": len(items) for t, sp in built.items() for s, items in sp.items()} == counts


@pytest.mark.slow  # ~40 s: the corpus, then 3 x 8 items through lm-eval
@pytest.mark.skipif(not Path(PROSE).is_file(), reason="the open-prose corpus is not on this machine ($EMBNORM_PROSE)")
def test_the_suite_scores_through_lm_eval_with_the_runs_tokenizer_uncut():
    import torch
    from tokenizers import Tokenizer

    from embnorm_lib.core.config import preset_config
    from embnorm_lib.core.nets.model import GPT
    from embnorm_lib.core.scoring.lm_eval_adapter import SubwordLM, evaluate_lm

    tokenizers = sorted((Path(__file__).resolve().parents[1] / "runs" / "tokenizers").glob("bytebpe-4096-1335ce2b*.json"))
    if not tokenizers:
        pytest.skip("the prose ladder's tokenizer is not under runs/tokenizers")
    torch.manual_seed(0)
    lm = SubwordLM(GPT(preset_config("prose-gpt2-0-x4", seed=100)), Tokenizer.from_file(str(tokenizers[0])))
    result = evaluate_lm(lm, data_path=PROSE, suite="v3", limit=8)
    assert {t: len(v["0shot"]) for t, v in result["items"].items()} == {f"prose3_{t}": 8 for t in suite.TASKS}
    assert result["truncated_requests"] == 0 and result["skipped_shots"] == []


def test_the_pilots_mdes_follow_the_runs_spread():
    """Identical runs: no item spread and no run spread, so no detectable-effect floor; runs that disagree on items
    and differ in accuracy give positive MDEs at the prose family's Holm level."""
    import numpy as np
    import pandas as pd

    from embnorm_lib.lmtasks import pilot_prose

    rng = np.random.default_rng(0)
    base = {t: rng.integers(0, 2, 400) for t in suite.TASKS}
    same = {(run, t): base[t] for run in ("a", "b", "c") for t in suite.TASKS}
    table = pd.DataFrame([{"run": run, "task": t, "acc": float(base[t].mean())} for run in "abc" for t in suite.TASKS])
    flat = pilot_prose.mde_figures(table, same)
    assert flat["mde_item_sampling_lower_bound"] == 0 and flat["mde_from_run_spread"] == 0
    noisy = {(run, t): np.where(rng.random(400) < 0.1 * (k + 1), 1 - base[t], base[t])
             for k, run in enumerate("abc") for t in suite.TASKS}
    table = pd.DataFrame([{"run": run, "task": t, "acc": float(noisy[(run, t)].mean())} for run in "abc"
                          for t in suite.TASKS])
    figures = pilot_prose.mde_figures(table, noisy)
    assert figures["alpha"] == 0.05 / 4 and figures["seeds"] == 6 and figures["runs"] == 3
    assert 0 < figures["mde_item_sampling_lower_bound"] and 0 < figures["mde_from_run_spread"]


def test_a_prose_run_that_asks_is_scored_on_suite_v3_after_training(tmp_path, monkeypatch):
    """lm_eval=True is allowed on the corpus suite v3 is drawn from (and only there among corpora of one's own); the
    stage after training then writes lm_eval_v3.json, not v1's file, and runs.csv reads it as lm3 columns."""
    from embnorm_lib.core.config import preset_config
    from embnorm_lib.core.errors import ConfigError
    from embnorm_lib.core.scoring import lm_eval_adapter as adapter
    from embnorm_lib.runner.results import lm_summary_fields

    cfg = preset_config("prose-gpt2-1", seed=100)
    assert cfg.corpus_sha256 == suite.corpus_sha256() and cfg.replace(lm_eval=True).lm_eval
    with pytest.raises(ConfigError, match="lm_eval=True"):
        cfg.replace(lm_eval=True, corpus_sha256="0" * 64)
    assert adapter.suite_after_training(cfg) == "v3" and adapter.suite_after_training(preset_config("tiny")) == "v1"
    run = tmp_path / "none" / "seed100"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"diverged": false}')
    (run / "model.pt").write_bytes(b"")
    asked = []
    monkeypatch.setattr(adapter, "finish_interrupted", lambda r: None)
    monkeypatch.setattr(adapter, "evaluate_run", lambda root, data, suite="v1": asked.append(suite) or {"s": suite})
    assert adapter.score_if_asked(cfg, run) is None and asked == []  # not asked
    assert adapter.score_if_asked(cfg.replace(lm_eval=True), run, "corpus.txt") == {"s": "v3"} and asked == ["v3"]
    (run / "lm_eval_v3.json").write_text('{"kept": 1}')
    assert adapter.score_if_asked(cfg.replace(lm_eval=True), run) == {"kept": 1} and asked == ["v3"]
    result = {"macro": {"0shot": {"acc": 0.5, "acc_norm": 0.4}}, "seconds": 3.0,
              "tasks": {f"prose3_{t}": {"0shot": {"acc": 0.5}} for t in suite.TASKS}}
    fields = lm_summary_fields(result, prefix="lm3")
    assert fields["lm3_macro_acc"] == 0.5 and {f"lm3.{t}.0shot.acc" for t in suite.TASKS} <= set(fields)
