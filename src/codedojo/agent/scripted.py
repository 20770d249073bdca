"""A scripted policy: an `Engine` that answers with given replies, as real tokens of a real tokenizer.

For tests and demos of everything around the model: the agent loop, sandboxes, verification, rollout
scheduling and the trainer's data path all run for real; only the choice of words is fixed. Each session
(episode) walks through its own copy of the script; when the script runs out, the last reply repeats.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from codedojo.inference.protocol import Completion, FinishReason, SamplingParams

Script = Sequence[str] | Callable[[str], Sequence[str]]


class ScriptedPolicy:
    """Replies from a script; `script` is a list of replies or a function of the session id."""

    def __init__(self, tokenizer: Any, script: Script, *, logprob: float = -0.5) -> None:
        self.tokenizer = tokenizer
        self._script = script
        self._logprob = logprob
        self._turn: dict[str, int] = {}
        self.calls = 0

    def _replies(self, session_id: str) -> Sequence[str]:
        return self._script(session_id) if callable(self._script) else self._script

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Completion:
        self.calls += 1
        key = session_id or ""
        replies = self._replies(key)
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        text = replies[min(turn, len(replies) - 1)] if replies else ""
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        finish: FinishReason = "stop"
        if len(ids) > params.max_new_tokens:
            ids, finish = ids[: params.max_new_tokens], "length"
        return Completion(token_ids=tuple(ids), logprobs=tuple([self._logprob] * len(ids)), finish_reason=finish,
                          prompt_tokens=len(prompt_ids), cached_tokens=0, weight_version=0)

    async def end_session(self, session_id: str) -> None:
        self._turn.pop(session_id, None)

    async def update_weights(self, state: Mapping[str, Any]) -> int:
        """A script has no weights: nothing to load, and the version stays 0."""
        return 0

    async def flush_cache(self) -> bool:
        """A script caches no KV: nothing to drop."""
        return True

    async def close(self) -> None:
        self._turn.clear()
