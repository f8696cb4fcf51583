import json
import math

import pytest
import torch
from conftest import strip_timing, tiny

from embnorm_lib.core.corpora import data as data_module
from embnorm_lib.core.corpora.data import DataError
from embnorm_lib.core.errors import ConfigError
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.records.steplog import read_step_log, round_timings, same_rows
from embnorm_lib.core.training.checkpoint import ResumeError
from embnorm_lib.core.training.train import lr_at, train


def files_of(run_dir):
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir())} if run_dir.exists() else {}


def test_loss_falls_on_the_real_corpus(tmp_path, data_path):
    summary = train(tiny(max_iters=40, eval_interval=20), tmp_path / "run", data_path, progress=False)
    assert summary["val_loss"] < summary["init_val_loss"] - 0.4
    assert summary["tokens"] == 40 * 8 * 32 == summary["token_budget"]
    assert not summary["diverged"]


def test_run_directory_holds_config_metrics_and_provenance(tmp_path, data_path):
    cfg = tiny(max_iters=12)
    run = RunDir(tmp_path / "run")
    summary = train(cfg, run.root, data_path, progress=False)
    assert json.loads(run.config.read_text()) == cfg.to_dict()
    rows = read_step_log(run, "metrics")
    assert [r["step"] for r in rows] == list(range(1, 13))
    for key in ("step", "tokens", "lr", "train_loss", "grad_norm_total", "block1_input_norm", "wall_s"):
        assert key in rows[0]
    assert same_rows(rows, round_timings(rows))  # timings logged at their stated resolution (steplog)
    evals = read_step_log(run, "evals")
    assert [e["step"] for e in evals] == [0, 10, 12]
    assert evals[-1]["val_loss"] == summary["val_loss"]
    assert math.isclose(summary["val_ppl"], math.exp(summary["val_loss"]))
    assert math.isclose(summary["val_bpc"], summary["val_loss"] / math.log(2))
    for key in ("torch", "python", "git_commit", "n_params", "wall_s", "data_sha256", "precision", "device"):
        assert summary[key] not in (None, "")
    assert not run.checkpoint.exists() and run.final_model.exists()
    # a finished run keeps metrics and diagnostics as Parquet (steplog), evals as JSONL
    assert {p.name for p in run.root.iterdir()} >= {"metrics.parquet", "diagnostics.parquet", "evals.jsonl"}
    assert not run.metrics.exists() and not run.diagnostics.exists()
    # no temp files left; only the lock file (never removed: deleting a lock file races with its next taker)
    assert sorted(p.name for p in run.root.iterdir() if p.name.startswith(".")) == [".lock"]


def test_same_seed_twice_gives_identical_metrics(tmp_path, data_path):
    cfg = tiny(max_iters=15, variant="rms")
    train(cfg, tmp_path / "a", data_path, progress=False)
    train(cfg, tmp_path / "b", data_path, progress=False)
    for log in ("metrics", "evals", "diagnostics"):
        assert strip_timing(read_step_log(tmp_path / "a", log)) == strip_timing(read_step_log(tmp_path / "b", log))
    other = tiny(max_iters=15, variant="rms", seed=1)
    train(other, tmp_path / "c", data_path, progress=False)
    assert read_step_log(tmp_path / "c", "metrics")[0]["train_loss"] != \
        read_step_log(tmp_path / "a", "metrics")[0]["train_loss"]


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, data_path):
    cfg = tiny(max_iters=25, checkpoint_interval=0, dropout=0.1)  # dropout: the torch RNG must resume too
    full = train(cfg, tmp_path / "full", data_path, progress=False)
    partial = train(cfg, tmp_path / "cut", data_path, progress=False, until_step=13)
    assert partial == {"finished": False, "step": 13}
    assert RunDir(tmp_path / "cut").checkpoint.exists()
    resumed = train(cfg, tmp_path / "cut", data_path, progress=False)
    for log in ("metrics", "evals", "diagnostics"):
        assert strip_timing(read_step_log(tmp_path / "full", log)) == strip_timing(read_step_log(tmp_path / "cut", log))
    assert resumed["val_loss"] == full["val_loss"]
    a = torch.load(tmp_path / "full" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "cut" / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_records_the_cpus_that_trained_it_and_says_when_a_resume_moves_to_another(tmp_path, data_path,
                                                                                          monkeypatch, capsys):
    from embnorm_lib.core.records import io as io_module
    from embnorm_lib.core.training import train as train_module

    here = io_module.cpu_info()["cpu_model"]
    cfg = tiny(max_iters=8, checkpoint_interval=0, eval_at_init=False)
    whole = train(cfg, tmp_path / "whole", data_path, progress=False)
    assert whole["trained_on"] == [{"from_step": 0, "cpu_model": here}] and whole["cpu_changed_on_resume"] is False
    train(cfg, tmp_path / "moved", data_path, progress=False, until_step=5)
    monkeypatch.setattr(train_module, "cpu_info", lambda: {"cpu_model": "Another CPU (family 1, model 2, cache 3)"})
    moved = train(cfg, tmp_path / "moved", data_path, progress=False)
    assert moved["trained_on"] == [{"from_step": 0, "cpu_model": here},
                                   {"from_step": 5, "cpu_model": "Another CPU (family 1, model 2, cache 3)"}]
    assert moved["cpu_changed_on_resume"] is True
    assert "resumes at step 5 on another CPU (Another CPU" in capsys.readouterr().err
    # a checkpoint from before CPUs were recorded: the first part is not known, so neither is whether it moved
    monkeypatch.undo()
    train(cfg, tmp_path / "old", data_path, progress=False, until_step=5)
    ckpt = torch.load(RunDir(tmp_path / "old").checkpoint, weights_only=True)
    del ckpt["trained_on"]
    torch.save(ckpt, RunDir(tmp_path / "old").checkpoint)
    old = train(cfg, tmp_path / "old", data_path, progress=False)
    assert old["trained_on"][0] == {"from_step": 0, "cpu_model": "not recorded"}
    assert old["cpu_changed_on_resume"] is None and old["val_loss"] == whole["val_loss"]


def test_finished_run_is_not_retrained(tmp_path, data_path):
    cfg = tiny(max_iters=5)
    first = train(cfg, tmp_path / "run", data_path, progress=False)
    before = files_of(tmp_path / "run")
    again = train(cfg, tmp_path / "run", data_path, progress=False)
    assert again["val_loss"] == first["val_loss"] and files_of(tmp_path / "run") == before


def test_variants_see_identical_batches(tmp_path, data_path, monkeypatch):
    seen = {}
    original = data_module.BatchSampler.next_batch

    def recording(self):
        batch = original(self)
        seen.setdefault(current, []).append(batch[0].clone())
        return batch

    monkeypatch.setattr(data_module.BatchSampler, "next_batch", recording)
    for current in ("none", "ln", "rms"):
        train(tiny(max_iters=6, variant=current, eval_at_init=False), tmp_path / current, data_path, progress=False)
    for variant in ("ln", "rms"):
        assert all(torch.equal(a, b) for a, b in zip(seen["none"], seen[variant]))
    assert len(seen["none"]) == 6


def test_lr_schedule_warms_up_then_decays_to_min():
    cfg = tiny(max_iters=100, lr=1e-3, warmup_frac=0.1, min_lr_ratio=0.1)
    assert lr_at(cfg, 1) == pytest.approx(1e-4) and lr_at(cfg, 10) == pytest.approx(1e-3)
    assert lr_at(cfg, 100) == pytest.approx(1e-4)
    lrs = [lr_at(cfg, s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_divergence_is_recorded_as_data(tmp_path, data_path):
    # an embedding scale near float32's maximum overflows the residual stream at once
    summary = train(tiny(max_iters=10, emb_init_std=3e38, eval_at_init=False), tmp_path / "run", data_path,
                    progress=False)
    assert summary["diverged"] is True and summary["diverged_step"] == 1
    assert summary["val_loss"] != summary["val_loss"] or summary["val_loss"] is None
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["diverged"] is True and on_disk["val_loss"] is None  # strict JSON: NaN written as null


def test_resume_with_changed_config_is_refused_and_writes_nothing(tmp_path, data_path):
    train(tiny(max_iters=20, checkpoint_interval=5), tmp_path / "run", data_path, progress=False, until_step=5)
    before = files_of(tmp_path / "run")
    with pytest.raises(ResumeError) as err:
        train(tiny(max_iters=20, checkpoint_interval=5, lr=5e-3), tmp_path / "run", data_path, progress=False)
    assert "lr: 0.001 -> 0.005" in str(err.value) and "\n" not in str(err.value)
    assert files_of(tmp_path / "run") == before


def test_truncated_checkpoint_is_refused_with_a_clear_error(tmp_path, data_path):
    cfg = tiny(max_iters=20)
    train(cfg, tmp_path / "run", data_path, progress=False, until_step=10)
    ckpt = RunDir(tmp_path / "run").checkpoint
    ckpt.write_bytes(ckpt.read_bytes()[:2000])
    before = files_of(tmp_path / "run")
    with pytest.raises(ResumeError, match="checkpoint .*ckpt.pt is unreadable.*delete it") as err:
        train(cfg, tmp_path / "run", data_path, progress=False)
    assert "\n" not in str(err.value)
    assert files_of(tmp_path / "run") == before


def test_missing_or_corrupt_data_writes_nothing(tmp_path, data_path):
    with pytest.raises(DataError, match="not found"):
        train(tiny(), tmp_path / "a", tmp_path / "missing.txt", progress=False)
    corrupt = tmp_path / "corrupt.txt"
    corrupt.write_bytes(open(data_path, "rb").read()[::-1])
    with pytest.raises(DataError, match="checksum mismatch"):
        train(tiny(), tmp_path / "b", corrupt, progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_bf16_autocast_path_runs_on_cpu(tmp_path, data_path):
    summary = train(tiny(max_iters=6, precision="bf16", eval_at_init=False), tmp_path / "run", data_path,
                    progress=False)
    assert summary["precision"] == "bf16" and math.isfinite(summary["val_loss"])
    fp32 = train(tiny(max_iters=6, eval_at_init=False), tmp_path / "ref", data_path, progress=False)
    assert abs(summary["val_loss"] - fp32["val_loss"]) < 0.05


@pytest.mark.slow
def test_torch_compile_matches_eager(tmp_path, data_path):
    eager = train(tiny(max_iters=8), tmp_path / "eager", data_path, progress=False)
    compiled = train(tiny(max_iters=8, compile=True), tmp_path / "compiled", data_path, progress=False)
    assert compiled["val_loss"] == pytest.approx(eager["val_loss"], abs=1e-4)


def test_compile_auto_is_on_for_large_models_on_cuda_only():
    from embnorm_lib.core.device import COMPILE_MIN_PARAMS, resolve_compile

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_compile("auto", cuda, COMPILE_MIN_PARAMS) and not resolve_compile("auto", cuda, COMPILE_MIN_PARAMS - 1)
    assert not resolve_compile("auto", cpu, 10 * COMPILE_MIN_PARAMS)
    assert resolve_compile(True, cpu, 1) and not resolve_compile(False, cuda, 10 * COMPILE_MIN_PARAMS)
    from embnorm_lib.core.config import preset_config
    from embnorm_lib.core.nets.model import GPT

    sizes = {p: GPT(preset_config(p)).num_params() for p in ("gpt-small", "seeds-final", "ladder-4")}
    assert [resolve_compile("auto", cuda, n) for n in sizes.values()] == [True, False, False], sizes


def test_a_copied_tree_names_its_commit_from_the_environment(tmp_path, monkeypatch):
    from embnorm_lib.core.records.io import git_commit

    monkeypatch.delenv("EMBNORM_SOURCE_COMMIT", raising=False)
    assert git_commit(tmp_path) == "unknown"  # tmp_path is no git checkout
    monkeypatch.setenv("EMBNORM_SOURCE_COMMIT", "abc123")
    assert git_commit(tmp_path) == "abc123 (copied tree)"


def test_a_training_step_reads_the_device_once(tmp_path, data_path, monkeypatch):
    """Per step, one batched transfer of what the log needs (loss, block-1 input norm, gradient norm), no .item()
    syncs: counted as the difference between a 10- and a 20-step run."""
    import torch

    from embnorm_lib.core.notebook import train_job

    counts = {"item": 0, "tolist": 0}
    for name in counts:
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _name=name, _original=original, **k):
            counts[_name] += 1
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, counting)
    seen = {}
    for steps in (10, 20):
        counts.update(item=0, tolist=0)
        cfg = tiny(max_iters=steps, eval_at_init=False, eval_interval=0, diag_interval=0, checkpoint_interval=0,
                   eval_windows=8, torch_threads=1)
        train_job(cfg, tmp_path / f"{steps}", data_path, progress=False)
        seen[steps] = dict(counts)
    per_step = {k: (seen[20][k] - seen[10][k]) / 10 for k in counts}
    # the stages after the loop (calibration's temperature search) vary by a read or two between the runs
    assert abs(per_step["item"]) < 0.5 and abs(per_step["tolist"] - 1) < 0.5, per_step


def test_the_summary_names_the_commit_the_run_started_with(tmp_path, data_path, monkeypatch):
    """The checkout may move while a run trains; the run ran the code of its start, so that commit is recorded."""
    from embnorm_lib.core.training import train as train_module

    commits = iter(["commit-at-start"])
    monkeypatch.setattr(train_module, "git_commit", lambda *a, **k: next(commits, "commit-at-the-end"))
    train(tiny(max_iters=3, eval_interval=0, diag_interval=0, eval_at_init=False), tmp_path / "run", data_path,
          progress=False)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["git_commit"] == "commit-at-start"


def test_a_run_is_dirty_when_code_differs_not_when_results_do(tmp_path):
    """A sweep re-indexes runs/<study>/runs.csv after each run; the runs after it must not record '-dirty' for that."""
    import subprocess

    from embnorm_lib.core.records.io import git_commit

    def git(*args):  # noqa: ANN202
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "runs" / "study").mkdir(parents=True)
    (tmp_path / "runs" / "study" / "runs.csv").write_text("a\n1\n")
    (tmp_path / "model.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    clean = git_commit(tmp_path)
    (tmp_path / "runs" / "study" / "runs.csv").write_text("a\n1\n2\n")
    assert git_commit(tmp_path) == clean and not clean.endswith("-dirty")
    assert git_commit(tmp_path / "runs" / "study") == clean  # asked from inside runs/ too
    (tmp_path / "model.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == clean + "-dirty"


def test_a_config_left_by_a_run_that_never_checkpointed_does_not_bar_the_directory(tmp_path, data_path):
    """A run that failed before its first checkpoint (say, a model too large to allocate) leaves config.json and
    nothing to resume: the next run, with another config, trains there; with a checkpoint the refusal stands."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.config.write_text(json.dumps(tiny(max_iters=5, block_size=4096).to_dict()))
    summary = train(tiny(max_iters=5), run.root, data_path, progress=False)
    assert json.loads(run.config.read_text())["block_size"] == 32 and summary["val_loss"] > 0
    # a directory holding something of a run (here its summary) still refuses another config
    with pytest.raises(ResumeError, match=r"different config \(lr: 0.001 -> 0.005\)"):
        train(tiny(max_iters=5, lr=5e-3), run.root, data_path, progress=False)


@pytest.mark.parametrize("changes,message", [
    ({"eval_windows": 100_000_000}, "invalid eval_windows=100000000; allowed: 0 (the whole validation split) or 1 to"),
    ({"interim_eval_windows": 100_000_000}, "invalid interim_eval_windows=100000000"),
    ({"execution": "fleet"}, "invalid execution='fleet' for a single run; allowed: 'single'"),
])
def test_settings_a_single_run_would_record_untruly_are_refused_before_any_write(tmp_path, data_path, changes,
                                                                                  message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train(tiny(max_iters=5, **changes), tmp_path / "run", data_path, progress=False)
    assert not (tmp_path / "run").exists()
