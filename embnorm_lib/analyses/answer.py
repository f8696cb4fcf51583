"""The answer on one screen (issue 71): the README's TL;DR, its answer figure and its regime table, computed from the
committed studies.

    python -m embnorm_lib publish readme    # figures/answer.png, the README's first screen, FINDINGS.md (report.py)

`answer_data` gathers every number the first screen quotes (JSON-safe, so a test can re-derive and compare it);
`answer_figure`, `tldr_lines`, `regime_table` and `reading_note` render it. Wording that states a direction ("costs",
"helps", "not resolved") is chosen from the Holm decision of the row it describes, never typed; every term the
screen uses (Holm, H1b, data-bound, the footer's hashes) is explained on it, with links computed from the headings
of docs/PROTOCOL.md and FINDINGS.md."""
from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..core.config import RunConfig
from ..core.io import fingerprint, read_json, repo_root, runs_root
from ..core.rundir import study_dir_for
from ..publishing.render import percent
from ..runner.results import has_index, load_runs
from ..stats.equivalence import EQUIVALENT_WORDS

FIGURE = Path("figures") / "answer"  # .png (embedded in the README) and .pdf
REGISTERED_STUDY = "main"  # the registered paired study: both training regimes, seeds-final's seeds included
REGIMES = ("seeds-final", "nanogpt-cpu")  # its regimes, the headline's first
# the registered family's calibration endpoints (secondary; lower is better), in the order the answer says them
CALIBRATION = {"brier": "the Brier score", "ece_equal_width": "ECE"}
NORMS = ("ln", "rms")
STUDIES_QUOTED = ("main", "stability-budget", "stability-budget-v2", "stability-scale-v2", "stability-lr-v2",
                  "stability-h1b-v2", "ladder", "ladder-data")
DATA_LADDER = ("ladder-data-lr", "ladder-data")  # the adequate-data ladder (issue 76): tuning, then confirmatory
ARM_NAMES = {"none": "no norm", "ln": "LayerNorm", "rms": "RMSNorm", "scaled": "scaled (tok·√d)"}
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
    from ..core.data import load_corpus

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
                         "iters": int(sub["cfg.max_iters"].iloc[0]), "seeds": int(sub["seed"].nunique()),
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
    from ..core.data import load_corpus
    from .budget import budget_table, load_budget_runs

    runs = load_budget_runs(out)
    table = budget_table(runs, len(load_corpus().train))
    table = table[table["variant"].isin(NORMS)]
    return {"layers": int(runs["cfg.n_layer"].iloc[0]), "width": int(runs["cfg.n_embd"].iloc[0]),
            "seeds": int(table["seeds"].min()),
            "rows": _rows(table.rename(columns={"delta_final": "mean_diff", "ci_low_final": "ci_low",
                                                "ci_high_final": "ci_high", "p_holm_final": "p_holm",
                                                "significant_final": "significant"}),
                          ["variant", "max_iters", "epochs", "mean_diff", "ci_low", "ci_high", "p_holm",
                           "significant"])}


def init_data(out: Path) -> dict:
    """Scale vs normalization (exploratory): each norm's difference per embedding init scale and output head."""
    from .scale import STUDY, regime_table

    runs = load_runs(STUDY, out)
    table = regime_table(runs)
    table = table[table["variant"].isin(NORMS)].rename(columns={"delta_vs_none": "mean_diff"})
    return {"layers": int(runs["cfg.n_layer"].iloc[0]), "width": int(runs["cfg.n_embd"].iloc[0]),
            "iters": int(runs["cfg.max_iters"].iloc[0]), "seeds": int(table["seeds"].min()),
            "rows": _rows(table, ["emb_init_std", "head", "variant", "mean_diff", "ci_low", "ci_high", "p_holm",
                                  "significant"]),
            "seed_study": seed_study_data()}


def seed_study_data() -> dict:
    """What is known of the seed study's setup: its model and budget (the `seeds-prelim` preset reproduces its Table
    1 protocol) and the embedding norm it published for `none`. Its embedding init is not published; a norm near
    √d is what N(0, 1) embeddings (PyTorch's nn.Embedding default) give, N(0, 0.02) ones give about 0.02·√d."""
    from ..core.config import PRESETS
    from ..studies.seed_study import SEED_STUDY_TABLE1

    preset = PRESETS["seeds-prelim"]
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

    study = "stability-lr-v2"
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
        confirm["clip" if clip else "noclip"] = {
            "none_failures": int(decision["baseline_failures"]),
            "variants": {v: {"verdict": x["verdict"], "fixes": bool(x["fixes"]), "failures": int(failures[v]),
                             # the price of stability: the arm at its own best LR minus none at its own
                             "mean_diff": _clean(tuned.loc[v, "mean_diff"]), "ci_low": _clean(tuned.loc[v, "ci_low"]),
                             "ci_high": _clean(tuned.loc[v, "ci_high"]),
                             "significant": bool(tuned.loc[v, "significant"])}
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
    from ..core.data import load_corpus
    from ..studies import registered_seeds
    from . import ladder

    runs = load_runs("ladder", out)
    table = ladder.finished(ladder.primary(ladder.rung_table(runs)), registered_seeds("ladder"))
    table = table[(table["tokenizer"] == "char") & table["variant"].isin(NORMS)]
    table = table.assign(rung=[int(p.split("-")[1]) for p in table["preset"]])
    budget = ladder.budget_table(runs)
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
    from ..core.opencorpus import dictionary_share
    from ..core.presets import DATA_TOKENS_PER_PARAM
    from ..studies import study_cells
    from ..studies.ladder_data import (
        LR_STEP,
        RUNGS,
        TUNING_SEEDS,
        confirmatory_runs_planned,
        corpus_record,
        non_embedding_params,
    )
    from .ladder import TREND_MIN_SIZES, trend_direction
    from .ladder_data import quoted_table, trend_table

    confirm = DATA_LADDER[1]
    runs = load_runs(confirm, out) if has_index(confirm, out) else pd.DataFrame()
    quoted = quoted_table(runs) if len(runs) else pd.DataFrame()
    fits = trend_table(runs) if len(runs) else pd.DataFrame()
    return {"chars": corpus_record()["characters"], "dictionary_share": dictionary_share(corpus_record()),
            "amendment": amendment(f"`{DATA_LADDER[0]}`"),
            "planned": confirmatory_runs_planned(), "sizes": len(RUNGS),
            "params_all": [non_embedding_params(r) for r in range(len(RUNGS))],
            "tokens_per_param": DATA_TOKENS_PER_PARAM, "lr_step": LR_STEP, "tuning_seeds": len(TUNING_SEEDS),
            "trend_min_sizes": TREND_MIN_SIZES,
            "trend": [{**t, "direction": trend_direction(t)} for t in _rows(
                fits, ["variant", "rungs", "slope_per_decade", "slope_ci_low", "slope_ci_high"])] if len(fits) else [],
            "studies": {s: {"finished": len(load_runs(s, out)) if has_index(s, out) else 0,
                            "registered": len(study_cells(s))} for s in DATA_LADDER},
            "rungs": _rows(quoted, ["rung", "params", "shape", "iters", "passes", "seeds", "variant", "lr", "lr_none",
                                    "none", "none_sd", "mean_diff", "ci_low", "ci_high", "p_holm", "significant",
                                    "equivalent", "mde_80", "data_bound", "endpoints_repeat"]) if len(quoted) else []}


def answer_data(out_dir=None) -> dict:
    """Every number the README's first screen quotes, from the committed studies."""
    from ..core.data import load_corpus

    out = runs_root(out_dir)
    corpus = load_corpus()
    return {"corpus": {"chars": len(corpus.train) + len(corpus.val)},
            "registered": registered_data(out), "zeroshot": zeroshot_data(out), "budget": budget_data(out),
            "init": init_data(out), "failures": failure_data(out), "size": size_data(out)}


def available(out_dir=None) -> bool:
    """Whether every study the first screen quotes has an index (a checkout without the committed runs has none)."""
    out = runs_root(out_dir)
    return all(has_index(s, out) for s in STUDIES_QUOTED)


# -- words -----------------------------------------------------------------------------------------------------------

def interval(r: dict, digits: int = 3) -> str:
    return f"{r['mean_diff']:+.{digits}f} [{r['ci_low']:+.{digits}f}, {r['ci_high']:+.{digits}f}]"


def effect_word(r: dict, cost: str = "costs", gain: str = "helps") -> str:
    """'equivalent within ±0.01' where the TOST shows the difference inside the margin (Holm over its family's
    TOSTs; amendment 18), else the direction of a difference where its Holm decision resolves it."""
    if r.get("equivalent"):
        return EQUIVALENT_WORDS
    if not r["significant"]:
        return "not resolved"
    return cost if r["mean_diff"] > 0 else gain


def calibration_words(d: dict, variant: str = "ln") -> str:
    """The TL;DR's calibration clause: per endpoint, the norm's Holm-resolved direction in every registered regime
    (said once, with the headline regime's interval, where all agree), else per regime."""
    regimes = list(d["registered"].values())
    parts = []
    for metric, name in CALIBRATION.items():
        rows = [(r["iters"], _pick(r["calibration"], metric=metric, variant=variant)[0]) for r in regimes]
        said = {effect_word(x, "worse", "better") for _, x in rows}
        if len(said) == 1 and "not resolved" not in said:
            verb = "**worsens**" if said == {"worse"} else "**improves**"
            parts.append(f"{verb} {name} in {'both' if len(rows) == 2 else 'all'} regimes, "
                         f"{interval(rows[0][1])} at {rows[0][0]} iterations")
        else:
            parts.append(f"{name} " + ", ".join(
                f"{effect_word(x, 'worse', 'better')}" + (f" by {abs(x['mean_diff']):.3f}" if x["significant"] else "")
                + f" at {iters}" for iters, x in rows) + " iterations")
    return f"`{variant}` " + "; ".join(parts)


def _millions(params: float) -> str:
    return f"{params / 1e6:.1f}M" if params >= 1e6 else f"{params / 1e6:.2f}M"


def _pick(rows: list[dict], **match) -> list[dict]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def _model(r: dict) -> str:
    return f"{r['layers']} × {r['width']}"


def protocol_section(title: str) -> str:
    """A link to a top-level section of docs/PROTOCOL.md, refused if the protocol has no such heading."""
    if f"## {title}" not in (repo_root() / PROTOCOL).read_text().splitlines():
        raise ValueError(f"{PROTOCOL} has no '## {title}' section; allowed: one of its '## ' headings")
    return f"{PROTOCOL.as_posix()}#{github_anchor(title)}"


def headline_words(d: dict) -> dict:
    """The registered regimes: the verdict, and the longest budget (epochs) at which every norm's cost is resolved,
    which bounds where the headline holds."""
    reg = d["registered"]
    verdicts = {r["verdict"] for r in reg.values()}
    costly = [r for r in reg.values() if all(x["significant"] and x["mean_diff"] > 0 for x in r["loss"])]
    return {"verdict": verdicts.pop() if len(verdicts) == 1 else "depends on the regime",
            "max_epochs": max(r["epochs"] for r in costly) if costly else None}


def budget_words(b: dict) -> dict:
    """LayerNorm at the shortest budget where its difference is resolved (else the shortest) and at the longest: two
    points described, not a trend tested (no test of a trend is registered for the budget grid)."""
    ln = sorted(_pick(b["rows"], variant="ln"), key=lambda r: r["max_iters"])
    first = next((r for r in ln if r["significant"]), ln[0])
    last = ln[-1]
    smaller = abs(last["mean_diff"]) < abs(first["mean_diff"])
    subject = "the cost" if first["significant"] and first["mean_diff"] > 0 else "the difference"
    return {"first": first, "last": last, "shortest": ln[0]["max_iters"], "subject": subject,
            "verb": "is smaller" if smaller else "is not smaller"}


def budget_sentence(b: dict, bd: dict, epochs: bool = False) -> str:
    """'+0.097 [..] (costs) at 300 iterations, +0.004 [..] (not resolved) at 8000 (...)': the two budgets of
    budget_words with their intervals and decisions, and what kind of evidence they are."""
    at = f"{b['last']['max_iters']} ({b['last']['epochs']:.2f} epochs; " if epochs else f"{b['last']['max_iters']} ("
    first = interval(b["first"]) if epochs else f"{b['first']['mean_diff']:+.3f}"  # the TL;DR keeps one interval
    return (f"{first} ({effect_word(b['first'])}) at {b['first']['max_iters']} iterations, {interval(b['last'])} "
            f"({effect_word(b['last'])}) at {at}exploratory, {_model(bd)}, {bd['seeds']} seeds; no trend tested)")


def init_words(i: dict) -> dict:
    """LayerNorm at the smallest and the largest embedding init scale, per output head; whether the untied head's
    sign flips between them (both resolved, opposite words); whether the grid is the seed study's setup."""
    by_head = {}
    for head in ("untied", "tied"):
        ln = _pick(i["rows"], variant="ln", head=head)
        by_head[head] = (min(ln, key=lambda r: r["emb_init_std"]), max(ln, key=lambda r: r["emb_init_std"]))
    small, large = by_head["untied"]
    words = {effect_word(small), effect_word(large)}
    seed = i["seed_study"]
    return {"small": small, "large": large, "tied": by_head["tied"],
            "flips": len(words) == 2 and "not resolved" not in words,
            "seed_setup": (seed["layers"], seed["width"], seed["iters"]) == (i["layers"], i["width"], i["iters"])}


def size_words(s: dict) -> dict:
    resolved = [r for r in s["rows"] if r["significant"]]
    params = sorted({r["params"] for r in s["rows"]})
    plateau = s["plateau_from"]
    fit = [p for r, p in ((x["rung"], x["params"]) for x in s["rungs"]) if plateau is None or r < plateau]
    ln = _pick(s["rows"], variant="ln")
    passes = [r["passes"] for r in s["rungs"]]
    return {"resolved": len(resolved), "sizes": len(params), "low": params[0], "high": params[-1],
            "fit_high": max(fit) if fit else None, "plateau_params": None if plateau is None else
            next(x["params"] for x in s["rungs"] if x["rung"] == plateau),
            "ln_within": max(abs(r["mean_diff"]) for r in ln), "passes_low": min(passes), "passes_high": max(passes)}


def data_ladder_finished(p: dict) -> bool:
    """Whether the adequate-data ladder's confirmatory runs are registered and all have finished (at least as many
    as its design holds): only then does the first screen point at its result."""
    confirm = p["studies"][DATA_LADDER[1]]
    return bool(confirm["registered"] and confirm["finished"] >= max(confirm["registered"], p.get("planned", 0)))


def data_ladder_rungs(p: dict) -> list[dict]:
    """The quoted rungs of the adequate-data ladder, smallest first: per rung its regime and each norm's row."""
    rungs = []
    for rung in sorted({r["rung"] for r in p.get("rungs", [])}):
        ln, rms = (_pick(p["rungs"], rung=rung, variant=v)[0] for v in NORMS)
        rungs.append({**{k: ln[k] for k in ("rung", "params", "shape", "iters", "passes", "seeds", "none",
                                            "data_bound")}, "ln": ln, "rms": rms})
    return rungs


def _size_list(positions: list[int], sizes: list[str]) -> str:
    """Sizes (at their positions in the quoted ladder): 'a', 'a and b', 'a, b and c', or the span 'a–c' where three
    or more sit next to each other."""
    if len(sizes) >= 3 and positions == list(range(positions[0], positions[-1] + 1)):
        return f"{sizes[0]}–{sizes[-1]}"
    return sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} and {sizes[-1]}"


def data_ladder_short(p: dict) -> str:
    """The TL;DR's clause on the adequate-data ladder: the sizes where LayerNorm costs, helps, or is not resolved
    (in the order of each outcome's smallest size), each outcome said once so the clause stays one line at every
    size of the ladder; a lone resolved size carries its interval, several their point differences (the regime table
    has every interval). The corpus's size says at once what open English is (the reading note under the TL;DR says
    more); the iterations are in the Scope bullet."""

    rungs = data_ladder_rungs(p)
    if not rungs:
        return ("An adequate-data ladder has finished: "
                f"[runs/{DATA_LADDER[1]}/LADDER-DATA.md](runs/{DATA_LADDER[1]}/LADDER-DATA.md)."
                if data_ladder_finished(p) else "An adequate-data ladder is in progress.")
    resolved = [r for r in rungs if r["ln"]["significant"]]

    def at(members: list) -> str:
        return "at " + _size_list([i for i, _ in members], [_millions(r["params"]) for _, r in members])

    def outcome(word: str) -> str:
        members = [(i, r) for i, r in enumerate(rungs) if effect_word(r["ln"]) == word]
        if word == "not resolved":
            return f"{word} {at(members)}"
        return (f"{word} {interval(members[0][1]['ln'])} {at(members)}" if len(resolved) == 1 else
                f"{word} {at(members)} (" + ", ".join(f"{r['ln']['mean_diff']:+.3f}" for _, r in members) + ")")

    words = list(dict.fromkeys(effect_word(r["ln"]) for r in rungs))  # smallest size first, as in the scope
    link = f"runs/{DATA_LADDER[1]}/LADDER-DATA.md"
    # while sizes are still training, the link's words say which are quoted (a reader asked where the 4th size was)
    sizes = (f"{len(rungs)} sizes; [details]({link})" if len(rungs) == p["sizes"] else
             f"{len(rungs)} of {p['sizes']} sizes [{'quoted' if data_ladder_finished(p) else 'finished'}]({link})")
    return (f"On open English ({p['chars'] / 1e6:.1f}M characters, {sizes}): `ln` "
            + ", ".join(outcome(w) for w in words) + ".")


def data_ladder_scope(p: dict) -> str:
    """The scope the adequate-data ladder's quoted sizes add: '' while none is quoted."""
    rungs = data_ladder_rungs(p)
    if not rungs:
        return ""
    return (f"; on open English {_millions(rungs[0]['params'])}–{_millions(rungs[-1]['params'])}, "
            f"{rungs[0]['iters']:,}–{rungs[-1]['iters']:,} iterations")


def data_ladder_result_words(p: dict) -> str:
    """Each quoted rung's registered comparison with its regime, and where the exploratory trend stands."""
    from ..stats import p_text
    from .ladder import trend_words
    from .ladder_data import direction_words

    rungs = data_ladder_rungs(p)
    if not rungs:
        return ""

    def arm(r: dict) -> str:  # the report's words for the test (direction_words), so FINDINGS says it one way
        return (f"`{r['variant']}` {direction_words(r)} {interval(r)} (Holm p {p_text(r['p_holm'])}, MDE "
                f"{r['mde_80']:.3f})")

    sizes = "; ".join(f"{r['shape']} ({_millions(r['params'])}, {r['iters']:,} iterations = {r['passes']:.2f} passes, "
                      f"{r['seeds']} seeds, `none` at {r['none']:.3f}"
                      + (", data-bound" if r["data_bound"] else "") + f"): {arm(r['ln'])}, {arm(r['rms'])}"
                      for r in rungs)
    entering = [r for r in rungs if not r["data_bound"]]
    trend = (" The trend across sizes (exploratory; a weighted line on log10 parameters over the sizes that pass the "
             "data-bound check, no extrapolation): " + "; ".join(
                 f"`{t['variant']}` {trend_words(t)} (slope {t['slope_per_decade']:+.4f} [{t['slope_ci_low']:+.4f}, "
                 f"{t['slope_ci_high']:+.4f}] nats/char per decade, {t['rungs']} sizes)" for t in p["trend"]) + "."
             if p.get("trend") else
             f" The trend across sizes (exploratory) waits for {p['trend_min_sizes']} sizes that pass the data-bound "
             f"check ({len(entering)} so far).")
    return (f" Its finished sizes (registered, Holm within each size, each arm at its own tuned LR, `rms` at `ln`'s; "
            f"Δ in nats/char): {sizes}.{trend}")


def data_ladder_words(p: dict) -> str:
    """Where the adequate-data ladder stands, from its registered and finished runs, and each finished size's
    registered comparison (a size is quoted once all its registered runs have finished)."""
    tuning, confirm = (p["studies"][s] for s in DATA_LADDER)
    a = p["amendment"]
    report = f"[runs/{DATA_LADDER[1]}/LADDER-DATA.md](runs/{DATA_LADDER[1]}/LADDER-DATA.md)"
    head = (f"An adequate-data ladder ({p['chars'] / 1e6:.1f}M characters of open English, "
            f"{p['dictionary_share']:.0%} of them dictionary and glossary entries, "
            f"[amendment {a['number']}]({a['link']}); studies `{DATA_LADDER[0]}`, `{DATA_LADDER[1]}`)")
    if data_ladder_finished(p):
        return (f"{head} has finished ({confirm['finished']} of {confirm['registered']} confirmatory runs)."
                + data_ladder_result_words(p) + f" Details: {report}.")
    return (f"{head} is in progress: {tuning['finished']} of the {tuning['registered']} tuning runs registered so far "
            "have finished" + (f", {confirm['finished']} of {confirm['registered']} confirmatory runs (of the "
                               f"{p['planned']} its design holds)" if confirm["registered"] and p.get("planned") else
                               f", {confirm['finished']} of {confirm['registered']} confirmatory runs"
                               if confirm["registered"] else
                               "; its confirmatory runs are registered once the LRs are tuned")
            + "; each size is quoted here once all its registered runs have finished." + data_ladder_result_words(p)
            + f" Details: {report}.")


def zeroshot_words(z: dict) -> dict:
    macro = _pick(z["family"], variant="ln", task="macro")[0]
    tasks = [r for r in _pick(z["family"], variant="ln") if r["task"] != "macro"]
    top = max(tasks, key=lambda r: abs(r["share"]))
    at_edge = [t["task"] for t in z["v1_difficulty"] if not t["well_inside"]]
    return {"macro": macro, "top": top, "v1_at_edge": at_edge, "v1_tasks": len(z["v1_difficulty"])}


def failure_words(f: dict) -> dict:
    """H1b with clipping (the recipe's default), every arm: failures of the fresh seeds, whether it removed none's
    failures, its tuned cost; and the search's failures per arm at its lowest failing LR."""
    h = f["h1b"]["regimes"]["clip"]
    at = f["lowest_failing_lr"]
    search = {r["variant"]: r for r in f["rows"] if r["lr"] == at}
    costs = all(x["significant"] and x["mean_diff"] > 0 for x in h["variants"].values())
    return {"none": h["none_failures"], "fixed": [v for v, x in h["variants"].items() if x["fixes"]],
            "ln": h["variants"]["ln"], "variants": h["variants"], "search_at": search, "all_cost": costs,
            "lr_low": min(r["lr"] for r in f["rows"])}


def confidence_data(d: dict) -> dict:
    """The registered regimes: whether every norm's difference is resolved, the most seeds, the largest Holm p, and
    what the configurations differ in (per regime, in the headline's order: `layers`, `iters`, where they differ)."""
    reg = list(d["registered"].values())
    return {"resolved": all(r["significant"] for x in reg for r in x["loss"]), "seeds": max(x["seeds"] for x in reg),
            "p_holm_max": max(r["p_holm"] for x in reg for r in x["loss"]),
            "differ": {k: [x[k] for x in reg] for k in ("layers", "iters") if len({x[k] for x in reg}) > 1}}


def confidence_words(d: dict) -> str:
    """How sure the headline is: registered and resolved in every regime, or not; and what its two registered
    configurations are (they differ in more than one thing, so they are two regimes, not two replications)."""
    from ..stats import p_text

    c = confidence_data(d)
    resolved, seeds, p = c["resolved"], c["seeds"], c["p_holm_max"]
    differ = []
    if "layers" in c["differ"]:
        differ.append("depth (" + " vs ".join(str(v) for v in c["differ"]["layers"]) + " layers)")
    if "iters" in c["differ"]:
        differ.append("budget (" + " vs ".join(str(v) for v in c["differ"]["iters"]) + " iterations)")
    configs = (f"in both registered configurations, which differ in {' and '.join(differ)} at once: two regimes "
               "that each show the cost, not two independent confirmations of one setting" if differ else
               "in both registered configurations")
    if resolved:
        unit = 10.0 ** (math.floor(math.log10(p)) - 1)  # two significant digits, rounded up: a bound, never below p
        bound = math.ceil(round(p / unit, 9)) * unit
        return (f"**high** for the cost on tiny Shakespeare at GPT-2 init and short budgets (registered protocol, up "
                f"to {seeds} paired seeds, every Holm p ≤ {p_text(bound)}), {configs}")  # rounded up: a bound
    return "**low**: the registered comparison does not resolve a direction in every regime"


def tldr_lines(d: dict) -> list[str]:
    """The README's TL;DR: one short line per question (at most eight, each a sentence or two), with the regime where
    it holds; `detail_lines` carries the designs, the tasks and every interval into FINDINGS.md."""
    reg = d["registered"]
    head = reg[REGIMES[0]]
    ln_head, rms_head = (_pick(head["loss"], variant=v)[0] for v in NORMS)
    hw, b, i, s, z, f = (headline_words(d), budget_words(d["budget"]), init_words(d["init"]), size_words(d["size"]),
                         zeroshot_words(d["zeroshot"]), failure_words(d["failures"]))
    bd, zd, fd = d["budget"], d["zeroshot"], d["failures"]
    regime = (f"on tiny Shakespeare at GPT-2 init and short budgets (≤ {hw['max_epochs']:.2f} epochs)"
              if hw["max_epochs"] else "on tiny Shakespeare at GPT-2 init")
    h1b = fd["h1b"]
    fixed = (f"{', '.join(f'`{v}`' for v in f['fixed'])} removed the failures" if f["fixed"] else
             "no arm removed them all (" + ", ".join(f"`{v}` {f['variants'][v]['failures']}" for v in NORMS)
             + f" of {h1b['seeds']} still failed)")
    return [
        f"- **Answer: {regime}, {hw['verdict']}.** LayerNorm after the embedding "
        f"**{effect_word(ln_head, 'raises', 'lowers')}** validation loss by {interval(ln_head)} nats/char over "
        f"`none`'s {head['none_loss']:.3f} ({head['layers']} × {head['width']}, {head['iters']} iterations, {head['seeds']} seeds); RMSNorm "
        f"{rms_head['mean_diff']:+.3f}.",
        f"- **Longer training**: `ln` {budget_sentence(b, bd)}.",
        f"- **Zero-shot**: `ln` **{effect_word(z['macro'], 'raises', 'lowers')}** macro accuracy, "
        f"{interval(z['macro'])} (registered, {_model(head)}, {head['iters']} iterations, {zd['seeds']} "
        "seeds).",
        f"- **Calibration** (registered): {calibration_words(d)}.",
        f"- **Stability: {'no benefit detected' if not f['fixed'] else 'a benefit'}.** Where `none` fails (peak LR "
        f"{h1b['lr']:g}, {_model(fd)}, gradients clipped: {f['none']} of {h1b['seeds']}), {fixed}"
        + ("; each costs loss at its own best LR" if f["all_cost"] else "") + " (registered H1b).",
        f"- **Init scale may set the sign** (exploratory, {_model(d['init'])}, {d['init']['iters']} iterations, "
        f"{d['init']['seeds']} seeds): with N(0, {i['large']['emb_init_std']:g}) embeddings and an untied head "
        f"`ln` {effect_word(i['large'])} ({interval(i['large'])}).",
        f"- **Size**: on tiny Shakespeare, {'no' if not s['resolved'] else s['resolved']} difference resolved at "
        f"{s['sizes']} sizes ({_millions(s['low'])}–{_millions(s['high'])}; `ln` within ±{s['ln_within']:.3f})"
        + (f", data-bound from {_millions(s['plateau_params'])}" if s["plateau_params"] else "") + ". "
        + data_ladder_short(d["size"]["data_ladder"]),
        f"- **Scope**: character-level Pre-LN GPTs on tiny Shakespeare, {_millions(s['low'])}–{_millions(s['high'])} "
        f"parameters, {min(b['shortest'], head['iters'])}–{b['last']['max_iters']} iterations"
        f"{data_ladder_scope(d['size']['data_ladder'])}. "
        f"**Confidence**: {confidence_words(d).split(' for ')[0].rstrip(':')} for the Answer. "
        "[Details](FINDINGS.md#the-answer-in-detail).",
    ]


def detail_lines(d: dict) -> list[str]:
    """The answer in detail (FINDINGS.md's opening): each TL;DR line with its design, tasks, registration and every
    interval, the regime where it holds, its scope and its confidence."""
    from ..stats import p_text

    reg = d["registered"]
    head, other = reg[REGIMES[0]], reg[REGIMES[1]]
    ln_head = _pick(head["loss"], variant="ln")[0]
    rms_head = _pick(head["loss"], variant="rms")[0]
    ln_other = _pick(other["loss"], variant="ln")[0]
    hw, b, i, s, z, f = (headline_words(d), budget_words(d["budget"]), init_words(d["init"]), size_words(d["size"]),
                         zeroshot_words(d["zeroshot"]), failure_words(d["failures"]))
    bd, zd, fd, idata, sd = d["budget"], d["zeroshot"], d["failures"], d["init"], d["size"]
    regime = (f"on tiny Shakespeare at GPT-2 init ({gpt2_init_words(head)}) and short training budgets "
              f"(≤ {hw['max_epochs']:.2f} epochs)" if hw["max_epochs"] else f"on tiny Shakespeare at GPT-2 init "
              f"({gpt2_init_words(head)})")
    v1 = _pick(head["zeroshot_v1"], variant="ln")[0]
    tasks = zd["tasks"]
    top = tasks[z["top"]["task"]]
    h1b = fd["h1b"]
    arms = ["none", *h1b["regimes"]["clip"]["variants"]]
    failed = {"none": f["none"], **{v: x["failures"] for v, x in f["variants"].items()}}
    first_ln = i["tied"][0]
    seed = idata["seed_study"]
    lines = [
        f"- **Answer: {regime}, {hw['verdict']}.** A LayerNorm right after the embedding "
        f"**{effect_word(ln_head, 'raises', 'lowers')}** final validation loss by {interval(ln_head)} nats/char "
        f"over `none`'s {head['none_loss']:.3f} ({_model(head)} model, {head['iters']} iterations = "
        f"{head['epochs']:.2f} epochs, {head['seeds']} seeds; RMSNorm {rms_head['mean_diff']:+.3f}) and by "
        f"{interval(ln_other)} over {other['none_loss']:.3f} ({_model(other)}, {other['iters']} "
        f"iterations = {other['epochs']:.2f} epochs, {other['seeds']} seeds). With longer training {b['subject']} "
        f"{b['verb']}: {budget_sentence(b, bd, epochs=True)}.",
        f"- **Zero-shot** (the {_model(head)} models at {head['iters']} iterations, {zd['seeds']} seeds; suite v2: "
        f"{len(tasks)} multiple-choice tasks with {zd['choices']} options, cut from the validation text — "
        f"{', '.join(t['kind'] for t in tasks.values())}; {zd['items']} items each): `ln` "
        f"**{effect_word(z['macro'], 'raises', 'lowers')}** macro accuracy, {interval(z['macro'])}, "
        f"{percent(z['top']['share'])} of it from the {top['kind']} task `{z['top']['task']}` ({top['what']}). v2 is the "
        f"registered endpoint, registered ([amendment {zd['amendment']['number']}]({zd['amendment']['link']})) after "
        f"suite v1's scores were seen and before any study was scored with it, on tasks chosen by {zd['pilot_runs']} "
        f"pilot runs outside the study. Suite v1 (`ln` {interval(v1)}) is superseded: {len(z['v1_at_edge'])} of its "
        f"{z['v1_tasks']} tasks sit at chance or ceiling, so it cannot detect less than {zd['mde_v1']:.3f} "
        f"(v2: {zd['mde_v2']:.3f}).",
        "- **Calibration** (registered secondary endpoints of each regime's family, Holm across the family; lower "
        "is better: the Brier score and the top-label ECE of next-character predictions): "
        + "; ".join(f"{_model(r)}, {r['iters']} iterations, {r['seeds']} seeds: " + ", ".join(
            f"`{x['variant']}` {CALIBRATION[x['metric']].removeprefix('the ')} {interval(x, 4)} (Holm p "
            f"{p_text(x['p_holm'])}, {effect_word(x, 'worse', 'better')})"
            for x in sorted(r["calibration"], key=lambda x: (list(CALIBRATION).index(x["metric"]), x["variant"])))
            for r in reg.values())
        + ". Every comparison: [Calibration](#calibration-are-the-predicted-probabilities-as-trustworthy).",
        f"- **Stability: {'no benefit detected' if not f['fixed'] else 'a benefit'}.** In the exploratory LR search "
        f"(`{fd['study']}`: {_model(fd)}, peak LR {f['lr_low']:g}–{fd['largest_lr']:g}, {fd['seeds']} seeds per arm "
        f"and LR) no arm fails below peak LR {fd['lowest_failing_lr']:g}; there, the registered H1b test "
        f"([amendment {h1b['amendment']['number']}]({h1b['amendment']['link']}): where `none` fails, does a norm "
        f"remove the failures, and at what cost?) on {h1b['seeds']} fresh seeds: failed "
        + ", ".join(f"`{v}` {failed[v]}" for v in arms) + f" of {h1b['seeds']}; "
        + (f"{', '.join(f'`{v}`' for v in f['fixed'])} removed the failures" if f["fixed"] else
           "no arm removed the failures")
        + ("; each arm costs loss at its own best LR: " if f["all_cost"] else "; loss at each arm's own best LR: ")
        + ", ".join(f"`{v}` {interval(x)}" for v, x in f["variants"].items())
        + " nats/char (`scaled`: tok·√d, no norm).",
        f"- **Init scale sets the sign, in one exploratory grid** ({_model(idata)}, {idata['iters']} iterations, "
        f"{idata['seeds']} seeds, embedding std {i['small']['emb_init_std']:g} and {i['large']['emb_init_std']:g}, "
        f"untied and tied output head): untied head, `ln` {effect_word(i['large'])} at N(0, {i['large']['emb_init_std']:g})"
        f" ({interval(i['large'])}) and {effect_word(i['small'])} at N(0, {i['small']['emb_init_std']:g}) "
        f"({interval(i['small'])}); tied head, {effect_word(first_ln)} at N(0, {first_ln['emb_init_std']:g}) "
        f"({interval(first_ln)}), {effect_word(i['tied'][1])} at N(0, {i['tied'][1]['emb_init_std']:g}) "
        f"({interval(i['tied'][1])}). "
        + (f"This is the seed study's model and budget: if it used PyTorch's default N(0, 1) embedding init (its "
           f"published embedding norm for `none`, {seed['embedding_norm']:g}, is near √{seed['width']} = "
           f"{seed['unit_init_norm']:.1f}, what an N(0, 1) token embedding alone gives; an N(0, 1) position "
           f"embedding added would make it about √{2 * seed['width']} = {np.sqrt(2 * seed['width']):.1f}, so the "
           "fit needs a small position embedding), this grid "
           + ("agrees with its LayerNorm gain." if seed["ln_lowered_ppl"] and effect_word(i["large"]) == "helps"
              else "does not reproduce its result.") if i["seed_setup"] else ""),
        f"- **Size**: on 1 MB of text, {'no' if not s['resolved'] else s['resolved']} difference resolved at any of "
        f"{s['sizes']} sizes "
        f"({_millions(s['low'])}–{_millions(s['high'])} non-embedding parameters, {sd['seeds']} seeds each; "
        f"`ln` within ±{s['ln_within']:.3f}). The ladder trains each size on {sd['tokens_per_param']} tokens per "
        f"non-embedding parameter, capped at {sd['passes_cap']} passes over the {sd['train_chars'] / 1e6:.1f}M "
        f"training characters, so every size sees {s['passes_low']:.1f}–{s['passes_high']:.0f} passes: the long-"
        f"budget end, where the budget grid's difference is {b['last']['mean_diff']:+.3f} "
        f"({b['last']['epochs']:.2f} epochs), consistent with differences far below the headline's "
        f"{ln_head['mean_diff']:+.3f} at {head['iters']} iterations."
        + (f" From {_millions(s['plateau_params'])} up the baseline's loss stops falling with size (data-bound: the "
           f"text, not the model, limits it), so size is really tested only up to {_millions(s['fit_high'])}."
           if s["plateau_params"] else "")
        + " " + data_ladder_words(sd["data_ladder"]),
        f"- **Scope**: character-level Pre-LN GPTs on tiny Shakespeare ({d['corpus']['chars'] / 1e6:.1f}M "
        f"characters), {_millions(s['low'])}–{_millions(s['high'])} non-embedding parameters, "
        f"{min(b['shortest'], head['iters'], idata['iters'])}–{b['last']['max_iters']} iterations"
        f"{data_ladder_scope(sd['data_ladder'])}. **Confidence**: {confidence_words(d)}. The budget trend, the init grid and the LR search are exploratory "
        f"({min(bd['seeds'], idata['seeds'], fd['seeds'])} seeds); H1b, zero-shot v2 and each ladder size's "
        f"comparison are registered ([amendment {sd['amendment']['number']}]({sd['amendment']['link']})"
        + (f"; open English: [amendment {sd['data_ladder']['amendment']['number']}]"
           f"({sd['data_ladder']['amendment']['link']})" if data_ladder_rungs(sd["data_ladder"]) else "")
        + "; the trend across sizes is exploratory).",
    ]
    return lines


def regime_table(d: dict) -> str:
    """Regime -> LayerNorm's (and RMSNorm's) difference with its interval -> what to do, as Markdown: every point of
    the figure's budget ends, init grid (both heads), H1b, size and zero-shot that the TL;DR quotes."""
    rows = []
    for regime in REGIMES:
        r = d["registered"][regime]
        ln, rms = (_pick(r["loss"], variant=v)[0] for v in NORMS)
        rows.append((f"GPT-2 init, {_model(r)}, {r['iters']} it = {r['epochs']:.2f} epochs (registered, {r['seeds']} "
                     "seeds)", interval(ln), interval(rms), r["verdict"]))
    b, bw = d["budget"], budget_words(d["budget"])
    for end in (bw["first"], bw["last"]):
        ln, rms = (_pick(b["rows"], variant=v, max_iters=end["max_iters"])[0] for v in NORMS)
        rows.append((f"budget grid: {_model(b)}, {end['max_iters']} it = {end['epochs']:.2f} epochs (exploratory, "
                     f"{b['seeds']} seeds)", interval(ln), interval(rms), effect_word(ln)))
    i = d["init"]
    for std in sorted({r["emb_init_std"] for r in i["rows"]}):
        for head in ("untied", "tied"):
            ln, rms = (_pick(i["rows"], variant=v, emb_init_std=std, head=head)[0] for v in NORMS)
            rows.append((f"init grid: embeddings N(0, {std:g}), {head} head ({_model(i)}, {i['iters']} it; "
                         f"exploratory, {i['seeds']} seeds)", interval(ln), interval(rms), effect_word(ln)))
    f = d["failures"]["h1b"]
    h = f["regimes"]["clip"]
    ln, rms = (h["variants"][v] for v in NORMS)
    rows.append((f"H1b: peak LR {f['lr']:g}, where `none` fails {h['none_failures']}/{f['seeds']} (registered; cost "
                 "at each arm's own best LR)", interval(ln), interval(rms),
                 f"{ln['verdict']} ({'removes' if ln['fixes'] else 'does not remove'} failures)"))
    s = d["size"]
    fit = [r for r in s["rungs"] if s["plateau_from"] is None or r["rung"] < s["plateau_from"]]
    # the largest size that is not data-bound, and the largest size (FINDINGS.md has every size)
    for rung in list({r["rung"]: r for r in (fit[-1:] + s["rungs"][-1:])}.values()):
        ln, rms = (_pick(s["rows"], variant=v, rung=rung["rung"])[0] for v in NORMS)
        bound = s["plateau_from"] is not None and rung["rung"] >= s["plateau_from"]
        rows.append((f"size {_millions(rung['params'])} params, {rung['passes']:.0f} passes (registered, "
                     f"{s['seeds']} seeds" + (", data-bound" if bound else "") + ")", interval(ln), interval(rms),
                     effect_word(ln)))
    for r in data_ladder_rungs(s["data_ladder"]):
        rows.append((f"open English: size {_millions(r['params'])} params, {r['iters']:,} it = {r['passes']:.2f} "
                     f"passes (registered, {r['seeds']} seeds, tuned LRs, `rms` at `ln`'s LR"
                     + (", data-bound" if r["data_bound"] else "") + ")", interval(r["ln"]),
                     interval(r["rms"]), effect_word(r["ln"])
                     + ("" if r["ln"]["significant"] else
                        f" (MDE `ln` {r['ln']['mde_80']:.3f}, `rms` {r['rms']['mde_80']:.3f})")))
    z = zeroshot_words(d["zeroshot"])
    zrms = _pick(d["zeroshot"]["family"], variant="rms", task="macro")[0]
    rows.append((f"zero-shot macro **accuracy** (higher is better), suite v2 (registered, {d['zeroshot']['seeds']} "
                 "seeds)", interval(z["macro"]), interval(zrms),
                 effect_word(z["macro"], "raises accuracy", "costs accuracy")))
    lines = ["| regime | Δ val loss `ln` [95% CI] | Δ `rms` [95% CI] | decision |", "|---|---|---|---|"]
    lines += [f"| {a} | {b_} | {c} | {e} |" for a, b_, c, e in rows]
    return "\n".join(lines)


def stats_power_percent() -> int:
    from ..stats import MDE_POWER

    return round(100 * MDE_POWER)


def open_english_note(d: dict) -> str:
    """What the adequate-data ladder's corpus is, for the reading note."""
    p = d["size"]["data_ladder"]
    a = p["amendment"]
    return (f"{p['chars'] / 1e6:.1f}M characters of openly licensed text (dictionary entries, glosses, quotations, "
            f"tiny Shakespeare), enough that every size sees it less than once ([amendment {a['number']}]"
            f"({a['link']})); *MDE*: the smallest difference a test detects with {stats_power_percent()}% power")


def gpt2_init_words(regime: dict) -> str:
    head = "the output head tied to the token embedding" if regime["tied_head"] else "an output head of its own"
    return f"token and position embeddings drawn from N(0, {regime['emb_init_std']:g}), {head}"


def reading_note(d: dict) -> str:
    """What the first screen's terms mean, each with a link to where it is defined."""
    h1b = d["failures"]["h1b"]["amendment"]
    return ("How to read: Δ is the norm's final validation loss minus `none`'s on the same seed (nats/char; 95% "
            "paired t interval), so positive means the norm costs; `8 × 128` is layers × width; "
            f"*GPT-2 init*: {gpt2_init_words(d['registered'][REGIMES[0]])}; *epochs*: passes "
            "over the 1 MB training text (the same iterations give different epochs where two regimes' batches "
            "differ). *Registered* results test hypotheses fixed "
            f"before the runs ([docs/PROTOCOL.md]({PROTOCOL.as_posix()})); *exploratory* ones describe. *Resolved* "
            "(a direction word in the text, a filled marker in the figure) means significant at α = 0.05 after "
            "Holm's correction for all the comparisons tested together in one family "
            f"([Inference]({protocol_section('Inference')})); otherwise *not resolved*, whatever the interval; "
            "*equivalent within ±0.01*: two one-sided tests (TOST, Holm-corrected) put the difference inside ±0.01, "
            "the smallest difference the protocol counts (amendment 18, added after the data). *H1b* "
            "is the registered stability hypothesis: where `none` fails at a high learning rate, a norm removes the "
            f"failures at an acceptable cost ([amendment {h1b['number']}]({h1b['link']}), "
            f"[Stability]({findings_link('stability')})); an arm's *own best LR*: its lowest mean final loss in "
            f"H1b's LR search (`{d['failures']['study']}`, {d['failures']['seeds']} seeds per rate; a failed run "
            "counts at its initial loss); "
            "a run *fails* when its loss becomes non-finite or its final "
            "validation loss ends above its loss at initialisation, and *scaled* (the figure's stability panel) "
            "multiplies the token embedding by √d instead of normalizing it. *Data-bound*: the baseline's loss no "
            "longer falls as the model grows, so the corpus, not capacity, limits it (on the 1 MB ladder: from the "
            "first size whose next size is not lower by a one-sided Welch t at p < 0.05; on open English, amendment "
            "16's rule: a size whose baseline does not fall from the size below by more than the larger of the two "
            "sizes' seed SDs) "
            f"([Scale]({findings_link('scale')})). *Open English*: {open_english_note(d)}. *Brier score*: the squared "
            "error of the predicted next-character probabilities; *ECE* (expected calibration error): the gap between "
            f"the top prediction's confidence and its accuracy; lower is better ([Calibration]"
            f"({findings_link('calibration')})). The figure's footer names the exact runs drawn: each quoted "
            "`runs/<study>/runs.csv` by its sha256.")


# -- the figure ------------------------------------------------------------------------------------------------------

def _errorbars(ax, x, rows: list[dict], variant: str, y: str = "mean_diff", joined: bool = True):
    from ..publishing.plots import arm_color, variant_style

    color, (ls, marker) = arm_color(variant), variant_style(variant)
    ls = ls if joined else "none"  # categories on the x axis: a line between them would suggest an order
    ys = np.array([r[y] for r in rows], float)
    err = np.vstack([ys - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ys])
    ax.errorbar(x, ys, yerr=err, fmt=marker, ls=ls, color=color, capsize=2, mfc="white", label=ARM_NAMES[variant])
    sig = [k for k, r in enumerate(rows) if r.get("significant")]
    ax.plot(np.asarray(x, float)[sig], ys[sig], marker, color=color, zorder=3)


def _budget_panel(ax, d: dict):
    b, bw = d["budget"], budget_words(d["budget"])
    for k, variant in enumerate(NORMS):
        rows = sorted(_pick(b["rows"], variant=variant), key=lambda r: r["max_iters"])
        _errorbars(ax, np.array([r["max_iters"] for r in rows], float) * (1 + 0.06 * k), rows, variant)
    ax.axhline(0, color="0.5", lw=0.8)
    ends = sorted({(r["max_iters"], r["epochs"]) for r in b["rows"]})
    ax.set_xscale("log")
    ax.set_xticks([i for i, _ in ends], [f"{i}\n{e:.2f} ep" for i, e in ends])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel=f"training iterations and epochs ({_model(b)} model, GPT-2 init)",
           ylabel="Δ final val loss vs no norm (nats/char)")
    ax.set_title(f"Budget grid (exploratory, {b['seeds']} seeds; no trend tested):\n"
                 f"{bw['first']['mean_diff']:+.3f} ({effect_word(bw['first'])}) at {bw['first']['max_iters']} it, "
                 f"{bw['last']['mean_diff']:+.3f} ({effect_word(bw['last'])}) at {bw['last']['max_iters']} it "
                 f"({bw['last']['epochs']:.2f} epochs)", fontsize=9)


def _init_panel(ax, d: dict):
    i, iw = d["init"], init_words(d["init"])
    cats = [(std, head) for std in sorted({r["emb_init_std"] for r in i["rows"]}) for head in ("untied", "tied")]
    for k, variant in enumerate(NORMS):
        rows = [_pick(i["rows"], variant=variant, emb_init_std=s, head=h)[0] for s, h in cats]
        _errorbars(ax, np.arange(len(cats)) + 0.12 * (k - 0.5), rows, variant, joined=False)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xticks(range(len(cats)), [f"N(0, {s:g})\n{h} head" for s, h in cats], fontsize=9)
    ax.set(xlabel="embedding init and output head", ylabel="Δ final val loss vs no norm (nats/char)")
    ax.set_title(f"Init grid (exploratory; {_model(i)}, {i['iters']} it, {i['seeds']} seeds): in this grid the init\n"
                 f"scale may set the sign, untied head {effect_word(iw['small'])} at std {iw['small']['emb_init_std']:g}, "
                 f"{effect_word(iw['large'])} at {iw['large']['emb_init_std']:g}", fontsize=9)


def _failure_panel(ax, d: dict):
    from ..publishing.plots import arm_color, variant_style

    f, fw = d["failures"], failure_words(d["failures"])
    h1b = f["h1b"]
    arms = list(dict.fromkeys(r["variant"] for r in f["rows"]))
    failing = {r["lr"] for r in f["rows"] if r["failed"]}
    zero = next(r for r in f["rows"] if not r["failed"])
    for k, variant in enumerate(arms):
        rows = sorted(_pick(f["rows"], variant=variant), key=lambda r: r["lr"])
        x = np.array([r["lr"] for r in rows]) * (1 + 0.08 * (k - (len(arms) - 1) / 2))
        ls, marker = variant_style(variant)
        share = np.array([r["share"] for r in rows])
        # intervals where some arm failed: at the LRs where none did, every arm's 0 of n shares one interval
        shown = np.array([r["lr"] in failing for r in rows])
        err = np.vstack([share - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - share])
        ax.plot(x, share, marker=marker, ls=ls, color=arm_color(variant), ms=4, lw=1,
                label=ARM_NAMES.get(variant, variant))
        ax.errorbar(x[shown], share[shown], yerr=err[:, shown], fmt="none", ecolor=arm_color(variant), capsize=2,
                    elinewidth=0.7)
    ax.set(xscale="log", ylim=(-0.05, 1.05), xlabel=f"peak learning rate ({_model(f)} model, clipping at "
           f"{f['grad_clip']:g})", ylabel=f"share of {f['seeds']} runs failed")
    failed = {"none": fw["none"], **{v: x["failures"] for v, x in fw["variants"].items()}}
    short = {**ARM_NAMES, "scaled": "scaled"}
    costs = [f"{short[v]} {x['mean_diff']:+.3f}" for v, x in fw["variants"].items()]
    note = (f"Registered H1b at LR {h1b['lr']:g} ({h1b['seeds']} fresh seeds), runs failed:\n"
            + ", ".join(f"{short[v]} {n}" for v, n in failed.items()) + f" of {h1b['seeds']}; "
            + ("no arm removed the failures." if not fw["fixed"] else f"{', '.join(fw['fixed'])} removed them.")
            + "\nCost at each arm's own best LR (nats/char):\n" + ", ".join(costs)
            + f"\n95% exact intervals where any arm failed;\n0 of {zero['runs']} failed: [0, {zero['ci_high']:.2f}]")
    ax.text(0.02, 0.97, note, transform=ax.transAxes, fontsize=8, color="0.25", va="top")
    at = f["lowest_failing_lr"]
    failing_there = [ARM_NAMES.get(v, v) for v in arms if any(r["failed"] for r in _pick(f["rows"], variant=v, lr=at))]
    ax.set_title(f"LR search {f['study']} (exploratory, {f['seeds']} seeds): "
                 f"{'no stability benefit detected' if not fw['fixed'] else 'a stability benefit'};\n"
                 f"no arm fails below LR {at:g}; there {', '.join(failing_there)} fail", fontsize=9)
    ax.legend(fontsize=8, loc="center left")


OPEN_ENGLISH_MARKERS = {"ln": "o", "rms": "D"}  # the adequate-data ladder's points, apart from the 1 MB ladder's


def open_english_said(rungs: list[dict]) -> str:
    """Per resolved direction, which norms and at which sizes of the adequate-data ladder (the panel's title)."""
    said = []
    for word, sign in (("cost", 1), ("help", -1)):
        at = {}
        for r in rungs:
            arms = [v for v in NORMS if r[v]["significant"] and np.sign(r[v]["mean_diff"]) == sign]
            if arms:
                at.setdefault(" and ".join(ARM_NAMES[v] for v in arms) if len(arms) == 1 else "both norms",
                              []).append(_millions(r["params"]))
        said += [f"{who} {word}{'s' if who != 'both norms' else ''} at {', '.join(sizes)}" for who, sizes in at.items()]
    return "; ".join(said) or "no effect resolved"


def _size_panel(ax, d: dict):
    from ..publishing.plots import arm_color

    s, sw = d["size"], size_words(d["size"])
    if s["plateau_from"] is not None:
        # from just left of the first data-bound size: an open-English size below it (not data-bound) stays outside
        ax.axvspan(sw["plateau_params"] / 1.1, sw["high"] * 1.6, color="0.92", lw=0)
        ax.text(sw["plateau_params"] / 1.05, 0.3, "1 MB ladder data-bound:\nthe baseline's loss\nstops falling with size",
                transform=ax.get_xaxis_transform(), va="bottom", fontsize=8, color="0.35")
    for k, variant in enumerate(NORMS):
        rows = sorted(_pick(s["rows"], variant=variant), key=lambda r: r["params"])
        _errorbars(ax, np.array([r["params"] for r in rows], float) * (1 + 0.08 * k), rows, variant)
    open_rungs = data_ladder_rungs(s["data_ladder"])
    joined = bool(s["data_ladder"].get("trend"))  # no line between sizes before the exploratory trend is quoted
    for k, variant in enumerate(NORMS):  # just left of the true size, the 1 MB ladder's points just right
        rows = [r[variant] for r in open_rungs]
        if not rows:
            continue
        x = np.array([r["params"] for r in rows], float) * (0.86 + 0.06 * k)
        ys = np.array([r["mean_diff"] for r in rows])
        err = np.vstack([ys - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ys])
        marker, color = OPEN_ENGLISH_MARKERS[variant], arm_color(variant)
        ax.errorbar(x, ys, yerr=err, fmt=marker, ls=":" if joined else "none", color=color, capsize=2, mfc="white",
                    label=f"{ARM_NAMES[variant]}, open English")
        sig = [j for j, r in enumerate(rows) if r["significant"]]
        ax.plot(x[sig], ys[sig], marker, color=color, zorder=3)
    ax.axhline(0, color="0.5", lw=0.8)
    # the 1 MB ladder's budget rule is capped in passes, so its large sizes get fewer tokens per parameter: say how few
    largest = max(s["rungs"], key=lambda r: r["params"])
    one_mb = (f"{s['tokens_per_param']} tokens/param, capped at {s['passes_cap']} passes "
              f"({largest['tokens_per_param']:.1f} tokens/param at {_millions(largest['params'])})")
    ax.set(xscale="log", xlabel="non-embedding parameters\n" + (
        f"1 MB: {one_mb}\nopen English: {s['data_ladder']['tokens_per_param']} tokens/param, < 1 pass"
        if open_rungs else one_mb),
           ylabel="Δ final val loss vs no norm (nats/char)")
    title = (f"Size ladder on 1 MB ({s['seeds']} seeds per size, {sw['passes_low']:.1f}–{sw['passes_high']:.0f} "
             f"passes): no size effect\nresolved at {sw['sizes']} sizes ({_millions(sw['low'])}–{_millions(sw['high'])})")
    if open_rungs:
        title = (f"Size, 1 MB ({s['seeds']} seeds, {sw['passes_low']:.1f}–{sw['passes_high']:.0f} passes): no effect "
                 f"resolved at {sw['sizes']} sizes;\nopen English (circles, diamonds; {len(open_rungs)} of "
                 f"{s['data_ladder']['sizes']} sizes, {min(r['seeds'] for r in open_rungs)} seeds): "
                 f"{open_english_said(open_rungs)}")
    ax.set_title(title, fontsize=9)


def answer_figure(d: dict) -> plt.Figure:
    """Four panels, each titled with its study and what it shows: Δ val loss against training budget, against the
    embedding's init scale, failures against peak LR, Δ against model size. Open markers: not resolved after Holm;
    filled: resolved."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.6))
    _budget_panel(axes[0][0], d)
    _init_panel(axes[0][1], d)
    _failure_panel(axes[1][0], d)
    _size_panel(axes[1][1], d)
    for a in axes.flat:
        if a is not axes[1][0]:
            a.legend(fontsize=8, loc="best")
        a.tick_params(labelsize=9)
    reg, hw = d["registered"][REGIMES[0]], headline_words(d)
    also = " (size panel: also open English)" if data_ladder_rungs(d["size"]["data_ladder"]) else ""
    fig.suptitle(f"Embedding norm in a Pre-LN GPT on tiny Shakespeare{also}: {reg['verdict']} at GPT-2 init and "
                 f"≤ {hw['max_epochs']:.2f} epochs\n(95% t intervals; filled marker = resolved after Holm's "
                 "correction, open = not resolved)", fontsize=11)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def write_figure(d: dict, out_dir=None, figures_dir=None) -> Path:
    from ..publishing.plots import save

    out = runs_root(out_dir)
    stamp = ("embnorm · answer · sha256 of each study's runs.csv: "
             + ", ".join(f"{s} {fingerprint(study_dir_for(s, out).index)}" for s in STUDIES_QUOTED))
    fig = answer_figure(d)
    stem = Path(figures_dir) / "answer" if figures_dir else repo_root() / FIGURE
    png, _ = save(fig, stem, stamp)
    plt.close(fig)
    return png


def first_screen(d: dict, figure: str) -> str:
    """The README's answer block: the TL;DR, the answer figure, the regime table, how to read them, where to read
    on."""
    return "\n".join(["## TL;DR", "", *tldr_lines(d), "",
                      f"![The answer in four panels: the embedding norm's difference in validation loss against training "
                      f"budget, against the embedding's init scale, failures against peak learning rate, and the "
                      f"difference against model size]({figure})", "",
                      regime_table(d), "",
                      reading_note(d), "",
                      "Read on: the full findings, grouped by question, in [FINDINGS.md](FINDINGS.md); the "
                      "paper, [paper/paper.pdf](paper/paper.pdf); every figure, [figures/README.md](figures/README.md); "
                      "every study, [runs/README.md](runs/README.md); the protocol, "
                      "[docs/PROTOCOL.md](docs/PROTOCOL.md); explore the runs interactively in the last cell of "
                      "`notebooks/03_diagnostics` (paired differences per study and metric)."])
