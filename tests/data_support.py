"""Shared by the dataset-pipeline tests: tiny Harbor tasks with metadata, rows, and a scripted policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.data.ingest import row_for
from codedojo.tasks.config import AgentPhaseConfig, EnvironmentConfig, TaskConfig, VerifierConfig
from codedojo.tasks.task import Task, write_task

SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
RIGHT = "```bash\necho 42 > answer.txt\n```"
WRONG = "```bash\nls\n```"
# The verifier: reward 1 when /app/answer.txt holds 42.
CHECK_ANSWER = ('#!/bin/bash\nif [ "$(cat /app/answer.txt 2>/dev/null)" = "42" ]; then echo 1; else echo 0; fi '
                "> /logs/verifier/reward.txt\n")
ALWAYS_PASSES = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
SOLVE = "#!/bin/bash\necho 42 > answer.txt\n"
WRONG_SOLVE = "#!/bin/bash\necho 41 > answer.txt\n"


def make_answer_task(folder: Path, name: str, *, repository: str = "repo-a", tier: str = "warmup",
                     test_sh: str = CHECK_ANSWER, solve_sh: str = SOLVE) -> Task:
    """A task solved by writing 42 to answer.txt; the metadata the pipeline groups by is set."""
    config = TaskConfig(
        source="codedojo-builtin",
        metadata={"instance_id": name, "repository": repository, "tier": tier},
        agent=AgentPhaseConfig(timeout_sec=60.0), verifier=VerifierConfig(timeout_sec=60.0),
        environment=EnvironmentConfig(memory_mb=512, storage_mb=256, network_mode="no-network"),
    )
    return write_task(folder / name, instruction=f"Write 42 to answer.txt ({name}).", config=config,
                      files={"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
                             "tests/test.sh": test_sh, "solution/solve.sh": solve_sh})


def write_rows(path: Path, tasks: list[Task]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [row_for(t, root=path.parent) for t in tasks]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def synthetic_row(name: str, *, repository: str, language: str, difficulty: str) -> dict[str, Any]:
    """A row for split and sample tests (its task directory need not exist)."""
    return {"prompt": name, "label": name, "metadata": {"instance_id": name, "repository": repository,
                                                        "language": language, "difficulty": difficulty,
                                                        "task_path": f"tasks/{name}"}}
