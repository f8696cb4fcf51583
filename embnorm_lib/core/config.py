"""Every knob of one training run, validated on construction, round-tripped through JSON."""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .corpora.tokenizer import check_tokenizer
from .errors import ConfigError
from .nets.variants import canonical_variant
from .presets import (  # noqa: F401 (re-exported: callers look presets and the ladder's rules up in config)
    DEFAULT_PRESET,
    LADDER_EPOCH_CAP,
    LADDER_MIN_ITERS,
    LADDER_RUNGS,
    LADDER_TOKENS_PER_ITER,
    LADDER_TOKENS_PER_PARAM,
    PRESETS,
    TRAIN_CHARS_TINY_SHAKESPEARE,
    ladder_iters,
    non_embedding_params,
)
from .records.io import read_json

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
EXECUTIONS = ("single", "fleet")
MAX_SEED = 2**32 - 1  # numpy's seed range; torch and Python accept it too
DEVICES = ("auto", "cpu", "cuda", "mps")
HEAD_INITS = ("normal", "zero")


@dataclass
class RunConfig:
    # what the study varies
    variant: str = "none"
    seed: int = 0
    # model (GPT-2 style, Pre-LN)
    n_layer: int = 8
    n_head: int = 8
    n_embd: int = 128
    block_size: int = 128
    vocab_size: int = 65
    tokenizer: str = "char"  # tokenizer.py's registry: char | bpe-512 | bpe-4096 | bytebpe-4096 | shards
    corpus_sha256: str = ""  # "": tiny Shakespeare; else the sha256 of a UTF-8 text file of your own (give data_path)
    # where the training split ends, in characters (0: the first 90%); a corpus split by document (opencorpus.py)
    # puts its validation documents last and records this point
    train_chars: int = 0
    dropout: float = 0.0
    bias: bool = True
    init_std: float = 0.02
    emb_init_std: float = 0.02  # token and position embeddings; PyTorch's nn.Embedding default is 1.0
    tie_embeddings: bool = True  # False: an output head of its own, N(0, init_std), not the token embedding
    head_init: str = "normal"  # an untied head's init: normal, N(0, init_std); zero (modded-nanogpt's speedrun)
    # optimisation (AdamW, linear warmup then cosine decay to min_lr)
    batch_size: int = 16  # global batch: per-rank micro-batch x world size x grad_accum
    grad_accum: int = 1
    max_iters: int = 300
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup_frac: float = 0.1
    weight_decay: float = 0.1
    # The token and position tables' own decay; None: weight_decay, as for every matrix (nanoGPT decays them; minGPT
    # does not). A tied head is the token table, so it follows this too.
    emb_weight_decay: float | None = None
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping
    # evaluation and bookkeeping
    eval_interval: int = 50  # full-validation pass every this many steps (and always at the end)
    eval_at_init: bool = True
    eval_windows: int = 0  # 0: score the whole validation split (every study preset); N: N evenly spaced windows
    # Evaluations before the last (init included) score only this many of those windows, evenly spaced (0: all of
    # them, as every committed run did): the learning curve on a fixed subset; the final metrics use every window.
    interim_eval_windows: int = 0
    checkpoint_interval: int = 50
    # diagnostics (see diagnostics.py); 0 disables the interval-controlled probes
    diag_interval: int = 25
    spike_factor: float = 1.5
    spike_window: int = 20
    lm_eval: bool = False  # zero/few-shot suite through lm-evaluation-harness at the end of the run
    # execution
    device: str = "auto"
    precision: str = "auto"
    compile: bool | str = "auto"  # auto: torch.compile on CUDA for large models only (device.resolve_compile)
    torch_threads: int = 0  # 0 leaves torch's default
    # single: one run per process; fleet: trained with the other runs of its shape as one batched fleet (fleet.py).
    # Like the thread count, it is how a run was computed, not what it is: fleet numbers match single ones to float
    # rounding, not bit for bit, so a checkpoint is resumed in its own mode only and finished runs are reused for
    # their own mode only. Runs written before this field existed are single runs. (A third mode, packed seeds of
    # one config, was retired with packed.py: no committed run used it.)
    execution: str = "single"
    preset: str = ""

    def __post_init__(self) -> None:
        self.variant = canonical_variant(self.variant)
        _check(isinstance(self.seed, int) and not isinstance(self.seed, bool) and 0 <= self.seed <= MAX_SEED,
               "seed", self.seed, f"an integer in [0, {MAX_SEED}]")
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "batch_size", "max_iters", "grad_accum"):
            value = getattr(self, name)
            _check(isinstance(value, int) and not isinstance(value, bool) and value > 0, name, value,
                   "an integer > 0")
        _check(self.n_embd % self.n_head == 0, "n_embd", self.n_embd,
               f"a multiple of n_head={self.n_head}")
        for name in ("lr", "init_std", "emb_init_std"):
            _check(_num(getattr(self, name)) and getattr(self, name) > 0, name, getattr(self, name), "a number > 0")
        for name in ("warmup_frac", "min_lr_ratio"):
            v = getattr(self, name)
            _check(_num(v) and 0 <= v <= 1, name, v, "a number in [0, 1]")
        _check(_num(self.dropout) and 0 <= self.dropout < 1, "dropout", self.dropout, "a number in [0, 1)")
        for name in ("weight_decay", "grad_clip"):
            _check(_num(getattr(self, name)) and getattr(self, name) >= 0, name, getattr(self, name), "a number >= 0")
        _check(self.emb_weight_decay is None or (_num(self.emb_weight_decay) and self.emb_weight_decay >= 0),
               "emb_weight_decay", self.emb_weight_decay, "null (weight_decay's value) or a number >= 0")
        for name in ("beta1", "beta2"):
            _check(_num(getattr(self, name)) and 0 <= getattr(self, name) < 1, name, getattr(self, name),
                   "a number in [0, 1)")
        for name in ("eval_interval", "checkpoint_interval", "diag_interval", "torch_threads", "spike_window",
                     "eval_windows", "interim_eval_windows", "train_chars"):
            v = getattr(self, name)
            _check(isinstance(v, int) and not isinstance(v, bool) and v >= 0, name, v, "an integer >= 0")
        _check(_num(self.spike_factor) and self.spike_factor > 1, "spike_factor", self.spike_factor, "a number > 1")
        _check(self.precision in PRECISIONS, "precision", self.precision, ", ".join(PRECISIONS))
        _check(self.execution in EXECUTIONS, "execution", self.execution, ", ".join(EXECUTIONS))
        check_tokenizer(self.tokenizer)
        _check(self.corpus_sha256 == "" or (isinstance(self.corpus_sha256, str) and len(self.corpus_sha256) == 64
                                            and all(c in "0123456789abcdef" for c in self.corpus_sha256)),
               "corpus_sha256", self.corpus_sha256, '"" (tiny Shakespeare) or a 64-character lowercase hex sha256')
        _check(self.tokenizer != "shards" or self.corpus_sha256 != "", "corpus_sha256", self.corpus_sha256,
               "the shard set's sha256 with tokenizer=shards (`run --data-path DIR` records it; `python -m "
               "embnorm_lib shards DIR` prints it)")
        _check(not (self.lm_eval and self.corpus_sha256 and self.corpus_sha256 != prose_suite_corpus()),
               "lm_eval", self.lm_eval, "false with a corpus of your own (suites v1 and v2 are built from "
               "Shakespeare's plays, v3 from the open-prose corpus's validation documents)")
        _check(self.head_init in HEAD_INITS, "head_init", self.head_init, ", ".join(HEAD_INITS))
        _check(not (self.head_init == "zero" and self.tie_embeddings), "head_init", self.head_init,
               "normal with tie_embeddings=true (a tied head is the token embedding)")
        _check(self.device in DEVICES, "device", self.device, ", ".join(DEVICES))
        _check(self.compile in (True, False, "auto"), "compile", self.compile, "true, false, auto")
        for name in ("bias", "tie_embeddings", "eval_at_init", "lm_eval"):
            _check(isinstance(getattr(self, name), bool), name, getattr(self, name), "true or false")

    # -- derived quantities ------------------------------------------------------------
    @property
    def tokens_per_iter(self) -> int:
        return self.batch_size * self.block_size

    @property
    def token_budget(self) -> int:
        return self.max_iters * self.tokens_per_iter

    @property
    def warmup_iters(self) -> int:
        return round(self.warmup_frac * self.max_iters)

    # -- serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        data = read_json(path)
        if not isinstance(data, dict):
            raise ConfigError(f"invalid config file {path}; allowed: a JSON object of config fields")
        return cls.from_dict(data)

    def replace(self, **changes: Any) -> RunConfig:
        return RunConfig.from_dict({**self.to_dict(), **changes})

    def training_identity(self) -> dict[str, Any]:
        """The fields that must match for a checkpoint to be resumed (execution knobs may differ)."""
        d = self.to_dict()
        for knob in ("device", "compile", "torch_threads", "preset", "checkpoint_interval", "lm_eval", "grad_accum",
                     "execution"):
            d.pop(knob)
        return d


def prose_suite_corpus() -> str:
    """The sha256 of the corpus suite v3 is drawn from (lmtasks/manifest_v3.json); read only when a run asks to be
    scored on a corpus of its own."""
    from ..lmtasks.build_prose import corpus_sha256

    return corpus_sha256()


def _num(v: Any) -> bool:
    """A finite real number (not a bool): inf and nan are refused, not recorded as a divergence."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"invalid {name}={value!r}; allowed: {allowed}")


def check_name(kind: str, value: Any, allow_empty: bool = False) -> str:
    """A study name or run tag becomes a path component: no separators, no '..', no leading dot."""
    # whitespace and control characters are refused too: a newline in a directory name breaks every line-based
    # listing of runs (runs.csv's paths, `git status`, the sweep's lines)
    ok = isinstance(value, str) and (value or allow_empty) and not any(
        (sep in value) for sep in ("/", "\\", "\0")) and ".." not in value and not value.startswith(".") and (
        value.isprintable() and not any(c.isspace() for c in value))
    _check(bool(ok), kind, value, "a name without '/', '\\', '..', spaces, control characters or a leading dot"
           + (" (or empty)" if allow_empty else ""))
    return value


def preset_config(preset: str, **overrides: Any) -> RunConfig:
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
    return RunConfig.from_dict({**PRESETS[preset], "preset": preset, **overrides})
