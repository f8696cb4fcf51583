"""Publish exactly the registered design (issue 117): a linked-in run, an unregistered extra seed, an off-design run
or a cell still training is refused in one line by the index, `seal --check` and publish, replayed on a copy of a
committed study; the committed files never change."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from embnorm_lib.core.records.io import repo_root
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.core.records.seal import reseal
from embnorm_lib.publishing.publish import publish
from embnorm_lib.runner.design import DesignError, check_design
from embnorm_lib.runner.results import build_index

pytestmark = pytest.mark.committed
STUDY = "seeds-final"


@pytest.fixture
def copy(tmp_path):
    """A copy of the committed study under a runs directory of the test's own."""
    out = tmp_path / "runs"
    shutil.copytree(repo_root() / "runs" / STUDY, out / STUDY, symlinks=True)
    return out


def committed_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "runs"], cwd=repo_root(), capture_output=True,
                          text=True).stdout


def test_the_copy_passes(copy):
    check_design(STUDY, copy, publishing=True)
    assert len(build_index(STUDY, copy)) == 15


def test_a_symlinked_run_directory_is_refused_everywhere(copy):
    before = committed_status()
    index = (copy / STUDY / "runs.csv").read_bytes()
    shutil.rmtree(copy / STUDY / "ln" / "seed2")
    (copy / STUDY / "ln" / "seed2").symlink_to("../rms/seed2")
    with pytest.raises(DesignError, match=r"ln/seed2 is a symbolic link; allowed: real directories"):
        build_index(STUDY, copy)
    with pytest.raises(DesignError, match="symbolic link"):
        publish(STUDY, copy)
    assert (copy / STUDY / "runs.csv").read_bytes() == index  # nothing rewritten
    sealed = subprocess.run([sys.executable, "-m", "embnorm_lib", "seal", STUDY, "--check", "--out-dir", str(copy)],
                            capture_output=True, text=True, timeout=120)
    assert sealed.returncode == 2 and "is a symbolic link" in sealed.stderr
    # the link is refused by the study check, counted as that, not as one more refused run
    assert "0 run(s) refused; 1 study check(s) refused" in sealed.stdout, sealed.stdout
    assert committed_status() == before


def test_an_unregistered_extra_seed_is_refused(copy):
    extra = copy / STUDY / "ln" / "seed9"
    shutil.copytree(copy / STUDY / "ln" / "seed2", extra)
    for name in ("config.json", "summary.json"):
        data = json.loads((extra / name).read_text())
        data["seed"] = 9
        (extra / name).write_text(json.dumps(data))
    reseal(RunDir(extra), "config.json", "summary.json")
    with pytest.raises(DesignError, match=r"ln/seed9 is not one of its 15 registered cells"):
        publish(STUDY, copy)
    with pytest.raises(DesignError, match="not one of its 15 registered cells"):
        build_index(STUDY, copy)


def test_an_off_design_run_is_refused(copy):
    run = copy / STUDY / "rms" / "seed1"
    config = json.loads((run / "config.json").read_text())
    config["lr"] = 0.5
    (run / "config.json").write_text(json.dumps(config))
    reseal(RunDir(run), "config.json")
    with pytest.raises(DesignError, match=r"rms/seed1 was trained with lr=0.5 but its registered cell has lr=0.0003"):
        build_index(STUDY, copy)


def test_a_missing_run_and_a_cell_being_trained_stop_publish(copy):
    held = RunDir(copy / STUDY / "none" / "seed3").cell_lock()
    assert held.acquire()
    try:
        with pytest.raises(DesignError, match=r"none/seed3 is being trained by another process"):
            publish(STUDY, copy)
        build_index(STUDY, copy)  # indexing a study in progress is allowed
    finally:
        held.release()
    shutil.rmtree(copy / STUDY / "none" / "seed3")
    with pytest.raises(Exception, match="1 of 15 registered runs are missing"):
        check_design(STUDY, copy, publishing=True)


def test_a_rebuilt_index_never_lists_fewer_runs_unless_asked(copy, capsys):
    """Issue 117 #5: a deleted run directory made `sweep --index-only` rewrite runs.csv smaller, exit 0."""
    from embnorm_lib.runner import sweep

    index = copy / STUDY / "runs.csv"
    before = index.read_bytes()
    shutil.rmtree(copy / STUDY / "ln" / "seed2")
    assert sweep.main([STUDY, "--index-only", "--out-dir", str(copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "runs/seeds-final/ln/seed2" in err and "--drop-missing" in err
    assert index.read_bytes() == before
    assert sweep.main([STUDY, "--index-only", "--out-dir", str(copy), "--drop-missing"]) == 0
    assert len(build_index(STUDY, copy)) == 14
    assert committed_status() == ""


def test_seed_counts_and_means_come_from_the_paired_set():
    """Issue 117 #3: in an unbalanced study the Answer line counted the union of seeds, and the baseline mean was over
    all its seeds while Δ was paired, so the shown means did not differ by the shown Δ."""
    import pandas as pd

    from embnorm_lib import stats
    from embnorm_lib.analyses.paired import ScopeAnalysis, answer_lines, results_table

    rows = [{"variant": "none", "seed": s, "val_loss": 2.0 + 0.01 * s} for s in range(5)]
    rows += [{"variant": "ln", "seed": s, "val_loss": 2.1 + 0.01 * s} for s in range(3)]  # seeds 3-4 missing
    runs = pd.DataFrame(rows).assign(diverged=False, failed=False)
    family = stats.comparison_family(runs, ["val_loss"])
    analysis = ScopeAnalysis("adhoc", "all", runs, family, stats.decide(family, runs, "none"))
    row = results_table(analysis).iloc[0]
    base = float(row["none mean ± SD"].split(" ± ")[0])
    var = float(row["variant mean ± SD"].split(" ± ")[0])
    assert row["seeds"] == 3 and var - base == pytest.approx(float(row["Δ (variant − none)"]), abs=1e-4)
    line = answer_lines([analysis])[0]
    assert "(3 paired seeds; unpaired, left out: `none` seed 3, `none` seed 4)" in line


@pytest.mark.parametrize("link", ["study", "arm", "run", "file"])
def test_a_run_writes_through_no_link_in_any_study(tmp_path, capsys, link):
    """Issue 117, item 8: after `tar -x` of a crafted archive, a later `run` (an ad-hoc study too) wrote its whole run
    directory through a link out of the tree."""
    from embnorm_lib.core.errors import entry
    from embnorm_lib.runner import run

    runs, outside = tmp_path / "runs", tmp_path / "outside"
    outside.mkdir()
    chain = {"study": runs / "adhoc", "arm": runs / "adhoc" / "ln", "run": runs / "adhoc" / "ln" / "seed0"}
    if link == "file":
        chain["run"].mkdir(parents=True)
        (chain["run"] / "config.json").symlink_to(outside / "config.json")
        linked = chain["run"] / "config.json"
    else:
        chain[link].parent.mkdir(parents=True, exist_ok=True)
        chain[link].symlink_to(outside, target_is_directory=True)
        linked = chain[link]
    assert entry(run.main, ["--preset", "tiny", "--variant", "ln", "--out-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {linked} is a symbolic link; allowed: real directories and files under the runs directory " \
                  "(a run writes through no link)\n"
    assert not any(outside.iterdir())
