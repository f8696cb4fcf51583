"""A study's executed run notebooks packed into runs/<study>/notebooks.tar.xz (issue 73): nothing lost (tar puts
every notebook back, byte for byte), the same notebooks give the same archive, a notebook a sweep still holds or of an
unfinished run stays loose, a damaged archive is named in one line."""
import io
import json
import re
import subprocess
import tarfile

import pytest
from conftest import REPO
from test_runs_portable import ABSOLUTE_PATH

from embnorm_lib.core.errors import RunDirError
from embnorm_lib.core.records.rundir import RunDir
from embnorm_lib.runner import notebook_archive as na
from embnorm_lib.tools import compact_logs


def _run(study, arm, seed, finished=True, text=None):
    run = RunDir(study / arm / f"seed{seed}")
    run.root.mkdir(parents=True)
    if finished:
        run.summary.write_text(json.dumps({"steps": 1}))
    run.notebook.write_text(text or json.dumps({"cells": [], "arm": arm, "seed": seed}))
    return run


def test_packing_moves_finished_runs_notebooks_into_the_archive_and_tar_gives_them_back(tmp_path):
    study = tmp_path / "s"
    runs = [_run(study, arm, seed) for arm in ("ln", "none") for seed in (0, 1)]
    unfinished = _run(study, "rms", 0, finished=False)
    loose = {r.notebook.relative_to(study).as_posix(): r.notebook.read_bytes() for r in runs}
    packed, loose_bytes, archive_bytes = na.pack_notebooks(study)
    assert (packed, loose_bytes) == (4, sum(map(len, loose.values()))) and archive_bytes == na.archive_path(study).stat().st_size
    assert not any(r.notebook.exists() for r in runs) and unfinished.notebook.is_file()
    assert na.archived_notebooks(study) == loose
    assert na.read_archived_notebook(runs[0].root) == loose["ln/seed0/02_train.ipynb"]
    assert na.read_archived_notebook(unfinished.root) == unfinished.notebook.read_bytes()
    out = tmp_path / "restored"
    out.mkdir()
    subprocess.run(["tar", "-xJf", str(na.archive_path(study)), "-C", str(out)], check=True)
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*.ipynb")} == loose
    assert na.pack_notebooks(study)[0] == 0  # nothing loose: the archive stays as it is


def test_a_later_run_joins_the_archive_and_a_loose_notebook_replaces_its_packed_copy(tmp_path):
    study = tmp_path / "s"
    _run(study, "ln", 0)
    na.pack_notebooks(study)
    _run(study, "ln", 1)
    RunDir(study / "ln" / "seed0").notebook.write_text("{\"newer\": true}")
    assert na.pack_notebooks(study)[0] == 2
    assert na.archived_notebooks(study) == {"ln/seed0/02_train.ipynb": b"{\"newer\": true}",
                                            "ln/seed1/02_train.ipynb": json.dumps({"cells": [], "arm": "ln",
                                                                                   "seed": 1}).encode()}


def test_the_archive_is_a_function_of_the_notebooks_alone():
    notebooks = {"b/seed0/02_train.ipynb": b"{}", "a/seed1/02_train.ipynb": b"{\"x\": 1}"}
    payload = na.archive_bytes(notebooks)
    assert na.archive_bytes(dict(reversed(notebooks.items()))) == payload
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:xz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(notebooks)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.mode) for m in members} == {(0, 0, 0, "", 0o644)}


def test_a_notebook_whose_cell_a_sweep_holds_stays_loose(tmp_path):
    study = tmp_path / "s"
    held, free = _run(study, "ln", 0), _run(study, "ln", 1)
    with held.cell_lock():
        assert na.pack_notebooks(study)[0] == 1
    assert held.notebook.is_file() and not free.notebook.exists()
    assert not free.cell_lock_path.exists()  # looking at a cell leaves no lock file


def test_a_damaged_archive_is_named_and_no_loose_notebook_is_deleted(tmp_path):
    study = tmp_path / "s"
    run = _run(study, "ln", 0)
    na.archive_path(study).write_bytes(b"not an archive")
    with pytest.raises(RunDirError, match="unreadable notebook archive .*notebooks.tar.xz") as bad:
        na.pack_notebooks(study)
    assert "\n" not in str(bad.value) and run.notebook.is_file()


def test_compact_logs_packs_a_studys_notebooks_and_says_so(tmp_path, capsys):
    from test_steplog import sealed_run

    study = tmp_path / "s"
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(), sealed_run(study).notebook)
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path), "--check"]) == 0
    assert "packed" not in capsys.readouterr().out and not na.archive_path(study).exists()  # --check writes nothing
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 0
    assert "packed 1 executed notebook(s)" in capsys.readouterr().out and na.archive_path(study).is_file()


@pytest.mark.committed
def test_no_packed_notebook_names_an_absolute_path():
    import re

    pattern = re.compile(ABSOLUTE_PATH)
    archives = sorted((REPO / "runs").glob(f"*/{na.ARCHIVE}"))
    assert archives, "no committed notebook archive"
    for archive in archives:
        for name, data in na.archived_notebooks(archive.parent).items():
            assert not pattern.search(data.decode()), f"{archive.parent.name}/{name}"


@pytest.mark.parametrize("member", ["../evil/seed0/02_train.ipynb", "/tmp/abs.txt", "junk.txt", "ln/seed0/x.ipynb"])
def test_an_archive_holding_anything_but_run_notebooks_is_refused(tmp_path, member):
    study = tmp_path / "s"
    run = _run(study, "ln", 0)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(member)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    import lzma
    na.archive_path(study).write_bytes(lzma.compress(raw.getvalue()))
    with pytest.raises(RunDirError, match=f"holds {re.escape(repr(member))}; allowed: only files"):
        na.pack_notebooks(study)
    assert run.notebook.is_file()


def test_a_refused_run_keeps_its_notebook_and_a_bad_notebook_is_named_per_run(tmp_path, capsys):
    import nbformat
    from test_steplog import sealed_run

    study = tmp_path / "s"
    damaged, unreadable, good = (sealed_run(study, seed=k) for k in range(3))
    for run in (damaged, good):
        nbformat.write(nbformat.v4.new_notebook(), run.notebook)
    unreadable.notebook.write_text('{"cells": [')
    damaged.summary.write_text(damaged.summary.read_text() + " ")  # no longer what the seal says
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"run {unreadable.root}: 02_train.ipynb is not a readable notebook" in err and str(damaged.root) in err
    assert damaged.notebook.is_file() and unreadable.notebook.is_file() and not good.notebook.exists()
    assert list(na.archived_notebooks(study)) == ["ln/seed2/02_train.ipynb"]


# -- issue 117, item 8: the archive read and extracted by its own rules, never by `tar -x` --------------------------

def _crafted(study, *members):
    """An archive of (TarInfo fields, bytes) members, written as compact_logs would name it."""
    import lzma

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for fields, data in members:
            info = tarfile.TarInfo(fields.pop("name"))
            for key, value in fields.items():
                setattr(info, key, value)
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    na.archive_path(study).write_bytes(lzma.compress(raw.getvalue()))


def _tree(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_extract_notebooks_puts_each_back_byte_for_byte_and_keeps_a_loose_one(tmp_path, capsys):
    from embnorm_lib.core.errors import entry

    study = tmp_path / "s"
    runs = [_run(study, arm, seed) for arm in ("ln", "none") for seed in (0, 1)]
    packed = {r.notebook.relative_to(study).as_posix(): r.notebook.read_bytes() for r in runs}
    na.pack_notebooks(study)
    runs[0].notebook.write_text('{"newer": true}')  # loose: newer than its packed copy, which packing would replace
    (study / "none" / "seed1" / "summary.json").unlink()
    (study / "none" / "seed1").rmdir()  # a run that is gone gets no lone notebook
    assert entry(na.main, ["s", "--out-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (f"2 notebook(s) put back beside their runs in {study}; 1 already there (kept); "
                                       "1 without a run directory (not written)\n")
    assert runs[0].notebook.read_text() == '{"newer": true}'
    assert {n: (study / n).read_bytes() for n in ("ln/seed1/02_train.ipynb", "none/seed0/02_train.ipynb")} == {
        n: packed[n] for n in ("ln/seed1/02_train.ipynb", "none/seed0/02_train.ipynb")}
    assert not (study / "none" / "seed1").exists() and not [p for p in _tree(study) if p.endswith(".tmp")]
    assert na.extract_notebooks(study) == (0, 3, 1)  # again: nothing to do


@pytest.mark.parametrize("fields,why", [
    (dict(name="ln/seed1/02_train.ipynb", type=tarfile.SYMTYPE, linkname="/etc/passwd"), "holds 'ln/seed1/"),
    (dict(name="ln/seed1/02_train.ipynb", type=tarfile.LNKTYPE, linkname="ln/seed0/02_train.ipynb"), "holds 'ln/seed1/"),
    (dict(name="ln", type=tarfile.SYMTYPE, linkname="/tmp"), "holds 'ln'; allowed: only files"),
    (dict(name="/abs/seed0/02_train.ipynb"), "holds '/abs/seed0/02_train.ipynb'"),
    (dict(name="../out/seed0/02_train.ipynb"), "holds '../out/seed0/02_train.ipynb'"),
    (dict(name="ln/seed0/02_train.ipynb"), "holds 'ln/seed0/02_train.ipynb' twice; allowed: each notebook once"),
])
def test_an_archive_with_a_link_a_path_out_or_a_name_twice_is_refused_whole(tmp_path, capsys, fields, why):
    """tar -x made the link; the reader kept the last of two copies of a name."""
    from embnorm_lib.core.errors import entry

    study = tmp_path / "s"
    for seed in (0, 1):
        RunDir(study / "ln" / f"seed{seed}").root.mkdir(parents=True)
    _crafted(study, (dict(name="ln/seed0/02_train.ipynb"), b"{}"), (fields, b'{"evil": 1}'))
    before = _tree(tmp_path)
    with pytest.raises(RunDirError, match=re.escape(why)):
        na.archived_notebooks(study)
    assert entry(na.main, ["s", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: notebook archive {na.archive_path(study)} {why}" in err
    assert _tree(tmp_path) == before  # nothing written, not even the good member


def test_an_archive_over_its_size_caps_is_refused_before_its_data_is_read(tmp_path, monkeypatch):
    """A crafted archive of 156 KB held a 1 GiB member, which the reader loaded into memory."""
    study = tmp_path / "s"
    RunDir(study / "ln" / "seed0").root.mkdir(parents=True)
    _crafted(study, (dict(name="ln/seed0/02_train.ipynb"), b"x" * 5000), (dict(name="ln/seed1/02_train.ipynb"), b"{}"))
    monkeypatch.setattr(na, "MAX_NOTEBOOK_BYTES", 4096)
    with pytest.raises(RunDirError, match="holds 'ln/seed0/02_train.ipynb' of 5,000 bytes .*allowed: at most 4,096 "
                                          "bytes a notebook and 256,000,000 in all"):
        na.extract_notebooks(study)
    monkeypatch.setattr(na, "MAX_NOTEBOOK_BYTES", 10**6)
    monkeypatch.setattr(na, "MAX_ARCHIVE_BYTES", 6000)  # each fits; together, with their headers, they do not
    with pytest.raises(RunDirError, match="holds 'ln/seed1/02_train.ipynb' of 2 bytes"):
        na.archived_notebooks(study)
    monkeypatch.setattr(na, "MAX_ARCHIVE_BYTES", 10**6)
    monkeypatch.setattr(na, "MAX_NOTEBOOKS", 1)
    with pytest.raises(RunDirError, match="holds more than 1 notebooks"):
        na.archived_notebooks(study)
    assert _tree(study) == ["ln", "ln/seed0", "notebooks.tar.xz"]


@pytest.mark.parametrize("link", ["arm", "seed", "notebook"])
def test_extraction_writes_nothing_through_a_symbolic_link(tmp_path, capsys, link):
    """After `tar -x` of a crafted archive, a later run wrote its whole run directory through a link out of the tree."""
    from embnorm_lib.core.errors import entry

    study, outside = tmp_path / "s", tmp_path / "outside"
    (outside / "seed0").mkdir(parents=True)
    _run(study, "none", 0)
    na.pack_notebooks(study)
    _crafted(study, (dict(name="none/seed0/02_train.ipynb"), b"{}"), (dict(name="rms/seed0/02_train.ipynb"), b"{}"))
    if link == "arm":
        (study / "rms").symlink_to(outside)
    else:
        (study / "rms").mkdir()
        if link == "seed":
            (study / "rms" / "seed0").symlink_to(outside / "seed0")
        else:
            (study / "rms" / "seed0").mkdir()
            (study / "rms" / "seed0" / "02_train.ipynb").symlink_to(outside / "seed0" / "02_train.ipynb")  # dangling
    before = _tree(tmp_path)
    assert entry(na.main, ["s", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a symbolic link or not a" in err and "nothing is written through a link" in err
    assert _tree(tmp_path) == before  # not even none/seed0's notebook, sorted before the link


def test_packing_refuses_a_notebook_that_is_a_symbolic_link(tmp_path):
    """compact-logs packed an outside file into the archive through a linked notebook."""
    study = tmp_path / "s"
    run = _run(study, "ln", 0)
    (tmp_path / "secret.txt").write_text("outside the tree")
    run.notebook.unlink()
    run.notebook.symlink_to(tmp_path / "secret.txt")
    with pytest.raises(RunDirError, match=f"run {re.escape(str(run.root))}: 02_train.ipynb is a symbolic link"):
        na.pack_notebooks(study)
    assert not na.archive_path(study).exists()
    assert na.pack_notebooks(study, skip={run.root}) == (0, 0, 0)  # a run compact_logs refused is left as it is


def test_compact_logs_refuses_a_linked_notebook_and_leaves_what_it_points_at_out_of_the_archive(tmp_path, capsys):
    import nbformat
    from test_steplog import sealed_run

    study = tmp_path / "s"
    linked, good = sealed_run(study, seed=0), sealed_run(study, seed=1)
    outside = tmp_path / "outside.ipynb"
    nbformat.write(nbformat.v4.new_notebook(metadata={"secret": "outside the tree"}), outside)
    linked.notebook.symlink_to(outside)
    nbformat.write(nbformat.v4.new_notebook(), good.notebook)
    assert compact_logs.main(["--study", "s", "--out-dir", str(tmp_path)]) == 2
    assert f"run {linked.root}: 02_train.ipynb is a symbolic link" in capsys.readouterr().err
    assert linked.notebook.is_symlink() and list(na.archived_notebooks(study)) == ["ln/seed1/02_train.ipynb"]


def test_a_notebooks_brief_errors_keep_trios_warning_and_its_absolute_path_out_of_the_outputs(monkeypatch):
    """The zero-shot cell's lm-eval imports trio, which warns (naming its own file's absolute path) when IPython
    already has a custom exception handler: brief_errors installs one, so it also silences that one warning, and
    nothing else."""
    import builtins
    import warnings

    from IPython.core.interactiveshell import InteractiveShell

    from embnorm_lib.core.notebook import brief_errors

    shell = InteractiveShell.instance()
    monkeypatch.setattr(builtins, "get_ipython", lambda: shell, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        brief_errors()
        warnings.warn("IPython detected, but you already have a custom exception handler installed. I'll skip "
                      "installing Trio's custom handler", RuntimeWarning, stacklevel=1)
        warnings.warn("another warning", RuntimeWarning, stacklevel=1)
    assert shell.custom_exceptions != ()
    assert [str(w.message) for w in caught] == ["another warning"]
    shell.set_custom_exc((), None)
