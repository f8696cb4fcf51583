"""Setup helpers for the Kaggle/Colab quickstart notebook (standard library only: they run before the
project's requirements are installed).

A GPU image already has torch (its CUDA build), numpy, pandas, matplotlib, scipy... Pinning our CPU
versions over them would downgrade the image and force a kernel restart, so the notebook installs only
what a run needs and the image lacks, and says whether anything it changed needs a restart."""
from __future__ import annotations

import importlib.metadata as metadata
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

# What training, the sweep and its summary table import (not jupyterlab, pytest, submitit, lm-eval).
RUN_PACKAGES = ("numpy", "pandas", "matplotlib", "scipy", "statsmodels", "tokenizers", "torchmetrics", "tqdm",
                "psutil", "papermill", "nbformat", "nbconvert", "ipykernel", "pyarrow")


def installed_versions(packages: Iterable[str] = (*RUN_PACKAGES, "torch")) -> dict[str, str]:
    found = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def missing_packages(packages: Iterable[str] = RUN_PACKAGES, version: Callable[[str], str] | None = None) -> list[str]:
    """The packages of `packages` that are not installed at all; installed ones are kept at the image's version."""
    version = version or metadata.version
    missing = []
    for name in packages:
        try:
            version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def restart_needed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Packages the install changed that the kernel may already have loaded: those need a restart."""
    return sorted(name for name, v in before.items() if after.get(name) != v)


def seeds_text(seeds) -> str:
    """`-p seeds 0`, `-p seeds 0-2`, `-p seeds "0,3"` or a YAML list, as the sweep's --seeds text."""
    if isinstance(seeds, bool):
        raise ValueError(f"invalid seeds={seeds!r}; allowed: an integer >= 0, a range like 0-2, or a list")
    if isinstance(seeds, int):
        text = str(seeds)
    elif isinstance(seeds, (list, tuple)):
        text = ",".join(str(s) for s in seeds)
    else:
        text = str(seeds).strip()
    if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", text):
        raise ValueError(f"invalid seeds={seeds!r}; allowed: an integer >= 0, a range like 0-2, or a list")
    return text


def data_arguments(data_path: str = "", vocab_size: int = 0) -> list[str]:
    """The sweep's data arguments from the quickstart's parameters: a text file or a folder of token shards (whose
    layout the sweep detects and checks), and the vocabulary size shards need."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 0:
        raise ValueError(f"invalid vocab_size={vocab_size!r}; allowed: 0 (the preset's) or a positive integer")
    if not isinstance(data_path, str):
        raise ValueError(f"invalid data_path={data_path!r}; allowed: a path as text")
    return ([*(["--data-path", data_path] if data_path else []), *(["--set", f"vocab_size={vocab_size}"]
                                                                    if vocab_size else [])])


def run_command(args: list[str], cwd: str | Path | None = None) -> None:
    """Run one of the project's commands and print what it says as plain notebook output (its progress goes to
    stderr, which a notebook paints red line by line, and a returned CompletedProcess would print its repr); a
    failure is one line with the command's last words."""
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    last = "(no output)"
    for line in process.stdout:
        print(line, end="", flush=True)
        last = line.strip() or last
    if process.wait() != 0:
        shown = " ".join(Path(args[0]).name if i == 0 else a for i, a in enumerate(args))
        raise RuntimeError(f"{shown[:100]} failed (exit {process.returncode}): {last}")
