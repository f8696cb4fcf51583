"""scripts/code_only.sh: a checkout without the committed run directories, and back, for a machine that takes the
working tree but not ~200 MiB of per-step logs (a lent GPU takes at most 64 MiB)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "code_only.sh"
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _script(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/code_only.sh", *args], cwd=repo, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path):
    """A small repository shaped like this one: code, a study's run directory, a tokenizer, a top-level index."""
    root = tmp_path / "repo"
    files = {"embnorm_lib/model.py": "x = 1\n", "runs/README.md": "index\n", "runs/bench.json": "{}\n",
             "runs/tokenizers/bpe-512-abc.json": "{}\n", "runs/main/runs.csv": "a\n1\n",
             "runs/main/none/seed0/metrics.jsonl": "{}\n" * 50_000, "scripts/code_only.sh": SCRIPT.read_text()}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return root


def test_on_keeps_code_and_tokenizers_and_off_restores_the_index(repo):
    exclude = repo / ".git" / "info" / "exclude"
    before_index, before_exclude = _git(repo, "ls-files"), exclude.read_text()
    on = _script(repo, "on")
    assert on.returncode == 0, on.stdout + on.stderr
    assert "1 run directories left the index" in on.stdout
    travels = set(_git(repo, "ls-files", "--cached", "--others", "--exclude-standard").split())
    assert travels == {"embnorm_lib/model.py", "runs/README.md", "runs/bench.json",
                       "runs/tokenizers/bpe-512-abc.json", "scripts/code_only.sh"}
    assert (repo / "runs/main/none/seed0/metrics.jsonl").exists()  # nothing on disk is touched
    (repo / "runs/tokenizers/bpe-4096-abc.json").write_text("{}\n")  # trained while code-only: it travels
    (repo / "runs/main/ln/seed0").mkdir(parents=True)
    (repo / "runs/main/ln/seed0/metrics.jsonl").write_text("{}\n")  # a new run does not
    travels_now = set(_git(repo, "ls-files", "--cached", "--others", "--exclude-standard").split())
    assert travels_now == travels | {"runs/tokenizers/bpe-4096-abc.json"}
    commit = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "oops"],
                            cwd=repo, capture_output=True, text=True)
    assert commit.returncode != 0 and "code_only.sh off" in commit.stderr  # the staged deletions cannot land
    assert _script(repo, "on").returncode == 1  # not twice
    off = _script(repo, "off")
    assert off.returncode == 0, off.stdout + off.stderr
    assert _git(repo, "ls-files") == before_index and exclude.read_text() == before_exclude
    assert set(_git(repo, "status", "--porcelain", "-uall").splitlines()) == {
        "?? runs/main/ln/seed0/metrics.jsonl", "?? runs/tokenizers/bpe-4096-abc.json"}
    assert not (repo / ".git/hooks/pre-commit").exists()
    assert _script(repo, "off").returncode == 1


def test_on_refuses_staged_changes_under_runs(repo):
    (repo / "runs/main/runs.csv").write_text("a\n2\n")
    _git(repo, "add", "runs/main/runs.csv")
    refused = _script(repo, "on")
    assert refused.returncode == 1 and "staged changes" in refused.stdout
    assert "runs/main/runs.csv" in _git(repo, "ls-files")


def test_this_repositorys_code_only_copy_fits_a_gpu_transfer_with_room_to_spare():
    """What travels without the run directories stays far under the device's 64 MiB (wheels ride along too)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    names = _git(REPO, "ls-files").splitlines()
    code_only = [n for n in names if not (n.startswith("runs/") and n.count("/") > 1
                                          and not n.startswith("runs/tokenizers/"))]
    mib = sum((REPO / n).stat().st_size for n in code_only if (REPO / n).exists()) / 2 ** 20
    assert mib < 32, f"{mib:.1f} MiB of tracked files outside the run directories"


def test_on_works_in_a_checkout_without_a_hooks_folder(repo):
    shutil.rmtree(repo / ".git" / "hooks", ignore_errors=True)  # a checkout made with an empty template has none
    on = _script(repo, "on")
    assert on.returncode == 0, on.stdout + on.stderr
    assert (repo / ".git" / "hooks" / "pre-commit").is_file()
    assert _script(repo, "off").returncode == 0 and not (repo / ".git" / "hooks" / "pre-commit").exists()
