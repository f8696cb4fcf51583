"""scripts/check_reports.py: republishing in a scratch checkout, and what counts as a report that differs."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

spec = importlib.util.spec_from_file_location("check_reports", REPO / "scripts" / "check_reports.py")
check_reports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_reports)
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_a_new_commit_stamp_alone_is_no_change_but_any_other_line_or_a_new_file_is(tmp_path):
    report = tmp_path / "runs" / "s" / "REPORT.md"
    report.parent.mkdir(parents=True)
    report.write_text("Written by `x` at commit 0123456789ab from `runs/s/runs.csv`.\n\n| ln | 0.0123 |\n")
    figure = tmp_path / "figures" / "s.png"
    figure.parent.mkdir()
    figure.write_bytes(b"\x89PNG\x00\x01")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    report.write_text("Written by `x` at commit ba9876543210 from `runs/s/runs.csv`.\n\n| ln | 0.0123 |\n")
    assert check_reports.changed_files(tmp_path) == []
    report.write_text("Written by `x` at commit ba9876543210 from `runs/s/runs.csv`.\n\n| ln | 0.0124 |\n")
    assert check_reports.changed_files(tmp_path) == ["runs/s/REPORT.md"]
    _git(tmp_path, "checkout", "-q", "--", ".")
    (tmp_path / "runs" / "s" / "ZEROSHOT.md").write_text("new\n")
    assert check_reports.changed_files(tmp_path) == ["runs/s/ZEROSHOT.md"]
    (tmp_path / "runs" / "s" / "ZEROSHOT.md").unlink()
    figure.write_bytes(b"\x89PNG\x00\x02")  # a redrawn figure is binary: any change counts
    assert check_reports.changed_files(tmp_path) == ["figures/s.png"]


def test_a_records_commit_key_is_a_stamp_to_the_check_and_to_the_writer(tmp_path):
    """runs/<study>/result.json carries the commit that wrote it, as a page's "at commit" line does: a publish at a
    new commit neither rewrites the record (write_text_stable) nor counts as a change (check_reports)."""
    from embnorm_lib.core.records.writes import write_text_stable

    record = tmp_path / "runs" / "s" / "result.json"
    record.parent.mkdir(parents=True)
    record.write_text('{\n  "commit": "0123456789ab",\n  "mean_diff": 0.0123\n}\n')
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    write_text_stable(record, '{\n  "commit": "ba9876543210",\n  "mean_diff": 0.0123\n}\n')
    assert "0123456789ab" in record.read_text()  # only the stamp differed: left as it was
    record.write_text('{\n  "commit": "ba9876543210",\n  "mean_diff": 0.0123\n}\n')
    assert check_reports.changed_files(tmp_path) == []
    write_text_stable(record, '{\n  "commit": "ba9876543210",\n  "mean_diff": 0.0124\n}\n')
    assert "0.0124" in record.read_text()
    assert check_reports.changed_files(tmp_path) == ["runs/s/result.json"]


@pytest.mark.parametrize("old,new", [("0123456", "ba98765-dirty"), ("0123456789ab", "f" * 40),
                                     ("0123456789ab-dirty", "ba9876543210")])
def test_the_check_and_the_writer_read_one_stamp_pattern_of_any_length_dirty_or_not(tmp_path, old, new):
    """check_reports hands git the writer's own pattern: a stamp write_text_stable leaves alone is one the check
    does not count, whatever its length or a -dirty suffix (the check once matched exactly 12 hex digits)."""
    from embnorm_lib.core.records.writes import write_text_stable

    page = tmp_path / "runs" / "s" / "REPORT.md"
    page.parent.mkdir(parents=True)
    page.write_text(f"Written at commit {old}.\n\n| ln | 0.0123 |\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    write_text_stable(page, f"Written at commit {new}.\n\n| ln | 0.0123 |\n")
    assert old in page.read_text()
    page.write_text(f"Written at commit {new}.\n\n| ln | 0.0123 |\n")
    assert check_reports.changed_files(tmp_path) == []
    page.write_text(f"Written at commit {new}.\n\n| ln | 0.0124 |\n")
    assert check_reports.changed_files(tmp_path) == ["runs/s/REPORT.md"]


def test_the_v1_stability_studies_publish_once_together_and_the_rest_one_by_one():
    targets = check_reports.publish_targets(["seeds-final", "stability-lr", "stability-init", "ladder"])
    assert targets == ["seeds-final", "ladder", "stability"]
    assert check_reports.publish_targets(["main"]) == ["main"]


def test_a_selection_that_matches_no_committed_study_is_refused_before_any_checkout(capsys):
    before = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    assert check_reports.main(["no-such-study"]) == 2
    assert "no study with a committed index matches 'no-such-study'; allowed: " in capsys.readouterr().err
    assert subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout == before


@pytest.mark.slow  # ~30 s: republishes one study's report in a scratch checkout of HEAD
@pytest.mark.committed
def test_the_committed_subword_lr_check_report_is_what_the_code_writes(capsys):
    assert check_reports.main(["ladder-bpe-lr2"]) == 0, capsys.readouterr().out
    assert "every committed report is what the current code writes" in capsys.readouterr().out
