"""JupyterLab on working copies: `python -m embnorm_lib lab` copies the committed notebooks into the git-ignored lab/
folder (a copy already there is kept: it is yours) and starts JupyterLab there. Lab autosaves whatever is open; opened
from notebooks/, an edited parameters cell (seed = 7, max_iters = 30) and every output were written into the committed
notebook and its jupytext twin, and the README's design-card command then trained 30 iterations. The notebooks find
the library from any folder of the checkout, so a copy runs exactly as the original.

    python -m embnorm_lib lab                 # copy what is missing into lab/, then start JupyterLab there
    python -m embnorm_lib lab --copy-only     # only the copies (e.g. to open them in another editor)
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from ..core.errors import entry
from ..core.records.io import repo_root

LAB_DIR = "lab"  # under the checkout, git-ignored


def prepare_lab(repo: Path | None = None) -> tuple[Path, list[str], list[str]]:
    """Copy each committed notebook missing from lab/ into it; returns (lab folder, copied, kept as they were)."""
    repo = Path(repo) if repo is not None else repo_root()
    lab = repo / LAB_DIR
    lab.mkdir(exist_ok=True)
    copied, kept = [], []
    for notebook in sorted((repo / "notebooks").glob("*.ipynb")):
        target = lab / notebook.name
        if target.exists():
            kept.append(notebook.name)
        else:
            shutil.copy2(notebook, target)
            copied.append(notebook.name)
    return lab, copied, kept


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="embnorm_lib lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--copy-only", action="store_true", help="make the copies, start nothing")
    args, lab_args = p.parse_known_args(argv)
    lab, copied, kept = prepare_lab()
    print(f"{LAB_DIR}/: copied {', '.join(copied) or 'nothing'}; kept your copies of {', '.join(kept) or 'none'} "
          f"(delete one to get the committed version again). The committed notebooks/ stay as they are.")
    if args.copy_only:
        return 0
    return subprocess.call([sys.executable, "-m", "jupyterlab", f"--notebook-dir={lab}", *lab_args])


if __name__ == "__main__":
    sys.exit(entry(main))
