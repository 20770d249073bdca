"""Bounded capture of a command's output, shared by every backend.

A command may print gigabytes; a sandbox keeps only the first and last halves of its output limit per
stream and counts what it dropped, so capturing never grows with the output (ExecResult.truncated_bytes).
"""

from __future__ import annotations


class OutputCapture:
    """Keeps the first and last `limit // 2` bytes of a stream and counts what falls between."""

    def __init__(self, limit: int) -> None:
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        if len(self.tail) > self.half:
            excess = len(self.tail) - self.half
            self.dropped += excess
            del self.tail[:excess]

    def text(self) -> str:
        if self.dropped:
            marker = f"\n[... {self.dropped} bytes of output dropped ...]\n".encode()
            return (bytes(self.head) + marker + bytes(self.tail)).decode("utf-8", "replace")
        return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
