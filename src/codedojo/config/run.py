"""What a launch returns (`Run`) and the error of a recipe that cannot run where it was asked to
(`BackendRequired`): the types `TrainConfig.launch` and every backend's launcher (train.launch,
integrations.slime_launch, integrations.modal_app) share, so that none of them imports another."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


class BackendRequired(RuntimeError):
    """The recipe cannot run on the requested backend."""


@dataclass(frozen=True)
class Run:
    """A launched training run."""

    training_run_id: str
    run_dir: Path
    backend: str
    summary: dict[str, Any]
    modal_app_url: str | None = None

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"
