"""Embedding recipes: how a model's embeddings and output head are set up around the study's switch (issue 112).

Practitioners use two today, and each is one entry here; a study names its recipe, never ad-hoc overrides.
Everything a recipe does not name is shared (the blocks' GPT-2 init, the optimiser, the schedule, the data)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    overrides: dict[str, Any] = field(default_factory=dict)  # RunConfig fields


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("gpt2", "GPT-2 / nanoGPT: token and position embeddings N(0, 0.02), output head tied to the token "
                   "embedding",
           dict(emb_init_std=0.02, tie_embeddings=True, head_init="normal")),
    # modded-nanogpt's speedrun: nn.Embedding's default N(0, 1), an untied head initialised to zero
    # (lm_head.weight.zero_()), and an RMSNorm right after the embedding in its own model; here the norm is the
    # study's switch, so `none`, `ln` and `rms` each run under this recipe
    Recipe("speedrun", "modded-nanogpt speedrun style: unit-variance embeddings N(0, 1), an untied output head "
                       "initialised to zero",
           dict(emb_init_std=1.0, tie_embeddings=False, head_init="zero")),
)}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; allowed: {', '.join(RECIPES)}")
    return RECIPES[name]
