"""`task.toml`: Harbor's task configuration (schema 1.4, as defined by Harbor 0.25), as frozen records.

Every section and field Harbor 0.25 defines is here, with Harbor's defaults. The legacy spellings Harbor
still accepts are read and converted: a root `version` becomes `schema_version`, `[environment]`
`memory = "4G"` and `storage = "10G"` become `memory_mb` / `storage_mb` (binary units, so 4G = 4096),
and `allow_internet = true|false` becomes `network_mode = "public"|"no-network"`. Files are always
written in the new form. A key Harbor does not define is an error naming the key and the file, or, when
the caller collects warnings (`Task.load` does; Harbor's loader ignores such keys and its lint warns), a
warning with the same text; `codedojo tasks validate --strict` makes them errors again. `[metadata]` is
the one free-form table.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

from codedojo.records import RecordError, load_record, record_to_dict

SCHEMA_VERSION = "1.4"

NetworkMode = Literal["public", "no-network", "allowlist"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNIT_MB = {"B": 1 / 2**20, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}


def _parse_size_mb(key: str, value: Any) -> Any:
    """Legacy `memory = "4G"` / `storage = "10G"` to megabytes; the new keys pass through."""
    if key.endswith("_mb") or not isinstance(value, str):
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f"{key} = {value!r} is not a size like '512M' or '4G'")
    unit = (m.group(2) or "M").upper()
    return round(float(m.group(1)) * _UNIT_MB["B" if unit == "B" else unit[0]])


def _parse_network(key: str, value: Any) -> Any:
    """Legacy `allow_internet = true|false` to `network_mode`."""
    if key == "allow_internet":
        if not isinstance(value, bool):
            raise ValueError(f"allow_internet must be true or false, got {value!r}")
        return "public" if value else "no-network"
    return value


def _alias(*names: str, parse: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"aliases": names}
    if parse is not None:
        meta["parse"] = parse
    return meta


@dataclass(frozen=True, kw_only=True)
class Author:
    name: str
    """Author's name."""
    email: str | None = None
    """Contact address."""


@dataclass(frozen=True, kw_only=True)
class PackageInfo:
    """`[task]`: optional package identity for registries."""

    name: str | None = None
    """"org/name"; the task's name when set (else the directory name)."""
    version: str | None = None
    """Package version string."""
    description: str = ""
    """One-line description."""
    authors: tuple[Author, ...] = ()
    """Authors."""
    keywords: tuple[str, ...] = ()
    """Search keywords."""


@dataclass(frozen=True, kw_only=True)
class Healthcheck:
    command: str
    """Command whose exit code 0 means healthy."""
    interval_sec: float = 5.0
    """Seconds between checks."""
    timeout_sec: float = 30.0
    """Seconds before one check counts as failed."""
    start_period_sec: float = 0.0
    """Grace period after start."""
    start_interval_sec: float = 5.0
    """Interval during the grace period."""
    retries: int = 3
    """Failures tolerated before the environment counts as unhealthy."""


@dataclass(frozen=True, kw_only=True)
class Tpu:
    type: str
    """TPU type."""
    topology: str | None = None
    """TPU topology."""


@dataclass(frozen=True, kw_only=True)
class McpServer:
    name: str
    """Server name."""
    transport: Literal["sse", "stdio", "streamable-http"] = "sse"
    """How the agent reaches the server."""
    url: str | None = None
    """Endpoint for sse / streamable-http."""
    command: str | None = None
    """Executable for stdio."""
    args: tuple[str, ...] = ()
    """Arguments for stdio."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra HTTP headers."""


@dataclass(frozen=True, kw_only=True)
class EnvironmentConfig:
    """`[environment]`: where the agent runs."""

    build_timeout_sec: float = 600.0
    """Wall clock for starting the environment (image build or pull, sandbox start)."""
    docker_image: str | None = None
    """A prebuilt image; when set it is used even if environment/ has a Dockerfile."""
    os: Literal["linux", "windows"] = "linux"
    """Operating system of the environment."""
    cpus: int | float | None = None
    """CPU cores."""
    memory_mb: int | None = field(default=None, metadata=_alias("memory", parse=_parse_size_mb))
    """Memory limit in MiB (legacy `memory = "4G"` is read as 4096)."""
    storage_mb: int | None = field(default=None, metadata=_alias("storage", parse=_parse_size_mb))
    """Writable storage in MiB (legacy `storage = "10G"` is read as 10240)."""
    gpus: int | None = None
    """GPU count."""
    gpu_types: tuple[str, ...] | None = None
    """Acceptable GPU types."""
    tpu: Tpu | None = None
    """TPU request."""
    mcp_servers: tuple[McpServer, ...] = ()
    """MCP servers the agent may use."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables set for every command in the environment."""
    skills_dir: str | None = None
    """Directory of agent skills to upload."""
    healthcheck: Healthcheck | None = None
    """Readiness check run after start."""
    workdir: str | None = None
    """Default working directory of every command; overrides the image's WORKDIR."""
    network_mode: NetworkMode = field(
        default="public", metadata=_alias("allow_internet", parse=_parse_network)
    )
    """Network access (legacy `allow_internet = false` is read as "no-network")."""
    allowed_hosts: tuple[str, ...] = ()
    """Hosts reachable in "allowlist" mode (names, *.wildcards, IPs, CIDRs)."""


@dataclass(frozen=True, kw_only=True)
class CollectStep:
    """`[[verifier.collect]]`: a command run after the agent, before artifacts are collected."""

    command: str
    """Shell command."""
    service: str = "main"
    """Compose service to run it in."""
    timeout_sec: float = 60.0
    """Wall clock for the command."""
    user: str | int | None = None
    """User to run it as."""


@dataclass(frozen=True, kw_only=True)
class VerifierConfig:
    """`[verifier]`: how tests/test.sh is run."""

    timeout_sec: float = 600.0
    """Wall clock for the whole verification."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment for test.sh; `${VAR}` and `${VAR:-default}` are resolved from the host."""
    user: str | int | None = None
    """User that runs test.sh (default: the environment's default user)."""
    environment_mode: Literal["shared", "separate"] | None = None
    """"shared" verifies in the agent's environment (default); "separate" in a fresh one."""
    environment: EnvironmentConfig | None = None
    """Environment for a separate verifier; setting it implies separate mode."""
    network_mode: NetworkMode | None = None
    """Network override during verification."""
    allowed_hosts: tuple[str, ...] | None = None
    """Allowlist override during verification."""
    collect: tuple[CollectStep, ...] = ()
    """Commands run after the agent, before artifact collection."""


@dataclass(frozen=True, kw_only=True)
class AgentPhaseConfig:
    """`[agent]`: limits for the agent phase."""

    timeout_sec: float | None = None
    """Wall clock for the agent; None means no limit."""
    user: str | int | None = None
    """User the agent's commands run as."""
    network_mode: NetworkMode | None = None
    """Network override during the agent phase."""
    allowed_hosts: tuple[str, ...] | None = None
    """Allowlist override during the agent phase."""


@dataclass(frozen=True, kw_only=True)
class SolutionConfig:
    """`[solution]`: the oracle's reference solution."""

    env: dict[str, str] = field(default_factory=dict)
    """Environment for solution/solve.sh."""


@dataclass(frozen=True, kw_only=True)
class Artifact:
    source: str
    """Path in the environment."""
    destination: str | None = None
    """Path under the trial's artifacts/ directory."""
    exclude: tuple[str, ...] = ()
    """Glob patterns left out."""
    service: str | None = None
    """Compose service to collect from."""


@dataclass(frozen=True, kw_only=True)
class StepConfig:
    """`[[steps]]`: one step of a multi-step task."""

    name: str
    """Step name; also the directory under steps/."""
    agent: AgentPhaseConfig | None = None
    """Agent limits for this step."""
    verifier: VerifierConfig | None = None
    """Verifier settings for this step."""
    min_reward: float | dict[str, float] | None = None
    """Reward needed to continue to the next step."""
    healthcheck: Healthcheck | None = None
    """Readiness check before this step."""
    artifacts: tuple[str | Artifact, ...] = ()
    """Artifacts collected after this step."""


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """The whole of `task.toml`."""

    schema_version: str = field(default=SCHEMA_VERSION, metadata=_alias("version"))
    """Schema version; the legacy root key `version` is read as this."""
    source: str | None = None
    """Name of the dataset the task came from."""
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    """How step rewards combine in multi-step tasks (default: mean)."""
    artifacts: tuple[str | Artifact, ...] = ()
    """Paths collected into the trial's artifacts/ after the run."""
    task: PackageInfo | None = None
    """`[task]` package identity."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form metadata (instance id, repository, difficulty, tests, ...)."""
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    """`[verifier]`."""
    agent: AgentPhaseConfig = field(default_factory=AgentPhaseConfig)
    """`[agent]`."""
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    """`[environment]`."""
    solution: SolutionConfig = field(default_factory=SolutionConfig)
    """`[solution]`."""
    steps: tuple[StepConfig, ...] = ()
    """`[[steps]]` of a multi-step task."""


def parse_task_config(text: str, *, where: str, warnings: list[str] | None = None) -> TaskConfig:
    """Parse task.toml text; errors name `where` and the offending key. An unknown key is an error, unless
    `warnings` is a list: then its message goes there and the key is ignored (what Harbor's loader does)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecordError(f"{where}: not valid TOML: {e}") from None
    return load_record(TaskConfig, data, where=where, unknown=warnings)


def load_task_config(path: Path, *, warnings: list[str] | None = None) -> TaskConfig:
    return parse_task_config(path.read_text(encoding="utf-8"), where=str(path), warnings=warnings)


def dump_task_config(config: TaskConfig) -> str:
    """Canonical TOML for `config`: new-style keys only, defaults left out, schema version first."""
    data = record_to_dict(config)
    data = {"schema_version": config.schema_version, **data}
    return tomli_w.dumps(_without_none(data))


def _without_none(value: Any) -> Any:
    """`value` with the None entries of its tables dropped at every depth: TOML has no null, and free-form
    metadata may hold one (a None inside an array stays an error)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_without_none(v) for v in value]
    return value

