"""SWE-rebench V2 rows to Harbor task directories that run on the dataset's prebuilt images.

Per row: instruction.md is the problem statement; task.toml names the image, the repository's workdir,
the resources and timeouts of `ConvertConfig`, and records the row's identity, quality labels and test
ids under [metadata]; tests/ holds test.sh, grade.awk, the test patch and the expected test ids;
solution/ holds the upstream fix and solve.sh. environment/ stays empty: the image is prebuilt.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codedojo.tasks.config import AgentPhaseConfig, EnvironmentConfig, NetworkMode, TaskConfig, VerifierConfig
from codedojo.tasks.swerebench import scripts
from codedojo.tasks.swerebench.grading import GRADER, format_ids, supported_parsers
from codedojo.tasks.swerebench.row import RowError, SweRebenchRow, parse_row
from codedojo.tasks.task import Task, TaskError, validate_task_dir, write_task

SOURCE = "swe-rebench-v2"


@dataclass(frozen=True, kw_only=True)
class ConvertConfig:
    """Resources and limits written into every converted task."""

    cpus: int | float = 2
    """CPU cores of the sandbox."""
    memory_mb: int = 4096
    """Memory limit in MiB."""
    storage_mb: int = 10240
    """Writable storage in MiB."""
    network_mode: NetworkMode = "no-network"
    """Network access of the sandbox; the images already hold every dependency."""
    build_timeout_sec: float = 1800.0
    """Time to pull the image and start the sandbox (the images are large)."""
    agent_timeout_sec: float = 1800.0
    """Wall clock for the agent."""
    verifier_timeout_sec: float = 1800.0
    """Wall clock for tests/test.sh (some suites take many minutes)."""
    include_interface: bool = False
    """Append the row's `interface` (signatures the tests call) to the instruction."""


@dataclass(frozen=True)
class SkippedRow:
    """A row that did not become a task."""

    index: int
    """0-based position in the input."""
    instance_id: str
    """The row's instance_id, or "" when it has none."""
    reason: str
    """Why it was skipped."""


@dataclass(frozen=True)
class ConversionReport:
    """What one conversion run wrote and skipped."""

    converted: tuple[Path, ...] = ()
    """Task directories written, each valid."""
    skipped: tuple[SkippedRow, ...] = field(default=())
    """Rows left out, with reasons."""


def task_dir_name(instance_id: str) -> str:
    """A directory name for the instance: its id, with anything outside [A-Za-z0-9._-] replaced."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", instance_id)
    return name if name.strip(".") else f"task_{name}"


def convert_row(
    raw: Mapping[str, Any],
    *,
    out_dir: Path,
    config: ConvertConfig = ConvertConfig(),
    parsers: frozenset[str] | None = None,
) -> Task:
    """Write the task for one row under `out_dir` and return it loaded (hence validated).

    Raises RowError with the reason when the row cannot become a task; `parsers` is the set of parser
    names grade.awk supports (asked from awk when not given).
    """
    row = parse_row(raw)
    supported = supported_parsers() if parsers is None else parsers
    if row.log_parser not in supported:
        raise RowError(f"log parser {row.log_parser} is not supported by grade.awk (docs/swe-rebench.md)")
    test_files = scripts.patch_paths(row.test_patch)
    if not test_files:
        raise RowError("test_patch names no file")
    bad = scripts.unsafe_paths(test_files)
    if bad:
        raise RowError(f"test_patch touches a path outside the repository: {bad[0]!r}")
    test_sh = scripts.test_script(
        instance_id=row.instance_id,
        workdir=row.workdir,
        base_commit=row.base_commit,
        log_parser=row.log_parser,
        test_commands=row.test_commands,
    )
    _check_bash_syntax(test_sh)
    files: dict[str, str | bytes] = {
        "tests/test.sh": test_sh,
        "tests/grade.awk": GRADER.read_bytes(),
        "tests/test.patch": _patch_bytes(row.test_patch),
        "tests/test_files.txt": "".join(f"{p}\n" for p in test_files),
        "tests/fail_to_pass.txt": format_ids(row.fail_to_pass),
        "tests/pass_to_pass.txt": format_ids(row.pass_to_pass),
        "solution/solve.sh": scripts.solve_script(instance_id=row.instance_id, workdir=row.workdir),
        "solution/fix.patch": _patch_bytes(row.patch),
    }
    return write_task(
        out_dir / task_dir_name(row.instance_id),
        instruction=_instruction(row, include_interface=config.include_interface),
        config=_task_config(row, config),
        files=files,
    )


def convert_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    out_dir: Path,
    config: ConvertConfig = ConvertConfig(),
    limit: int | None = None,
    overwrite: bool = False,
    on_row: Callable[[Path | SkippedRow], None] | None = None,
) -> ConversionReport:
    """Convert rows until the input ends or `limit` tasks are written; every task is validated.

    A row whose task directory already exists is skipped unless `overwrite`. `on_row` hears about each
    row (the task path, or the SkippedRow) as it is done.
    """
    parsers = supported_parsers()
    out_dir.mkdir(parents=True, exist_ok=True)
    converted: list[Path] = []
    skipped: list[SkippedRow] = []
    seen: set[str] = set()
    for index, raw in enumerate(rows):
        if limit is not None and len(converted) >= limit:
            break
        result = _convert_one(
            raw, index, out_dir=out_dir, config=config, parsers=parsers, overwrite=overwrite, seen=seen
        )
        (converted if isinstance(result, Path) else skipped).append(result)  # type: ignore[arg-type]
        if on_row is not None:
            on_row(result)
    return ConversionReport(converted=tuple(converted), skipped=tuple(skipped))


def _convert_one(
    raw: Mapping[str, Any],
    index: int,
    *,
    out_dir: Path,
    config: ConvertConfig,
    parsers: frozenset[str],
    overwrite: bool,
    seen: set[str],
) -> Path | SkippedRow:
    instance_id = str(raw.get("instance_id") or "").strip()
    if instance_id in seen:
        return SkippedRow(index, instance_id, "duplicate instance_id (an earlier row has it)")
    seen.add(instance_id)
    target = out_dir / task_dir_name(instance_id)
    if instance_id and target.exists() and any(target.iterdir()):
        if not overwrite:
            return SkippedRow(index, instance_id, f"{target} exists (overwrite replaces it: --overwrite)")
        shutil.rmtree(target)
    try:
        task = convert_row(raw, out_dir=out_dir, config=config, parsers=parsers)
    except RowError as e:
        return SkippedRow(index, instance_id, str(e))
    except TaskError as e:
        shutil.rmtree(target, ignore_errors=True)
        return SkippedRow(index, instance_id, f"the written task is invalid: {e}")
    problems = validate_task_dir(task.path)
    if problems:
        shutil.rmtree(task.path, ignore_errors=True)
        return SkippedRow(index, instance_id, "; ".join(problems))
    return task.path


def _instruction(row: SweRebenchRow, *, include_interface: bool) -> str:
    text = row.problem_statement.replace("\r\n", "\n").strip() + "\n"
    if include_interface and row.interface.strip():
        interface = row.interface.replace("\r\n", "\n").strip()
        text += f"\nThe tests use this interface:\n\n{interface}\n"
    return text


def _task_config(row: SweRebenchRow, config: ConvertConfig) -> TaskConfig:
    metadata: dict[str, Any] = {
        "source": SOURCE,
        "instance_id": row.instance_id,
        "repository": row.repo,
        "language": row.language,
        "difficulty": row.difficulty,
        "quality": row.quality,
        "quality_flags": list(row.quality_flags),
        "base_commit": row.base_commit,
        "created_at": row.created_at,
        "license": row.license,
        "log_parser": row.log_parser,
        "test_commands": list(row.test_commands),
        "fail_to_pass": list(row.fail_to_pass),
        "pass_to_pass": list(row.pass_to_pass),
    }
    return TaskConfig(
        source=SOURCE,
        metadata={k: v for k, v in metadata.items() if v is not None},
        environment=EnvironmentConfig(
            docker_image=row.image_name,
            workdir=row.workdir,
            cpus=config.cpus,
            memory_mb=config.memory_mb,
            storage_mb=config.storage_mb,
            network_mode=config.network_mode,
            build_timeout_sec=config.build_timeout_sec,
        ),
        agent=AgentPhaseConfig(timeout_sec=config.agent_timeout_sec),
        verifier=VerifierConfig(timeout_sec=config.verifier_timeout_sec),
    )


def _check_bash_syntax(script: str) -> None:
    """The test commands are pasted into test.sh; one that does not parse would stop the whole verifier."""
    bash = shutil.which("bash")
    if bash is None:
        return
    proc = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        first = proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise RowError(f"the test commands are not valid bash: {first}")


def _patch_bytes(diff: str) -> bytes:
    # A patch must end with a newline, or git apply reports a corrupt last hunk.
    data = diff.encode("utf-8", "surrogateescape")
    return data if data.endswith(b"\n") else data + b"\n"
