"""The committed studies travel: no file under runs/ names a path of the machine that wrote it (issue 73)."""
import re
import subprocess

import pytest
from conftest import REPO

# An absolute path on Linux, macOS or Windows: a root directory such a machine keeps checkouts, homes, temp files or
# software under. Relative paths (runs/..., ../shared/...) and URLs do not match.
ABSOLUTE_PATH = r"(^|[^A-Za-z0-9_.~/-])/(work|root|home|tmp|Users|mnt|opt|var|kaggle|content|private|scratch)/|[A-Z]:\\\\"


@pytest.mark.committed
def test_no_committed_file_under_runs_names_an_absolute_path():
    numbers_only = [f":(exclude)runs/**/{log}.jsonl*" for log in ("metrics", "evals", "diagnostics")]  # per-step logs
    found = subprocess.run(["git", "grep", "-lIE", ABSOLUTE_PATH, "--", "runs", *numbers_only], cwd=REPO,
                           capture_output=True, text=True)
    if found.returncode not in (0, 1):  # 1: no match
        pytest.skip(f"not a git checkout ({found.stderr.strip()[:200]})")
    assert found.stdout.split() == []


def test_the_pattern_finds_what_it_should():
    pattern = re.compile(ABSOLUTE_PATH)
    for text in ("-> /work/main/runs/x", "File /root/.pyenv/lib/x.py", '"data_path": "/home/me/input.txt"',
                 "C:\\\\Users\\\\me"):
        assert pattern.search(text), text
    for text in ("-> runs/main/ln/seed0", "../shared/data/input.txt", "https://example.org/tmp/x", "a/b/c"):
        assert not pattern.search(text), text


@pytest.mark.committed
def test_every_committed_run_directory_is_a_finished_sealed_run():
    """A run still training (a checkpoint's logs, no summary.json or manifest.json) is never committed: landing it
    by `git add runs/` would publish a partial log beside the finished ones (it happened once: d14ba085)."""
    listed = subprocess.run(["git", "ls-files", "runs"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout ({listed.stderr.strip()[:200]})")
    files: dict[str, set[str]] = {}
    for path in listed.stdout.split("\n"):
        head, _, name = path.rpartition("/")
        if re.search(r"/seed\d+$", head):
            files.setdefault(head, set()).add(name)
    unfinished = sorted(d for d, names in files.items() if not {"summary.json", "manifest.json"} <= names)
    assert files and unfinished == []
