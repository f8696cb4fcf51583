"""The answer on one screen (issue 71): the README's TL;DR, its answer figure and its regime table, computed from the
committed studies.

    python -m embnorm_lib publish readme    # figures/answer.png, the README's first screen, FINDINGS.md (report.py)

`answer_data` gathers every number the first screen quotes (JSON-safe, so a test can re-derive and compare it);
`record` adds the words chosen from them (answer_words: every direction word from the Holm decision or TOST of the row
it describes, never typed) and the links (computed from the headings of docs/PROTOCOL.md and FINDINGS.md); the prose
is the template templates/answer.md.j2, filled from that record (runs/answer.json); answer_figure draws the figure."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.config import RunConfig
from ..core.records.io import read_json, repo_root, runs_root
from ..core.records.rundir import study_dir_for
from ..publishing.templating import macro
from ..runner.results import has_index, load_runs
from ..stats import seeds_behind
from ..studies.paper_sources import BOUNDARY_KEYS, LADDER, MAIN
from .answer_words import CALIBRATION, DATA_LADDER, NORMS, REGIMES, STUDIES_QUOTED, answer_record, data_ladder_record

REGISTERED_STUDY = MAIN  # the registered paired study: both regimes, the seed study's final plan's runs included
RECORD = "answer.json"  # under runs/: the answer's record, written by site.update_readme
TEMPLATE = "answer.md.j2"  # the answer's prose: the README's first screen and FINDINGS.md's opening
PROTOCOL = Path("docs") / "PROTOCOL.md"
FINDINGS = "FINDINGS.md"


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def amendment(about: str) -> dict:
    """The first amendment of docs/PROTOCOL.md whose heading names `about`: its number, when it was committed
    (the heading's own words) and a link to it."""
    for line in (repo_root() / PROTOCOL).read_text().splitlines():
        found = re.match(r"### (Amendment (\d+) \(([^)]*)\), (.*))", line)
        if found and about in line:
            return {"number": int(found[2]), "date": found[3], "when": found[4],
                    "link": f"{PROTOCOL.as_posix()}#{github_anchor(found[1])}"}
    raise ValueError(f"{PROTOCOL} has no amendment heading naming {about!r}; allowed: a text that one "
                     "'### Amendment N (date), ...' heading contains")


def findings_link(group: str) -> str:
    """A link to one question's section of FINDINGS.md (findings.py writes its headings from FINDINGS_GROUPS)."""
    from ..studies.findings_groups import FINDINGS_GROUPS

    return f"{FINDINGS}#{github_anchor(FINDINGS_GROUPS[group][0])}"


def _clean(value):
    if isinstance(value, (np.floating, float)):
        return None if not np.isfinite(value) else round(float(value), 6)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[dict]:
    """Records with clean values; a p value at 6 significant digits (6 decimals would write 2.6e-09 as 0)."""
    return [{k: float(f"{v:.6g}") if k.startswith("p_") and np.isfinite(v) else _clean(v) for k, v in r.items()}
            for r in frame[columns].to_dict("records")]


# -- the data --------------------------------------------------------------------------------------------------------

def registered_data(out: Path) -> dict:
    """Per regime of the registered study: the model, seeds, iterations, each norm's difference in final validation
    loss (family.csv) and the decision rule's verdict (decision.json)."""
    from ..core.corpora.data import load_corpus

    runs = load_runs(REGISTERED_STUDY, out)
    train = len(load_corpus().train)
    found = {}
    for regime in REGIMES:
        root = study_dir_for(REGISTERED_STUDY, out).analysis / regime
        family = pd.read_csv(root / "family.csv")
        sub = runs[runs["cfg.preset"] == regime]
        rows = family[(family["metric"] == "val_loss") & family["variant"].isin(NORMS)]
        v1 = family[(family["metric"] == "lm_macro_acc") & family["variant"].isin(NORMS)]
        calibration = family[family["metric"].isin(CALIBRATION) & family["variant"].isin(NORMS)]
        found[regime] = {"layers": int(sub["cfg.n_layer"].iloc[0]), "width": int(sub["cfg.n_embd"].iloc[0]),
                         "iters": int(sub["cfg.max_iters"].iloc[0]),
                         "seeds": seeds_behind(rows, f"{REGISTERED_STUDY} {regime}"),
                         "epochs": _clean(sub["tokens"].mean() / train),
                         "emb_init_std": _clean(sub["cfg.emb_init_std"].iloc[0]),
                         # a run written before the field existed has no column: its config loads with the default
                         "tied_head": RunConfig.load(study_dir_for(REGISTERED_STUDY, out).root / sub["run_dir"].iloc[0]
                                                     / "config.json").tie_embeddings,
                         "verdict": read_json(root / "decision.json")["overall"],
                         "none_loss": _clean(rows["baseline_mean"].iloc[0]),
                         "loss": _rows(rows, ["variant", "mean_diff", "ci_low", "ci_high", "p_holm", "significant",
                                             "equivalent"]),
                         "zeroshot_v1": _rows(v1, ["variant", "mean_diff", "ci_low", "ci_high", "p_holm",
                                                   "significant"]),
                         "calibration": _rows(calibration, ["metric", "variant", "mean_diff", "ci_low", "ci_high",
                                                            "p_holm", "significant"])}
    return found


def zeroshot_data(out: Path) -> dict:
    """Suite v2 (the registered zero-shot endpoint, amendment 3) on the registered study's largest regime, per task,
    with the share of the macro difference each task carries; and why suite v1 is superseded: the baseline's accuracy
    per v1 task against chance and ceiling, and each suite's minimum detectable macro difference at those seeds."""
    from . import zeroshot

    regime = f"preset={REGIMES[0]}"
    d = zeroshot.analyse(REGISTERED_STUDY, out, bootstrap=False)[regime]
    family = d["family"]
    tasks = family[family["task"] != "macro"]
    macro = family[family["task"] == "macro"].set_index("variant")["mean_diff"]
    n_tasks = tasks["task"].nunique()
    # the macro is the tasks' plain mean: a task's share of it is its difference / n_tasks over the macro's
    shares = {(t.variant, t.task): t.mean_diff / n_tasks / macro[t.variant] for t in tasks.itertuples()}
    family = family.assign(share=[shares.get(k, np.nan) for k in zip(family["variant"], family["task"], strict=True)])
    v1 = zeroshot.family_table(d["runs"], suite="v1")
    manifest = read_json(zeroshot.SUITE_MANIFESTS["v2"])
    # each task's description opens with its kind ("spelling: the true next 8 characters vs ...")
    kinds = {task: text.split(":", 1) for task, text in manifest["tasks"].items()}
    return {"regime": REGIMES[0], "seeds": len(d["seeds"]), "items_min": min(d["items"].values()),
            "tasks": {task: {"kind": kind.strip(), "what": what.strip()} for task, (kind, what) in kinds.items()},
            "choices": round(1 / zeroshot.CHANCE), "amendment": amendment("zero-shot suite v2"),
            "family": _rows(family, ["variant", "task", "none", "mean_diff", "ci_low", "ci_high", "p_holm",
                                     "significant", "share"]),
            "mde_v2": _clean(d["mde"]["mde_at_seeds_used"].max()),
            "mde_v1": _clean(zeroshot.measured_mde(v1)["mde_at_seeds_used"].max()),
            "v1_items": int(read_json(zeroshot.SUITE_MANIFESTS["v1"])["n_test"]), "items": int(manifest["n_test"]),
            "pilot_runs": len(manifest["pilot"]["runs"]),
            "v1_difficulty": _rows(zeroshot.difficulty(d["runs"], suite="v1"), ["task", "none_acc", "above_chance", "below_ceiling",
                                                   "well_inside"]),
            "chance": zeroshot.CHANCE, "margin": zeroshot.MARGIN}


def budget_data(out: Path) -> dict:
    """The budget trend (exploratory): each norm's difference in final validation loss per training budget."""
    from ..core.corpora.data import load_corpus
    from .budget import budget_table, load_budget_runs

    runs = load_budget_runs(out)
    table = budget_table(runs, len(load_corpus().train))
    table = table[table["variant"].isin(NORMS)]
    return {"layers": int(runs["cfg.n_layer"].iloc[0]), "width": int(runs["cfg.n_embd"].iloc[0]),
            "seeds": int(table["seeds"].min()),
            "rows": _rows(table.rename(columns={"delta_final": "mean_diff", "ci_low_final": "ci_low",
                                                "ci_high_final": "ci_high", "p_holm_final": "p_holm",
                                                "significant_final": "significant", "none_final": "none"}),
                          ["variant", "max_iters", "epochs", "none", "mean_diff", "ci_low", "ci_high", "p_holm",
                           "significant"])}


def init_data(out: Path) -> dict:
    """Scale vs normalization (exploratory): each norm's difference per embedding init scale and output head."""
    from .scale import STUDY, regime_table

    runs = load_runs(STUDY, out)
    table = regime_table(runs)
    none = table[table["variant"] == "none"].set_index(["emb_init_std", "head"])["val_loss"]
    table = table[table["variant"].isin(NORMS)].rename(columns={"delta_vs_none": "mean_diff"})
    table = table.assign(none=[none[k] for k in zip(table["emb_init_std"], table["head"], strict=True)])
    return {"layers": int(runs["cfg.n_layer"].iloc[0]), "width": int(runs["cfg.n_embd"].iloc[0]),
            "iters": int(runs["cfg.max_iters"].iloc[0]), "seeds": int(table["seeds"].min()),
            "rows": _rows(table, ["emb_init_std", "head", "variant", "none", "mean_diff", "ci_low", "ci_high",
                                  "p_holm", "significant"]),
            "seed_study": seed_study_data()}


def seed_study_data() -> dict:
    """What is known of the seed study's setup: its model and budget (the preset named after our replication study
    reproduces its Table 1 protocol) and the embedding norm it published for `none`. Its embedding init is not
    published; a norm near √d is what N(0, 1) embeddings (PyTorch's nn.Embedding default) give, N(0, 0.02) ones give
    about 0.02·√d."""
    from ..core.config import PRESETS
    from ..studies.seed_study import SEED_STUDY_TABLE1, TABLE1_PRESET

    preset = PRESETS[TABLE1_PRESET]
    return {"layers": preset["n_layer"], "width": preset["n_embd"], "iters": preset["max_iters"],
            "embedding_norm": SEED_STUDY_TABLE1["none"]["embedding_norm"],
            "ln_lowered_ppl": SEED_STUDY_TABLE1["ln"]["val_ppl"] < SEED_STUDY_TABLE1["none"]["val_ppl"],
            "unit_init_norm": _clean(np.sqrt(preset["n_embd"]))}


def failure_data(out: Path) -> dict:
    """Where each arm fails (the exploratory LR search with clipping), with a 95% Clopper-Pearson interval on each
    share; and the registered H1b test at the LR where none fails (does a norm remove the failures, at what cost)."""
    from scipy.stats import binomtest

    from . import h1b
    from .boundary import phase_table

    study = BOUNDARY_KEYS["clip"]
    runs = load_runs(study, out)
    phase = phase_table(runs)
    intervals = [binomtest(int(r.failed), int(r.runs)).proportion_ci(method="exact") for r in phase.itertuples()]
    phase = phase.assign(share=phase["failed"] / phase["runs"], ci_low=[c.low for c in intervals],
                         ci_high=[c.high for c in intervals])
    d = h1b.analyse(out)
    confirm = {}
    for clip, (family, decision) in d["confirmatory"].items():
        tuned = family[family["endpoint"] == "tuned_cost"].set_index("variant")
        failures = family[family["endpoint"] == "failures"].set_index("variant")["variant_value"]
        spikes = family[family["endpoint"] == "spike_count_post_warmup"].set_index("variant")  # H1b's spike endpoint
        confirm["clip" if clip else "noclip"] = {
            "none_failures": int(decision["baseline_failures"]),
            "variants": {v: {"verdict": x["verdict"], "fixes": bool(x["fixes"]), "failures": int(failures[v]),
                             # the price of stability: the arm at its own best LR minus none at its own
                             "mean_diff": _clean(tuned.loc[v, "mean_diff"]), "ci_low": _clean(tuned.loc[v, "ci_low"]),
                             "ci_high": _clean(tuned.loc[v, "ci_high"]),
                             "significant": bool(tuned.loc[v, "significant"]),
                             "spikes": {"variant_value": _clean(spikes.loc[v, "variant_value"]),
                                        "none_value": _clean(spikes.loc[v, "none_value"]),
                                        **{k: _clean(spikes.loc[v, k]) for k in ("mean_diff", "ci_low", "ci_high",
                                                                                 "p_holm")},
                                        "significant": bool(spikes.loc[v, "significant"])}}
                         for v, x in decision["variants"].items()}}
    failing = phase[phase["failed"] > 0]
    return {"study": study, "layers": int(runs["cfg.n_layer"].iloc[0]), "width": int(runs["cfg.n_embd"].iloc[0]),
            "seeds": int(runs["seed"].nunique()), "grad_clip": _clean(runs["cfg.grad_clip"].iloc[0]),
            "lowest_failing_lr": _clean(failing["cfg.lr"].min()) if len(failing) else None,
            "largest_lr": _clean(phase["cfg.lr"].max()),
            "rows": _rows(phase.rename(columns={"cfg.lr": "lr"}), ["variant", "lr", "failed", "runs", "share",
                                                                     "ci_low", "ci_high"]),
            "h1b": {"seeds": len(d["seeds"]), "lr": h1b.CONFIRMATORY_LR, "regimes": confirm,
                    "amendment": amendment(h1b.STUDY)}}


def plateau_start(losses: pd.DataFrame) -> int | None:
    """The first rung from which the baseline's validation loss stops falling with size: the next rung's loss is
    not lower by a resolved margin (one-sided Welch t, p < 0.05). From there on a larger model does not fit the
    1 MB corpus better, so a difference there measures over-fitting and LR, not capacity (issue 76: data-bound)."""
    from scipy.stats import ttest_ind

    rungs = sorted(losses["rung"].unique())
    for here, bigger in zip(rungs, rungs[1:], strict=False):
        a = losses.loc[losses["rung"] == here, "val_loss"]
        b = losses.loc[losses["rung"] == bigger, "val_loss"]
        if ttest_ind(b, a, equal_var=False, alternative="less").pvalue >= 0.05:
            return int(here)
    return None


def size_data(out: Path) -> dict:
    """The character size ladder: each norm's difference per finished size (Holm within the size), the budget per
    size (tokens per non-embedding parameter, passes over the training split) and where the baseline plateaus."""
    from ..core.config import LADDER_EPOCH_CAP, LADDER_TOKENS_PER_PARAM
    from ..core.corpora.data import load_corpus
    from ..studies import registered_seeds
    from . import ladder, ladder_sections

    runs = load_runs(LADDER, out)
    table = ladder.finished(ladder.primary(ladder.rung_table(runs)), registered_seeds(LADDER))
    table = table[(table["tokenizer"] == "char") & table["variant"].isin(NORMS)]
    table = table.assign(rung=[int(p.split("-")[1]) for p in table["preset"]])
    budget = ladder_sections.budget_table(runs)
    budget = budget[budget["variant"] == "none"].assign(rung=lambda f: [int(p.split("-")[1]) for p in f["preset"]])
    train = len(load_corpus().train)
    none = runs[runs["variant"] == "none"].assign(rung=lambda f: [int(p.split("-")[1]) for p in f["cfg.preset"]])
    none = none[none["rung"].isin(set(table["rung"]))]
    per_rung = none.groupby("rung")["val_loss"].agg(["mean", "std"])
    return {"seeds": int(table["seeds"].min()), "plateau_from": plateau_start(none[["rung", "val_loss"]]),
            "tokens_per_param": LADDER_TOKENS_PER_PARAM, "passes_cap": LADDER_EPOCH_CAP, "train_chars": train,
            "data_ladder": data_ladder_progress(out), "amendment": amendment("the size ladder ("),
            "rows": _rows(table, ["rung", "params", "variant", "mean_diff", "ci_low", "ci_high", "p_holm",
                                  "significant"]),
            "rungs": [{"rung": int(r.rung), "params": int(r.params), "tokens_per_param": _clean(r.tokens_per_param),
                       "passes": _clean(r.train_tokens / train), "none_loss": _clean(per_rung.loc[r.rung, "mean"]),
                       "none_loss_sd": _clean(per_rung.loc[r.rung, "std"])}
                      for r in budget.itertuples() if r.rung in per_rung.index]}


def data_ladder_progress(out: Path) -> dict:
    """The adequate-data ladder (amendment 16): its corpus, per study how many of the runs registered so far have
    finished, and each finished rung's registered comparison on the primary endpoint (`ladder_data.quoted_table`:
    every confirmatory seed in, item 6's seed rule settled). Its grids are registered rung by rung (the
    confirmatory runs once the LRs are tuned), so the registered count grows."""
    from ..core.corpora.opencorpus import dictionary_share
    from ..core.presets import DATA_TOKENS_PER_PARAM
    from ..runner.registry import planned_runs
    from ..studies import study_cells
    from ..studies.ladder_data import (
        LR_STEP,
        RUNGS,
        TUNING_SEEDS,
        corpus_record,
        non_embedding_params,
    )
    from .ladder import TREND_MIN_SIZES, trend_direction
    from .ladder_data import lr_margins, quoted_table, trend_table

    confirm = DATA_LADDER[1]
    runs = load_runs(confirm, out) if has_index(confirm, out) else pd.DataFrame()
    quoted = quoted_table(runs) if len(runs) else pd.DataFrame()
    fits = trend_table(runs) if len(runs) else pd.DataFrame()
    checked = trend_table(runs, checked_only=True) if len(runs) else pd.DataFrame()  # issue 113: without rung 0
    baselines = baseline_data()
    return {"chars": corpus_record()["characters"], "dictionary_share": dictionary_share(corpus_record()),
            "bigram": baselines["open_english"]["bigram_nats_per_token"], "trained_margin": baselines["trained_margin"],
            "lr_margins": lr_margins(out),
            "amendment": amendment(f"`{DATA_LADDER[0]}`"),
            "planned": planned_runs(confirm), "sizes": len(RUNGS),
            "params_all": [non_embedding_params(r) for r in range(len(RUNGS))],
            "tokens_per_param": DATA_TOKENS_PER_PARAM, "lr_step": LR_STEP, "tuning_seeds": len(TUNING_SEEDS),
            "trend_min_sizes": TREND_MIN_SIZES,
            "trend": [{**t, "direction": trend_direction(t)} for t in _rows(
                fits, ["variant", "rungs", "slope_per_decade", "slope_ci_low", "slope_ci_high"])] if len(fits) else [],
            "trend_without_smallest": [{**t, "direction": trend_direction(t)} for t in _rows(
                checked, ["variant", "rungs", "slope_per_decade", "slope_ci_low", "slope_ci_high"])]
            if len(checked) else [],
            "studies": {s: {"finished": len(load_runs(s, out)) if has_index(s, out) else 0,
                            "registered": len(study_cells(s))} for s in DATA_LADDER},
            "rungs": _rows(quoted, ["rung", "params", "shape", "iters", "passes", "seeds", "variant", "lr", "lr_none",
                                    "none", "none_sd", "none_min", "none_max", "mean_diff", "ci_low", "ci_high",
                                    "p_holm", "significant", "equivalent", "mde_80", "data_bound",
                                    "endpoints_repeat"]) if len(quoted) else []}


def baseline_data() -> dict:
    """The count baselines of the two character splits the answer quotes (docs/baselines.json, tools/baselines.py)
    and the margin a regime's `none` must end below the bigram to count as trained (amendment 17 item 7's rule,
    registered for the prose ladder; applied to the character regimes after their data, so labelled exploratory)."""
    from ..tools.baselines import load
    from .prose import TRAINED_MARGIN

    found = load()
    return {"tinyshakespeare": found["tinyshakespeare/char"], "open_english": found["open-english/char"],
            "trained_margin": TRAINED_MARGIN}


def answer_data(out_dir=None) -> dict:
    """Every number the README's first screen quotes, from the committed studies."""
    from ..core.corpora.data import load_corpus
    from .curves import curves_data
    from .prose import confirmatory_result

    out = runs_root(out_dir)
    corpus = load_corpus()
    return {"corpus": {"chars": len(corpus.train) + len(corpus.val)}, "baselines": baseline_data(),
            "registered": registered_data(out), "zeroshot": zeroshot_data(out), "budget": budget_data(out),
            "init": init_data(out), "failures": failure_data(out), "size": size_data(out),
            "curves": curves_data(out), "prose_ladder": confirmatory_result(out)}



def available(out_dir=None) -> bool:
    """Whether every study the first screen quotes has an index (a checkout without the committed runs has none)."""
    out = runs_root(out_dir)
    return all(has_index(s, out) for s in STUDIES_QUOTED)


def protocol_section(title: str) -> str:
    """A link to a top-level section of docs/PROTOCOL.md, refused if the protocol has no such heading."""
    if f"## {title}" not in (repo_root() / PROTOCOL).read_text().splitlines():
        raise ValueError(f"{PROTOCOL} has no '## {title}' section; allowed: one of its '## ' headings")
    return f"{PROTOCOL.as_posix()}#{github_anchor(title)}"


# -- the record and its pages (templates/answer.md.j2) ---------------------------------------------------------------

def links() -> dict:
    """The links the answer's pages use, computed from the headings they point at (refused if one is missing)."""
    from ..studies.findings_groups import FINDINGS_GROUPS

    return {"protocol": PROTOCOL.as_posix(), "inference": protocol_section("Inference"),
            **{group: findings_link(group) for group in ("stability", "scale", "calibration")},
            "calibration_here": "#" + github_anchor(FINDINGS_GROUPS["calibration"][0])}


def record(d: dict) -> dict:
    """The answer's record (answer_words.answer_record) as JSON-safe data: what runs/answer.json holds."""
    return json.loads(json.dumps(answer_record(d, links())))


def first_screen(rec: dict, figure: str) -> str:
    """The README's answer block: the TL;DR, the answer figure, the regime table, how to read them, where to read
    on."""
    return str(macro(TEMPLATE, "first_screen")(rec, figure))


def detail_lines(rec: dict) -> list[str]:
    """FINDINGS.md's "The answer in detail": each TL;DR line with its design, tasks, registration and intervals."""
    return str(macro(TEMPLATE, "detail")(rec)).split("\n")


def data_ladder_words(p: dict) -> str:
    """FINDINGS' account of the adequate-data ladder: where it stands and each quoted size's registered test."""
    return str(macro(TEMPLATE, "data_ladder_words")(p, data_ladder_record(p)))


def data_ladder_result_words(p: dict) -> str:
    """Each quoted size's registered comparison and the trend's words ('' while no size is quoted)."""
    return str(macro(TEMPLATE, "data_ladder_results")(p, data_ladder_record(p)))
