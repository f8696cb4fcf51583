"""Every notebook the library executes (a sweep's runs, a publish's analysis notebooks, the main job's data step)
goes through execute_notebook here: papermill with a kernel that talks over IPC sockets in a private temporary
folder, not over local TCP.

Why: over TCP the client picks free ports and the kernel binds them a moment later; a kernel started by another
process in between (two sweep workers, a publish's two notebooks side by side, pytest-xdist) can take one, and the
kernel dies with 'Address already in use' while its client waits 60 s (seen in CI, jupyter_client 8.10 and
ipykernel 7.4). A socket file under a fresh folder cannot collide, and ipykernel does not warn about unencrypted
TCP. Windows has no IPC transport there, and a socket path longer than the OS allows cannot be bound: both keep TCP.

The kernel also imports the very embnorm_lib that runs it. A kernel starts in the notebook's folder, where the
package is not importable, so it would take whichever embnorm_lib its Python finds: with one checkout installed
editable and a sweep started from another (a worktree at a fixed commit), every run trained on the installed
checkout's code and wrote into *its* runs/ (seen in this project). Putting this package's folder first on the
kernel's PYTHONPATH makes the sweep and its runs one code."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbformat import NotebookNode

# the kernel logs at ERROR only: its warnings are about the kernel, which the user cannot act on (a cell's own
# warnings are its outputs, kept)
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
_UNIX_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, 104 on macOS; the socket names end in "-N"


def kernel_options(folder: str) -> dict:
    """papermill keywords for a kernel whose sockets live in `folder` (the caller owns and removes it)."""
    socket_base = str(Path(folder) / "kernel")
    if os.name == "nt" or len(socket_base.encode()) + 3 > _UNIX_SOCKET_PATH_MAX:
        return {"extra_arguments": KERNEL_ARGS}
    from traitlets.config import Config

    return {"extra_arguments": KERNEL_ARGS,
            "config": Config({"KernelManager": {"transport": "ipc", "ip": socket_base}})}


# the folder that holds this embnorm_lib (a checkout's root, or site-packages for an installed copy)
PACKAGE_FOLDER = str(Path(__file__).resolve().parents[2])


def kernel_pythonpath(current: str | None) -> str:
    """PYTHONPATH for a kernel: this package's folder first, then what was there (once, never twice)."""
    rest = [p for p in (current or "").split(os.pathsep) if p and os.path.abspath(p) != PACKAGE_FOLDER]
    return os.pathsep.join([PACKAGE_FOLDER, *rest])


@contextlib.contextmanager
def _this_package_for_kernels() -> Iterator[None]:
    # jupyter_client hands a new kernel os.environ (papermill passes no env of its own), so set it for the start
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = kernel_pythonpath(before)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def execute_notebook(source: str, executed: str, **papermill_kwargs) -> NotebookNode:
    """pm.execute_notebook(source, executed, **papermill_kwargs) on a kernel of its own sockets that imports this
    embnorm_lib (see above)."""
    import papermill as pm

    with tempfile.TemporaryDirectory(prefix="embnorm-kernel-") as folder, _this_package_for_kernels():
        return pm.execute_notebook(source, executed, kernel_name="python3", **papermill_kwargs,
                                   **kernel_options(folder))
