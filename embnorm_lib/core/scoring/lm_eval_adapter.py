"""Zero/few-shot evaluation of a trained run through lm-evaluation-harness, fully offline.

    python -m embnorm_lib lm-eval STUDY | --run-dir runs/seeds-final/ln/seed0   # a study's unscored runs, or one

`CharLM` is an `lm_eval.api.model.LM` over a run's final weights: character tokenization, left-truncation to the
block size, batched scoring, greedy generation. The Shakespeare suite lives in embnorm_lib/lmtasks (one YAML per
task) and is registered with `TaskManager(include_path=...)`."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

# Some harness code paths touch the Hub unless told not to (lm-eval #2394): set before importing it.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # the harness's per-request bars would flood notebooks and logs

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from ..config import RunConfig, check_name  # noqa: E402
from ..corpora.data import encode_chars, load_corpus  # noqa: E402
from ..errors import ConfigError, RunDirError, entry  # noqa: E402
from ..nets.model import GPT  # noqa: E402
from ..records.io import git_commit, json_text, read_json, runs_root  # noqa: E402
from ..records.rundir import RunDir, finished_run_dirs  # noqa: E402
from ..records.seal import adding_result_file, finish_interrupted  # noqa: E402
from ..records.writes import atomic_write_text  # noqa: E402
from .suites import SHOTS, TASKS, Suite, get_suite, suite_after_training, suites  # noqa: E402,F401

TASK_DIR = Path(__file__).resolve().parents[2] / "lmtasks"
FEWSHOT_SEED = 1234


try:
    from lm_eval.api.model import LM as _LMBase
except ImportError:  # lm-eval is optional for training; CharLM needs it
    _LMBase = object


def padded_batches(rows: list[tuple[list[int], int]], batch_size: int
                   ) -> Iterator[tuple[list[int], list[tuple[list[int], int]], torch.Tensor]]:
    """(request indices, their rows, the inputs right-padded with 0 to the batch's longest) per batch, requests of
    similar length batched together so padding stays small; a causal model's scores never see the padding."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    for i in range(0, len(order), batch_size):
        idx = order[i: i + batch_size]
        batch = [rows[j] for j in idx]
        x = torch.zeros(len(batch), max(len(full) - 1 for full, _ in batch), dtype=torch.long)
        for j, (full, _) in enumerate(batch):
            x[j, : len(full) - 1] = torch.tensor(full[:-1])
        yield idx, batch, x


class CharLM(_LMBase):
    """A character-level GPT behind lm-eval's LM interface."""

    def __init__(self, model: GPT, chars: list[str], batch_size: int = 64, device: str = "cpu"):
        super().__init__()
        self.model = model.to(device).eval()
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.block_size = model.cfg.block_size
        self.batch_size_per_gpu = batch_size
        self.device_name = device
        self.truncated = 0  # requests cut from the left to fit the window

    @classmethod
    def from_run_dir(cls, run_dir: str | Path, data_path=None, **kwargs) -> CharLM:
        """The run's final weights behind the interface its tokenizer needs (SubwordLM for BPE runs)."""
        run = RunDir(Path(run_dir))
        cfg = RunConfig.load(run.config)
        model = GPT(cfg)
        model.load_state_dict(torch.load(run.final_model, map_location="cpu", weights_only=True))
        corpus = load_corpus(data_path, corpus_sha256=cfg.corpus_sha256)
        # on CUDA where the run's device setting allows it (on a GPU machine, CPU scoring took most of a sweep
        # job's time outside training); on the CPU otherwise, as every committed run was scored
        kwargs.setdefault("device", "cuda" if cfg.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
        if cfg.tokenizer == "char":
            return CharLM(model, corpus.chars, **kwargs)
        from ..corpora.tokenizer import recorded_tokenizer
        recorded = read_json(run.summary).get("tokenizer_sha256", "")  # the very file it trained with
        return SubwordLM(model, recorded_tokenizer(cfg.tokenizer, corpus.sha256, recorded, run.root), **kwargs)

    def encode(self, text: str) -> list[int]:
        return encode_chars(self.chars, text)

    def split(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of the context and of the continuation (for characters, each encoded alone)."""
        return self.encode(context), self.encode(continuation)

    def token_text(self, token_id: int) -> str:
        return self.chars[token_id]

    # -- scoring ---------------------------------------------------------------------------------
    def rows(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[list[int], int]]:
        """Each request as (the tokens the model reads and predicts, continuation length): context and continuation
        concatenated and cut from the left to block_size + 1 tokens; an empty context is conditioned on a newline
        (this corpus's record separator)."""
        rows = []
        for ctx, cont in pairs:
            if not cont:
                raise ValueError("empty continuation; allowed: a continuation of at least one character")
            ctx = ctx or [self.stoi["\n"]]
            full = (ctx + cont)[-(self.block_size + 1):]
            if len(ctx) + len(cont) > self.block_size + 1:
                self.truncated += 1
            rows.append((full, len(cont)))
        return rows

    @torch.inference_mode()
    def _score(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """Sum of log P(continuation | context) and whether greedy decoding gives the continuation."""
        rows = self.rows(pairs)
        # batch similar lengths together so padding stays small; answers go back in request order
        results: list = [None] * len(rows)
        for idx, batch, x in padded_batches(rows, self.batch_size_per_gpu):
            logits, _, _ = self.model(x.to(self.device_name))
            logprobs = F.log_softmax(logits.float(), dim=-1).cpu()
            for j, (full, n_cont) in enumerate(batch):
                end = len(full) - 1
                target = torch.tensor(full[-n_cont:])
                lp = logprobs[j, end - n_cont: end]
                results[idx[j]] = (lp.gather(-1, target[:, None]).sum().item(), bool((lp.argmax(-1) == target).all()))
        return results

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        return self._score([self.split(r.args[0], r.args[1]) for r in requests])

    def loglikelihood_rolling(self, requests) -> list[float]:
        """Log-likelihood of whole strings: each window of block_size characters conditions on the one before."""
        out = []
        for r in requests:
            ids = self.encode(r.args[0])
            pairs = []
            for start in range(0, len(ids), self.block_size):
                cont = ids[start: start + self.block_size]
                ctx = ids[max(0, start - self.block_size): start]
                pairs.append((ctx[-(self.block_size + 1 - len(cont)):] if ctx else [], cont))
            out.append(sum(lp for lp, _ in self._score(pairs)))
        return out

    @torch.inference_mode()
    def generate_until(self, requests) -> list[str]:
        """Greedy decoding, one character at a time, until a stop string or max_gen_toks."""
        outputs = []
        for r in requests:
            context, kwargs = r.args[0], dict(r.args[1] if len(r.args) > 1 else {})
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.get("max_gen_toks", 64))
            ids = self.encode(context) or [self.stoi["\n"]]
            text = ""
            for _ in range(max_new):
                logits, _, _ = self.model(torch.tensor([ids[-self.block_size:]], device=self.device_name))
                nxt = int(logits[0, -1].argmax())
                ids.append(nxt)
                text += self.token_text(nxt)
                hit = [s for s in until if s and s in text]
                if hit:
                    text = text[: min(text.index(s) for s in hit)]
                    break
            outputs.append(text)
        return outputs


class SubwordLM(CharLM):
    """A subword (BPE) GPT behind the same interface. A request is encoded whole (context + continuation) and split
    at the context's last character: a token that spans the boundary belongs to the continuation, so the score is
    the log-probability of the tokens the whole string is written with, each conditioned on the tokens before it
    (never a token cut in half, never a tokenization the model did not see in training)."""

    def __init__(self, model: GPT, tokenizer, batch_size: int = 64, device: str = "cpu"):
        super().__init__(model, [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())],
                         batch_size, device)
        self.tokenizer = tokenizer
        self.stoi = {"\n": tokenizer.token_to_id("\n")}  # an empty context is conditioned on a newline

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def split(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        encoding = self.tokenizer.encode(context + continuation)
        first = next(i for i, (_, end) in enumerate(encoding.offsets) if end > len(context))
        return encoding.ids[:first], encoding.ids[first:]

    def token_text(self, token_id: int) -> str:
        return self.chars[token_id].replace("▁", " ")


def fits(block_size: int, shots: int, max_item_chars: int = 31) -> bool:
    """Whether a k-shot prompt (k examples + the query, newline-separated) fits the window."""
    return (shots + 1) * (max_item_chars + 1) <= block_size + 1


@contextlib.contextmanager
def _without_env_report():
    """lm-eval appends an environment report to every result (torch's collect_env: pip, nvidia-smi and other
    subprocesses, about a second per call here and one call per shot count); nothing of it is kept, so skip it."""
    import lm_eval.evaluator

    if not hasattr(lm_eval.evaluator, "add_env_info"):  # a later lm-eval may drop or move it: then nothing to skip
        yield
        return
    with mock.patch.object(lm_eval.evaluator, "add_env_info", lambda storage: None):
        yield


def evaluate_lm(lm: CharLM, shots=None, data_path=None, tasks=None, suite: str = "v1", limit: int | None = None
                ) -> dict:
    """Per task and k: acc, acc_norm and their harness stderr; macro accuracy over tasks per k. For a suite with
    item-level results, also each item's zero/one `acc` in document order (a string of 0 and 1 per task and k).
    `limit` scores only the first items of each task (tests); the suite's own few-shot limit applies otherwise."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    spec = get_suite(suite)
    shots = spec.shots if shots is None else shots
    tasks = spec.tasks if tasks is None else tasks
    if not tasks:
        raise ValueError(f"suite {suite} has no tasks; allowed: a suite frozen by its pilot (lmtasks/pilot.py)")
    # data_path reaches the tasks' loaders through the manager (simple_evaluate's `metadata` is read only without one)
    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False, metadata={"data_path": str(data_path or "")})
    result = {"tasks": {}, "macro": {}, "skipped_shots": []}
    if spec.item_level:  # v1's files keep their committed shape
        result.update(suite=suite, items={})
    t0 = time.perf_counter()
    for k in shots:
        if not fits(lm.block_size, k, spec.max_item_chars):
            result["skipped_shots"].append(k)
            continue
        k_limit = limit if limit is not None else (spec.fewshot_limit if k > 0 else None)
        if k_limit is not None:
            result.setdefault("item_limit", {})[f"{k}shot"] = k_limit
        with _without_env_report():
            out = lm_eval.simple_evaluate(
                model=lm, tasks=list(tasks), num_fewshot=k, task_manager=manager, limit=k_limit, use_cache=None,
                cache_requests=False, log_samples=spec.item_level, random_seed=0, numpy_random_seed=0,
                torch_random_seed=0, fewshot_random_seed=FEWSHOT_SEED, bootstrap_iters=1000,
                verbosity="ERROR")
        accs, norms, ses = [], [], []
        for task in tasks:
            r = out["results"][task]
            entry = {"acc": r["acc,none"], "acc_norm": r["acc_norm,none"],
                     "acc_stderr": r.get("acc_stderr,none"), "acc_norm_stderr": r.get("acc_norm_stderr,none")}
            result["tasks"].setdefault(task, {})[f"{k}shot"] = entry
            if spec.item_level:
                samples = sorted(out["samples"][task], key=lambda sample: sample["doc_id"])
                result["items"].setdefault(task, {})[f"{k}shot"] = "".join(
                    str(int(sample["acc"])) for sample in samples)
            accs.append(entry["acc"])
            norms.append(entry["acc_norm"])
            ses.append(entry["acc_stderr"])
        stderr = (math.sqrt(sum(s ** 2 for s in ses)) / len(ses)
                  if all(isinstance(s, (int, float)) for s in ses) else None)
        result["macro"][f"{k}shot"] = {"acc": sum(accs) / len(accs), "acc_norm": sum(norms) / len(norms),
                                       "acc_stderr": stderr}
    result["seconds"] = time.perf_counter() - t0
    if lm.device_name != "cpu":  # CPU-scored files keep the shape every committed run has
        result["device"] = lm.device_name
    result["truncated_requests"] = lm.truncated
    result["fewshot_random_seed"] = FEWSHOT_SEED
    result["git_commit"] = git_commit()
    return result


def evaluate_run(run_dir: str | Path, data_path=None, shots=None, force: bool = False, suite: str = "v1"
                 ) -> dict | None:
    """Score one finished run's weights; writes the suite's result file (lm_eval.json for v1, lm_eval_v2.json for
    v2), the only files this stage owns (runs.csv picks their scalars up when the study is indexed). None for a
    run that is not finished or diverged."""
    run = RunDir(Path(run_dir))
    target = getattr(run, get_suite(suite).run_file)
    finish_interrupted(run)
    if not run.summary.is_file() or not run.final_model.is_file() or read_json(run.summary).get("diverged"):
        return None
    if target.is_file() and not force:
        return read_json(target)
    result = evaluate_lm(CharLM.from_run_dir(run.root, data_path), shots, data_path, suite=suite)
    write_result(run.root, suite, result)
    return result


def write_result(run_dir: str | Path, suite: str, result: dict) -> Path:
    """A suite's result file in a finished run, which is then sealed again with it (seal.adding_result_file)."""
    run = RunDir(Path(run_dir))
    target = getattr(run, get_suite(suite).run_file)
    with adding_result_file(run, target.name, text := json_text(result)):  # a kill in here resumes on a rerun
        atomic_write_text(target, text)
    return target


def score_if_asked(cfg: RunConfig, run_dir: str | Path, data_path=None) -> dict | None:
    """The stage after training: the run's suite (suite_after_training) when the config asks and the suite's file
    does not exist yet (refused without weights)."""
    run = RunDir(Path(run_dir))
    finish_interrupted(run)
    if not cfg.lm_eval or not run.summary.is_file() or read_json(run.summary).get("diverged"):
        return None
    suite = suite_after_training(cfg)
    target = getattr(run, get_suite(suite).run_file)
    if target.is_file():
        return read_json(target)
    if not run.final_model.is_file():
        raise RunDirError(f"run {run.root} has no {target.name} and no model.pt to score (weights are not "
                          f"committed); allowed: a run with its weights, or retrain it into a fresh directory")
    return evaluate_run(run.root, data_path, suite=suite)


def copy_result(source: Path, target: Path, origin: str) -> dict:
    """A bitwise-identical run's lm_eval.json (same weights, so the same scores), naming the run it came from."""
    write_result(target, "v1", result := {**read_json(RunDir(source).lm_eval), "copied_from": origin})
    return result


def run_dir_argument(text: str, out_dir: str | None = None) -> Path:
    """--run-dir (relative to the working directory, as a shell completes it) resolved, symlinks and '..' included,
    and held to a run directory under the runs directory (--out-dir, else the checkout's runs/): this command writes
    there (lm_eval.json and the run's seal), so a path that leads elsewhere is refused in one line."""
    root = runs_root(out_dir).resolve()
    full = Path(text).expanduser().resolve()
    if not full.is_relative_to(root) or len(full.relative_to(root).parts) < 3:
        raise ConfigError(f"invalid --run-dir {text!r}: it resolves to {full}, not a run directory under {root}; "
                          f"allowed: runs/STUDY/ARM/seedN inside the runs directory (--out-dir names another one)")
    if not RunDir(full).config.is_file():
        raise ConfigError(f"invalid --run-dir {text!r}: {full} holds no run (no config.json); allowed: a run "
                          f"directory under {root}")
    return full


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", nargs="?")
    p.add_argument("--run-dir", default=None)
    p.add_argument("--out-dir", default=None)
    p.add_argument("--data-path", default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--suite", default="v1", choices=("v1", "v2", "v3"), help="v1, v2, v3: lm_eval[_v2|_v3].json")
    args = p.parse_args(argv)
    if args.run_dir:
        result = evaluate_run(run_dir_argument(args.run_dir, args.out_dir), args.data_path, force=args.force,
                              suite=args.suite)
        print(json.dumps(result["macro"] if result else None, indent=2))
        return 0
    if not args.study:
        p.error("give a study or --run-dir")
    try:
        check_name("study", args.study)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    runs = finished_run_dirs(runs_root(args.out_dir) / args.study)
    for run in tqdm(runs, desc=f"lm-eval {args.study}", unit="run"):
        evaluate_run(run.root, args.data_path, force=args.force, suite=args.suite)
    print(f"scored {len(runs)} run(s); `python -m embnorm_lib sweep {args.study} --index-only` adds them to runs.csv")
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))
