"""Dataset hook for the Shakespeare tasks: lm-eval calls load_items(**dataset_kwargs, **metadata)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: imported where used, it is slow to load
    import datasets


def load_items(task_name: str, data_path: str | None = None, **_) -> datasets.DatasetDict:
    import datasets

    from embnorm_lib.lmtasks.build import verified_suite

    suite = verified_suite(data_path or None)[task_name]
    keep = ("context", "choices", "label")
    return datasets.DatasetDict({split: datasets.Dataset.from_list([{k: it[k] for k in keep} for it in items])
                                 for split, items in suite.items()})


def doc_to_text(doc: dict) -> str:
    return doc["context"]


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choices"])


def doc_to_target(doc: dict) -> int:
    return int(doc["label"])
