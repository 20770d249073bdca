"""Episode budgets: replies per episode, tokens per reply, tokens of the whole conversation.

One budget per prompt profile, and every stage that records or runs episodes for a model takes it from
here: the expert's demonstrations (so SFT learns replies RL will not cut), the RL recipe, evaluation and
the difficulty probe. The `small` profile's budget is the small-model recipe's (`SmolLM2_Recipe`: six
replies of at most 96 tokens in a 2,048-token context, sized so a 135M model on a laptop CPU finishes an
episode in seconds, and command outputs cut to 2,000 characters); the `standard` one is the agent loop's
defaults (mini-swe-agent's: 75 replies of 1,024 tokens in 32k, outputs of 10,000 characters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class EpisodeBudget:
    max_steps: int
    """Model replies per episode."""
    max_new_tokens: int
    """Tokens per reply (the end-of-turn token included)."""
    max_context_tokens: int
    """Tokens of the whole conversation: prompt, replies and command outputs."""
    max_output_chars: int
    """Characters of one command's output shown to the model (head and tail beyond that)."""

    def agent_fields(self) -> dict[str, Any]:
        """The `AgentConfig` keyword arguments of this budget."""
        return {"max_steps": self.max_steps, "max_new_tokens": self.max_new_tokens,
                "max_context_tokens": self.max_context_tokens, "max_output_chars": self.max_output_chars}


SMALL_OUTPUT_CHARS = 2000
"""A 2,048-token context holds a few outputs of this size (about 600 tokens each)."""


def recipe_budget(recipe: Any, *, profile: str) -> EpisodeBudget:
    """The budget a recipe trains under (its reply, step and context fields; outputs by profile)."""
    return EpisodeBudget(max_steps=recipe.extra_config.agentic_max_steps,
                         max_new_tokens=recipe.rollout_max_response_len,
                         max_context_tokens=recipe.rollout_max_context_len,
                         max_output_chars=profile_budget(profile).max_output_chars)


def profile_budget(profile: str) -> EpisodeBudget:
    """The budget of prompt profile `profile` ("small" or "standard")."""
    if profile == "small":
        from codedojo.config.recipe import SmolLM2_Recipe

        recipe = SmolLM2_Recipe()
        return EpisodeBudget(max_steps=recipe.extra_config.agentic_max_steps,
                             max_new_tokens=recipe.rollout_max_response_len,
                             max_context_tokens=recipe.rollout_max_context_len, max_output_chars=SMALL_OUTPUT_CHARS)
    if profile == "standard":
        from codedojo.agent.loop import AgentConfig

        loop = AgentConfig()
        return EpisodeBudget(max_steps=loop.max_steps, max_new_tokens=loop.max_new_tokens,
                             max_context_tokens=loop.max_context_tokens, max_output_chars=loop.max_output_chars)
    raise ValueError(f"unknown prompt profile {profile!r}: expected 'small' or 'standard'")
