"""What publication commits is the same on every CPU: numpy's vector kernels and OpenBLAS's pick code by CPU (AVX-512,
AVX2, SSE) and can move the last bit of a fit or a log; the committed numbers must not move with them."""
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from test_ladder import check_runs, synthetic

from embnorm_lib.core.records.io import PUBLISHED_DIGITS, published, published_csv


def publish_ladder(out) -> None:
    """A ladder study's publication under `out`: its report and figures, and the paper's ladder data and figure
    (paper/data.json's size-trend fit and log-scale peak ratios are where an AVX-512 CPU once changed 32 floats in
    the 16th digit)."""
    from embnorm_lib.analyses import ladder_report, paper, paper_ladder

    ladder_report.write_report("ladder", out, out / "figures")
    paper.write_inputs(out, out / "paper", data={"ladder": paper_ladder.ladder_data(out)}, figures=("ladder",))


def ladder_study(root, jitter_ulps: int = 0):
    """A synthetic ladder (with gradient-norm peaks) and its LR check under `root`; `jitter_ulps` moves every float
    of the index by that many units in the last place, as another CPU's kernels might."""
    runs = synthetic()
    rng = np.random.default_rng(1)
    runs = runs.assign(peak_grad_norm_post_warmup=10 ** rng.normal(0, 0.3, len(runs)), clipped_frac=0.05,
                       spike_count_post_warmup=0, final_train_loss=runs["val_loss"] - 0.2)
    for column in ("val_loss", "best_val_loss", "peak_grad_norm_post_warmup", "final_train_loss"):
        values = runs[column].to_numpy(float)
        for _ in range(jitter_ulps):
            values = np.nextafter(values, np.inf)
        runs[column] = values
    for study, frame in (("ladder", runs), ("ladder-lr", check_runs(rung=1))):
        (root / study).mkdir(parents=True)
        # full precision in: the index carries whatever bits the runs wrote
        (root / study / "runs.csv").write_text(frame.to_csv(index=False, float_format="%.17g"))
    return root


def published_files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "runs.csv"}


def lesser_cpus() -> dict[str, dict[str, str]]:
    """Environments that make numpy and OpenBLAS take the code of a lesser CPU than this one: every numpy dispatch
    target above its baseline switched off in turn (X86_V4 and the AVX512 groups, then X86_V3 too: AVX2/FMA3), and
    OpenBLAS's kernels of the matching CPU."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    present = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    avx512 = [f for f in present if f.startswith(("AVX512", "X86_V4"))]
    envs = {}
    if avx512:
        envs["avx2"] = {"NPY_DISABLE_CPU_FEATURES": " ".join(avx512), "OPENBLAS_CORETYPE": "Haswell"}
    if present:
        envs["sse4"] = {"NPY_DISABLE_CPU_FEATURES": " ".join(present), "OPENBLAS_CORETYPE": "Nehalem"}
    return envs


def publish_elsewhere(root, env_extra: dict[str, str]) -> dict[str, bytes]:
    """publish_ladder(root) in a fresh interpreter whose numpy and OpenBLAS start with `env_extra`."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", **env_extra}
    script = "import sys; from pathlib import Path; from test_cpu_independence import publish_ladder; " \
             "publish_ladder(Path(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", script, str(root)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return published_files(root)


@pytest.mark.parametrize("which", ["nearest", pytest.param("the rest", marks=pytest.mark.slow)])
def test_a_publication_writes_the_same_bytes_on_a_lesser_cpu(tmp_path, which):
    """The nearest lesser CPU (AVX2 on an AVX-512 machine: the two this project's machines are) by default; the
    lesser ones after it (down to SSE4) with -m slow."""
    envs = lesser_cpus()
    assert envs, "numpy has no dispatch target above its baseline on this CPU: nothing to emulate"
    chosen = list(envs.items())[:1] if which == "nearest" else list(envs.items())[1:]
    if not chosen:
        pytest.skip("this CPU has one lesser target, checked by the default case")
    publish_ladder(ladder_study(tmp_path / "here"))  # this CPU's own kernels, in this process
    here = published_files(tmp_path / "here")
    assert {"paper/data.json", "paper/figures/ladder.svg", "ladder/LADDER.md"} <= set(here) and any(name.endswith(".pdf") for name in here)
    for name, env in chosen:
        there = publish_elsewhere(ladder_study(tmp_path / name), env)
        assert set(there) == set(here)
        differ = [f for f in here if here[f] != there[f]]
        assert not differ, f"{name} ({env}) changed {differ}"


def test_last_bit_differences_in_the_runs_do_not_reach_the_published_numbers(tmp_path, monkeypatch):
    """The same check without emulation, for any CPU: the runs' floats moved by a few units in the last place (what
    another machine's kernels give) leave the committed JSON and reports byte-identical."""
    from embnorm_lib.analyses import ladder_report, paper, paper_ladder
    from embnorm_lib.publishing import plots

    monkeypatch.setattr(plots, "save", lambda *args, **kwargs: None)  # figures: the emulation test above
    texts = []
    for ulps in (0, 3):
        root = ladder_study(tmp_path / f"ulps{ulps}", jitter_ulps=ulps)
        report = ladder_report.write_report("ladder", root, root / "figures").read_text()
        texts.append((report, paper.data_json(paper_ladder.ladder_data(root))))
    assert texts[0][0] == texts[1][0]
    assert texts[0][1] == texts[1][1]


def test_published_numbers_are_rounded_to_the_stated_digits():
    value = 0.5468979418303406
    assert published({"a": [value, np.float64(value)], "n": np.int64(3), "ok": np.bool_(True)}) == \
        {"a": [0.5468979418, 0.5468979418], "n": 3, "ok": True}
    assert PUBLISHED_DIGITS == 10 and published(1.23456789012345e-7) == 1.234567890e-7
    assert published(float("nan")) != published(float("nan"))  # NaN passes through (JSON writes it as null)
    frame = pd.DataFrame({"x": [value, 2.0], "name": ["a", "b"], "n": [1, 2]})
    assert published_csv(frame) == "x,name,n\n0.5468979418,a,1\n2.0,b,2\n"


def test_the_committed_papers_data_holds_no_number_beyond_the_stated_digits():
    data = json.loads((REPO / "paper" / "data.json").read_text())

    def floats(obj):
        if isinstance(obj, float):
            yield obj
        elif isinstance(obj, dict):
            for v in obj.values():
                yield from floats(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from floats(v)

    assert [x for x in floats(data) if published(x) != x] == []
