"""One episode's token sequence, kept exactly as the model saw and produced it.

The trainer learns from tokens, not text. Re-tokenizing a conversation after the fact silently changes
what is trained on (chat templates rewrite past turns — Qwen3 drops earlier `<think>` blocks —, and
text -> tokens -> text is not an identity), so an episode keeps ONE sequence that only ever grows:

* the first prompt: the chat template applied to the opening messages (loss mask 0);
* each model turn: the sampled token ids, unchanged, with the engine's logprobs (loss mask 1);
* between turns: the tokens that close the model's turn if the template adds any after its stop token,
  then the new message rendered on its own (loss mask 0).

Rendering "the new message on its own" uses the template itself: render a fixed two-message stub with
and without the new message and keep the difference, so whatever the template puts around a message
(role headers, separators, the next generation prompt) is exactly what a full render would put there.
`drift()` renders the whole conversation again and counts where it disagrees with the kept sequence —
zero for templates that never rewrite history, positive for those that do; the kept sequence is what
training uses either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]

_STUB_USER = "codedojo-stub-user"
_STUB_ASSISTANT = "codedojo-stub-assistant"


class TemplateError(RuntimeError):
    """The chat template does not render messages in a way the transcript can extend."""


def render_text(tokenizer: Any, messages: Sequence[Mapping[str, Any]], *, generation_prompt: bool,
                tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt,
                                         tools=list(tools) if tools else None)
    if not isinstance(text, str):
        raise TemplateError(f"apply_chat_template returned {type(text).__name__}, expected text")
    return text


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` as a continuation: no BOS added, special-token strings parsed as specials."""
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass
class Transcript:
    """The growing token sequence of one episode with its loss mask and logprobs (same lengths)."""

    tokenizer: Any
    tools: Sequence[Mapping[str, Any]] | None = None
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)

    @classmethod
    def start(cls, tokenizer: Any, messages: Sequence[Message], *,
              tools: Sequence[Mapping[str, Any]] | None = None) -> Transcript:
        """Open the episode with `messages` (system, user, ...) and the assistant's generation prompt."""
        transcript = cls(tokenizer=tokenizer, tools=tools)
        text = render_text(tokenizer, messages, generation_prompt=True, tools=tools)
        ids = encode(tokenizer, text)
        transcript._extend(ids, trained=False)
        transcript.messages = [dict(m) for m in messages]
        return transcript

    def __len__(self) -> int:
        return len(self.token_ids)

    def _extend(self, ids: Sequence[int], *, trained: bool, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if trained else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def add_sampled(self, ids: Sequence[int], logprobs: Sequence[float], *, message: Message) -> None:
        """Append a model turn exactly as sampled; `message` is its parsed form for the readable log."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled tokens but {len(logprobs)} logprobs")
        self._extend(ids, trained=True, logprobs=logprobs)
        self.messages.append(dict(message))

    def add_message(self, message: Message, *, stop_token_text: str | None) -> list[int]:
        """Append a new (non-model) message after a model turn; returns the tokens added.

        `stop_token_text` is the text of the token that ended the model's turn (None if the turn ran out
        of tokens): whatever the template puts after an assistant message beyond that token (e.g. the
        newline after `<|im_end|>`) is added first, so the sequence matches a full render.
        """
        closing = self._assistant_suffix()
        if stop_token_text and closing.startswith(stop_token_text):
            closing = closing[len(stop_token_text):]
        ids = encode(self.tokenizer, closing + self._delta(message))
        self._extend(ids, trained=False)
        self.messages.append(dict(message))
        return ids

    def _stub(self) -> list[Message]:
        return [{"role": "user", "content": _STUB_USER}, {"role": "assistant", "content": _STUB_ASSISTANT}]

    def _assistant_suffix(self) -> str:
        """What the template writes after an assistant message's content."""
        text = render_text(self.tokenizer, self._stub(), generation_prompt=False, tools=self.tools)
        at = text.rfind(_STUB_ASSISTANT)
        if at < 0:
            raise TemplateError("the chat template drops assistant content; cannot keep a token-faithful transcript")
        return text[at + len(_STUB_ASSISTANT):]

    def _delta(self, message: Message) -> str:
        """The text a full render adds for `message` plus the next generation prompt."""
        before = render_text(self.tokenizer, self._stub(), generation_prompt=False, tools=self.tools)
        after = render_text(self.tokenizer, [*self._stub(), message], generation_prompt=True, tools=self.tools)
        if not after.startswith(before):
            raise TemplateError(
                "the chat template renders earlier messages differently once a new one is added; "
                "cannot extend the transcript by rendering only the new message"
            )
        return after[len(before):]

    def drift(self) -> int:
        """Kept tokens that a full re-render of `messages` does not reproduce (0 = faithful).

        Compared position by position; a render longer than the kept sequence is not drift when the
        difference is only what the template adds after the last sampled stop token."""
        ends_with_reply = bool(self.messages) and self.messages[-1].get("role") == "assistant"
        text = render_text(self.tokenizer, self.messages, generation_prompt=not ends_with_reply, tools=self.tools)
        rendered = encode(self.tokenizer, text)
        kept = self.token_ids
        common = min(len(rendered), len(kept))
        mismatched = sum(1 for a, b in zip(rendered[:common], kept[:common], strict=True) if a != b)
        return mismatched + max(0, len(kept) - len(rendered))
