"""What codedojo's slime hooks read from slime's `args` namespace and the job's environment, read once.

slime hands every hook one argparse namespace holding its own flags plus every key of the
`--custom-config-path` YAML (set as attributes after validation). The names below are the reference
tutorial's (`agentic_*` keys of its extra_config, `ASYNC_RL_REWARD_SHAPE`, `SLIME_AGENT_SANDBOX_CPU` /
`_MEMORY_MB`), plus the few codedojo adds (`agentic_sandbox_backend`, `agentic_sandbox_network`,
`agentic_max_infra_retries`, ...). A missing attribute means the default of `codedojo.config.ExtraConfig`
(or of the recipe field it stands for), so the hook behaves the same when slime runs without codedojo's
rendered YAML; in particular a missing `agentic_sandbox_network` means no network for the episode's sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codedojo.config.recipe import ExtraConfig
from codedojo.sandbox.base import SandboxLimits
from codedojo.trial.hacking import FlaggedEpisodes
from codedojo.trial.reward import REWARD_SHAPES, RewardShape

_EXTRA = ExtraConfig()
DEFAULT_QUERY_TIMEOUT_SEC = 600.0
"""One /generate request (the fork's agentic_query_timeout)."""


class HookConfigError(ValueError):
    """slime's args or the job's environment hold a value the hook cannot use."""


@dataclass(frozen=True, kw_only=True)
class HookSettings:
    """Everything one episode of the generate hook needs from `args` and the environment."""

    router_url: str
    """SGLang router (or single server) base URL: http://{sglang_router_ip}:{sglang_router_port}."""
    tokenizer_name: str
    """args.hf_checkpoint: an HF folder, or a model name codedojo knows (tests use tiny-llama)."""
    max_steps: int
    episode_timeout_sec: float
    """agentic_episode_timeout, or agentic_eval_timeout for evaluation episodes when set."""
    command_timeout_sec: float
    max_format_errors: int
    max_infra_retries: int
    max_new_tokens: int
    """Per reply: rollout_max_response_len (slime's sampling_params carry the same number)."""
    max_context_tokens: int
    """Whole episode: rollout_max_context_len."""
    query_timeout_sec: float
    reward_shape: RewardShape
    flagged_episodes: FlaggedEpisodes
    """agentic_flagged_episodes (the recipe's `flagged_episodes`): "zero" when absent."""
    sandbox_backend: str
    sandbox_limits: SandboxLimits
    task_roots: tuple[Path, ...]
    """Where relative task paths are looked up, in order (see `task_roots`)."""
    prompt_profile: str | None

    @classmethod
    def from_args(cls, args: Any, *, evaluation: bool, environ: Mapping[str, str] | None = None) -> HookSettings:
        env = os.environ if environ is None else environ

        def arg(name: str, default: Any) -> Any:
            value = getattr(args, name, None)
            return default if value is None else value

        ip, port = getattr(args, "sglang_router_ip", None), getattr(args, "sglang_router_port", None)
        if not ip or not port:
            raise HookConfigError("args.sglang_router_ip / args.sglang_router_port are not set: the generate hook "
                                  "runs inside slime's rollout manager, after the router has started")
        tokenizer_name = getattr(args, "hf_checkpoint", None)
        if not tokenizer_name:
            raise HookConfigError("args.hf_checkpoint is not set (the tokenizer of the served model)")
        episode_timeout = float(arg("agentic_episode_timeout", _EXTRA.agentic_episode_timeout))
        if evaluation and getattr(args, "agentic_eval_timeout", None) is not None:
            episode_timeout = float(args.agentic_eval_timeout)
        shape = str(arg("agentic_reward_shape", env.get("ASYNC_RL_REWARD_SHAPE", "binary")))
        if shape not in REWARD_SHAPES:
            raise HookConfigError(f"reward shape {shape!r} (ASYNC_RL_REWARD_SHAPE or agentic_reward_shape); "
                                  f"expected one of {REWARD_SHAPES}")
        flagged = str(arg("agentic_flagged_episodes", "zero"))
        if flagged not in ("zero", "keep"):
            raise HookConfigError(f"agentic_flagged_episodes = {flagged!r}: expected 'zero' or 'keep' (the recipe's "
                                  "flagged_episodes)")
        return cls(
            router_url=f"http://{ip}:{port}",
            tokenizer_name=str(tokenizer_name),
            max_steps=int(arg("agentic_max_steps", _EXTRA.agentic_max_steps)),
            episode_timeout_sec=episode_timeout,
            command_timeout_sec=float(arg("agentic_exec_timeout", _EXTRA.agentic_exec_timeout)),
            max_format_errors=int(arg("agentic_max_format_errors", _EXTRA.agentic_max_format_errors)),
            max_infra_retries=int(arg("agentic_max_infra_retries", _EXTRA.agentic_max_infra_retries)),
            max_new_tokens=int(arg("rollout_max_response_len", 1024)),
            max_context_tokens=int(arg("rollout_max_context_len", 32768)),
            query_timeout_sec=float(arg("agentic_query_timeout", DEFAULT_QUERY_TIMEOUT_SEC)),
            reward_shape=shape,  # type: ignore[arg-type]
            flagged_episodes=flagged,  # type: ignore[arg-type]
            sandbox_backend=str(arg("agentic_sandbox_backend", env.get("CODEDOJO_SANDBOX_BACKEND", "local"))),
            sandbox_limits=sandbox_limits(env, network=sandbox_network(args)),
            task_roots=task_roots(args, env),
            prompt_profile=getattr(args, "agentic_prompt_profile", None),
        )


def sandbox_limits(env: Mapping[str, str], *, network: bool | None = False) -> SandboxLimits:
    """SLIME_AGENT_SANDBOX_CPU / _MEMORY_MB (the tutorial's variables; unset means the task's own) and
    `network` (see `sandbox_network`)."""
    try:
        cpus = float(env["SLIME_AGENT_SANDBOX_CPU"]) if env.get("SLIME_AGENT_SANDBOX_CPU") else None
        memory = int(env["SLIME_AGENT_SANDBOX_MEMORY_MB"]) if env.get("SLIME_AGENT_SANDBOX_MEMORY_MB") else None
    except ValueError as e:
        raise HookConfigError(f"SLIME_AGENT_SANDBOX_CPU / SLIME_AGENT_SANDBOX_MEMORY_MB: {e}") from None
    return SandboxLimits(cpus=cpus, memory_mb=memory, network=network)


def sandbox_network(args: Any) -> bool | None:
    """args.agentic_sandbox_network (the recipe's `sandbox_network`, written to extra_config.yaml): False when
    absent, the safe default for a policy under training; None (the YAML's null) follows each task."""
    if not hasattr(args, "agentic_sandbox_network"):
        return False
    value = args.agentic_sandbox_network
    if value is not None and not isinstance(value, bool):
        raise HookConfigError(f"agentic_sandbox_network = {value!r}: expected true, false or null "
                              "(the recipe's sandbox_network)")
    return value


def task_roots(args: Any, env: Mapping[str, str]) -> tuple[Path, ...]:
    """Folders a relative `metadata.task_path` may be relative to, most specific first.

    codedojo's rows are relative to their JSONL file's folder (as `AgentTaskDataset` reads them): the
    training file is `args.prompt_data`, and rendered eval configs give each row `metadata.task_root`.
    CODEDOJO_TASK_ROOT overrides both; the tutorial's ASYNC_RL_TASK_ROOT comes last."""
    roots = [env.get("CODEDOJO_TASK_ROOT")]
    prompt_data = getattr(args, "prompt_data", None)
    if isinstance(prompt_data, str) and prompt_data:
        roots.append(str(Path(prompt_data).parent))
    roots.append(env.get("ASYNC_RL_TASK_ROOT"))
    return tuple(Path(r) for r in roots if r)


def resolve_task_path(metadata: Mapping[str, Any], *, roots: tuple[Path, ...]) -> Path:
    """The task directory a row names in `metadata.task_path`: absolute as is; relative from the row's own
    `metadata.task_root`, else the first of `roots` that holds it."""
    raw = metadata.get("task_path") if isinstance(metadata, Mapping) else None
    if not raw:
        raise HookConfigError("the sample has no metadata.task_path (rows must name their Harbor task directory)")
    path = Path(str(raw))
    if path.is_absolute():
        return path
    candidates = [Path(str(metadata["task_root"])) / path] if metadata.get("task_root") else []
    candidates += [root / path for root in roots]
    for candidate in candidates:
        if (candidate / "task.toml").is_file():
            return candidate
    return candidates[0] if candidates else path
