"""The agent loop: ask the model for one bash command, run it in the sandbox, show it the output, repeat.

Behaviour follows mini-swe-agent v2 (our own prompts): one command per reply; each command in a fresh
shell in the task's workdir; the episode is submitted when a command's output starts with the line
`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` and it exits 0; a reply without exactly one command gets a
corrective message, and the episode ends after `max_format_errors` of those in a row. Limits: turns,
wall clock, per-command timeout (partial output is returned), tokens per reply, total context.

Every way an episode ends is a status (codedojo.trial.result.EpisodeStatus), never an exception: the
loop catches engine and sandbox failures and reports them as infrastructure statuses with the partial
trajectory attached.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from codedojo.agent.actions import BASH_TOOL, ActionFormat, FormatError, format_for_template, parse_action
from codedojo.agent.prompts import SUBMIT_SENTINEL, PromptProfile, get_profile, render
from codedojo.agent.transcript import Transcript
from codedojo.inference.errors import ContextLengthError, InferenceError
from codedojo.inference.protocol import Engine, SamplingParams, eos_token_ids
from codedojo.sandbox.base import ExecResult, Sandbox, SandboxError
from codedojo.tasks.task import Task
from codedojo.trial.agents import AgentOutcome
from codedojo.trial.status import EpisodeStatus
from codedojo.trial.trajectory import Trajectory, Turn

# A reply needs at least this many tokens of room; with less the context budget counts as spent.
MIN_REPLY_TOKENS = 8


def episode_id_for(task_name: str, seed: int | None) -> str:
    """An episode's id (its trajectory file's name and the engine's session key): reproducible for a seeded
    episode, random otherwise."""
    suffix = f"s{seed:010d}" if seed is not None else uuid.uuid4().hex[:12]
    return f"{task_name[:40].replace('/', '_')}-{suffix}"


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Limits and choices of the agent loop. Defaults are the reference workflow's."""

    max_steps: int = 75
    """Model replies per episode."""
    episode_timeout_sec: float = 1800.0
    """Wall clock of the whole agent phase (the task's [agent].timeout_sec also applies)."""
    command_timeout_sec: float = 120.0
    """Wall clock of one command; its partial output is shown to the model."""
    max_new_tokens: int = 1024
    """Tokens per reply."""
    max_context_tokens: int = 32768
    """Tokens of the whole conversation (prompt, replies and outputs)."""
    max_format_errors: int = 3
    """Consecutive replies without exactly one command before the episode ends."""
    max_output_chars: int = 10000
    """Command output longer than this is shown as its head and tail with the elided count."""
    prompt_profile: str | None = None
    """"standard" or "small"; None lets the model spec decide."""
    action_format: ActionFormat | None = None
    """"fenced", "hermes" or "qwen3_coder"; None reads it off the chat template."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """Sampling of each reply (max_new_tokens is taken from above)."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_new_tokens", "max_context_tokens", "max_format_errors", "max_output_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"AgentConfig.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("episode_timeout_sec", "command_timeout_sec"):
            if not getattr(self, name) > 0:
                raise ValueError(f"AgentConfig.{name} must be positive, got {getattr(self, name)}")


def observation_variables(result: ExecResult, *, max_chars: int) -> dict[str, Any]:
    output = (result.stdout + result.stderr).removesuffix("\n")  # the template supplies the line break
    variables: dict[str, Any] = {"returncode": result.return_code, "timed_out": result.timed_out,
                                 "output": output, "elided_chars": 0, "head": "", "tail": ""}
    if len(output) > max_chars:
        half = max_chars // 2
        # the middle not shown includes what the sandbox already dropped (`truncated_bytes`): a command that
        # printed 100 MB is said to have lost ~100 MB, not the ~1 MB the sandbox kept
        variables.update(head=output[:half], tail=output[-half:],
                         elided_chars=len(output) - 2 * half + result.truncated_bytes)
    return variables


def is_submission(result: ExecResult) -> bool:
    lines = (result.stdout + result.stderr).lstrip().splitlines()
    return result.return_code == 0 and bool(lines) and lines[0].strip() == SUBMIT_SENTINEL


class AgentLoop:
    """Drives a model through a task; an `Agent` for the trial runner."""

    name = "agent"

    def __init__(self, engine: Engine, *, config: AgentConfig | None = None, profile: PromptProfile | None = None,
                 seed: int | None = None) -> None:
        self.engine = engine
        self.config = config or AgentConfig()
        self.profile = profile or get_profile(self.config.prompt_profile or "standard")
        self.action_format: ActionFormat = self.config.action_format or format_for_template(
            getattr(engine.tokenizer, "chat_template", None))
        self.seed = seed

    def opening_messages(self, task: Task, *, workdir: str) -> list[dict[str, Any]]:
        variables = self._variables(workdir=workdir) | {"task": task.instruction.strip()}
        messages = [{"role": "system", "content": render(self.profile.system_template, variables)}]
        for user, assistant in self.profile.examples:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": render(self.profile.instance_template, variables)})
        return messages

    def _variables(self, *, workdir: str) -> dict[str, Any]:
        return {"workdir": workdir, "sentinel": SUBMIT_SENTINEL, "max_steps": self.config.max_steps,
                "command_timeout": f"{self.config.command_timeout_sec:g}", "action_format": self.action_format}

    async def run(self, task: Task, sandbox: Sandbox, *, timeout_sec: float | None) -> AgentOutcome:
        episode = _Episode(self, task, sandbox, timeout_sec=timeout_sec)
        trajectory = await episode.play()
        details = {"episode_id": trajectory.episode_id, "turns": len(trajectory.turns),
                   "sampled_tokens": trajectory.num_sampled_tokens, "total_tokens": len(trajectory.token_ids),
                   "drift": trajectory.drift}
        return AgentOutcome(status=trajectory.status, detail=trajectory.detail, details=details,
                            trajectory=trajectory)


class _Episode:
    """The state of one episode; `play` runs it to an end status."""

    def __init__(self, agent: AgentLoop, task: Task, sandbox: Sandbox, *, timeout_sec: float | None) -> None:
        self.agent = agent
        self.config = agent.config
        self.task = task
        self.sandbox = sandbox
        budget = self.config.episode_timeout_sec if timeout_sec is None else min(timeout_sec,
                                                                                 self.config.episode_timeout_sec)
        self.deadline = time.monotonic() + budget
        self.episode_id = episode_id_for(task.name, agent.seed)
        self.turns: list[Turn] = []
        self.timings = {"generate": 0.0, "exec": 0.0}
        self.detail: str | None = None
        tools = [BASH_TOOL] if agent.action_format != "fenced" else None
        self.transcript = Transcript.start(agent.engine.tokenizer,
                                           agent.opening_messages(task, workdir=sandbox.workdir), tools=tools)
        self.prompt_length = len(self.transcript)

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    async def play(self) -> Trajectory:
        started = time.monotonic()
        try:
            status = await self._loop()
        finally:
            with contextlib.suppress(Exception):
                await self.agent.engine.end_session(self.episode_id)
        self.timings["total"] = time.monotonic() - started
        transcript = self.transcript
        drift = transcript.drift()
        return Trajectory(
            episode_id=self.episode_id, task_name=self.task.name, task_path=str(self.task.path), status=status,
            messages=transcript.messages, turns=self.turns, token_ids=list(transcript.token_ids),
            loss_mask=list(transcript.loss_mask), logprobs=list(transcript.logprobs),
            prompt_length=self.prompt_length, drift=drift, detail=self.detail, timings=self.timings,
        )

    async def _loop(self) -> EpisodeStatus:
        format_errors = 0
        for index in range(self.config.max_steps):
            if self._left() <= 0:
                return EpisodeStatus.EPISODE_TIMEOUT
            room = self.config.max_context_tokens - len(self.transcript)
            if room < MIN_REPLY_TOKENS:
                self.detail = f"the conversation reached {len(self.transcript)} tokens"
                return EpisodeStatus.CONTEXT_LIMIT
            params = replace(self.config.sampling, max_new_tokens=min(self.config.max_new_tokens, room),
                             seed=None if self.agent.seed is None else self.agent.seed * 1_000_003 + index)
            t0 = time.monotonic()
            try:
                completion = await asyncio.wait_for(
                    self.agent.engine.generate(self.transcript.token_ids, params, session_id=self.episode_id),
                    timeout=self._left())
            except TimeoutError:
                return EpisodeStatus.EPISODE_TIMEOUT
            except ContextLengthError as e:
                self.detail = str(e)
                return EpisodeStatus.CONTEXT_LIMIT
            except InferenceError as e:
                self.detail = f"{type(e).__name__}: {e}"
                return EpisodeStatus.ENGINE_ERROR
            generate_sec = time.monotonic() - t0
            self.timings["generate"] += generate_sec
            text, stop_text = self._decode(completion.token_ids, completion.finish_reason)
            self.transcript.add_sampled(completion.token_ids, completion.logprobs,
                                        message={"role": "assistant", "content": text})
            turn = Turn(index=index, prompt_tokens=completion.prompt_tokens, cached_tokens=completion.cached_tokens,
                        sampled_tokens=len(completion.token_ids), finish_reason=completion.finish_reason,
                        weight_version=completion.weight_version, generate_sec=generate_sec)
            action = parse_action(text, fmt=self.agent.action_format)
            if completion.finish_reason == "length" and len(self.transcript) >= self.config.max_context_tokens:
                self.turns.append(replace(turn, format_error="context budget spent mid-reply"))
                self.detail = "the context budget ran out in the middle of a reply"
                return EpisodeStatus.CONTEXT_LIMIT
            if completion.finish_reason == "length" and isinstance(action, FormatError):
                action = FormatError(f"your reply was cut off after {len(completion.token_ids)} tokens; keep the "
                                     "thought short and give the command")
            if isinstance(action, FormatError):
                format_errors += 1
                self.turns.append(replace(turn, format_error=action.problem))
                if format_errors >= self.config.max_format_errors:
                    self.detail = f"{format_errors} replies in a row without exactly one command"
                    return EpisodeStatus.FORMAT_ERROR
                message = render(self.agent.profile.format_error_template,
                                 self.agent._variables(workdir=self.sandbox.workdir) | {"problem": action.problem})
                self._add({"role": "user", "content": message}, stop_text)
                continue
            format_errors = 0
            t0 = time.monotonic()
            try:
                result = await self.sandbox.exec(
                    "exec 2>&1\n" + action.command,
                    timeout_sec=max(0.001, min(self.config.command_timeout_sec, self._left())))
            except SandboxError as e:
                self.turns.append(replace(turn, command=action.command))
                self.detail = f"sandbox failed: {e}"
                return EpisodeStatus.SANDBOX_ERROR
            exec_sec = time.monotonic() - t0
            self.timings["exec"] += exec_sec
            self.turns.append(replace(turn, command=action.command, return_code=result.return_code,
                                       timed_out=result.timed_out, output_chars=len(result.stdout) + len(result.stderr),
                                       exec_sec=exec_sec))
            if is_submission(result):
                return EpisodeStatus.SUBMITTED
            if result.timed_out and self._left() <= 0:
                return EpisodeStatus.EPISODE_TIMEOUT
            variables = self.agent._variables(workdir=self.sandbox.workdir) | observation_variables(
                result, max_chars=self.config.max_output_chars)
            observation = render(self.agent.profile.observation_template, variables)
            role = "user" if self.agent.action_format == "fenced" else "tool"
            self._add({"role": role, "content": observation}, stop_text)
            if len(self.transcript) >= self.config.max_context_tokens:
                self.detail = f"the conversation reached {len(self.transcript)} tokens"
                return EpisodeStatus.CONTEXT_LIMIT
        self.detail = f"used all {self.config.max_steps} steps"
        return EpisodeStatus.STEP_LIMIT

    def _add(self, message: dict[str, Any], stop_text: str | None) -> None:
        self.transcript.add_message(message, stop_token_text=stop_text)

    def _decode(self, token_ids: tuple[int, ...], finish_reason: str) -> tuple[str, str | None]:
        """The reply's text without the stop token, and the stop token's text (None if none ended it)."""
        tokenizer = self.agent.engine.tokenizer
        ids = list(token_ids)
        stop_text = None
        stops = {*self.config.sampling.stop_token_ids, *eos_token_ids(tokenizer)}
        if finish_reason == "stop" and ids and ids[-1] in stops:
            stop_text = tokenizer.decode([ids[-1]], skip_special_tokens=False)
            ids = ids[:-1]
        return tokenizer.decode(ids, skip_special_tokens=False), stop_text
