"""The command-line helpers every module shares."""
import pytest

from embnorm_lib.cli import parse_seeds, report_main
from embnorm_lib.errors import ConfigError


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
