"""The top of every study report (issue 71): the study's question, its design and its answer, before any table.

Every report writer (REPORT.md, STABILITY.md, BOUNDARY.md, SCALE.md, BUDGET.md, H1B.md, LENGTH.md, LADDER.md,
LADDER-DATA.md, ZEROSHOT.md) opens its page with `header_lines`. Nothing in it is typed per report: the question and
the registration come from the study registry (`studies.Study.question`, `.status`, `.amendment`) and the heading of
that amendment in docs/PROTOCOL.md; the design (arms, seeds, model, budget, grid) is computed from the registry's
cells; the answer is the lines the writer computed from the runs (its decision or direction words)."""
from __future__ import annotations

import re
import subprocess
from dataclasses import asdict

from ..core.nets.variants import variant_rank
from ..core.records.io import repo_root
from ..runner.registry import STATUSES, STUDIES, Cell, study_cells

PROTOCOL = "docs/PROTOCOL.md"
STATUS_WORDS = {"confirmatory": "**Confirmatory**", "exploratory": "**Exploratory**",
                "tuning": "**Tuning** (chooses a setting a confirmatory study runs at; tests nothing)",
                "smoke": "**Smoke test** (checks the pipeline; tests nothing)"}
assert set(STATUS_WORDS) == set(STATUSES)

# The config fields a design names, in reading order: a field with one value in a group of cells is part of the
# setting, one with several is a grid axis (or, constant within each arm, the arm's own value)
DESIGN_FIELDS = ("n_layer", "n_embd", "block_size", "batch_size", "max_iters", "lr", "grad_clip", "emb_init_std",
                 "tie_embeddings", "precision")
FIELD_NAMES = {"max_iters": "iterations", "lr": "peak LR", "grad_clip": "gradient clipping",
               "emb_init_std": "embedding init std", "tie_embeddings": "output head", "precision": "precision",
               "n_layer": "layers", "n_embd": "width", "block_size": "block", "batch_size": "batch"}


def _value(field: str, value) -> str:
    if field == "max_iters":
        return f"{value:,}"
    if field == "grad_clip":
        return "off" if value == 0 else f"{value:g}"
    if field == "tie_embeddings":
        return "tied" if value else "untied"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _seed_words(seeds: list[int]) -> str:
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{len(seeds)} seeds ({seeds[0]}–{seeds[-1]})"
    return f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''} ({', '.join(map(str, seeds))})"


def _arm_words(arms) -> str:
    return ", ".join(f"`{a}`" for a in sorted(arms, key=variant_rank))


def _group_parts(cells: list[Cell]) -> dict[str, str]:
    """One group's design as labelled parts: the model, each fixed field, each grid axis and each per-arm value."""
    configs = [(c, asdict(c.config())) for c in cells]
    values = {f: sorted({cfg[f] for _, cfg in configs}, key=lambda v: (str(type(v)), v)) for f in DESIGN_FIELDS}
    arms = sorted({c.variant for c in cells}, key=variant_rank)
    per_arm = {f for f in DESIGN_FIELDS if len(values[f]) > 1
               and all(len({cfg[f] for c, cfg in configs if c.variant == v}) == 1 for v in arms)}
    parts = {}
    if len(values["n_layer"]) == len(values["n_embd"]) == 1:
        parts["model"] = f"{values['n_layer'][0]} × {values['n_embd'][0]} model"
    for f in DESIGN_FIELDS:
        if f in ("n_layer", "n_embd") and "model" in parts:
            continue
        if len(values[f]) == 1:
            if not (f == "precision" and values[f][0] == "auto"):  # auto: fp32 on a CPU, the committed runs' case
                parts[f] = f"{FIELD_NAMES[f]} {_value(f, values[f][0])}"
        elif f in per_arm:
            by_arm = {c.variant: cfg[f] for c, cfg in configs}
            parts[f] = f"{FIELD_NAMES[f]} per arm " + ", ".join(f"`{v}` {_value(f, by_arm[v])}" for v in arms)
        else:
            parts[f] = f"{FIELD_NAMES[f]} × {{{', '.join(_value(f, v) for v in values[f])}}}"
    parts["arms"] = f"arms {_arm_words(arms)} × {_seed_words(list({c.seed for c in cells}))}"
    return parts


def design_lines(study: str) -> list[str]:
    """The study's design from its registered cells: what every cell shares on the first line, then one line per
    preset (and tokenizer) with what sets it apart."""
    cells = study_cells(study)
    if not cells:
        return ["no cell registered yet (the study's settings are registered as its earlier runs finish)."]
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.preset, dict(cell.overrides).get("tokenizer", "char")), []).append(cell)
    parts = {key: _group_parts(group) for key, group in groups.items()}
    shared = {k: v for k, v in next(iter(parts.values())).items() if all(p.get(k) == v for p in parts.values())}
    shared_words = ", ".join(v for k, v in shared.items() if k != "arms")
    arms = shared.get("arms") or (f"arms {_arm_words({c.variant for c in cells})} × "
                                  f"{_seed_words(list({c.seed for c in cells}))}")
    names = {key: f"`{key[0]}`" + ("" if key[1] == "char" else f", {key[1]} tokens") for key in groups}
    if len(groups) == 1:
        (key,) = groups
        return [f"Preset {names[key]}: {shared_words}; {arms} = {len(cells)} runs registered."]
    own = {key: ", ".join(v for k, v in p.items() if k not in shared and k != "arms")
           + ("" if "arms" in shared else f"; {p['arms']}") for key, p in parts.items()}
    # arms and seeds on the first line only where every setting has the same ones (else each setting's line says)
    head = f"Every run: {shared_words}; " + (f"{arms}; " if "arms" in shared else "")
    return [f"{head}{len(cells)} runs registered in {len(groups)} settings:", ""] + [
        f"- {names[key]}: {own[key]} ({len(groups[key])} runs)." for key in groups]


def baseline_words(studies: list[str]) -> str:
    """The count baselines of every split the studies' cells train on (docs/baselines.json): how far below them a
    variant ends is how far past counting it is. A split not yet measured is named with the command that measures it."""
    from ..core.corpora.data import CORPUS_SHA256
    from ..tools.baselines import load

    measured = {(e["corpus_sha256"], e["tokenizer"]): e for e in load().values()}
    splits = dict.fromkeys((c.config().corpus_sha256 or CORPUS_SHA256, c.config().tokenizer)
                           for study in studies for c in study_cells(study))
    words = []
    for sha, tokenizer in splits:
        e = measured.get((sha, tokenizer))
        if e is None:
            words.append(f"corpus {sha[:12]} in {tokenizer} tokens: not measured yet (`python -m embnorm_lib "
                         "baselines`)")
            continue
        unit = "nats/char" if tokenizer == "char" else "nats/token"
        per_byte = "" if tokenizer == "char" else (f" ({e['bigram_bits_per_byte']:.3f} and "
                                                    f"{e['unigram_bits_per_byte']:.3f} bits per byte)")
        words.append(f"{e['corpus']}, {'characters' if tokenizer == 'char' else tokenizer + ' tokens'}: count "
                     f"bigram {e['bigram_nats_per_token']:.3f}, unigram {e['unigram_nats_per_token']:.3f} "
                     f"{unit}{per_byte}")
    return ("**Baselines** on the validation split, which a trained model ends well below (docs/baselines.json): "
            + "; ".join(words) + ".")


def amendment_heading(number: int) -> str:
    """The heading of a docs/PROTOCOL.md amendment after its number: '(2026-11-25), committed before any run of …'."""
    path = repo_root() / PROTOCOL
    text = path.read_text() if path.is_file() else ""
    found = re.search(rf"^### Amendment {number} (.+)$", text, flags=re.M)
    if not found:
        raise ValueError(f"amendment {number} has no heading '### Amendment {number} ...' in {PROTOCOL}; "
                         f"allowed: an amendment that the protocol lists")
    return found.group(1).strip()


def status_words(study: str) -> str:
    """How the protocol registers the study: its status and the amendment (with its heading) that did."""
    s = STUDIES[study]
    if s.amendment == 0:

        where = f"{PROTOCOL} as first registered ({protocol_words().split(', last amended')[0].removeprefix('registered ')})"
    else:
        where = f"{PROTOCOL} amendment {s.amendment} {amendment_heading(s.amendment)}"
    return f"{STATUS_WORDS[s.status]}, per {where}"


def header_lines(studies: str | list[str], answer: list[str], question: str = "", status: str = "",
                 pending: str = "") -> list[str]:
    """The opening block of a report on one or more registered studies: Question, Design, Answer (markdown lines).

    `answer`: the writer's computed lines (bullets or sentences); when empty the block says why (`pending`, or that
    the registered runs have not all finished). `question` replaces the registry's (a report on one aspect of a
    study, such as its zero-shot scores); `status` replaces the registration words (ZEROSHOT.md: whether the suite
    is an endpoint of that study)."""
    studies = [studies] if isinstance(studies, str) else list(studies)
    registered = [s for s in studies if s in STUDIES]
    if question or registered:
        lines = [f"**Question.** {question or STUDIES[registered[0]].question}", ""]
    else:
        lines = []
    if not registered:  # an ad-hoc study (a grid given on the command line): no registered design to state
        lines += [f"**Design.** {', '.join(f'`{s}`' for s in studies)} is not in the study registry: no registered "
                  "question, design or status.", ""]
    elif len(registered) == 1:
        first, *rest = design_lines(registered[0])
        lines += [f"**Design.** {status or status_words(registered[0])}. {first}", *rest, ""]
    else:
        lines += ["**Design.**" + (f" {status}." if status else ""), ""]
        for study in registered:
            first, *rest = design_lines(study)
            lines += [f"- `{study}`: {'' if status else status_words(study) + '. '}{first}"]
            lines += [f"  {line}" for line in rest if line]
        lines.append("")
    if registered:
        lines += [baseline_words(registered), ""]
    if not answer:
        return lines + [f"**Answer.** Not yet: {pending or 'the registered runs have not all finished'}.", ""]
    bullets = [a if a.startswith("- ") else f"- {a}" for a in answer]
    return lines + ["**Answer.**", "", *bullets, ""]


def protocol_commits() -> list[str]:
    """Every commit of docs/PROTOCOL.md, oldest first: the registration, then its amendments."""
    try:
        out = subprocess.run(["git", "log", "--reverse", "--format=%H", "--", "docs/PROTOCOL.md"], cwd=repo_root(),
                             capture_output=True, text=True, timeout=10).stdout.split()
    except OSError:
        return []
    return out


def protocol_words() -> str:
    commits = protocol_commits()
    if not commits:
        return "not committed"
    amended = f", last amended at commit {commits[-1][:12]}" if len(commits) > 1 else ""
    return f"registered at commit {commits[0][:12]}{amended}"
