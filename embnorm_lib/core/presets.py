"""Named starting points: a preset fixes the model, the optimiser and the budget; variant and seed stay free.
The size ladders' presets follow their registered rules (shapes, tokens per parameter, pass caps)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .records.io import repo_root

DEFAULT_PRESET = "seeds-final"  # what a command trains when given no preset: the seed study's final plan

# Named starting points. A preset fixes the model and optimiser; variant and seed stay free.
PRESETS: dict[str, dict[str, Any]] = {
    # The seed study's preliminary protocol: 8 layers x 128, block 128, batch 16, AdamW 3e-4, 150 its.
    "seeds-prelim": dict(n_layer=8, n_head=8, n_embd=128, block_size=128, batch_size=16, lr=3e-4,
                         max_iters=150, eval_interval=50, checkpoint_interval=50),
    # The seed study's final plan: the same model at 300 iterations.
    "seeds-final": dict(n_layer=8, n_head=8, n_embd=128, block_size=128, batch_size=16, lr=3e-4,
                        max_iters=300, eval_interval=50, checkpoint_interval=50),
    # nanoGPT's CPU recipe for char-level Shakespeare (README "I only have a macbook");
    # beta2 0.99 and warmup 100/2000 follow its shakespeare_char config.
    "nanogpt-cpu": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, lr=1e-3,
                        max_iters=2000, dropout=0.0, beta2=0.99, warmup_frac=0.05,
                        eval_interval=250, checkpoint_interval=250, diag_interval=100),
    # Stress regime: twice as deep, a high learning rate and no warmup, where a baseline may spike or diverge.
    "stress-deep": dict(n_layer=16, n_head=8, n_embd=128, block_size=128, batch_size=16, lr=1e-2,
                        warmup_frac=0.0, max_iters=150, eval_interval=50, checkpoint_interval=50),
    # GPT-2 small shape (12 x 768, block 1024): GPU only; bf16/fp16 and torch.compile come on by themselves
    # on CUDA. Global batch 64 x 1024 tokens, reached with grad_accum on smaller cards.
    "gpt-small": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, batch_size=64, grad_accum=8, lr=6e-4,
                      max_iters=5000, dropout=0.0, eval_interval=500, checkpoint_interval=250, diag_interval=100),
    # A few iterations of a tiny model: for tests and smoke runs.
    "tiny": dict(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, lr=1e-3,
                 max_iters=20, eval_interval=10, checkpoint_interval=10, diag_interval=5,
                 eval_windows=64),  # tests and smoke runs: a 2,048-character evaluation budget
}


# GPT-2 small as nanoGPT trains it (issue 115; its config/train_gpt2.py and train.py), for token shards
# (`--data-path DIR`, shards.py): 12 x 768, block 1024, no biases, no dropout, vocabulary 50,304 (GPT-2's 50,257
# padded to a multiple of 64), a global batch of 480 x 1024 = 491,520 tokens (nanoGPT: 12 per micro-batch x 5
# accumulation steps x 8 GPUs; here grad_accum 40 on one GPU, `--set grad_accum=5` under torchrun on 8), AdamW
# 6e-4 with betas (0.9, 0.95) and weight decay 0.1, clipping at 1.0, 2,000 warm-up steps then cosine to 6e-5 over
# 600,000 steps (~295B tokens). Evaluation on 200 x 12 = 2,400 windows, as nanoGPT's eval_iters x batch.
GPT2_124M_TOKENS_PER_ITER = 480 * 1024
GPT2_124M_PARAMS = 12 * 12 * 768 ** 2 + (50304 + 1024) * 768  # blocks + token and position embeddings (~124M)
GPT2_124M_CHINCHILLA_ITERS = -(-20 * GPT2_124M_PARAMS // GPT2_124M_TOKENS_PER_ITER)  # 20 tokens per parameter


def _recipe(name: str) -> dict[str, Any]:
    from .recipes import get_recipe

    return get_recipe(name).overrides


def _gpt2_124m(max_iters: int, warmup_frac: float, **recipe: Any) -> dict[str, Any]:
    every = max(max_iters // 24, 1)
    return dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, bias=False, dropout=0.0,
                batch_size=480, grad_accum=40, lr=6e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, grad_clip=1.0,
                min_lr_ratio=0.1, max_iters=max_iters, warmup_frac=warmup_frac, eval_windows=2400,
                interim_eval_windows=240, eval_interval=every, checkpoint_interval=every,
                diag_interval=max(max_iters // 100, 1), **recipe)


PRESETS.update({
    "gpt2-124m": _gpt2_124m(600_000, 2000 / 600_000),
    # Hoffmann et al.'s budget, 20 tokens per parameter (~2.5B tokens, ~5,000 steps); 5% warm-up as this project's
    # other compute-optimal presets (nanoGPT's 2,000 steps would be 40% of it)
    "gpt2-124m-chinchilla": _gpt2_124m(GPT2_124M_CHINCHILLA_ITERS, 0.05),
    # the same with modded-nanogpt's embedding recipe (recipes.py "speedrun"): N(0, 1) embeddings, an untied head
    # initialised to zero; the norm after the embedding stays the study's switch (--variant none | ln | rms)
    "gpt2-124m-chinchilla-speedrun": _gpt2_124m(GPT2_124M_CHINCHILLA_ITERS, 0.05, **_recipe("speedrun")),
})


# The size ladder (issue 18): char-level, block 128, batch 32 (4,096 tokens per iteration), five widths x depths
# from ~0.1M to ~14M non-embedding parameters (12 * n_layer * n_embd^2). Budget rule: 20 tokens per non-embedding
# parameter (Hoffmann et al. 2022), capped at LADDER_EPOCH_CAP passes over the training split (what tiny
# Shakespeare supports before it repeats too often), at least LADDER_MIN_ITERS iterations. The learning rate
# follows the width (Adam: lr ~ 1/width), anchored at each arm's best LR of stability-lr-v2 at width 128
# (studies.LADDER_LR_AT_128); the ladder-lr study checks the rule at factors around it. Rungs 0-2 ran on a CPU and
# rungs 3-4 train there across sessions (PROTOCOL amendments 14-15); a GPU trains them as fleets.
LADDER_RUNGS = ((2, 64, 4), (4, 128, 4), (6, 192, 6), (8, 256, 8), (8, 384, 6))  # (n_layer, n_embd, n_head)
LADDER_TOKENS_PER_ITER = 32 * 128
LADDER_TOKENS_PER_PARAM = 20
LADDER_EPOCH_CAP = 10
LADDER_MIN_ITERS = 500
TRAIN_CHARS_TINY_SHAKESPEARE = 1_003_854  # the training split's length (data.TRAIN_FRACTION of the corpus; tested)


def non_embedding_params(n_layer: int, n_embd: int) -> int:
    return 12 * n_layer * n_embd ** 2


def ladder_iters(n_layer: int, n_embd: int, train_tokens: int = TRAIN_CHARS_TINY_SHAKESPEARE) -> int:
    tokens = min(LADDER_TOKENS_PER_PARAM * non_embedding_params(n_layer, n_embd), LADDER_EPOCH_CAP * train_tokens)
    return max(LADDER_MIN_ITERS, -(-tokens // LADDER_TOKENS_PER_ITER))


for _rung, (_layers, _width, _heads) in enumerate(LADDER_RUNGS):
    _iters = ladder_iters(_layers, _width)
    PRESETS[f"ladder-{_rung}"] = dict(n_layer=_layers, n_head=_heads, n_embd=_width, block_size=128, batch_size=32,
                                      max_iters=_iters, dropout=0.0, beta2=0.99, warmup_frac=0.05,
                                      eval_interval=max(_iters // 8, 1), checkpoint_interval=max(_iters // 8, 1),
                                      diag_interval=max(_iters // 20, 1), lr=1e-3)


# The adequate-data ladder (issue 76; PROTOCOL amendment 16): four sizes on the open-English corpus, whose record
# (docs/corpus-open-english.json) fixes the corpus checksum, its symbols and the document split point. Its registered
# LRs and seeds are the study layer's (studies/ladder_data.py); the shapes and the budget rule are presets, here.
CORPUS_RECORD = repo_root() / "docs" / "corpus-open-english.json"
DATA_RUNGS = ((2, 64, 4), (3, 96, 6), (4, 128, 4), (6, 160, 5))  # (n_layer, n_embd, n_head); head size 16-32
DATA_TOKENS_PER_ITER = 32 * 128  # batch 32 x block 128, as the 1 MB ladder
DATA_TOKENS_PER_PARAM = 20
DATA_MAX_PASSES = 4  # Muennighoff et al. 2023: up to ~4 passes, repeated data is nearly as good as new


def corpus_record() -> dict:
    return json.loads(Path(CORPUS_RECORD).read_text())


def data_ladder_iters(rung: int, train_chars: int | None = None) -> int:
    """20 tokens per non-embedding parameter, capped at DATA_MAX_PASSES over the training split."""
    n_layer, n_embd, _ = DATA_RUNGS[rung]
    train_chars = train_chars if train_chars is not None else corpus_record()["train_chars"]
    tokens = min(DATA_TOKENS_PER_PARAM * non_embedding_params(n_layer, n_embd), DATA_MAX_PASSES * train_chars)
    return -(-tokens // DATA_TOKENS_PER_ITER)


def data_ladder_preset(rung: int) -> dict:
    """The rung's preset (PRESETS['ladder-data-<rung>']): the corpus, the model, the budget; lr is per arm."""
    record = corpus_record()
    n_layer, n_embd, n_head = DATA_RUNGS[rung]
    n = data_ladder_iters(rung, record["train_chars"])
    return dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=128, batch_size=32, max_iters=n,
                dropout=0.0, beta2=0.99, warmup_frac=0.05, lr=1e-3, lm_eval=False,
                corpus_sha256=record["sha256"], vocab_size=record["vocab_size"], train_chars=record["train_chars"],
                eval_interval=max(n // 8, 1), checkpoint_interval=max(n // 8, 1), diag_interval=max(n // 20, 1),
                interim_eval_windows=64)  # the learning curve on 64 windows; the final metrics on every window


if CORPUS_RECORD.is_file():  # a copy without docs/ has no such presets
    for _rung in range(len(DATA_RUNGS)):
        PRESETS[f"ladder-data-{_rung}"] = data_ladder_preset(_rung)


# The prose ladder (issue 112; PROTOCOL amendment 17): three sizes x two embedding recipes (recipes.py) on the
# open-prose corpus (prosecorpus.py) in byte-level BPE tokens. Its registered LRs and seeds are the study layer's
# (studies/prose.py); the shapes, the budget rule and the corpus and tokenizer records are presets, here.
PROSE_RECORD = repo_root() / "docs" / "corpus-open-prose.json"
PROSE_TOKENIZER_RECORD = repo_root() / "docs" / "tokenizer-open-prose.json"
PROSE_TOKENIZER = "bytebpe-4096"
PROSE_RUNGS = ((2, 64, 2), (3, 96, 3), (4, 128, 4))  # (n_layer, n_embd, n_head): head size 32; 8x in parameters
PROSE_TOKENS_PER_ITER = 32 * 128  # batch 32 x block 128
PROSE_TOKENS_PER_PARAM = 20
PROSE_MAX_PASSES = 4
PROSE_BUDGET_FACTORS = {"": 1, "x4": 4}  # suffix "-x4": the same model on 4x the tokens
# Amendment 19: at amendment 17's budget (20 tokens per non-embedding parameter) size 0 ended above the count bigram.
# Sizes from this one on count the token and position embeddings among the parameters, as Hoffmann et al. (2022) count
# every parameter; size 0's confirmatory budget is its "-x4" preset (studies/prose.py LEVELS).
PROSE_EMBEDDINGS_COUNTED_FROM = 1
PROSE_EVALS = 24  # interim evaluations per run (the learning curve the compute multiplier interpolates)
PROSE_INTERIM_WINDOWS = 128  # ... each on the same 128 validation windows; the final one on every window


def prose_records() -> tuple[dict, dict]:
    return json.loads(PROSE_RECORD.read_text()), json.loads(PROSE_TOKENIZER_RECORD.read_text())


def prose_params(rung: int, vocab_size: int | None = None) -> int:
    """The parameters the budget counts: the blocks' (12 n_layer n_embd^2), plus from size
    PROSE_EMBEDDINGS_COUNTED_FROM on the token and position embeddings (the input's; a speedrun head is not counted,
    so both recipes see the same tokens)."""
    n_layer, n_embd, _ = PROSE_RUNGS[rung]
    if rung < PROSE_EMBEDDINGS_COUNTED_FROM:
        return non_embedding_params(n_layer, n_embd)
    vocab_size = vocab_size if vocab_size is not None else prose_records()[1]["vocab_size"]
    return non_embedding_params(n_layer, n_embd) + (vocab_size + 128) * n_embd


def prose_iters(rung: int, factor: int = 1, train_tokens: int | None = None, vocab_size: int | None = None) -> int:
    """20 tokens per counted parameter (prose_params; times the budget factor), capped at PROSE_MAX_PASSES passes."""
    train_tokens = train_tokens if train_tokens is not None else prose_records()[1]["train_tokens"]
    tokens = min(factor * PROSE_TOKENS_PER_PARAM * prose_params(rung, vocab_size), PROSE_MAX_PASSES * train_tokens)
    return -(-tokens // PROSE_TOKENS_PER_ITER)


def prose_preset(recipe: str, rung: int, budget: str = "") -> dict:
    """PRESETS['prose-<recipe>-<rung>[-x4]']: corpus, tokenizer, model, budget and the recipe's embedding set-up;
    lr is per arm (studies/prose.py)."""
    from .recipes import get_recipe

    corpus, tokenizer = prose_records()
    n_layer, n_embd, n_head = PROSE_RUNGS[rung]
    n = prose_iters(rung, PROSE_BUDGET_FACTORS[budget], tokenizer["train_tokens"], tokenizer["vocab_size"])
    every = max(n // PROSE_EVALS, 1)
    return dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=128, batch_size=32, max_iters=n,
                dropout=0.0, beta2=0.99, warmup_frac=0.05, lr=1e-3, lm_eval=False, tokenizer=PROSE_TOKENIZER,
                corpus_sha256=corpus["sha256"], vocab_size=tokenizer["vocab_size"], train_chars=corpus["train_chars"],
                eval_interval=every, checkpoint_interval=max(n // 8, 1), diag_interval=max(n // 20, 1),
                interim_eval_windows=PROSE_INTERIM_WINDOWS, **get_recipe(recipe).overrides)


if PROSE_RECORD.is_file() and PROSE_TOKENIZER_RECORD.is_file():  # a copy without docs/ has no such presets
    from .recipes import RECIPES as _RECIPES

    for _recipe in _RECIPES:
        for _rung in range(len(PROSE_RUNGS)):
            for _budget in PROSE_BUDGET_FACTORS if _rung == 0 else ("",):  # only size 0 has a 4x budget
                PRESETS[f"prose-{_recipe}-{_rung}" + (f"-{_budget}" if _budget else "")] = prose_preset(
                    _recipe, _rung, _budget)
