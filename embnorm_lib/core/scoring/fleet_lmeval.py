"""Zero/few-shot scoring of many finished runs at once (issue 75): one batched forward per request batch serves
every member, and the harness then runs per member on those scores.

lm-evaluation-harness asks an LM for the log-likelihoods of all a suite's requests in one call. Runs that share
tensor shapes are stacked as a fleet (fleet.py's layout and forward) and a `SharedScores` scores each distinct
request list for all of them in one pass; a `MemberLM` is a `CharLM` that answers its harness run from that
pass. So the harness, its task files, few-shot sampling and metrics are untouched and each run's result file has
the shape a single run's has; only the forward is shared. Scores follow the single runs' to float rounding
(batched matmuls sum in another order), so an item's answer can differ only on a near tie; the test compares
per-item answers with the harness on each run alone.

    python -m embnorm_lib.core.scoring.fleet_lmeval RUN_DIR [RUN_DIR ...] [--suite v2]"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.nn import functional as F

from ..config import RunConfig
from ..corpora.data import load_corpus
from ..errors import ConfigError, entry
from ..nets.model import GPT
from ..nets.variants import get_variant, variant_rank
from ..records.io import read_json
from ..records.rundir import RunDir
from ..training.fleet_ops import ArmNorm, Members, groups_of, shapes_by_name, slot_key
from ..training.fleet_ops import fleet_forward as _forward
from .lm_eval_adapter import CharLM, evaluate_lm, get_suite, padded_batches, write_result


def stack_members(cfgs: Sequence[RunConfig], states: Sequence[dict]) -> tuple[dict, Members, list[int]]:
    """The finished weights of runs of one shape as fleet parameters ([K, ...] per name, arms contiguous), their
    per-member constants and the fleet order (member k is run order[k]). A norm parameter that a member's arm
    lacks holds a placeholder that no segment of that arm reads."""
    order = sorted(range(len(cfgs)), key=lambda i: variant_rank(cfgs[i].variant))
    shapes = shapes_by_name((n, t.shape) for i in order for n, t in states[i].items())
    keyed = [{slot_key(n, tuple(t.shape), shapes): t for n, t in states[i].items()} for i in order]
    keys = list(dict.fromkeys(k for state in keyed for k in state))
    like = {k: next(state[k] for state in keyed if k in state) for k in keys}
    w = {k: torch.stack([state[k] if k in state else torch.zeros_like(like[k]) for state in keyed]).float()
         for k in keys}
    norms = [ArmNorm.of(cfgs[i].variant, cfgs[i].bias,
                        lambda n, i=i: slot_key(n, tuple(states[i][n].shape), shapes)) for i in order]
    scales = [get_variant(cfgs[i].variant).token_scale(cfgs[i].n_embd, cfgs[i].emb_init_std) for i in order]
    return w, Members.build(norms, torch.tensor(scales, dtype=torch.float32)), order


class SharedScores:
    """Every member's (log P(continuation | context), greedy match) for a request list, computed once per distinct
    list in batched forwards, as CharLM._score pads and batches them."""

    def __init__(self, w: dict, members: Members, cfg: RunConfig, batch_size: int = 64, device: str = "cpu"):
        self.w = {n: t.to(device) for n, t in w.items()}
        self.members = Members.build(members.norms, members.token_scale.to(device))
        self.cfg, self.batch_size, self.device = cfg, batch_size, device
        self.K = len(members.norms)
        self.cache: dict[tuple, list[list[tuple[float, bool]]]] = {}

    def scores(self, rows: list[tuple[list[int], int]]) -> list[list[tuple[float, bool]]]:
        key = tuple((tuple(full), n) for full, n in rows)
        if key not in self.cache:
            self.cache = {key: self._score_all(rows)}  # the harness asks once per suite and shot count
        return self.cache[key]

    @torch.inference_mode()
    def _score_all(self, rows: list[tuple[list[int], int]]) -> list[list[tuple[float, bool]]]:
        results: list[list] = [[None] * len(rows) for _ in range(self.K)]
        for idx, batch, x in padded_batches(rows, self.batch_size):
            width = x.shape[1]
            x = x.to(self.device).unsqueeze(0).expand(self.K, -1, -1)
            logits, _, _ = _forward(self.w, self.members, self.cfg, x)
            logprobs = F.log_softmax(logits.float(), dim=-1).view(self.K, len(batch), width, -1).cpu()
            for j, (full, n_cont) in enumerate(batch):
                end = len(full) - 1
                target = torch.tensor(full[-n_cont:])
                lp = logprobs[:, j, end - n_cont: end]  # (K, n_cont, V)
                picked = lp.gather(-1, target.expand(self.K, -1)[..., None]).squeeze(-1).sum(-1)
                greedy = (lp.argmax(-1) == target).all(-1)
                for k in range(self.K):
                    results[k][idx[j]] = (picked[k].item(), bool(greedy[k]))
        return results


class MemberLM(CharLM):
    """One member of a SharedScores behind the harness: its log-likelihoods come from the shared pass; greedy
    generation (no suite uses it) runs the member's own model."""

    def __init__(self, shared: SharedScores, k: int, model: GPT, chars: list[str]):
        super().__init__(model, chars, batch_size=shared.batch_size, device=shared.device)
        self.shared, self.k = shared, k

    def _score(self, pairs):
        return self.shared.scores(self.rows(pairs))[self.k]


def score_runs(run_dirs: Sequence[str | Path], suite: str = "v1", data_path=None, batch_size: int = 64,
               device: str = "cpu", limit: int | None = None) -> list[dict]:
    """Each finished, non-diverged character-level run's suite, scored with one shared forward per shape group;
    writes each run's result file (and reseals it) as evaluate_run does. Returns the results in run order."""
    runs = [RunDir(Path(d)) for d in run_dirs]
    for run in runs:
        if not run.summary.is_file() or not run.final_model.is_file() or read_json(run.summary).get("diverged"):
            raise ConfigError(f"invalid run {run.root} to score: it needs summary.json, model.pt and no divergence; "
                              f"allowed: finished, non-diverged runs with their weights")
    cfgs = [RunConfig.load(run.config) for run in runs]
    bad = next((c for c in cfgs if c.tokenizer != "char"), None)
    if bad is not None:
        raise ConfigError(f"invalid tokenizer={bad.tokenizer!r} for shared scoring; allowed: char (score subword "
                          f"runs one by one with embnorm_lib.core.scoring.lm_eval_adapter)")
    results: list[dict | None] = [None] * len(runs)
    for group in groups_of(cfgs):
        states = [torch.load(runs[i].final_model, map_location="cpu", weights_only=True) for i in group]
        group_cfgs = [cfgs[i] for i in group]
        w, members, order = stack_members(group_cfgs, states)
        shared = SharedScores(w, members, group_cfgs[0], batch_size, device)
        corpus = load_corpus(data_path, corpus_sha256=group_cfgs[0].corpus_sha256)
        for k, position in enumerate(order):
            i = group[position]
            model = GPT(cfgs[i])
            model.load_state_dict(states[position])
            result = evaluate_lm(MemberLM(shared, k, model, corpus.chars), data_path=data_path, suite=suite,
                                 limit=limit)
            if limit is None:
                write_result(runs[i].root, suite, result)
            results[i] = result
    return results


def score_if_asked(cfgs: Sequence[RunConfig], run_dirs: Sequence[str | Path], data_path=None) -> None:
    """The stage after a fleet trains: lm_eval_adapter.score_if_asked for every run, with the character-level runs
    that ask for the suite and lack its file scored together."""
    from .lm_eval_adapter import score_if_asked as score_one

    shared = []
    for cfg, run_dir in zip(cfgs, run_dirs, strict=True):
        run = RunDir(Path(run_dir))
        if (cfg.lm_eval and cfg.tokenizer == "char" and run.summary.is_file() and run.final_model.is_file()
                and not run.lm_eval.is_file() and not read_json(run.summary).get("diverged")):
            shared.append(run.root)
        else:
            score_one(cfg, run_dir, data_path)
    if shared:
        cuda = all(c.device in ("auto", "cuda") for c in cfgs) and torch.cuda.is_available()
        score_runs(shared, "v1", data_path, device="cuda" if cuda else "cpu")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", help="finished character-level run directories")
    parser.add_argument("--suite", default="v1", help="the zero-shot suite (v1, v2; see lm_eval_adapter)")
    parser.add_argument("--data-path", default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    get_suite(args.suite)
    for run_dir, result in zip(args.run_dirs, score_runs(args.run_dirs, args.suite, args.data_path,
                                                          device=args.device), strict=True):
        print(f"{run_dir}: macro 0-shot acc {result['macro']['0shot']['acc']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(entry(main))
