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
from embnorm_lib.core.rundir import RunDir
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
