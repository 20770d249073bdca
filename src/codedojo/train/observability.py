"""What a run records: per-step metrics (JSONL and TensorBoard), the slime-signature log hook, rollout
dumps, and a Chrome-trace timeline of the phases.

Files in the run directory:
  metrics.jsonl          one JSON object per step ({"step", "kind": "train" | "eval", metrics...})
  tensorboard/           the same scalars as TensorBoard events
  trace.json             Chrome trace (chrome://tracing, Perfetto) when capture_trace is on
  rollouts/...           dumps per rollout id when save_debug_rollout_data is set
"""

from __future__ import annotations

import importlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def steps_trained(record: dict[str, Any]) -> int:
    """How many steps were trained when `record` was written: a train row of rollout s is written before
    step s's checkpoint (s + 1 steps), an eval row of step s after s steps."""
    return int(record["step"]) + (1 if record["kind"] == "train" else 0)


class MetricsLog:
    """Appends metrics to metrics.jsonl and TensorBoard; numbers only go to TensorBoard.

    `start` is the step the run (re)starts at. The records are brought back to it first, so a run killed
    after a step's metrics but before its checkpoint logs that step once: metrics.jsonl keeps the rows
    written by `start` trained steps (none for a run starting at 0), and TensorBoard purges every event
    at or after step `start` (`purge_step`), then gets the kept rows of step `start` again (the evaluation
    after `start` steps, which the relaunched run does not repeat)."""

    def __init__(self, run_dir: Path, *, start: int = 0, tensorboard: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.kept = self._rewind(start)
        """The rows of earlier processes that the run keeps, in order."""
        self._writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=start or None)
            for record in self.kept:
                if record["step"] >= start:
                    self._scalars(record["step"], record)

    def _rewind(self, start: int) -> list[dict[str, Any]]:
        kept = [r for r in read_metrics(self.path.parent) if start and steps_trained(r) <= start]
        if self.path.exists():
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in kept), encoding="utf-8")
            tmp.replace(self.path)
        return kept

    def write(self, step: int, kind: str, metrics: dict[str, Any], *, to_tensorboard: bool = True) -> None:
        record = {"step": step, "kind": kind, "time": time.time(), **metrics}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
        if to_tensorboard:
            self._scalars(step, metrics)

    def _scalars(self, step: int, metrics: dict[str, Any]) -> None:
        if self._writer is None:
            return
        for key, value in metrics.items():
            if key in ("step", "kind", "time"):
                continue
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_hook(path: str | None) -> Callable[..., Any] | None:
    """A function named "module:function" or "module.function"."""
    if not path:
        return None
    module, sep, name = path.partition(":")
    if not sep:
        module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load {path!r}: {e}") from None


class Trace:
    """Chrome trace events (complete events, microseconds) collected in memory and written on flush."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._origin = time.monotonic()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def add(self, name: str, *, start: float, end: float, lane: str = "trainer", **args: Any) -> None:
        """Record a span between two time.monotonic() readings."""
        if self.path is None:
            return
        with self._lock:
            self._events.append({"name": name, "ph": "X", "pid": os.getpid(), "tid": lane,
                                 "ts": (start - self._origin) * 1e6, "dur": (end - start) * 1e6, "args": args})

    @contextmanager
    def span(self, name: str, *, lane: str = "trainer", **args: Any) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, start=start, end=time.monotonic(), lane=lane, **args)

    def flush(self) -> None:
        if self.path is None:
            return
        with self._lock:
            data = {"traceEvents": list(self._events), "displayTimeUnit": "ms"}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)
