"""The public API: TrainConfig(model, dataset, recipe).launch(), with the reference tutorial's names."""

from __future__ import annotations

from codedojo.config.dataset import AgentTaskDataset, DatasetConfig, task_row
from codedojo.config.models import Qwen3_6_27B, SmolLM2_135M_Instruct
from codedojo.config.recipe import (
    CurriculumConfig,
    EvalConfig,
    EvalDataset,
    EvalDefaults,
    ExtraConfig,
    HealthConfig,
    PriceTable,
    Qwen3_6_27B_Recipe,
    Recipe,
    SmolLM2_Recipe,
    TrackioConfig,
)
from codedojo.config.run import BackendRequired, Run
from codedojo.config.train_config import TrainConfig

__all__ = [
    "AgentTaskDataset",
    "BackendRequired",
    "CurriculumConfig",
    "DatasetConfig",
    "EvalConfig",
    "EvalDataset",
    "EvalDefaults",
    "ExtraConfig",
    "HealthConfig",
    "PriceTable",
    "Qwen3_6_27B",
    "Qwen3_6_27B_Recipe",
    "Recipe",
    "Run",
    "SmolLM2_135M_Instruct",
    "SmolLM2_Recipe",
    "TrackioConfig",
    "TrainConfig",
    "task_row",
]
