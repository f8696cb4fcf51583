"""Scale vs normalization: per-regime paired tables and the attribution words on a synthetic study."""
import re

import numpy as np
import pandas as pd
import pytest

from embnorm_lib.analyses import scale as scale_vs_norm


def synthetic_runs():
    """At std 1 with a tied head, ln and scaled_unit gain 0.5 (rescaling carries it) and ln_matched nothing;
    at std 0.02, ln costs 0.1 and the rest nothing. Tied none/ln runs are copies of runs written before
    tie_embeddings existed (NaN in the index)."""
    rng = np.random.default_rng(0)
    rows = []
    for std in (0.02, 1.0):
        for tie in (True, False):
            if tie is False and std == 0.02:
                continue
            for variant in ("none", "ln", "ln_matched", "scaled_unit"):
                for seed in range(5):
                    effect = {(1.0, "ln"): -0.5, (1.0, "scaled_unit"): -0.5, (0.02, "ln"): 0.1}.get((std, variant), 0)
                    if tie is False:
                        effect = 0.0
                    old = tie and variant in ("none", "ln")
                    rows.append({"variant": variant, "arm": f"{variant}_{std}_{tie}", "seed": seed,
                                 "cfg.emb_init_std": std, "cfg.tie_embeddings": np.nan if old else tie,
                                 "val_loss": 2.0 + effect + 0.01 * seed + rng.normal(0, 0.002),
                                 "init_val_loss": 4.2, "failed": False})
    return pd.DataFrame(rows)


def test_regimes_are_separate_holm_families_and_old_runs_count_as_tied():
    table = scale_vs_norm.regime_table(synthetic_runs())
    assert set(zip(table["emb_init_std"], table["head"])) == {(0.02, "tied"), (1.0, "tied"), (1.0, "untied")}
    tied = table[(table["emb_init_std"] == 1.0) & (table["head"] == "tied")].set_index("variant")
    assert tied.loc["none", "seeds"] == 5 and tied.loc["ln_matched", "seeds"] == 5  # old runs count as tied
    words = scale_vs_norm.attribution(table).set_index(["emb_init_std", "head"])
    assert words.loc[(1.0, "tied"), "ln vs none"].startswith("lowers it by 0.5")
    assert words.loc[(1.0, "tied"), "scaled_unit vs none"].startswith("lowers")
    assert words.loc[(1.0, "tied"), "ln_matched vs none"].startswith("not resolved")
    assert words.loc[(0.02, "tied"), "ln vs none"].startswith("raises it by 0.1")
    assert words.loc[(1.0, "untied"), "ln vs none"].startswith("not resolved")
    assert words.loc[(1.0, "untied"), "scaled vs none"] == "not run"


def test_normalizings_share_is_given_only_where_layernorms_difference_is_resolved():
    shares = scale_vs_norm.normalizing_share(scale_vs_norm.regime_table(synthetic_runs()))
    assert set(zip(shares["emb_init_std"], shares["head"])) == {(0.02, "tied"), (1.0, "tied")}  # untied: ln 0
    by = shares.set_index("emb_init_std")
    assert by.loc[1.0, "ln_delta"] < -0.4 and by.loc[0.02, "ln_delta"] > 0.05
    assert (shares["share"] < 0.1).all()  # ln_matched has no effect by construction
    assert by.loc[1.0, "share"] == abs(by.loc[1.0, "ln_matched_delta"] / by.loc[1.0, "ln_delta"])
    # rescaling alone: scaled_unit's difference over ln's, signed (a share against the norm's direction is negative)
    assert (shares["scale_share"] == shares["scaled_unit_delta"] / shares["ln_delta"]).all()
    assert [by.loc[1.0, "scale_share"], by.loc[0.02, "scale_share"]] == pytest.approx([1.0, 0.0], abs=0.05)  # as planted



def test_each_half_is_compared_with_layernorm_itself_paired_by_seed():
    runs = synthetic_runs()
    shares = scale_vs_norm.normalizing_share(scale_vs_norm.regime_table(runs), runs).set_index("emb_init_std")
    # std 1, tied: ln and scaled_unit gain 0.5 each, ln_matched nothing, so ln_matched sits 0.5 above ln, resolved,
    # and scaled_unit within noise of it (rescaling alone reproduces the norm there, as planted)
    assert shares.loc[1.0, "ln_matched_vs_ln"] == pytest.approx(0.5, abs=0.01)
    assert shares.loc[1.0, "ln_matched_vs_ln_low"] > 0 and shares.loc[1.0, "ln_matched_vs_ln_seeds"] == 5
    assert abs(shares.loc[1.0, "scaled_unit_vs_ln"]) < 0.01
    # std 0.02: ln costs 0.1, both halves nothing, so each half lies 0.1 below ln
    assert shares.loc[0.02, "ln_matched_vs_ln"] == pytest.approx(-0.1, abs=0.01)
    assert shares.loc[0.02, "scaled_unit_vs_ln_high"] < 0
    # the same pairs as stats.compare gives for the half against ln on that regime's runs
    tied = scale_vs_norm.with_regime(runs)
    tied = tied[(tied["cfg.emb_init_std"] == 0.02) & tied["cfg.tie_embeddings"]]
    c = scale_vs_norm.stats.compare(tied, "val_loss", "ln_matched", baseline="ln")
    assert (shares.loc[0.02, "ln_matched_vs_ln_low"], shares.loc[0.02, "ln_matched_vs_ln_high"]) == (c.ci_low, c.ci_high)
    assert "ln_matched_vs_ln" not in scale_vs_norm.normalizing_share(scale_vs_norm.regime_table(runs))  # no runs given

@pytest.mark.slow  # ~13 s: the whole regime table again; the report's own tests run on planted runs
@pytest.mark.committed
def test_the_modules_command_line_writes_the_report_publish_writes(tmp_path):
    """`python -m embnorm_lib.analyses.scale`, which SCALE.md names as its writer, writes what `publish` committed
    (the answer its header quotes included; it used to drop it), up to the commit in its 'Written by' line."""
    import re
    import shutil

    from conftest import REPO

    shutil.copytree(REPO / "runs" / "stability-scale-v2", tmp_path / "stability-scale-v2")
    (tmp_path / "stability-scale-v2" / "SCALE.md").unlink()
    assert scale_vs_norm.main(["--out-dir", str(tmp_path)]) == 0
    def unstamped(path):
        return re.sub(r"at commit [0-9a-f]{12}", "at commit X", path.read_text())
    assert unstamped(tmp_path / "stability-scale-v2" / "SCALE.md") == unstamped(
        REPO / "runs" / "stability-scale-v2" / "SCALE.md")


@pytest.mark.committed
def test_findings_quote_each_half_against_layernorm_with_its_interval_not_a_share():
    from embnorm_lib.analyses.findings import scale_finding
    from embnorm_lib.core.records.io import runs_root

    line = scale_finding(runs_root())
    runs = scale_vs_norm.load_runs(scale_vs_norm.STUDY, runs_root())
    shares = scale_vs_norm.normalizing_share(scale_vs_norm.regime_table(runs), runs)
    for r in shares.itertuples():
        assert f"{r.ln_matched_vs_ln:+.3f} [{r.ln_matched_vs_ln_low:+.3f}, {r.ln_matched_vs_ln_high:+.3f}] from `ln`" in line
    assert not re.search(r"\(\d+%", line) and "paired by seed" in line  # no share of the effect, as "(3%)" was
