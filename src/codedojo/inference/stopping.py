"""Stop-string detection on a growing list of sampled tokens.

Only the tail of the output is decoded after each token: a stop string of c characters spans at most
4c byte-level tokens, so decoding that window (plus slack) finds any match that the newest token
completed. Earlier matches would already have ended the turn, so a hit anywhere in the window is new.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class StopStrings:
    def __init__(self, tokenizer: Any, stop: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.window = 4 * max(len(s) for s in self.stop) + 4

    def hit(self, output_ids: Sequence[int]) -> bool:
        tail = self.tokenizer.decode(list(output_ids[-self.window :]), skip_special_tokens=False)
        return any(s in tail for s in self.stop)
