"""The library's notebooks run on kernels that cannot race for a TCP port (runner/kernels.py says why)."""
import json
import os
import tempfile
from pathlib import Path

import nbformat
import pytest

from embnorm_lib.runner.kernels import execute_notebook, kernel_options


@pytest.mark.skipif(os.name == "nt", reason="no IPC transport for Jupyter kernels on Windows")
def test_a_notebook_runs_on_ipc_sockets_in_a_private_folder_removed_afterwards(tmp_path):
    source = nbformat.v4.new_notebook()
    source.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source.cells = [nbformat.v4.new_code_cell(
        "import json; from ipykernel import get_connection_file\n"
        "info = json.load(open(get_connection_file())); print(json.dumps([info['transport'], info['ip']]))")]
    nbformat.write(source, tmp_path / "probe.ipynb")
    executed = execute_notebook(str(tmp_path / "probe.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False,
                                cwd=str(tmp_path))
    transport, socket_base = json.loads(executed.cells[0].outputs[0]["text"])
    assert transport == "ipc"
    folder = Path(socket_base).parent
    assert folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith("embnorm-kernel-")
    assert not folder.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.ipynb", "probe.ipynb"]  # no socket left in the cwd


def test_a_socket_path_too_long_for_the_os_keeps_tcp():
    assert "config" in kernel_options("/tmp/embnorm-kernel-abc")
    assert kernel_options("/tmp/" + "x" * 120) == {"extra_arguments": ["--IPKernelApp.log_level=ERROR"]}
