"""The study layer (issue 74): a study is one declarative entry, and a new study of an existing analysis kind needs
nothing else. Shown end to end on a copy of the library with one entry added: the sweep lists its grid, publish writes
its report through the kind's plugin, runs/README.md lists it, and the copy differs from the library in one file."""
import filecmp
import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from test_ladder import synthetic

# a new size-ladder study: two rungs of the character ladder at their checked LRs (the ladder kind's own helpers)
DEMO_ENTRY = '''    Study("ladder-demo", "A demonstration: the character ladder's rungs 0-1, none/ln/rms x seeds 0-4.", "ladder",
          lambda: _ladder_cells("ladder-demo", range(2), ABC, LADDER_SEEDS), waits_for=ladder_rung_waits,
          status="exploratory", amendment=4,
          question="Does the registry take a new ladder study as one entry?"),
'''

DEMO_SCRIPT = """
import json, sys
from pathlib import Path
from embnorm_lib.publishing.publish import publish
from embnorm_lib.runner import sweep
from embnorm_lib.runner.registry import STUDIES, analysis_of

out, figures = Path(sys.argv[1]), Path(sys.argv[2])
listed = sweep.main(["ladder-demo", "--list", "--out-dir", str(out)])
written = publish("ladder-demo", out, figures)
print(json.dumps({"kind": analysis_of("ladder-demo").kind, "cells": len(STUDIES["ladder-demo"].cells()),
                  "listed": listed, "written": sorted(written)}))
"""


def changed_files(a: Path, b: Path) -> list[str]:
    """Files that differ, or exist on one side only, between two source trees (caches aside)."""
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    found = [f"{cmp.left}/{name}" for name in cmp.diff_files + cmp.left_only + cmp.right_only]
    for name in cmp.subdirs:
        found += changed_files(a / name, b / name)
    return found


def test_a_new_study_of_an_existing_kind_is_one_entry_in_one_library_file(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "embnorm_lib", repo / "embnorm_lib", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "docs").symlink_to(REPO / "docs")  # the protocol the report header quotes, the open corpus's record
    shutil.copy(REPO / "pyproject.toml", repo / "pyproject.toml")
    entries = repo / "embnorm_lib" / "studies" / "ladder.py"
    text = entries.read_text()
    assert text.rstrip().endswith(")")  # the family's ENTRIES tuple closes the file
    entries.write_text(text.rstrip()[:-1] + DEMO_ENTRY + ")\n")

    changed = changed_files(REPO / "embnorm_lib", repo / "embnorm_lib")
    assert [Path(p).relative_to(REPO).as_posix() for p in changed] == ["embnorm_lib/studies/ladder.py"]

    out = tmp_path / "runs"
    (out / "ladder-demo").mkdir(parents=True)
    runs = synthetic()
    runs = runs[runs["cfg.preset"].isin(["ladder-0", "ladder-1"])].assign(study="ladder-demo", git_commit="0" * 40)
    runs.to_csv(out / "ladder-demo" / "runs.csv", index=False)
    done = subprocess.run([sys.executable, "-c", DEMO_SCRIPT, str(out), str(tmp_path / "figures")], cwd=repo,
                          env={**__import__("os").environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["kind"] == "ladder" and result["cells"] == 2 * 3 * 5 and result["listed"] == 0
    assert result["written"] == ["LADDER.md", "runs/README.md", "runs/RECIPES.md"]  # a scratch runs directory: no README pages, no paper
    assert (out / "ladder-demo" / "LADDER.md").read_text().startswith("# ")
    readme = (out / "README.md").read_text()
    assert "- `ladder-demo`: A demonstration" in readme and "[`ladder-demo/LADDER.md`](ladder-demo/LADDER.md)" in readme
