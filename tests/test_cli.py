"""The command-line helpers every module shares."""
import pytest

from embnorm_lib.core.cli import parse_seeds, report_main
from embnorm_lib.core.errors import ConfigError


def test_seeds_are_ranges_or_lists_and_anything_else_is_refused_naming_it():
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    for bad in ("-1", "1.5", "two", "", "3-1"):
        with pytest.raises(ConfigError, match="invalid --seeds"):
            parse_seeds(bad)


def test_a_report_command_refuses_a_study_without_an_index_and_prints_the_report_otherwise(tmp_path, capsys):
    written = []

    def write(study, args):
        written.append((study, args.figures_dir))
        path = tmp_path / "REPORT.md"
        path.write_text(f"report of {study}\n")
        return path

    studies = ["alpha", "beta"]
    assert report_main(["beta", "--out-dir", str(tmp_path)], "doc", studies, write) == 2
    assert "no runs.csv for beta; run `python -m embnorm_lib sweep beta` first" in capsys.readouterr().err
    assert written == []

    (tmp_path / "beta").mkdir()
    (tmp_path / "beta" / "runs.csv").write_text("run_dir\n")
    assert report_main(["beta", "--out-dir", str(tmp_path), "--figures-dir", "figs"], "doc", studies, write) == 0
    assert written == [("beta", "figs")]
    assert capsys.readouterr().out == "report of beta\n\n"
    with pytest.raises(SystemExit):
        report_main(["gamma", "--out-dir", str(tmp_path)], "doc", studies, write)


def test_one_command_line_dispatches_each_verb_to_its_module_and_the_old_commands_still_run():
    """`python -m embnorm_lib <verb>` runs a module's own command line (its table names modules that exist and have
    one); the flat `python -m embnorm_lib.<module>` commands of before the layers still run the same code."""
    import importlib.util
    import subprocess
    import sys

    from embnorm_lib.__main__ import VERBS

    for verb, (module, _) in VERBS.items():
        spec = importlib.util.find_spec(f"embnorm_lib.{module}")
        assert spec is not None and 'if __name__ == "__main__"' in open(spec.origin).read(), verb
    listed = subprocess.run([sys.executable, "-m", "embnorm_lib"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and all(verb in listed.stdout for verb in VERBS)
    unknown = subprocess.run([sys.executable, "-m", "embnorm_lib", "nope"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown verb 'nope'; allowed: run, sweep" in unknown.stderr
    sealed = subprocess.run([sys.executable, "-m", "embnorm_lib", "seal", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert sealed.returncode == 0 and "--check" in sealed.stdout


def test_the_old_flat_module_names_are_gone():
    """One spelling (issue 114): `embnorm_lib.results` and `python -m embnorm_lib.sweep` no longer resolve."""
    import importlib
    import subprocess
    import sys

    for old in ("embnorm_lib.results", "embnorm_lib.sweep", "embnorm_lib.analysis"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    gone = subprocess.run([sys.executable, "-m", "embnorm_lib.sweep", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert gone.returncode != 0 and "No module named embnorm_lib.sweep" in gone.stderr
