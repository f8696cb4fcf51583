"""Wheels for an offline GPU machine: what the study needs there that the machine's Python lacks.

    python scripts/offline_wheels.py --have have.txt             # -> .whl/ (add /.whl/ to .git/info/exclude)
    python scripts/offline_wheels.py --have have.txt --dry-run   # only list what would be kept

`have.txt` names the packages the target already has: `pip list --format=freeze` run there, or a comma- or
line-separated list of names. The script downloads, for CPython 3.12 on manylinux x86_64 and binary only, the
packages that run the training notebook, the sweep and the zero-shot suite (NEEDED, pinned as in requirements.txt)
with all their dependencies; a dependency published only as source (sqlitedict, word2number) is built into a wheel
here. It then deletes the wheels of packages the target already has, so what travels is the difference (it
prints the size; a machine that takes a limited working tree wants scripts/code_only.sh beside it). On the target:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEEDED = ("papermill", "nbformat", "nbconvert", "ipykernel", "jupytext", "submitit", "lm-eval")
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")


def canonical(name: str) -> str:
    """PEP 503 normalisation: `lm_eval`, `LM.Eval` and `lm-eval` are one package."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def pins(names: tuple[str, ...], requirements: str) -> list[str]:
    """`name==version` for each name as requirements.txt pins it; a name it does not pin is an error."""
    pinned = {}
    for line in requirements.splitlines():
        spec = line.split("#")[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            pinned[canonical(name)] = f"{name.strip()}=={version.strip()}"
    missing = [n for n in names if canonical(n) not in pinned]
    if missing:
        raise SystemExit(f"requirements.txt pins no version of {', '.join(missing)}; pin it there first")
    return [pinned[canonical(n)] for n in names]


def have_names(text: str) -> set[str]:
    """Package names from `pip list --format=freeze` output or a comma/line-separated list."""
    names = set()
    for item in re.split(r"[,\n]", text):
        item = item.split("#")[0].strip()
        if item:
            names.add(canonical(re.split(r"[=<>~! @]", item, maxsplit=1)[0]))
    return names


def wheel_package(filename: str) -> str:
    return canonical(filename.split("-", 1)[0])


def already_there(wheels: list[str], have: set[str]) -> list[str]:
    """The wheels whose package the target already has."""
    return [w for w in wheels if wheel_package(w) in have]


def download(requirements: list[str], dest: Path) -> None:
    """pip download for the target; a requirement with no wheel is built here (once) and the download retried."""
    platform_args = [a for p in PLATFORMS for a in ("--platform", p)]
    built: set[str] = set()
    while True:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
               "--python-version", "3.12", "--implementation", "cp", *platform_args, "--find-links", str(dest),
               "-d", str(dest), *requirements]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode == 0:
            return
        found = re.search(r"No matching distribution found for ([A-Za-z0-9_.\-]+)", done.stderr)
        if not found or canonical(found.group(1)) in built:
            raise SystemExit(f"pip download failed:\n{done.stderr[-2000:]}")
        name = found.group(1)
        built.add(canonical(name))
        print(f"building a wheel for {name} (published as source only)")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                        "-w", str(dest), name], check=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--have", type=Path, required=True, help="the packages the target already has (see above)")
    p.add_argument("--dest", type=Path, default=REPO / ".whl")
    p.add_argument("--dry-run", action="store_true", help="download into DEST, list, and delete nothing")
    args = p.parse_args(argv)
    if not args.have.is_file():
        raise SystemExit(f"--have {args.have}: no such file; give the target's `pip list --format=freeze` output")
    have = have_names(args.have.read_text())
    args.dest.mkdir(parents=True, exist_ok=True)
    download(pins(NEEDED, (REPO / "requirements.txt").read_text()), args.dest)
    wheels = sorted(f.name for f in args.dest.glob("*.whl"))
    drop = already_there(wheels, have)
    if not args.dry_run:
        for name in drop:
            (args.dest / name).unlink()
    kept = [w for w in wheels if w not in drop]
    size = sum((args.dest / w).stat().st_size for w in kept)
    print(f"{len(kept)} wheels to carry ({size / 2**20:.1f} MiB) in {args.dest}; {len(drop)} "
          f"{'would be' if args.dry_run else 'were'} left out as already on the target")


if __name__ == "__main__":
    main()
