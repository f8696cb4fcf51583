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
