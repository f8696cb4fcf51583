"""Standard zero/few-shot tasks by name for a run trained on token shards, read through the user's own tokenizer.

    python -m embnorm_lib harness --run-dir runs/adhoc/ln/seed0 --tokenizer gpt2/tokenizer.json \
        --tasks hellaswag,lambada_openai,arc_easy,arc_challenge,piqa,winogrande [--shots 0] [--limit N]
    python -m embnorm_lib harness ... --tokenizer tiktoken:gpt2            # needs `pip install tiktoken`
    python -m embnorm_lib harness ... --include-path my_tasks/ --tasks my_task   # a task of your own (lm-eval YAML)

A shards run knows token ids only; the text of a task reaches it through the tokenizer that wrote the shards: a
Hugging Face `tokenizer.json` (the `tokenizers` package the project installs) or a tiktoken encoding (optional,
imported only when named). Each request is encoded whole and split where the context ends (lm_eval_adapter's
SubwordLM), so a continuation is scored with the tokens the whole string is written with. The per-task accuracy is
the metric the plan's macro average takes (acc_norm for hellaswag and arc_challenge, acc otherwise); the result is
<run>/harness.json, sealed into the finished run like the Shakespeare suites' files. Tasks are looked up in
`--include-path` first; lm-eval's own catalogue (~15k tasks, ~20 s to index) only when a task is not there."""
from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, entry
from .lm_eval_adapter import FEWSHOT_SEED, SubwordLM, _without_env_report  # also sets the offline switches first

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager

HARNESS_FILE = "harness.json"
PLAN_METRIC = {"hellaswag": "acc_norm", "arc_challenge": "acc_norm"}  # the others: acc
LOGIT_BYTES = 2 ** 30  # one scoring batch's float32 log-probabilities stay under this (vocab 50,304 x 1,024: 5 rows)
FORMS = "allowed: a Hugging Face tokenizer.json path, or tiktoken:<encoding> (e.g. tiktoken:gpt2)"


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    offsets: list[tuple[int, int]]  # each token's characters in the text: [start, end)


class UserTokenizer:
    """The user's tokenizer behind the calls SubwordLM makes: encode (ids and character offsets), id_to_token,
    get_vocab_size, token_to_id (a string that is one token), and decode for generation."""

    def __init__(self, spec: str):
        self.spec, self._hf, self._tiktoken = spec, None, None
        if spec.startswith("tiktoken:"):
            self._tiktoken = _tiktoken_encoding(spec.split(":", 1)[1])
            return
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"invalid --tokenizer {spec}: no such file; {FORMS}")
        from tokenizers import Tokenizer

        try:
            self._hf = Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust parser's own message, shortened to its first line
            raise ConfigError(f"invalid --tokenizer {spec}: not a tokenizer.json ({str(e).splitlines()[0][:120]}); "
                              f"{FORMS}") from None

    def encode(self, text: str) -> Encoding:
        if self._hf is not None:
            encoding = self._hf.encode(text, add_special_tokens=False)
            return Encoding(list(encoding.ids), [tuple(o) for o in encoding.offsets])
        ids = self._tiktoken.encode_ordinary(text)
        _, starts = self._tiktoken.decode_with_offsets(ids)
        return Encoding(ids, list(zip(starts, [*starts[1:], len(text)], strict=True)))

    def get_vocab_size(self) -> int:
        return self._hf.get_vocab_size() if self._hf is not None else self._tiktoken.n_vocab

    def id_to_token(self, token_id: int) -> str:
        return self.decode([token_id])

    def token_to_id(self, text: str) -> int | None:
        ids = self.encode(text).ids
        return ids[0] if len(ids) == 1 else None

    def decode(self, ids: list[int]) -> str:
        if self._hf is not None:
            return self._hf.decode(ids)
        return self._tiktoken.decode_bytes(ids).decode("utf-8", errors="replace")


def _tiktoken_encoding(name: str):
    try:
        import tiktoken
    except ImportError:
        raise ConfigError(f"invalid --tokenizer tiktoken:{name}: the tiktoken package is not installed; allowed: "
                          "`pip install tiktoken`, or a Hugging Face tokenizer.json path") from None
    try:
        return tiktoken.get_encoding(name)
    except ValueError:
        raise ConfigError(f"unknown tiktoken encoding {name!r}; allowed: "
                          f"{', '.join(tiktoken.list_encoding_names())}") from None


class HarnessLM(SubwordLM):
    """A run's final weights read through the user's tokenizer. Generated text is decoded by that tokenizer (byte-
    level tokens are not text), and a newline conditions an empty context as in the project's own suites."""

    def __init__(self, model, tokenizer: UserTokenizer, batch_size: int = 0, device: str = "cpu"):
        vocab = model.cfg.vocab_size
        if tokenizer.get_vocab_size() > vocab:
            raise ConfigError(f"invalid --tokenizer {tokenizer.spec}: {tokenizer.get_vocab_size():,} tokens, but the "
                              f"run was trained with vocab_size={vocab:,}; allowed: the tokenizer its shards were "
                              "written with")
        rows = max(1, LOGIT_BYTES // (4 * vocab * model.cfg.block_size))
        super().__init__(model, tokenizer, batch_size or min(64, rows), device)
        self.stoi = {"\n": tokenizer.encode("\n").ids[0]}

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])


def load_harness_lm(run_dir: str | Path, tokenizer: str, device: str = "") -> HarnessLM:
    """A finished run's final weights behind lm-eval's interface, read through `tokenizer`."""
    import torch

    from ..config import RunConfig
    from ..nets.model import GPT
    from ..records.rundir import RunDir

    run = RunDir(Path(run_dir))
    if not run.final_model.is_file():
        raise ConfigError(f"invalid --run-dir {run_dir}: no final weights (final_model.pt); allowed: a finished run")
    cfg = RunConfig.load(run.config)
    model = GPT(cfg)
    model.load_state_dict(torch.load(run.final_model, map_location="cpu", weights_only=True))
    device = device or ("cuda" if cfg.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    return HarnessLM(model, UserTokenizer(tokenizer), device=device)


def task_manager(tasks: list[str], include_path: str | Path | None = None) -> TaskManager:
    """lm-eval's task index: the user's folder alone when it holds every task asked for, else with lm-eval's own
    catalogue; an unknown task is refused in one line with the closest names."""
    from lm_eval.tasks import TaskManager

    manager = None
    if include_path is not None:
        if not Path(include_path).is_dir():
            raise ConfigError(f"invalid --include-path {include_path}: not a folder; allowed: a folder of lm-eval "
                              "task YAML files")
        manager = TaskManager(include_path=str(include_path), include_defaults=False)
    if manager is None or any(t not in manager.all_tasks for t in tasks):
        manager = TaskManager(include_path=str(include_path) if include_path else None)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        close = difflib.get_close_matches(unknown[0], manager.all_tasks, n=3)
        raise ConfigError(f"unknown task {unknown[0]!r}; allowed: an lm-eval task name"
                          + (f" (closest: {', '.join(close)})" if close else "") + " or a task of --include-path")
    return manager


def score(lm: HarnessLM, tasks: list[str], shots: int = 0, include_path=None, limit: int | None = None) -> dict:
    """Each task's plan metric (and acc, acc_norm where the task reports them) and their macro mean."""
    import lm_eval

    manager = task_manager(tasks, include_path)
    with _without_env_report():
        out = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), num_fewshot=shots, task_manager=manager,
                                      limit=limit, use_cache=None, cache_requests=False, random_seed=0,
                                      numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=FEWSHOT_SEED,
                                      bootstrap_iters=0, verbosity="ERROR")
    per_task = {}
    for task in tasks:
        reported = out["results"][task]
        metric = PLAN_METRIC.get(task, "acc")
        per_task[task] = {"metric": metric, "value": reported[f"{metric},none"],
                          **{m: reported[f"{m},none"] for m in ("acc", "acc_norm") if f"{m},none" in reported}}
    values = [t["value"] for t in per_task.values()]
    return {"tasks": per_task, "macro": sum(values) / len(values), "shots": shots, "limit": limit,
            "tokenizer": lm.tokenizer.spec, "truncated_requests": lm.truncated}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="embnorm_lib harness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", required=True, help="a finished run (its final_model.pt)")
    p.add_argument("--tokenizer", required=True, help="tokenizer.json path, or tiktoken:<encoding>")
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    p.add_argument("--shots", type=int, default=0)
    p.add_argument("--include-path", default=None, help="a folder of your own lm-eval task YAML files")
    p.add_argument("--limit", type=int, default=None, help="score only the first N items of each task (a check)")
    args = p.parse_args(argv)
    from ..records.io import json_text
    from ..records.rundir import RunDir
    from ..records.seal import adding_result_file, finish_interrupted
    from ..records.writes import atomic_write_text

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks or args.shots < 0 or (args.limit is not None and args.limit < 1):
        raise ConfigError(f"invalid --tasks {args.tasks!r} / --shots {args.shots} / --limit {args.limit}; allowed: "
                          "one task name or more, shots >= 0, limit >= 1")
    run = RunDir(Path(args.run_dir))
    finish_interrupted(run)  # a kill during an earlier result's seal is completed first
    result = score(load_harness_lm(args.run_dir, args.tokenizer), tasks, args.shots, args.include_path, args.limit)
    target = run.root / HARNESS_FILE
    with adding_result_file(run, target.name, text := json_text(result)):
        atomic_write_text(target, text)
    for task, r in result["tasks"].items():
        print(f"{task}: {r['metric']} {r['value']:.4f}")
    print(f"macro ({len(tasks)} tasks, {args.shots}-shot): {result['macro']:.4f} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
