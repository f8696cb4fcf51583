"""Issue 115 #2: lm-eval tasks by name on a run trained on token shards, read through the user's tokenizer; tested
offline end to end with a byte-level BPE trained here, nanoGPT-layout shards written with it, and a local YAML
multiple-choice task."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from embnorm_lib.core.errors import ConfigError
from embnorm_lib.core.scoring.harness import HARNESS_FILE, UserTokenizer, load_harness_lm

ITEMS = [("First Citizen: Before we proceed any further, hear me", [" speak.", " sing.", " fly."], 0),
         ("You are all resolved rather to die than to", [" famish?", " table", " purple"], 0),
         ("We know't, we know't. Let us kill him, and we'll have corn at our own", [" price.", " moon", " of"], 0),
         ("What authority surfeits on would relieve", [" us", " blue", " the"], 0)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("harness")
    text = open(data_path, encoding="utf-8").read()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator([text[:200_000]], trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer.save(str(root / "tokenizer.json"))
    shards = root / "shards"
    shards.mkdir()
    cut = int(len(text) * 0.9)
    for name, part in (("train.bin", text[:cut]), ("val.bin", text[cut:])):
        np.array(tokenizer.encode(part).ids, dtype=np.uint16).tofile(shards / name)
    done = subprocess.run([sys.executable, "-m", "embnorm_lib", "run", "--preset", "tiny", "--variant", "ln", "--seed",
                           "0", "--data-path", str(shards), "--set", "vocab_size=320", "--set", "max_iters=3",
                           "--set", "eval_windows=4", "--out-dir", str(root / "runs")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = next((root / "runs").rglob("summary.json")).parent
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "items.jsonl").write_text("".join(json.dumps({"context": c, "choices": ch, "label": y}) + "\n"
                                               for c, ch, y in ITEMS))
    (tasks / "tiny_mc.yaml").write_text(
        "task: tiny_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
        f"{tasks / 'items.jsonl'}\ntest_split: test\noutput_type: multiple_choice\ndoc_to_text: \"{{{{context}}}}\"\n"
        "doc_to_choice: choices\ndoc_to_target: label\ntarget_delimiter: \"\"\n"
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    return run_dir, root / "tokenizer.json", tasks


def test_a_local_task_scores_a_shards_run_through_the_users_tokenizer(trained):
    from embnorm_lib.core.records.rundir import RunDir
    from embnorm_lib.core.records.seal import verify_run

    run_dir, tokenizer, tasks = trained
    done = subprocess.run([sys.executable, "-m", "embnorm_lib", "harness", "--run-dir", str(run_dir), "--tokenizer",
                           str(tokenizer), "--tasks", "tiny_mc", "--include-path", str(tasks)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((run_dir / HARNESS_FILE).read_text())
    assert result["tasks"]["tiny_mc"]["metric"] == "acc" and result["tokenizer"] == str(tokenizer)
    verify_run(RunDir(run_dir))  # sealed in, as the suites' files are
    # the accuracy is what the model says: the choice with the highest log-likelihood, item by item
    lm = load_harness_lm(run_dir, str(tokenizer))
    right = 0
    for context, choices, label in ITEMS:
        scores = [lp for lp, _ in lm._score([lm.split(context, choice) for choice in choices])]
        right += int(np.argmax(scores) == label)
    assert result["tasks"]["tiny_mc"]["acc"] == pytest.approx(right / len(ITEMS))
    assert result["macro"] == result["tasks"]["tiny_mc"]["acc"]


def test_a_continuation_is_scored_with_the_tokens_the_whole_string_is_written_with(trained):
    run_dir, tokenizer, _ = trained
    lm = load_harness_lm(run_dir, str(tokenizer))
    context, continuation = "First Citizen: Before we proceed any further, hear me", " speak."
    ctx, cont = lm.split(context, continuation)
    assert ctx + cont == UserTokenizer(str(tokenizer)).encode(context + continuation).ids
    assert lm.tokenizer.decode(cont).endswith("speak.")


def test_bad_tokenizers_are_one_line_refusals(trained, tmp_path):
    run_dir, tokenizer, _ = trained
    with pytest.raises(ConfigError, match=r"no such file; allowed: a Hugging Face tokenizer.json path, or tiktoken:"):
        UserTokenizer(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"^invalid --tokenizer .*bad.json: not a tokenizer.json \("):
        UserTokenizer(str(tmp_path / "bad.json"))
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"the tiktoken package is not installed; allowed: `pip install tiktoken`"):
            UserTokenizer("tiktoken:gpt2")
    big = json.loads(tokenizer.read_text())
    big["model"]["vocab"].update({f"extra{i}": 1000 + i for i in range(40)})  # 340 tokens > vocab_size 320
    (tmp_path / "big.json").write_text(json.dumps(big))
    with pytest.raises(ConfigError, match=r"340 tokens, but the run was trained with vocab_size=320; allowed: the "):
        load_harness_lm(run_dir, str(tmp_path / "big.json"))
