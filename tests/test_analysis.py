import json
import shutil

import nbformat
import pandas as pd
import pytest
from conftest import REPO, tiny

from embnorm_lib.analyses import paired as analysis
from embnorm_lib.core.records.rundir import RunDir, run_dir_for
from embnorm_lib.core.records.seal import reseal
from embnorm_lib.core.training.train import train
from embnorm_lib.publishing import figures
from embnorm_lib.publishing.report import arm_table
from embnorm_lib.runner.results import build_index, load_runs


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory, data_path):
    """3 variants x 3 seeds of the tiny preset: a real (small) study on disk."""
    out = tmp_path_factory.mktemp("runs")
    for variant in ("none", "ln", "rms"):
        for seed in range(3):
            train(tiny(variant=variant, seed=seed, max_iters=8, eval_interval=4, diag_interval=4, eval_at_init=False),
                  run_dir_for("tinystudy", variant, seed, out), data_path, progress=False)
    build_index("tinystudy", out)
    return out


def test_index_and_arm_table(tiny_study):
    runs = load_runs("tinystudy", tiny_study)
    assert len(runs) == 9 and set(runs["arm"]) == {"none", "ln", "rms"}
    table = arm_table(runs)
    assert list(table.index) == ["none", "ln", "rms"]
    none = runs[runs["variant"] == "none"]["val_loss"]
    assert table.loc["none", "val_loss_mean"] == pytest.approx(none.mean())


def test_analysis_writes_tables_decision_and_report(tiny_study, tmp_path):
    analyses = analysis.analyse("tinystudy", out_dir=tiny_study)
    assert [a.scope for a in analyses] == ["tiny"]
    a = analyses[0]
    assert set(a.family["variant"]) == {"ln", "rms"} and "val_loss" in set(a.family["metric"])
    report = analysis.write_outputs(analyses, tiny_study, tmp_path / "fig")
    text = report.read_text()
    assert "Decision" in text and "docs/PROTOCOL.md" in text
    target = tiny_study / "tinystudy" / "analysis" / "tiny"
    decision = json.loads((target / "decision.json").read_text())
    assert decision["overall"] in ("keep baseline", "adopt ln", "adopt rms")
    assert (target / "results.tex").read_text().startswith("\\begin{tabular}")
    family = pd.read_csv(target / "family.csv")
    ln_loss = family[(family.variant == "ln") & (family.metric == "val_loss")].iloc[0]
    runs = load_runs("tinystudy", tiny_study)
    by_seed = runs.pivot_table(index="seed", columns="variant", values="val_loss")
    assert ln_loss.mean_diff == pytest.approx((by_seed["ln"] - by_seed["none"]).mean())
    assert (tmp_path / "fig" / "forest_tiny.png").stat().st_size > 1000
    from embnorm_lib.analyses.findings import findings_text

    words = findings_text(tiny_study, studies=("tinystudy",))
    assert words.startswith("### Accuracy")  # grouped by question, each group opening with what it means
    assert "\n- In [`tinystudy`](runs/tinystudy/REPORT.md) (3 seeds, paired)" in words
    assert "### Calibration" in words  # the tiny study scored no zero-shot suite: no such group
    assert f"`ln` {'raises' if ln_loss.mean_diff > 0 else 'lowers'} it by {abs(ln_loss.mean_diff):.3f}" in words
    assert f"**{decision['overall']}**" in words


@pytest.fixture
def stress_unregistered():
    """stability-stress out of the registry for one test, then back in its place: the registry's order is the order
    of every per-study table (paper.compute_spent), and monkeypatch.delitem would put it back last."""
    from embnorm_lib import studies

    saved = dict(studies.STUDIES)
    del studies.STUDIES["stability-stress"]
    yield
    studies.STUDIES.clear()
    studies.STUDIES.update(saved)


def _publish_tiny(tiny_study, tmp_path):
    from embnorm_lib.publishing.publish import publish

    out, fig = tmp_path / "runs", tmp_path / "figures"
    shutil.copytree(tiny_study / "tinystudy", out / "tinystudy")
    # the stability section reads the stability studies next to the study: stand one in (a stand-in, not the
    # registered grid that publishing the real study is held to; see stress_unregistered)
    shutil.copytree(tiny_study / "tinystudy", out / "stability-stress")
    publish("tinystudy", out, fig / "tinystudy")
    return out, fig


def test_publish_runs_both_notebooks(tiny_study, tmp_path, writers, stress_unregistered):
    """publish = 03 + 04 under papermill, each output with one owner."""
    from test_architecture import check_owners

    from embnorm_lib.publishing.publish import publish

    out, fig = _publish_tiny(tiny_study, tmp_path)
    for name in ("03_diagnostics", "04_statistics"):
        nb = nbformat.read(out / "tinystudy" / f"{name}.ipynb", as_version=4)
        assert not any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        assert "start_time" not in nb.metadata["papermill"] and "duration" not in nb.metadata["papermill"]
    # every registered figure, drawn by the 03 kernel (the one place the suite renders them all: 28 files, ~8 s)
    registered = {f"{name}.{ext}" for name in figures.FIGURES for ext in ("pdf", "png")}
    assert registered <= {p.name for p in (fig / "tinystudy").iterdir()}  # and 04's forest plots beside them
    assert all((fig / "tinystudy" / name).stat().st_size > 1000 for name in registered)
    assert not (out / "STABILITY.md").exists()  # one owner: `publish stability`, not a study's publish
    publish("stability", out, fig / "stability")
    check_owners(writers)
    assert {"runs.csv", "README.md", "STABILITY.md"} <= set(writers)  # REPORT.md: written in the 04 kernel
    stability_md = (out / "STABILITY.md").read_text()
    assert "## Stress regime" in stability_md and "`none` failed 0/3" in stability_md
    report = (out / "tinystudy" / "REPORT.md").read_text()
    assert "## Stability (all stability studies; exploratory)" in report and "`none` failed 0/3" in report
    assert (fig / "stability" / "stress_loss_traces.png").stat().st_size > 1000
    html = (out / "tinystudy" / "report.html").read_text()
    assert "Paired comparisons" in html and "Stability" in html
    assert "analysis.analyse(" not in html and "import " not in html  # outputs only, no code cells
    assert "Warning" not in html  # stderr (warnings) left out
    for path in (out / "tinystudy" / "report.html", out / "tinystudy" / "04_statistics.ipynb"):
        assert str(REPO) not in path.read_text()  # no path of the machine it was built on
    # issue 116 #5: the results table scrolls sideways in JupyterLab instead of wrapping "2.4843 ± 0.0045" over three
    # lines, and no cell shows a bare repr
    statistics = nbformat.read(out / "tinystudy" / "04_statistics.ipynb", as_version=4)
    outputs = [o for c in statistics.cells if c.cell_type == "code" for o in c.outputs]
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert tables and all('overflow-x: auto' in t and '<td style="white-space: nowrap">' in t for t in tables)
    assert not any(o.get("output_type") == "execute_result" and o["data"].get("text/plain", "").startswith("[(")
                   for o in outputs)


@pytest.mark.slow
def test_republishing_unchanged_runs_rewrites_no_byte(tiny_study, tmp_path, stress_unregistered):
    """On unchanged runs a second publish rewrites no byte (issue 12). Slow: it executes both notebooks twice."""
    import hashlib

    from embnorm_lib.publishing.publish import publish

    out, fig = _publish_tiny(tiny_study, tmp_path)
    publish("stability", out, fig / "stability")

    def digest():
        return {str(p.relative_to(tmp_path)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    before = digest()
    publish("tinystudy", out, fig / "tinystudy")
    publish("stability", out, fig / "stability")
    assert digest() == before


def test_completeness_gate_refuses_a_study_with_a_missing_metric(tiny_study, tmp_path, capsys):
    """A run that lacks a family metric must stop the analysis, not shrink its n (main's lm_macro_acc was 7 of 10)."""
    out = tmp_path / "runs"
    shutil.copytree(tiny_study / "tinystudy", out / "gated")
    for run_dir in (out / "gated").glob("*/seed*"):
        config = json.loads((run_dir / "config.json").read_text())
        (run_dir / "config.json").write_text(json.dumps({**config, "lm_eval": True}))  # the study asks for lm-eval
        if run_dir.parent.name != "none" or run_dir.name != "seed2":
            summary = json.loads((run_dir / "summary.json").read_text())
            (run_dir / "summary.json").write_text(json.dumps({**summary, "lm_macro_acc": 0.3}))
        reseal(RunDir(run_dir), "config.json", "summary.json")
    build_index("gated", out)
    report = out / "gated" / "REPORT.md"
    report.write_text("the committed report")
    with pytest.raises(analysis.IncompleteStudyError, match=r"1 \(run, metric\) pair\(s\) missing \(none/seed2: "
                                                             r"lm_macro_acc\)"):
        analysis.analyse("gated", out_dir=out)
    from embnorm_lib.publishing import publish

    assert publish.main(["gated", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none/seed2: lm_macro_acc" in err
    assert "published with" not in err  # a study of no group gets no pointer to one
    assert report.read_text() == "the committed report"  # nothing was re-analysed
    # a study that never asked for lm-eval has no lm metric in its family, and nothing is missing
    assert "lm_macro_acc" not in analysis.study_family("tinystudy", load_runs("tinystudy", tiny_study))


def test_a_group_member_that_fails_alone_points_at_its_group(tmp_path, capsys):
    """A v1 stability study published alone fails the paired checks (7 LRs per seed; no lm-eval at 150 iterations);
    the one line names the command that publishes it (the group) before the check that failed."""
    from embnorm_lib.publishing import publish

    out = tmp_path / "runs"
    shutil.copytree(REPO / "runs" / "stability-budget", out / "stability-budget")
    study = out / "stability-budget"
    before = sorted((p.relative_to(out), p.read_bytes()) for p in study.rglob("*") if p.is_file())
    assert publish.main(["stability-budget", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: study stability-budget is published with the other stability studies: "
                          "`python -m embnorm_lib publish stability` (published alone, it fails: study "
                          "stability-budget is incomplete: ")
    assert sorted((p.relative_to(out), p.read_bytes()) for p in study.rglob("*") if p.is_file()) == before


def test_an_executed_notebook_that_caught_a_jupyter_messaging_error_is_not_published():
    from embnorm_lib.core.errors import RunDirError
    from embnorm_lib.publishing.publish import check_no_kernel_noise

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="a warning the analysis printed\n")]
    nb.cells = [cell]
    check_no_kernel_noise(nb, "03_diagnostics")  # the analysis's own stderr is kept
    cell.outputs.append(nbformat.v4.new_output("stream", name="stderr", text=(
        "ERROR:tornado.general:Uncaught exception in ZMQStream callback\nValueError: DELIM not in msg_list\n")))
    with pytest.raises(RunDirError, match=r"invalid executed 03_diagnostics.ipynb: cell 1 caught a Jupyter messaging "
                                          r"error in its stderr \(ERROR:tornado.general"):
        check_no_kernel_noise(nb, "03_diagnostics")
