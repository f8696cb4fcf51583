"""The answer's record: `answer.answer_data`'s numbers plus every choice the README's first screen and FINDINGS.md's
"answer in detail" make from them (decision words, which rows are quoted, which sizes share an outcome), so the
template templates/answer.md.j2 only phrases. Nothing here writes a sentence; a direction word comes from the Holm
decision (or the TOST) of the row it describes.

    record = answer_record(answer_data())    # JSON-safe; written as runs/answer.json by site.update_readme"""
from __future__ import annotations

import math

import numpy as np

from ..publishing.templating import effect, pick
from ..stats.metrics import METRICS

# the studies quoted, by role: the registered regimes (the headline's first), the answer's studies, the data ladder
from ..studies.answer_sources import DATA_LADDER, REGIMES, STUDIES_QUOTED  # noqa: F401 (answer.py reads them here)

NORMS = ("ln", "rms")
# the registered family's calibration endpoints (secondary; lower is better), in the order the answer says them
CALIBRATION = {name: METRICS[name].answer_name for name in ("brier", "ece_equal_width")}


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
    ln = sorted(pick(b["rows"], variant="ln"), key=lambda r: r["max_iters"])
    first = next((r for r in ln if r["significant"]), ln[0])
    last = ln[-1]
    smaller = abs(last["mean_diff"]) < abs(first["mean_diff"])
    subject = "the cost" if first["significant"] and first["mean_diff"] > 0 else "the difference"
    return {"first": first, "last": last, "shortest": ln[0]["max_iters"], "subject": subject,
            "verb": "is smaller" if smaller else "is not smaller"}


def init_words(i: dict) -> dict:
    """LayerNorm at the smallest and the largest embedding init scale, per output head; whether the untied head's
    sign flips between them (both resolved, opposite words); whether the grid is the seed study's setup."""
    by_head = {}
    for head in ("untied", "tied"):
        ln = pick(i["rows"], variant="ln", head=head)
        by_head[head] = (min(ln, key=lambda r: r["emb_init_std"]), max(ln, key=lambda r: r["emb_init_std"]))
    small, large = by_head["untied"]
    words = {effect(small), effect(large)}
    seed = i["seed_study"]
    return {"small": small, "large": large, "tied": by_head["tied"],
            "flips": len(words) == 2 and "not resolved" not in words,
            "seed_setup": (seed["layers"], seed["width"], seed["iters"]) == (i["layers"], i["width"], i["iters"]),
            "seed_agrees": bool(seed["ln_lowered_ppl"] and effect(large) == "helps"),
            "two_embeddings_norm": float(np.sqrt(2 * seed["width"]))}


def size_words(s: dict) -> dict:
    resolved = [r for r in s["rows"] if r["significant"]]
    params = sorted({r["params"] for r in s["rows"]})
    plateau = s["plateau_from"]
    fit = [p for r, p in ((x["rung"], x["params"]) for x in s["rungs"]) if plateau is None or r < plateau]
    ln = pick(s["rows"], variant="ln")
    passes = [r["passes"] for r in s["rungs"]]
    return {"resolved": len(resolved), "sizes": len(params), "low": params[0], "high": params[-1],
            "fit_high": max(fit) if fit else None, "plateau_params": None if plateau is None else
            next(x["params"] for x in s["rungs"] if x["rung"] == plateau),
            "ln_within": max(abs(r["mean_diff"]) for r in ln), "passes_low": min(passes), "passes_high": max(passes)}


def zeroshot_words(z: dict) -> dict:
    macro = pick(z["family"], variant="ln", task="macro")[0]
    tasks = [r for r in pick(z["family"], variant="ln") if r["task"] != "macro"]
    top = max(tasks, key=lambda r: abs(r["share"]))
    at_edge = [t["task"] for t in z["v1_difficulty"] if not t["well_inside"]]
    return {"macro": macro, "rms_macro": pick(z["family"], variant="rms", task="macro")[0], "top": top,
            "v1_at_edge": at_edge, "v1_tasks": len(z["v1_difficulty"])}


def failure_words(f: dict) -> dict:
    """H1b with clipping (the recipe's default), every arm: failures of the fresh seeds, whether it removed none's
    failures, its tuned cost; and the search's failures per arm at its lowest failing LR."""
    h = f["h1b"]["regimes"]["clip"]
    at = f["lowest_failing_lr"]
    search = {r["variant"]: r for r in f["rows"] if r["lr"] == at}
    costs = all(x["significant"] and x["mean_diff"] > 0 for x in h["variants"].values())
    return {"none": h["none_failures"], "fixed": [v for v, x in h["variants"].items() if x["fixes"]],
            "ln": h["variants"]["ln"], "variants": h["variants"], "search_at": search, "all_cost": costs,
            "lr_low": min(r["lr"] for r in f["rows"]),
            "arms": ["none", *h["variants"]],
            "failed": {"none": h["none_failures"], **{v: x["failures"] for v, x in h["variants"].items()}}}


def confidence_data(d: dict) -> dict:
    """The registered regimes: whether every norm's difference is resolved, the most seeds, the largest Holm p
    (and a two-digit bound rounded up, never below it), and what the configurations differ in."""
    reg = list(d["registered"].values())
    p = max(r["p_holm"] for x in reg for r in x["loss"])
    unit = 10.0 ** (math.floor(math.log10(p)) - 1)
    return {"resolved": all(r["significant"] for x in reg for r in x["loss"]), "seeds": max(x["seeds"] for x in reg),
            "p_holm_max": p, "p_bound": math.ceil(round(p / unit, 9)) * unit,
            "differ": {k: [x[k] for x in reg] for k in ("layers", "iters") if len({x[k] for x in reg}) > 1}}


def calibration_parts(d: dict, variant: str = "ln") -> list[dict]:
    """Per calibration endpoint: whether every registered regime resolves the same direction (then said once, with
    the headline regime's row), else each regime's word."""
    parts = []
    for metric, name in CALIBRATION.items():
        rows = [{"iters": r["iters"], "row": pick(r["calibration"], metric=metric, variant=variant)[0]}
                for r in d["registered"].values()]
        said = {effect(x["row"], "worse", "better") for x in rows}
        parts.append({"metric": metric, "name": name, "rows": rows,
                      "agree": len(said) == 1 and "not resolved" not in said, "worse": said == {"worse"}})
    return parts


def data_ladder_finished(p: dict) -> bool:
    """Whether the adequate-data ladder's confirmatory runs are registered and all have finished (at least as many
    as its design holds): only then does the first screen point at its result."""
    confirm = p["studies"][DATA_LADDER[1]]
    return bool(confirm["registered"] and confirm["finished"] >= max(confirm["registered"], p.get("planned", 0)))


def data_ladder_rungs(p: dict) -> list[dict]:
    """The quoted rungs of the adequate-data ladder, smallest first: per rung its regime and each norm's row."""
    rungs = []
    for rung in sorted({r["rung"] for r in p.get("rungs", [])}):
        ln, rms = (pick(p["rungs"], rung=rung, variant=v)[0] for v in NORMS)
        rungs.append({**{k: ln[k] for k in ("rung", "params", "shape", "iters", "passes", "seeds", "none",
                                            "data_bound")}, "ln": ln, "rms": rms})
    return rungs


def data_ladder_record(p: dict) -> dict:
    """The adequate-data ladder's words: its quoted rungs with each test's amendment-16 words, and the trend's."""
    from .ladder import trend_words
    from .ladder_data_words import direction_words

    rungs = data_ladder_rungs(p)
    for r in rungs:
        for v in NORMS:
            r[v] = {**r[v], "direction": direction_words(r[v])}
    studies = p.get("studies", {})  # a clause that needs no run counts may be asked of a ladder record without them
    return {"rungs": rungs, "finished": data_ladder_finished(p) if studies else None,
            "trend": [{**t, "words": trend_words(t)} for t in p.get("trend", [])],
            "trend_without_smallest": [{**t, "words": trend_words(t)} for t in p.get("trend_without_smallest", [])],
            "entering": sum(not r["data_bound"] for r in rungs), "report": f"runs/{DATA_LADDER[1]}/LADDER-DATA.md",
            "tuning": studies.get(DATA_LADDER[0]), "confirm": studies.get(DATA_LADDER[1]),
            "names": DATA_LADDER}


def regime_rows(d: dict, b: dict) -> dict:
    """The regime table's choices: the budget grid's two ends, every init cell, and the ladder's largest size that
    is not data-bound beside its largest (FINDINGS.md has every size)."""
    budget = [{"end": end, **{v: pick(d["budget"]["rows"], variant=v, max_iters=end["max_iters"])[0] for v in NORMS}}
              for end in (b["first"], b["last"])]
    i = d["init"]
    init = [{"std": std, "head": head, **{v: pick(i["rows"], variant=v, emb_init_std=std, head=head)[0]
                                          for v in NORMS}}
            for std in sorted({r["emb_init_std"] for r in i["rows"]}) for head in ("untied", "tied")]
    s = d["size"]
    fit = [r for r in s["rungs"] if s["plateau_from"] is None or r["rung"] < s["plateau_from"]]
    sizes = [{"rung": rung, "bound": s["plateau_from"] is not None and rung["rung"] >= s["plateau_from"],
              **{v: pick(s["rows"], variant=v, rung=rung["rung"])[0] for v in NORMS}}
             for rung in list({r["rung"]: r for r in (fit[-1:] + s["rungs"][-1:])}.values())]
    return {"budget": budget, "init": init, "sizes": sizes}


def trained_below(d: dict, corpus: str) -> float:
    """The loss `none` must end at or below to count as trained on `corpus`'s split: the count bigram's, less the
    margin of amendment 17 item 7 (10%)."""
    b = d["baselines"]
    return b[corpus]["bigram_nats_per_token"] * (1 - b["trained_margin"])


def with_trained(row: dict, none: float, bound: float) -> dict:
    return {**row, "none_loss": none, "trained": bool(none <= bound)}


def mark_trained(d: dict, w: dict) -> None:
    """Each quoted regime marked trained or not: its `none` against the bigram of its own split."""
    shakespeare, english = trained_below(d, "tinyshakespeare"), trained_below(d, "open_english")
    w["regimes"] = [with_trained(r, r["none_loss"], shakespeare) for r in w["regimes"]]
    w["head"], w["other"] = w["regimes"]
    t = w["table"]
    t["budget"] = [with_trained(x, x["ln"]["none"], shakespeare) for x in t["budget"]]
    t["init"] = [with_trained(x, x["ln"]["none"], shakespeare) for x in t["init"]]
    t["sizes"] = [with_trained(x, x["rung"]["none_loss"], shakespeare) for x in t["sizes"]]
    w["dl"]["rungs"] = [with_trained(r, r["none"], english) for r in w["dl"]["rungs"]]


def advice_words(w: dict) -> dict:
    """The advice's evidence: the adequate-data ladder's trained sizes (each variant tuned, registered). Whether every
    interval there rules out a gain as large as the MEI, the largest gain any interval allows, and each size's word;
    the confidence: *high* where every trained size's test resolves (a direction or equivalence), *moderate* where
    some do not, *none* without a trained size."""
    from ..stats import MEI

    rungs = [r for r in w["dl"]["rungs"] if r["trained"]]
    rows = [r[v] for r in rungs for v in NORMS]
    decided = [effect(x) != "not resolved" for x in rows]
    # the trend over the trained sizes: the fit without the smallest size, where that is the only untrained one
    untrained = [r["rung"] for r in w["dl"]["rungs"] if not r["trained"]]
    trend = [t for t in w["dl"]["trend_without_smallest"] if t["variant"] == "ln"] if untrained == [0] else []
    return {"rungs": rungs, "untrained": [r for r in w["dl"]["rungs"] if not r["trained"]], "mei": MEI,
            "trend": trend[0] if trend else None,
            "gain_ruled_out": bool(rows) and all(x["ci_low"] > -MEI for x in rows),
            "largest_gain": -min(x["ci_low"] for x in rows) if rows else None,
            "costs": [r for r in rungs if effect(r["ln"]) == "costs"],
            "confidence": "none" if not rows else "high" if all(decided) else "moderate"}


def answer_record(d: dict, links: dict) -> dict:
    """What templates/answer.md.j2 fills in: the data (`d`), the words chosen from it (`w`) and the links (`links`:
    computed from the headings of docs/PROTOCOL.md and FINDINGS.md, so none is typed)."""
    from ..stats import MDE_POWER

    reg = d["registered"]
    head, other = reg[REGIMES[0]], reg[REGIMES[1]]
    b = budget_words(d["budget"])
    w = {"hw": headline_words(d), "b": b, "i": init_words(d["init"]), "s": size_words(d["size"]),
         "z": zeroshot_words(d["zeroshot"]), "f": failure_words(d["failures"]), "confidence": confidence_data(d),
         "calibration": calibration_parts(d), "dl": data_ladder_record(d["size"]["data_ladder"]),
         "table": regime_rows(d, b), "head": head, "other": other,
         "ln_head": pick(head["loss"], variant="ln")[0], "rms_head": pick(head["loss"], variant="rms")[0],
         "ln_other": pick(other["loss"], variant="ln")[0],
         "v1_ln": pick(head["zeroshot_v1"], variant="ln")[0],
         "regimes": [reg[r] for r in REGIMES], "power_percent": round(100 * MDE_POWER),
         # per regime, its calibration rows in the order the answer says them (CALIBRATION's, then by variant)
         "calibration_rows": [sorted(reg[r]["calibration"], key=lambda x: (list(CALIBRATION).index(x["metric"]),
                                                                           x["variant"])) for r in REGIMES],
         "calibration_names": {k: v.removeprefix("the ") for k, v in CALIBRATION.items()}}
    mark_trained(d, w)
    # each quoted size's learning curves beside its rung (params, trained) for the words and the figure
    by_rung = {r["rung"]: r for r in w["dl"]["rungs"]}
    w["curves"] = [{**c, "params": by_rung[int(c["preset"].rsplit("-", 1)[1])]["params"],
                    "trained": by_rung[int(c["preset"].rsplit("-", 1)[1])]["trained"]}
                   for c in d.get("curves", []) if int(c["preset"].rsplit("-", 1)[1]) in by_rung]
    w["advice"] = advice_words(w)
    return {"d": d, "w": w, "links": links}
