"""Dataset hooks for the tasks: lm-eval calls load_items(**dataset_kwargs, **metadata) (suite v1), load_items_v2
(suite v2) or load_items_v3 (suite v3, the prose ladder's)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: imported where used, it is slow to load
    import datasets


def _dataset(splits: dict) -> datasets.DatasetDict:
    import datasets

    keep = ("context", "choices", "label")
    return datasets.DatasetDict({split: datasets.Dataset.from_list([{k: it[k] for k in keep} for it in items])
                                 for split, items in splits.items()})


def load_items(task_name: str, data_path: str | None = None, **_) -> datasets.DatasetDict:
    from embnorm_lib.lmtasks.build import verified_suite

    return _dataset(verified_suite(data_path or None)[task_name])


def load_items_v2(task_name: str, data_path: str | None = None, **_) -> datasets.DatasetDict:
    from embnorm_lib.lmtasks.build_v2 import verified_suite

    return _dataset(verified_suite(data_path or None)[task_name])


def load_items_v3(task_name: str, data_path: str | None = None, **_) -> datasets.DatasetDict:
    from embnorm_lib.lmtasks.build_prose import verified_suite

    if not data_path:
        raise ValueError("suite v3 needs the open-prose corpus; allowed: data_path naming its file")
    return _dataset(verified_suite(data_path)[task_name])


def doc_to_text(doc: dict) -> str:
    return doc["context"]


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choices"])


def doc_to_target(doc: dict) -> int:
    return int(doc["label"])
