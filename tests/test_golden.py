"""A few golden renderings: what the ladder's reports and the findings page say about synthetic runs whose numbers are
planted (tests/test_ladder.py's `synthetic`, `check_runs`, `replication_runs`), and what the stability report says
about tests/test_stability.py's `four_studies`, and what the first screen says of the adequate-data ladder at each
stage of tests/test_answer.py's `data_ladder_states`, compared byte for byte with the files
under tests/golden/. The other tests assert on the data an analysis returns (its numbers and decisions); these pin
the wording, so a change of wording edits a golden file, not a test.

After an intended change of wording, rewrite them with the one command

    python -m pytest tests/test_golden.py --update-golden

then read the diff of tests/golden/ and commit it. The commit a report names is written as <commit>."""
import re

import numpy as np
import pandas as pd
import pytest
from test_answer import data_ladder_states
from test_ladder import check_runs, replication_runs, synthetic
from test_stability import four_studies

from embnorm_lib.analyses import answer, ladder_report, stability
from embnorm_lib.analyses.findings import findings_text
from embnorm_lib.core.config import LADDER_RUNGS

GOLDEN = __import__("pathlib").Path(__file__).resolve().parent / "golden"


def stable(text: str) -> str:
    """A rendering without what names this checkout's commit."""
    return re.sub(r"at commit [0-9a-f]{12}", "at commit <commit>", text)


def check_golden(request, name: str, text: str) -> None:
    path = GOLDEN / name
    if request.config.getoption("--update-golden"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(stable(text))
        return
    assert path.is_file(), f"{path} is missing; write it with: python -m pytest tests/test_golden.py --update-golden"
    assert stable(text) == path.read_text(), (f"{name} renders differently; if intended, rewrite tests/golden/ with: "
                                              "python -m pytest tests/test_golden.py --update-golden")


def write(tmp_path, study: str, runs: pd.DataFrame) -> None:
    (tmp_path / study).mkdir(exist_ok=True)
    runs.to_csv(tmp_path / study / "runs.csv", index=False)


def subword_check() -> pd.DataFrame:
    """ladder-bpe-lr at rung 1: bpe-4096's `none` best two factors of two above the factor the ladder ran at."""
    from embnorm_lib.studies import LADDER_LR_CHECKED

    planted = {"bpe-4096": {"none": 2.0, "ln": 1.0}, "bpe-512": {"none": LADDER_LR_CHECKED[1]["none"], "ln": 0.5}}
    runs = pd.concat([check_runs(best, rung=1).assign(**{"cfg.tokenizer": tok}) for tok, best in planted.items()],
                     ignore_index=True)
    lower = (runs["cfg.tokenizer"] == "bpe-4096") & (runs["variant"] == "ln")
    runs.loc[lower, "val_loss"] -= 0.2
    return runs.assign(val_loss_per_char=runs["val_loss"] / 4)


def subword_scale() -> pd.DataFrame:
    """ladder-bpe-scale at rung 1: ln -0.07, ln_matched -0.007, scaled_unit -0.063 nats/char against none."""
    rng = np.random.default_rng(1)
    layers, width, _ = LADDER_RUNGS[1]
    rows = []
    for seed in range(5, 10):
        base = 1.72 + rng.normal(0, 0.005)
        for variant, shift in (("none", 0.0), ("ln", -0.07), ("ln_matched", -0.007), ("scaled_unit", -0.063)):
            loss = base + shift + rng.normal(0, 0.00002)
            rows.append({"variant": variant, "seed": seed, "cfg.n_layer": layers, "cfg.n_embd": width,
                         "cfg.preset": "ladder-1", "cfg.tokenizer": "bpe-4096", "cfg.vocab_size": 4096,
                         "cfg.max_iters": 649, "cfg.batch_size": 32, "cfg.block_size": 128,
                         "val_loss": 3 * loss, "val_loss_per_char": loss, "best_val_loss": 3 * loss,
                         "final_block1_input_norm": {"none": 1.0, "ln": 12.0, "ln_matched": 0.8}.get(variant, 50.0)
                         + 0.01 * seed})
    return pd.DataFrame(rows)


def replication_with_peaks() -> pd.DataFrame:
    """ladder-bpe-rep2: ln's gradient-norm peaks 16 times none's on the same seed, rms's as none's."""
    runs = replication_runs("ladder-2")
    rng = np.random.default_rng(3)
    paired = 10 ** rng.normal(0, 0.3, 10)[runs["seed"].to_numpy() - 5]
    planted = np.where(runs["variant"] == "ln", 16.0, 1.0)
    return runs.assign(peak_grad_norm_post_warmup=paired * planted * 10 ** rng.normal(0, 0.05, len(runs)),
                       clipped_frac=0.02, spike_count_post_warmup=0)


def test_the_ladder_report(request, tmp_path):
    write(tmp_path, "ladder", synthetic().assign(final_train_loss=lambda r: r["val_loss"] - 0.2))
    check_golden(request, "ladder_LADDER.md", ladder_report.write_report("ladder", tmp_path, tmp_path / "f").read_text())


def test_the_subword_lr_check_report(request, tmp_path):
    write(tmp_path, "ladder-bpe-lr", subword_check())
    text = ladder_report.write_report("ladder-bpe-lr", tmp_path, tmp_path / "f").read_text()
    check_golden(request, "ladder-bpe-lr_LADDER.md", text)


def test_the_ladders_findings(request, tmp_path):
    """The findings page's ladder paragraphs: the ladder, the subword LR checks, the rung-2 replication with its
    registered peaks, and the subword scale-vs-norm shares."""
    write(tmp_path, "ladder", synthetic())
    write(tmp_path, "ladder-bpe-lr", subword_check())
    write(tmp_path, "ladder-bpe-lr2", check_runs({"none": 0.5, "ln": 1.0}, rung=2).assign(
        **{"cfg.tokenizer": "bpe-4096"}).pipe(lambda r: r.assign(val_loss_per_char=r["val_loss"] / 3.3)))
    write(tmp_path, "ladder-bpe-rep2", replication_with_peaks())
    write(tmp_path, "ladder-bpe-scale", subword_scale())
    check_golden(request, "ladder_findings.md", findings_text(tmp_path, studies=()))


def test_the_stability_report(request, tmp_path):
    """STABILITY.md of the four v1 stability studies, planted: every section, the recommendation and the cost."""
    four_studies(tmp_path)
    check_golden(request, "stability_STABILITY.md", stability.write_report(tmp_path, tmp_path / "f").read_text())


def test_the_data_ladders_progress_words(request):
    """The first screen's sentence on the adequate-data ladder, at each planted stage: waiting for its confirmatory
    grid, running, early (fewer registered than its design holds), done."""
    text = "".join(f"{stage}: {answer.data_ladder_words(p)}\n" for stage, p in data_ladder_states().items())
    check_golden(request, "answer_data_ladder.md", text)


@pytest.mark.parametrize("name", ["ladder_LADDER.md", "ladder-bpe-lr_LADDER.md", "ladder_findings.md",
                                  "stability_STABILITY.md", "answer_data_ladder.md"])
def test_a_golden_file_can_fail(tmp_path, request, name):
    """The comparison is byte for byte: one changed digit in a rendering fails it."""
    if request.config.getoption("--update-golden"):
        pytest.skip("rewriting tests/golden/")
    golden = (GOLDEN / name).read_text()
    changed = re.sub(r"\d", lambda m: str((int(m.group(0)) + 1) % 10), golden, count=1)
    with pytest.raises(AssertionError):
        check_golden(request, name, changed)
