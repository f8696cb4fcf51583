"""Do the committed reports say what the current code writes from the committed runs?

    python scripts/check_reports.py                 # every study with a committed index (~10 minutes on 2 cores)
    python scripts/check_reports.py ladder h1b      # only studies whose name contains one of these texts
    python scripts/check_reports.py --keep          # leave the scratch checkout for inspection

A report is regenerated whenever a study is published, but a change to the code that writes it (a renamed
column, a new sentence, a crash) shows only when that study is published again. This publishes every selected
study again in a scratch checkout of HEAD (a detached git worktree under the system's temporary directory, with
`../shared` beside it), so nothing here is touched, then lists each file the publishing changed beyond its
`at commit ...` stamp. It exits 1 when any changed or any publish failed; then publish those studies here and
commit what they write. Untracked run directories (a study still training) are not in HEAD, so they are not seen.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# published together by `publish stability` (runs/STABILITY.md), not one by one
STABILITY_V1 = ("stability-lr", "stability-init", "stability-stress", "stability-budget")


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def committed_studies() -> list[str]:
    """The studies whose index (runs/<study>/runs.csv) is committed at HEAD, registry order."""
    sys.path.insert(0, str(REPO))
    from embnorm_lib.studies import STUDIES

    indexed = {Path(p).parent.name for p in git("ls-files", "runs/*/runs.csv").split()}
    return [name for name in STUDIES if name in indexed]


def publish_targets(studies: list[str]) -> list[str]:
    """What to run `publish` on: each study, the v1 stability studies once as `stability`."""
    targets = [s for s in studies if s not in STABILITY_V1]
    return targets + (["stability"] if any(s in STABILITY_V1 for s in studies) else [])


def changed_files(tree: Path) -> list[str]:
    """Tracked files whose change is more than the commit stamp, and files publishing added."""
    # --numstat honours -I (--name-only lists every touched file); a binary file shows as "-<tab>-<tab>path"
    # a report's provenance line and a record's "commit" key name the commit they were written at; that alone is
    # not a change (the same pattern write_text_stable ignores)
    sys.path.insert(0, str(REPO))
    from embnorm_lib.core.records.writes import STAMP_PATTERN

    lines = git("diff", "--numstat", "-I", STAMP_PATTERN, cwd=tree).splitlines()
    stamped = [line.split("\t", 2)[2] for line in lines]
    added = git("ls-files", "--others", "--exclude-standard", cwd=tree).split()
    return sorted(set(stamped) | set(added))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("only", nargs="*", help="texts: check only studies whose name contains one of them")
    p.add_argument("--keep", action="store_true", help="leave the scratch checkout (its path is printed)")
    args = p.parse_args(argv)
    studies = committed_studies()
    if args.only:
        studies = [s for s in studies if any(text in s for text in args.only)]
        if not studies:
            print(f"error: no study with a committed index matches {' '.join(args.only)!r}; allowed: "
                  f"{', '.join(committed_studies())}", file=sys.stderr)
            return 2
    scratch = Path(tempfile.mkdtemp(prefix="embnorm-check-reports-"))
    tree = scratch / "embnorm"
    git("worktree", "add", "--detach", "--quiet", str(tree), "HEAD")
    shared = REPO.parent / "shared"
    if shared.is_dir():
        (scratch / "shared").symlink_to(shared)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    failed = []
    try:
        targets = publish_targets(studies)
        print(f"checking {len(targets)} publish targets in a scratch checkout of {git('rev-parse', 'HEAD')[:12]}: "
              f"{tree}", flush=True)
        for i, target in enumerate(targets, 1):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "embnorm_lib", "publish", target], cwd=tree, env=env,
                                  capture_output=True, text=True)
            status = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
            print(f"[{i}/{len(targets)}] publish {target}: {status}, {time.perf_counter() - start:.0f} s", flush=True)
            if done.returncode:
                failed.append(target)
                print("    " + "\n    ".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-5:]))
        changed = changed_files(tree)
        for path in changed:
            print(f"differs from HEAD: {path}")
        if not changed and not failed:
            print("every committed report is what the current code writes from the committed runs")
            return 0
        print(f"{len(changed)} file(s) differ, {len(failed)} publish(es) failed: publish those studies here "
              "(python -m embnorm_lib publish STUDY) and commit what they write", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept: {tree}")
        else:
            git("worktree", "remove", "--force", str(tree))
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
