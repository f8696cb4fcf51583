"""Ctrl-C stops promptly and loses nothing (issue 70, item 7): a training loop stops at the next step boundary and
checkpoints that step; a sweep starts no queued cell and its notebook kernel, which the terminal's signal does not
reach, checkpoints, stops and is gone when the sweep exits."""
import json
import os
import signal
import subprocess
import sys
import time

import nbformat
import psutil
import pytest
import torch
from conftest import REPO, strip_timing, tiny

from embnorm_lib.core.records.io import read_jsonl
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.training.interrupt import Terminated, TerminatedRun, stop_on_interrupt, stop_on_terminate
from embnorm_lib.core.training.train import Interrupted, train


@pytest.fixture(autouse=True)
def ctrl_c_honoured():
    """As in a terminal's foreground, whatever this process inherited (a background job starts with SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def send_at(at_step, signum):
    """An on_eval callback that delivers `signum` to the handler in force at `at_step`."""
    def on_eval(row):
        if row["step"] == at_step:
            signal.getsignal(signum)(signum, None)
    return on_eval


def press_ctrl_c(at_step):
    """An on_eval callback that delivers SIGINT to the handler in force, as the signal would between two bytecodes
    (calling it keeps a real signal off the test process when no training loop is there to catch it)."""
    return send_at(at_step, signal.SIGINT)


def test_ctrl_c_stops_a_run_at_the_next_step_checkpoints_it_and_the_resume_equals_the_uninterrupted_run(
        tmp_path, data_path):
    cfg = tiny(max_iters=25, checkpoint_interval=0, eval_at_init=False)  # no periodic checkpoint: any is Ctrl-C's
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted, match="stopped by Ctrl-C at step 10 \\(checkpointed\\)"):
        train(cfg, tmp_path / "cut", data_path, progress=False, on_eval=press_ctrl_c(10))
    assert signal.getsignal(signal.SIGINT) is handler  # Ctrl-C interrupts as before once the loop is left
    run = RunDir(tmp_path / "cut")
    assert torch.load(run.checkpoint, weights_only=False)["step"] == 10 and not run.summary.exists()
    assert [r["step"] for r in read_jsonl(run.metrics)] == list(range(1, 11))
    resumed = train(cfg, run.root, data_path, progress=False)
    full = train(cfg, tmp_path / "full", data_path, progress=False)
    assert resumed["val_loss"] == full["val_loss"]
    for name in ("metrics.jsonl", "evals.jsonl"):
        assert strip_timing(read_jsonl(run.root / name)) == strip_timing(read_jsonl(tmp_path / "full" / name))


def test_sigterm_stops_a_run_at_the_next_step_as_ctrl_c_does_and_only_where_nobody_else_handles_it(tmp_path,
                                                                                                    data_path):
    cfg = tiny(max_iters=25, checkpoint_interval=0, eval_at_init=False)
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(TerminatedRun, match="stopped by SIGTERM at step 10 \\(checkpointed\\)"):
            train(cfg, tmp_path / "cut", data_path, progress=False, on_eval=send_at(10, signal.SIGTERM))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert torch.load(RunDir(tmp_path / "cut").checkpoint, weights_only=False)["step"] == 10
        with stop_on_terminate():  # a sweep's handler (or any caller's) stands while a loop trains
            sweep_handler = signal.getsignal(signal.SIGTERM)
            with stop_on_interrupt() as requested:
                assert signal.getsignal(signal.SIGTERM) is sweep_handler and not requested()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job: Ctrl-C ignored, SIGTERM still taken
        with stop_on_interrupt() as requested:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
            assert requested() == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)


def test_kill_of_a_background_training_command_checkpoints_its_last_whole_step(tmp_path, data_path):
    """`python -m embnorm_lib run` in the background (Ctrl-C ignored) under `kill PID` or a scheduler's SIGTERM."""
    run_dir = tmp_path / "runs" / "tkill" / "ln" / "seed0"
    args = [sys.executable, "-m", "embnorm_lib", "run", "--preset", "tiny", "--variant", "ln", "--study", "tkill",
            "--set", "max_iters=100000", "--set", "checkpoint_interval=7", "--set", "eval_interval=100000",
            "--set", "diag_interval=0", "--set", "eval_at_init=false", "--set", "torch_threads=1",
            "--out-dir", str(tmp_path / "runs"), "--data-path", data_path]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.time() + 120
        while not (run_dir / "ckpt.pt").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert (run_dir / "ckpt.pt").exists(), proc.communicate()[0][-2000:]
        os.kill(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, output[-2000:]
    step = torch.load(run_dir / "ckpt.pt", weights_only=False)["step"]
    # the one line names the step the run checkpointed
    assert f"error: stopped by SIGTERM at step {step} (checkpointed); run it again to resume" in output, output[-2000:]
    assert "Traceback" not in output
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == list(range(1, step + 1))


def test_sigterm_is_taken_as_ctrl_c_inside_a_sweep_only_where_it_is_the_default():
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with stop_on_terminate():
            with pytest.raises(Terminated, match="terminated \\(SIGTERM\\)"):
                signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # as the signal would, without sending one
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # a second one while the runs checkpoint
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # whoever started the process chose to ignore it: kept
        with stop_on_terminate():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


# Ctrl-C end to end runs with -m slow (~25 s): the default suite has SIGTERM's end to end and Ctrl-C at a step
# boundary (test_ctrl_c_stops_a_run_at_the_next_step_checkpoints_it_and_the_resume_equals_the_uninterrupted_run)
@pytest.mark.parametrize("stop", [pytest.param("ctrl-c", marks=pytest.mark.slow), "sigterm"])
def test_a_stopped_sweep_checkpoints_the_running_cell_starts_no_queued_one_and_leaves_no_kernel(tmp_path, data_path,
                                                                                                stop):
    """Ctrl-C from a terminal (SIGINT to the sweep's process group), and `kill PID` of a sweep in the background
    (SIGTERM to the sweep alone, with Ctrl-C ignored as `nohup ... &` leaves it), stop it the same way."""
    out = tmp_path / "runs"
    # one worker, two cells: the second is queued while the first trains; long enough never to finish here
    args = [sys.executable, "-m", "embnorm_lib", "sweep", "tstop", "--preset", "tiny", "--variants", "none,ln",
            "--seeds", "0", "--set", "max_iters=100000", "--set", "checkpoint_interval=7", "--set",
            "eval_interval=100000", "--set", "diag_interval=0", "--set", "eval_at_init=false", "--workers", "1",
            "--threads", "1", "--out-dir", str(out), "--data-path", data_path]
    # from a terminal, Ctrl-C honoured; in the background, ignored (whatever this test process inherited)
    sigint = signal.SIG_DFL if stop == "ctrl-c" else signal.SIG_IGN
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    first, queued = out / "tstop" / "none" / "seed0", out / "tstop" / "ln" / "seed0"
    try:
        deadline = time.time() + 240
        while not (first / "ckpt.pt").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)  # a checkpoint: the kernel is inside the training loop
        assert (first / "ckpt.pt").exists(), proc.communicate()[0][-2000:]
        kernels = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if any("ipykernel" in part for part in p.cmdline())]
        assert len(kernels) == 1
        if stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the sweep and its worker, not the kernel
        else:
            os.kill(proc.pid, signal.SIGTERM)  # `kill PID`: the sweep alone, which passes it on to its worker
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == {"ctrl-c": 130, "sigterm": 143}[stop], output[-2000:]
    assert {"ctrl-c": "interrupted (Ctrl-C)", "sigterm": "terminated (SIGTERM)"}[stop] in output
    assert "Traceback" not in output
    assert not kernels[0].is_running() or kernels[0].status() == psutil.STATUS_ZOMBIE
    assert not queued.exists()  # the queued cell never started
    # the kernel's loop stopped at a step boundary and checkpointed it (the notebook's error names the step)
    nb = nbformat.read(first / "02_train.ipynb", as_version=4)
    error = next(o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error")
    assert error["ename"] == "Interrupted", error
    step = torch.load(first / "ckpt.pt", weights_only=False)["step"]
    assert f"at step {step} (checkpointed)" in error["evalue"]
    assert [r["step"] for r in read_jsonl(first / "metrics.jsonl")] == list(range(1, step + 1))
    assert json.loads((first / "config.json").read_text())["max_iters"] == 100000
