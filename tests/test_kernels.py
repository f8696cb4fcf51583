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


def test_the_kernel_imports_the_embnorm_lib_that_runs_it_not_another_one_on_the_path(tmp_path, monkeypatch):
    # another checkout's package first on PYTHONPATH, as an editable install of a second checkout would be found
    decoy = tmp_path / "other_checkout" / "embnorm_lib"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(decoy.parent))
    source = nbformat.v4.new_notebook()
    source.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source.cells = [nbformat.v4.new_code_cell("import embnorm_lib; print(embnorm_lib.__file__)")]
    nbformat.write(source, tmp_path / "probe.ipynb")
    executed = execute_notebook(str(tmp_path / "probe.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False,
                                cwd=str(tmp_path))
    import embnorm_lib
    assert executed.cells[0].outputs[0]["text"].strip() == embnorm_lib.__file__
    assert os.environ["PYTHONPATH"] == str(decoy.parent)  # the caller's environment is put back


def test_kernel_pythonpath_puts_this_package_first_once():
    from embnorm_lib.runner.kernels import PACKAGE_FOLDER, kernel_pythonpath
    assert kernel_pythonpath(None) == PACKAGE_FOLDER
    assert kernel_pythonpath(os.pathsep.join(["/a", PACKAGE_FOLDER, "/b"])) == os.pathsep.join([PACKAGE_FOLDER, "/a", "/b"])
