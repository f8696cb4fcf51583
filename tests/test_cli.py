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
    assert "no runs.csv for beta; run `python -m embnorm_lib.sweep beta` first" in capsys.readouterr().err
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
    new = subprocess.run([sys.executable, "-m", "embnorm_lib", "seal", "--help"], capture_output=True, text=True,
                         timeout=120)
    old = subprocess.run([sys.executable, "-m", "embnorm_lib.seal", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert new.returncode == old.returncode == 0 and new.stdout == old.stdout and "--check" in new.stdout


def test_an_old_module_name_is_the_moved_module_itself():
    import embnorm_lib.results as old
    import embnorm_lib.runner.results as new
    from embnorm_lib.analyses.paired import study_family  # renamed: analyses/paired.py
    from embnorm_lib.analyses.paired import study_family as moved

    assert old is new and study_family is moved and old.__spec__.name == "embnorm_lib.runner.results"
