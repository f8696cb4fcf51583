"""The zero/few-shot suites a run can be scored on, as a registry (lm_eval_adapter scores them): v1 and v2 from tiny
Shakespeare's validation split, v3 from the open-prose corpus's; which one a run that asks gets after training."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import RunConfig, prose_suite_corpus

TASKS = ["shakespeare_word_cloze", "shakespeare_shuffled", "shakespeare_next_line", "shakespeare_next_speaker"]
SHOTS = (0, 1, 3)


@dataclass(frozen=True)
class Suite:
    """A task suite: lm-eval tasks, shots, longest item, its run file (rundir.RunDir); v2, v3 keep item results."""
    name: str
    tasks: tuple[str, ...]
    shots: tuple[int, ...]
    max_item_chars: int
    run_file: str  # the RunDir attribute naming its results file
    item_level: bool
    fewshot_limit: int | None = None  # few-shot on the first N items of each task only (exploratory; cost)


def suites() -> dict[str, Suite]:
    """v1: the committed studies' suite (100 items per task); v2 (issue 17): thousands of items per task, the
    tasks a pilot kept (lmtasks/manifest_v2.json); v3: the open-prose suite, its item bound in tokens (zero-shot)."""
    from ...lmtasks import build_prose, build_v2

    return {"v1": Suite("v1", tuple(TASKS), SHOTS, 31, "lm_eval", False),
            "v2": Suite("v2", tuple(f"shakespeare2_{t}" for t in build_v2.frozen_tasks()), (0, 1),
                        build_v2.MAX_ITEM_CHARS, "lm_eval_v2", True, fewshot_limit=500),
            "v3": Suite("v3", tuple(f"prose3_{t}" for t in build_prose.frozen_tasks()), (0,),
                        build_prose.MAX_ITEM_TOKENS - 1, "lm_eval_v3", True)}


def get_suite(name: str) -> Suite:
    known = suites()
    if name not in known:
        raise ValueError(f"unknown suite {name!r}; allowed: {', '.join(known)}")
    return known[name]


def suite_after_training(cfg: RunConfig) -> str:
    """The suite a run that asks for one is scored on after training: v3 on the open-prose corpus its items come
    from, v1 on tiny Shakespeare (the committed studies'); config.py refuses lm_eval on any other corpus."""
    return "v3" if cfg.corpus_sha256 and cfg.corpus_sha256 == prose_suite_corpus() else "v1"
