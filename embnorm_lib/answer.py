"""The answer on one screen (issue 71): the README's TL;DR, its answer figure and its regime table, computed from the
committed studies.

    python -m embnorm_lib.publish readme    # figures/answer.png, the README's first screen, FINDINGS.md (report.py)

`answer_data` gathers every number the first screen quotes (JSON-safe, so a test can re-derive and compare it);
`answer_figure`, `tldr_lines` and `regime_table` render it. Wording that states a direction ("costs", "helps",
"not resolved") is chosen from the Holm decision of the row it describes, never typed."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .io import fingerprint, read_json, repo_root, runs_root
from .results import has_index, load_runs
from .rundir import study_dir_for

FIGURE = Path("figures") / "answer"  # .png (embedded in the README) and .pdf
REGISTERED_STUDY = "main"  # the registered paired study: both training regimes, seeds-final's seeds included
REGIMES = ("seeds-final", "nanogpt-cpu")  # its regimes, the headline's first
NORMS = ("ln", "rms")
STUDIES_QUOTED = ("main", "stability-budget", "stability-budget-v2", "stability-scale-v2", "stability-lr-v2",
                  "stability-h1b-v2", "ladder")
ARM_NAMES = {"none": "no norm", "ln": "LayerNorm", "rms": "RMSNorm", "scaled": "scaled (tok·√d)"}


def _clean(value):
    if isinstance(value, (np.floating, float)):
        return None if not np.isfinite(value) else round(float(value), 6)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[dict]:
    return [{k: _clean(v) for k, v in r.items()} for r in frame[columns].to_dict("records")]


# -- the data --------------------------------------------------------------------------------------------------------

def registered_data(out: Path) -> dict:
    """Per regime of the registered study: the model, seeds, iterations, each norm's difference in final validation
    loss (family.csv) and the decision rule's verdict (decision.json)."""
    runs = load_runs(REGISTERED_STUDY, out)
    found = {}
    for regime in REGIMES:
        root = study_dir_for(REGISTERED_STUDY, out).analysis / regime
        family = pd.read_csv(root / "family.csv")
        sub = runs[runs["cfg.preset"] == regime]
        rows = family[(family["metric"] == "val_loss") & family["variant"].isin(NORMS)]
        v1 = family[(family["metric"] == "lm_macro_acc") & family["variant"].isin(NORMS)]
        found[regime] = {"layers": int(sub["cfg.n_layer"].iloc[0]), "width": int(sub["cfg.n_embd"].iloc[0]),
                         "iters": int(sub["cfg.max_iters"].iloc[0]), "seeds": int(sub["seed"].nunique()),
                         "emb_init_std": _clean(sub["cfg.emb_init_std"].iloc[0]),
                         "verdict": read_json(root / "decision.json")["overall"],
                         "none_loss": _clean(rows["baseline_mean"].iloc[0]),
                         "loss": _rows(rows, ["variant", "mean_diff", "ci_low", "ci_high", "p_holm", "significant"]),
                         "zeroshot_v1": _rows(v1, ["variant", "mean_diff", "ci_low", "ci_high", "p_holm",
                                                   "significant"])}
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
    return {"regime": REGIMES[0], "seeds": len(d["seeds"]), "items_min": min(d["items"].values()),
            "family": _rows(family, ["variant", "task", "none", "mean_diff", "ci_low", "ci_high", "p_holm",
                                     "significant", "share"]),
            "mde_v2": _clean(d["mde"]["mde_at_seeds_used"].max()),
            "mde_v1": _clean(zeroshot.measured_mde(v1)["mde_at_seeds_used"].max()),
            "v1_items": int(read_json(zeroshot.SUITE_MANIFESTS["v1"])["n_test"]),
            "v1_difficulty": _rows(zeroshot.difficulty(d["runs"], suite="v1"), ["task", "none_acc", "above_chance", "below_ceiling",
                                                   "well_inside"]),
            "chance": zeroshot.CHANCE, "margin": zeroshot.MARGIN}


def budget_data(out: Path) -> dict:
    """The budget trend (exploratory): each norm's difference in final validation loss per training budget."""
    from .budget_trend import budget_table, load_budget_runs
    from .data import load_corpus

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
    from .scale_vs_norm import STUDY, regime_table

    runs = load_runs(STUDY, out)
    table = regime_table(runs)
    table = table[table["variant"].isin(NORMS)].rename(columns={"delta_vs_none": "mean_diff"})
    return {"layers": int(runs["cfg.n_layer"].iloc[0]), "width": int(runs["cfg.n_embd"].iloc[0]),
            "iters": int(runs["cfg.max_iters"].iloc[0]), "seeds": int(table["seeds"].min()),
            "rows": _rows(table, ["emb_init_std", "head", "variant", "mean_diff", "ci_low", "ci_high", "p_holm",
                                  "significant"])}


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
                         for v, x in decision["variants"].items() if v in NORMS}}
    failing = phase[phase["failed"] > 0]
    return {"study": study, "layers": int(runs["cfg.n_layer"].iloc[0]), "width": int(runs["cfg.n_embd"].iloc[0]),
            "seeds": int(runs["seed"].nunique()), "grad_clip": _clean(runs["cfg.grad_clip"].iloc[0]),
            "lowest_failing_lr": _clean(failing["cfg.lr"].min()) if len(failing) else None,
            "largest_lr": _clean(phase["cfg.lr"].max()),
            "rows": _rows(phase.rename(columns={"cfg.lr": "lr"}), ["variant", "lr", "failed", "runs", "share",
                                                                     "ci_low", "ci_high"]),
            "h1b": {"seeds": len(d["seeds"]), "lr": h1b.CONFIRMATORY_LR, "regimes": confirm}}


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
    from . import ladder
    from .data import load_corpus
    from .studies import registered_seeds

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
            "rows": _rows(table, ["rung", "params", "variant", "mean_diff", "ci_low", "ci_high", "p_holm",
                                  "significant"]),
            "rungs": [{"rung": int(r.rung), "params": int(r.params), "tokens_per_param": _clean(r.tokens_per_param),
                       "passes": _clean(r.train_tokens / train), "none_loss": _clean(per_rung.loc[r.rung, "mean"]),
                       "none_loss_sd": _clean(per_rung.loc[r.rung, "std"])}
                      for r in budget.itertuples() if r.rung in per_rung.index]}


def answer_data(out_dir=None) -> dict:
    """Every number the README's first screen quotes, from the committed studies."""
    from .data import load_corpus

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
    """The direction of a loss difference where its Holm decision resolves it."""
    if not r["significant"]:
        return "not resolved"
    return cost if r["mean_diff"] > 0 else gain


def _millions(params: float) -> str:
    return f"{params / 1e6:.1f}M" if params >= 1e6 else f"{params / 1e6:.2f}M"


def _pick(rows: list[dict], **match) -> list[dict]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def budget_words(b: dict) -> dict:
    ln = sorted(_pick(b["rows"], variant="ln"), key=lambda r: r["max_iters"])
    first, last = ln[0], ln[-1]
    shrinks = abs(last["mean_diff"]) < abs(first["mean_diff"])
    return {"first": first, "last": last, "verb": "shrinks" if shrinks else "does not shrink"}


def init_words(i: dict) -> dict:
    """LayerNorm at the smallest and the largest embedding init scale, untied head (the regime where both resolve)."""
    ln = _pick(i["rows"], variant="ln", head="untied")
    small, large = min(ln, key=lambda r: r["emb_init_std"]), max(ln, key=lambda r: r["emb_init_std"])
    flips = effect_word(small) != effect_word(large) and "not resolved" not in (effect_word(small), effect_word(large))
    return {"small": small, "large": large, "flips": flips}


def size_words(s: dict) -> dict:
    resolved = [r for r in s["rows"] if r["significant"]]
    params = sorted({r["params"] for r in s["rows"]})
    plateau = s["plateau_from"]
    fit = [p for r, p in ((x["rung"], x["params"]) for x in s["rungs"]) if plateau is None or r < plateau]
    return {"resolved": len(resolved), "sizes": len(params), "low": params[0], "high": params[-1],
            "fit_high": max(fit) if fit else None, "plateau_params": None if plateau is None else
            next(x["params"] for x in s["rungs"] if x["rung"] == plateau)}


def zeroshot_words(z: dict) -> dict:
    macro = _pick(z["family"], variant="ln", task="macro")[0]
    tasks = [r for r in _pick(z["family"], variant="ln") if r["task"] != "macro"]
    top = max(tasks, key=lambda r: abs(r["share"]))
    at_edge = [t["task"] for t in z["v1_difficulty"] if not t["well_inside"]]
    return {"macro": macro, "top": top, "v1_at_edge": at_edge, "v1_tasks": len(z["v1_difficulty"])}


def failure_words(f: dict) -> dict:
    h = f["h1b"]["regimes"]["clip"]
    return {"none": h["none_failures"], "fixed": [v for v, x in h["variants"].items() if x["fixes"]],
            "ln": h["variants"]["ln"]}


def confidence_words(d: dict) -> str:
    """How sure the headline is: registered and resolved in every regime, or not."""
    resolved = all(r["significant"] for reg in d["registered"].values() for r in reg["loss"])
    seeds = max(reg["seeds"] for reg in d["registered"].values())
    p = max(r["p_holm"] for reg in d["registered"].values() for r in reg["loss"])
    from .stats import p_text

    if resolved:
        return (f"**high** for the cost at GPT-2 init (registered protocol, up to {seeds} paired seeds, every Holm "
                f"p ≤ {p_text(p)}, in both model configurations)")
    return "**low**: the registered comparison does not resolve a direction in every regime"


def tldr_lines(d: dict) -> list[str]:
    """At most eight lines: the answer, its scope and its confidence."""
    reg = d["registered"]
    head, other = reg[REGIMES[0]], reg[REGIMES[1]]
    ln_head = _pick(head["loss"], variant="ln")[0]
    rms_head = _pick(head["loss"], variant="rms")[0]
    ln_other = _pick(other["loss"], variant="ln")[0]
    b, i, s, z, f = (budget_words(d["budget"]), init_words(d["init"]), size_words(d["size"]),
                     zeroshot_words(d["zeroshot"]), failure_words(d["failures"]))
    verdict = head["verdict"] if head["verdict"] == other["verdict"] else "depends on the regime"
    chars = d["corpus"]["chars"]
    lines = [
        f"- **Answer: {verdict}.** At GPT-2 init (embeddings N(0, {head['emb_init_std']:g})), a LayerNorm right after "
        f"the embedding **{effect_word(ln_head, 'raises', 'lowers')}** final validation loss by "
        f"{interval(ln_head)} nats/char ({head['layers']} × {head['width']} model, {head['iters']} iterations, "
        f"{head['seeds']} seeds; RMSNorm {rms_head['mean_diff']:+.3f}) and by {interval(ln_other)} in a "
        f"{other['layers']} × {other['width']} model at {other['iters']} iterations.",
        f"- **Zero-shot** (suite v2, the registered endpoint): `ln` "
        f"**{effect_word(z['macro'], 'raises', 'lowers')}** macro accuracy, {interval(z['macro'])}, "
        f"{z['top']['share']:.0%} of it from one task (`{z['top']['task']}`). Suite v1 is superseded: "
        f"{len(z['v1_at_edge'])} of its {z['v1_tasks']} tasks sit at chance or ceiling, so it cannot detect less "
        f"than {d['zeroshot']['mde_v1']:.3f} (v2: {d['zeroshot']['mde_v2']:.3f}).",
        f"- **Training budget**: the cost {b['verb']} with training, {b['first']['mean_diff']:+.3f} at "
        f"{b['first']['max_iters']} → {interval(b['last'])} ({effect_word(b['last'])}) at {b['last']['max_iters']} "
        f"iterations ({b['last']['epochs']:.1f} epochs).",
        f"- **Stability**: no benefit. No arm fails below peak LR {d['failures']['lowest_failing_lr']:g}; there, "
        f"`none` failed {f['none']} of {d['failures']['h1b']['seeds']} fresh seeds and "
        + (f"{', '.join(f'`{v}`' for v in f['fixed'])} removed the failures" if f["fixed"] else
           "no norm removed the failures")
        + f" (registered H1b; `ln`'s cost at its own best LR {interval(f['ln'], 3)} nats/char).",
        f"- **Init scale sets the sign**: with N(0, {i['large']['emb_init_std']:g}) embeddings `ln` "
        f"{effect_word(i['large'])} ({interval(i['large'])}); with N(0, {i['small']['emb_init_std']:g}) it "
        f"{effect_word(i['small'])} ({interval(i['small'])}).",
        f"- **Size**: {'no' if not s['resolved'] else s['resolved']} difference resolved at any of {s['sizes']} sizes "
        f"({_millions(s['low'])}–{_millions(s['high'])} non-embedding parameters)"
        + (f"; from {_millions(s['plateau_params'])} up the baseline's loss stops falling (data-bound), so size is "
           f"really tested only up to {_millions(s['fit_high'])}." if s["plateau_params"] else "."),
        f"- **Scope**: character-level Pre-LN GPTs, tiny Shakespeare ({chars / 1e6:.1f}M characters), "
        f"{_millions(s['low'])}–{_millions(s['high'])} non-embedding parameters, {min(b['first']['max_iters'], head['iters'])}"
        f"–{b['last']['max_iters']} iterations. **Confidence**: {confidence_words(d)}; budget, init, stability search "
        f"and size are exploratory ({d['budget']['seeds']}–{d['size']['seeds']} seeds) except H1b.",
    ]
    return lines


def regime_table(d: dict) -> str:
    """Regime -> LayerNorm's (and RMSNorm's) difference with its interval -> what to do, as Markdown."""
    rows = []
    for regime in REGIMES:
        r = d["registered"][regime]
        ln, rms = (_pick(r["loss"], variant=v)[0] for v in NORMS)
        rows.append((f"GPT-2 init, {r['layers']} × {r['width']}, {r['iters']} it (registered, {r['seeds']} seeds)",
                     interval(ln), interval(rms), r["verdict"]))
    b = d["budget"]
    for it in (budget_words(b)["first"]["max_iters"], budget_words(b)["last"]["max_iters"]):
        ln, rms = (_pick(b["rows"], variant=v, max_iters=it)[0] for v in NORMS)
        rows.append((f"{b['layers']} × {b['width']}, {it} it (exploratory, {b['seeds']} seeds)", interval(ln),
                     interval(rms), effect_word(ln)))
    i = d["init"]
    for std in sorted({r["emb_init_std"] for r in i["rows"]}):
        ln, rms = (_pick(i["rows"], variant=v, emb_init_std=std, head="untied")[0] for v in NORMS)
        rows.append((f"embeddings N(0, {std:g}), untied head (exploratory, {i['seeds']} seeds)", interval(ln),
                     interval(rms), effect_word(ln)))
    f = d["failures"]["h1b"]
    h = f["regimes"]["clip"]
    ln, rms = (h["variants"][v] for v in NORMS)
    rows.append((f"peak LR {f['lr']:g}, where `none` fails {h['none_failures']}/{f['seeds']} (registered H1b; "
                 "cost at each arm's best LR)", interval(ln), interval(rms),
                 f"{ln['verdict']} ({'removes' if ln['fixes'] else 'does not remove'} failures)"))
    s = d["size"]
    fit = [r for r in s["rungs"] if s["plateau_from"] is None or r["rung"] < s["plateau_from"]]
    # the largest size that is not data-bound, and the largest size (FINDINGS.md has every size)
    for rung in list({r["rung"]: r for r in (fit[-1:] + s["rungs"][-1:])}.values()):
        ln, rms = (_pick(s["rows"], variant=v, rung=rung["rung"])[0] for v in NORMS)
        bound = s["plateau_from"] is not None and rung["rung"] >= s["plateau_from"]
        rows.append((f"size {_millions(rung['params'])} params ({d['size']['seeds']} seeds"
                     + (", data-bound" if bound else "") + ")", interval(ln), interval(rms), effect_word(ln)))
    z = zeroshot_words(d["zeroshot"])
    zrms = _pick(d["zeroshot"]["family"], variant="rms", task="macro")[0]
    rows.append((f"zero-shot accuracy, suite v2 (registered, {d['zeroshot']['seeds']} seeds)", interval(z["macro"]),
                 interval(zrms), effect_word(z["macro"], "raises accuracy", "costs accuracy")))
    lines = ["| regime | Δ val loss `ln` [95% CI] | Δ `rms` [95% CI] | decision |", "|---|---|---|---|"]
    lines += [f"| {a} | {b_} | {c} | {e} |" for a, b_, c, e in rows]
    return "\n".join(lines)


# -- the figure ------------------------------------------------------------------------------------------------------

def _errorbars(ax, x, rows: list[dict], variant: str, y: str = "mean_diff", joined: bool = True):
    from .plots import arm_color, variant_style

    color, (ls, marker) = arm_color(variant), variant_style(variant)
    ls = ls if joined else "none"  # categories on the x axis: a line between them would suggest an order
    ys = np.array([r[y] for r in rows], float)
    err = np.vstack([ys - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ys])
    ax.errorbar(x, ys, yerr=err, fmt=marker, ls=ls, color=color, capsize=2, mfc="white", label=ARM_NAMES[variant])
    sig = [k for k, r in enumerate(rows) if r.get("significant")]
    ax.plot(np.asarray(x, float)[sig], ys[sig], marker, color=color, zorder=3)


def answer_figure(d: dict) -> plt.Figure:
    """Four panels, each titled with what it shows: Δ val loss against training budget, against the embedding's init
    scale, failures against peak LR, Δ against model size. Open markers: not resolved after Holm; filled: resolved."""
    from .plots import arm_color, variant_style

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.6))
    ax = axes[0][0]
    b, bw = d["budget"], budget_words(d["budget"])
    for k, variant in enumerate(NORMS):
        rows = sorted(_pick(b["rows"], variant=variant), key=lambda r: r["max_iters"])
        _errorbars(ax, np.array([r["max_iters"] for r in rows], float) * (1 + 0.06 * k), rows, variant)
    ax.axhline(0, color="0.5", lw=0.8)
    iters = sorted({r["max_iters"] for r in b["rows"]})
    ax.set_xscale("log")
    ax.set_xticks(iters, [str(i) for i in iters])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel=f"training iterations ({b['layers']} × {b['width']} model; exploratory, {b['seeds']} seeds)",
           ylabel="Δ final val loss vs no norm (nats/char)")
    ax.set_title(f"The cost {bw['verb']} with training: {bw['first']['mean_diff']:+.3f} at {bw['first']['max_iters']} "
                 f"→ {bw['last']['mean_diff']:+.3f} at {bw['last']['max_iters']} it", fontsize=9)

    ax = axes[0][1]
    i, iw = d["init"], init_words(d["init"])
    cats = [(std, head) for std in sorted({r["emb_init_std"] for r in i["rows"]}) for head in ("untied", "tied")]
    for k, variant in enumerate(NORMS):
        rows = [_pick(i["rows"], variant=variant, emb_init_std=s, head=h)[0] for s, h in cats]
        _errorbars(ax, np.arange(len(cats)) + 0.12 * (k - 0.5), rows, variant, joined=False)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xticks(range(len(cats)), [f"N(0, {s:g})\n{h} head" for s, h in cats], fontsize=8)
    ax.set(xlabel=f"embedding init ({i['layers']} × {i['width']} model, {i['iters']} it; exploratory, {i['seeds']} "
                  "seeds)", ylabel="Δ final val loss vs no norm (nats/char)")
    ax.set_title("The embedding's init scale sets the sign: "
                 + (f"{effect_word(iw['small'])} at std {iw['small']['emb_init_std']:g}, "
                    f"{effect_word(iw['large'])} at {iw['large']['emb_init_std']:g}"), fontsize=9)

    ax = axes[1][0]
    f = d["failures"]
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
    ax.set(xscale="log", ylim=(-0.05, 1.05), xlabel=f"peak learning rate ({f['layers']} × {f['width']} model, "
           f"clipping at {f['grad_clip']:g})", ylabel=f"share of {f['seeds']} runs failed")
    ax.text(0.02, 0.55, f"95% exact intervals where any arm failed;\n0 of {zero['runs']} failed: "
            f"[0, {zero['ci_high']:.2f}]", transform=ax.transAxes, fontsize=7, color="0.35")
    ax.set_title(f"No stability benefit: every arm trains below LR {f['lowest_failing_lr']:g}, and there "
                 "the norms fail too", fontsize=9)

    ax = axes[1][1]
    s, sw = d["size"], size_words(d["size"])
    if s["plateau_from"] is not None:
        ax.axvspan(sw["plateau_params"] / 1.6, sw["high"] * 1.6, color="0.92", lw=0)
        ax.text(sw["plateau_params"] / 1.5, 0.98, "baseline loss flat with size:\ndata-bound (issue 76)",
                transform=ax.get_xaxis_transform(), va="top", fontsize=7, color="0.35")
    for k, variant in enumerate(NORMS):
        rows = sorted(_pick(s["rows"], variant=variant), key=lambda r: r["params"])
        _errorbars(ax, np.array([r["params"] for r in rows], float) * (1 + 0.08 * k), rows, variant)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set(xscale="log", xlabel=f"non-embedding parameters (character models; {s['seeds']} seeds per size)",
           ylabel="Δ final val loss vs no norm (nats/char)")
    ax.set_title(f"No size effect resolved at {sw['sizes']} sizes ({_millions(sw['low'])}–{_millions(sw['high'])})",
                 fontsize=9)
    for a in axes.flat:
        a.legend(fontsize=7, loc="lower left" if a is axes[1][0] else "best")
        a.tick_params(labelsize=8)
    reg = d["registered"][REGIMES[0]]
    fig.suptitle(f"Embedding norm in a Pre-LN GPT on tiny Shakespeare: {reg['verdict']} at GPT-2 init "
                 "(95% t intervals; filled = resolved after Holm)", fontsize=11)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def write_figure(d: dict, out_dir=None, figures_dir=None) -> Path:
    from .plots import save

    out = runs_root(out_dir)
    stamp = "embnorm · answer · runs.csv " + " ".join(fingerprint(study_dir_for(s, out).index) for s in STUDIES_QUOTED)
    fig = answer_figure(d)
    stem = Path(figures_dir) / "answer" if figures_dir else repo_root() / FIGURE
    png, _ = save(fig, stem, stamp)
    plt.close(fig)
    return png


def first_screen(d: dict, figure: str) -> str:
    """The README's answer block: the TL;DR, the answer figure, the regime table and where to read on."""
    return "\n".join(["## TL;DR", "", *tldr_lines(d), "",
                      f"![The answer in four panels: the embedding norm's difference in validation loss against training "
                      f"budget, against the embedding's init scale, failures against peak learning rate, and the "
                      f"difference against model size]({figure})", "",
                      regime_table(d), "",
                      "Δ: the norm's final validation loss minus `none`'s on the same seed (nats/char; 95% paired t "
                      "interval). Read on: the full findings, grouped by question, in [FINDINGS.md](FINDINGS.md); the "
                      "paper, [paper/paper.pdf](paper/paper.pdf); every figure, [figures/README.md](figures/README.md); "
                      "every study, [runs/README.md](runs/README.md); the protocol, "
                      "[docs/PROTOCOL.md](docs/PROTOCOL.md); explore the runs interactively in the last cell of "
                      "`notebooks/03_diagnostics` (paired differences per study and metric)."])
