"""Publication is a transaction (issue 70): every output a publish writes, in this process or in the notebook kernels
and workers it starts, is put back as it was when any step fails; a publication killed part-way is undone by the next
one; scratch outputs never land in the checkout's figures/."""
import os
import subprocess
import sys

import pytest
from conftest import REPO
from test_stability import write_run

from embnorm_lib.core.records import io
from embnorm_lib.publishing import publish


def _python(code: str) -> None:
    """A child process of this one (as a notebook kernel or a worker is), importing this checkout's library."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], env=env, check=False, timeout=120)


def test_a_failed_transaction_puts_every_file_back_including_a_child_processes(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    kept = runs / "REPORT.md"
    kept.write_text("the committed report")
    elsewhere = tmp_path / "figures" / "study" / "fig.png"  # a new directory outside the runs directory too
    with pytest.raises(RuntimeError, match="a later step failed"), io.transaction(runs):
        io.atomic_write_text(kept, "a half-published report")
        io.write_bytes_if_changed(elsewhere, b"png")
        _python(f"from embnorm_lib.core.records import io; io.atomic_write_text({str(runs / 'new.md')!r}, 'written by a worker')")
        assert (runs / "new.md").read_text() == "written by a worker"
        raise RuntimeError("a later step failed")
    assert kept.read_text() == "the committed report"
    assert not (runs / "new.md").exists() and not (tmp_path / "figures").exists()
    assert os.environ.get(io.TRANSACTION_ENV) is None
    with io.transaction(runs):  # a transaction that succeeds keeps what it wrote
        io.atomic_write_text(kept, "the new report")
    assert kept.read_text() == "the new report"
    assert [p.name for p in (runs / io.JOURNAL_DIR).iterdir()] == ["lock"]


def test_a_publication_killed_part_way_is_rolled_back_by_the_next_one(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "REPORT.md").write_text("the committed report")
    _python(f"import os\nfrom embnorm_lib.core.records import io\nwith io.transaction({str(runs)!r}):\n"
            f"    io.atomic_write_text({str(runs / 'REPORT.md')!r}, 'half')\n    os._exit(9)")  # killed: no clean-up
    assert (runs / "REPORT.md").read_text() == "half"
    notes = []
    with io.transaction(runs, echo=notes.append):
        assert (runs / "REPORT.md").read_text() == "the committed report"
    assert notes and "rolled back 1 file(s)" in notes[0]


def test_two_publications_of_one_runs_directory_cannot_overlap(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    lock = io.RunLock(runs / io.JOURNAL_DIR / "lock")
    assert lock.acquire()
    try:
        with pytest.raises(io.RunDirError, match="in use by another process"), io.transaction(runs):
            pass
    finally:
        lock.release()
    with pytest.raises(io.RunDirError, match="no runs directory"), io.transaction(tmp_path / "absent"):
        pass


def _stability_studies(root):
    """stability-stress's registered grid (4 arms x 3 seeds), as small fake runs."""
    for variant in ("none", "ln", "rms", "scaled"):
        for seed in range(3):
            write_run(root, "stability-stress", variant, seed,
                      {"variant": variant, "seed": seed, "diverged": False, "val_loss": 2.4 + 0.01 * seed,
                       "spike_count": 0, "peak_grad_norm": 1.0, "wall_s": 10.0}, {"n_layer": 16},
                      [{"step": i, "train_loss": 4.0 - 0.01 * i, "grad_norm_total": 1.0} for i in range(1, 6)])


def test_a_publish_that_fails_late_changes_no_output(tmp_path, monkeypatch):
    """STABILITY.md, its figures and the index are written before runs/README.md; a failure there undoes them all."""
    runs = tmp_path / "runs"
    _stability_studies(runs)
    (runs / "STABILITY.md").write_text("the committed report")

    def fails(out):
        raise OSError(28, "no space left while writing runs/README.md")

    monkeypatch.setattr(publish, "write_runs_readme", fails)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(OSError, match="no space left"):
        publish.publish("stability", runs)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "lock"}
    assert after == before
    assert not (runs / "figures").exists() and not (runs / "stability-stress" / "runs.csv").exists()


def test_out_dir_implies_its_own_figures_folder(tmp_path):
    from embnorm_lib.core.records.io import default_figures_dir, repo_root

    assert default_figures_dir(None, "seeds-final") == repo_root() / "figures" / "seeds-final"
    assert default_figures_dir(tmp_path, "seeds-final") == tmp_path / "figures" / "seeds-final"
    runs = tmp_path / "runs"
    _stability_studies(runs)
    publish.publish("stability", runs)  # no --figures-dir: the figures go beside the scratch study, not into figures/
    assert any((runs / "figures" / "stability").glob("*.png"))
