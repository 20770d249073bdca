"""codedojo's agent loop as slime's custom generate function, and slime's rollout-log hook.

    --custom-generate-function-path codedojo.integrations.slime.generate
    --custom-rollout-log-function-path codedojo.integrations.slime.log_rollout_data

`generate(args, sample, sampling_params, evaluation=False)` runs one whole episode for one `Sample`:
the task named by `sample.metadata["task_path"]`, codedojo's agent loop against SGLang's `/generate`
(slime's router at `args.sglang_router_ip:args.sglang_router_port`, every turn of the episode sent with
`sample.session_id` as the routing key so consistent hashing keeps it on one engine's prefix cache),
the sandbox backend and limits from args / environment, and the verifier's reward under the run's
reward shape (a row's `metadata.reward_shape` wins). It fills `tokens` (prompt + response),
`response_length`, `loss_mask` and `rollout_log_probs` (both `response_length` long; logprob 0.0 where
the mask is 0), `reward`, `status`, `weight_versions` and `metadata`.

Invariant that keeps slime's step alive: whatever happens, the sample comes back with a float reward.
An infrastructure failure (sandbox, verifier, engine, a bad row) is a fully masked sample with reward
0.0, `remove_sample=True` and status FAILED, retried first up to agentic_max_infra_retries times; a
bare ABORTED sample with reward None would crash slime's reward post-processing in the synchronous loop.
When slime aborts the rollout (its abort waits for every pending generate call) the episode stops at its
next request and comes back the same way but with status ABORTED, which slime's abort path expects;
no retry starts after an abort. Cancellation of the coroutine still propagates.

slime is not imported here: statuses are taken from the sample's own class (`type(sample).Status`),
so the hook works with slime's `Sample` and with any object that has its fields.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
import uuid
from collections.abc import Mapping
from typing import Any

from codedojo.agent.loop import AgentConfig
from codedojo.inference.protocol import SamplingParams
from codedojo.inference.wire import sglang_to_params
from codedojo.integrations.agentic_metrics import log_rollout_data
from codedojo.integrations.slime_args import HookSettings, resolve_task_path
from codedojo.integrations.slime_engine import (
    SessionEngine,
    close_clients,
    load_tokenizer,
    shared_client,
    slime_abort_flag,
)
from codedojo.rollout.episodes import Episode, EpisodeRequest, RolloutConfig, run_episode
from codedojo.tasks.task import Task
from codedojo.train.samples import slime_sample
from codedojo.trial.runner import TrialOptions
from codedojo.trial.status import EpisodeStatus

__all__ = ["close_clients", "generate", "log_rollout_data"]

log = logging.getLogger(__name__)

# slime's sampling_params keys that codedojo's SamplingParams covers; the others (skip_special_tokens,
# no_stop_trim, spaces_between_special_tokens) only shape returned text, which the hook never reads.
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_new_tokens", "stop", "stop_token_ids", "sampling_seed")

async def generate(args: Any, sample: Any, sampling_params: Mapping[str, Any], evaluation: bool = False) -> Any:
    """slime's custom generate function: one agent episode for `sample`, filled in place and returned."""
    started = time.monotonic()
    if not getattr(sample, "session_id", None):
        sample.session_id = str(uuid.uuid4())
    settings = HookSettings.from_args(args, evaluation=evaluation)  # a broken launch fails loudly, once per call
    tokenizer = await load_tokenizer(settings.tokenizer_name)
    try:
        task = _task_for(sample, settings)
        agent_config = _agent_config(settings, sampling_params)
    except Exception as e:  # a bad row is this sample's failure, not the step's
        _fill_failure(sample, tokenizer=tokenizer, status=EpisodeStatus.INTERNAL_ERROR,
                      error=f"{type(e).__name__}: {e}")
        return sample
    client = shared_client(settings.router_url, tokenizer=tokenizer, timeout_sec=settings.query_timeout_sec)
    engine = SessionEngine(client, routing_key=sample.session_id, slime_aborted=slime_abort_flag(args))
    request = EpisodeRequest(task=task, group=_int(getattr(sample, "group_index", None)),
                             sample=_int(getattr(sample, "index", None)))
    rollout = RolloutConfig(max_infra_retries=settings.max_infra_retries, reward_shape=settings.reward_shape,
                            flagged_episodes=settings.flagged_episodes,
                            trial=TrialOptions(backend=settings.sandbox_backend, limits=settings.sandbox_limits))
    try:  # no retry starts once slime aborted the rollout
        episode = await run_episode(request, engine=engine, agent_config=agent_config, rollout=rollout,
                                    give_up=lambda: engine.aborted)
    except Exception:
        _fill_failure(sample, tokenizer=tokenizer, status=EpisodeStatus.INTERNAL_ERROR, error=traceback.format_exc())
        return sample
    fill_sample(sample, episode, tokenizer=tokenizer, evaluation=evaluation, aborted=engine.aborted)
    if hasattr(sample, "non_generation_time"):
        generate_sec = sum(t.generate_sec for t in episode.trajectory.turns) if episode.trajectory else 0.0
        sample.non_generation_time = max(0.0, time.monotonic() - started - generate_sec)
    return sample


def fill_sample(sample: Any, episode: Episode, *, tokenizer: Any, evaluation: bool = False,
                aborted: bool = False) -> None:
    """Write a finished episode into a slime `Sample` (the mapping of codedojo.train.samples.slime_sample).

    Without a valid reward the sample is fully masked with reward 0.0 and remove_sample; its status is
    FAILED, or ABORTED when slime aborted the rollout (slime re-queues or drops aborted groups itself)."""
    record = slime_sample(episode, index=_int(getattr(sample, "index", None)))
    infrastructure = not episode.valid
    tokens, response_length = record["tokens"], record["response_length"]
    loss_mask, logprobs = record["loss_mask"], record["rollout_log_probs"]
    if response_length == 0:  # no reply was sampled (e.g. the sandbox never started): one masked stand-in token
        tokens = (tokens or _prompt_tokens(sample, tokenizer)) + [_eos(tokenizer)]
        response_length, loss_mask, logprobs = 1, [0], [0.0]
    if infrastructure:
        loss_mask, logprobs = [0] * response_length, [0.0] * response_length
    sample.tokens = list(tokens)
    sample.response_length = response_length
    sample.loss_mask = list(loss_mask)
    sample.rollout_log_probs = [float(x) for x in logprobs]
    sample.response = tokenizer.decode(tokens[-response_length:], skip_special_tokens=False)
    sample.reward = 0.0 if episode.reward is None else float(episode.reward)
    sample.remove_sample = bool(getattr(sample, "remove_sample", False)) or infrastructure
    sample.status = type(sample).Status("aborted" if aborted and infrastructure else record["status"])
    sample.weight_versions = list(record["weight_versions"])
    extra = {k: v for k, v in record["metadata"].items() if k != "task_path"}
    sample.metadata = {**(sample.metadata or {}), **extra, "evaluation": evaluation,
                       "session_id": sample.session_id}
    cache = getattr(sample, "prefix_cache_info", None)
    if cache is not None and episode.trajectory is not None and hasattr(cache, "add"):
        for turn in episode.trajectory.turns:
            cache.add({"cached_tokens": turn.cached_tokens, "prompt_tokens": turn.prompt_tokens})


def _fill_failure(sample: Any, *, tokenizer: Any, status: EpisodeStatus, error: str) -> None:
    log.warning("codedojo generate: sample %s failed before its episode: %s", getattr(sample, "index", None),
                error.strip().splitlines()[-1] if error.strip() else error)
    sample.tokens = [*_prompt_tokens(sample, tokenizer), _eos(tokenizer)]
    sample.response_length = 1
    sample.loss_mask = [0]
    sample.rollout_log_probs = [0.0]
    sample.response = ""
    sample.reward = 0.0
    sample.remove_sample = True
    sample.status = type(sample).Status("failed")
    sample.weight_versions = []
    sample.metadata = {**(sample.metadata or {}), "episode_status": str(status), "error": error, "turns": 0,
                       "rewards": None, "timings": {}, "attempts": 0, "session_id": sample.session_id}


def _task_for(sample: Any, settings: HookSettings) -> Task:
    metadata = sample.metadata or {}
    task = Task.load(resolve_task_path(metadata, roots=settings.task_roots))
    row_shape = metadata.get("reward_shape")
    if row_shape is not None:  # the row's shape wins over the task's and the run's
        config = dataclasses.replace(task.config, metadata={**task.config.metadata, "reward_shape": row_shape})
        task = dataclasses.replace(task, config=config)
    return task


def _agent_config(settings: HookSettings, sampling_params: Mapping[str, Any]) -> AgentConfig:
    sampling = slime_sampling(sampling_params, default_max_new_tokens=settings.max_new_tokens)
    return AgentConfig(
        max_steps=settings.max_steps, episode_timeout_sec=settings.episode_timeout_sec,
        command_timeout_sec=settings.command_timeout_sec, max_new_tokens=sampling.max_new_tokens,
        max_context_tokens=settings.max_context_tokens, max_format_errors=settings.max_format_errors,
        prompt_profile=settings.prompt_profile, sampling=sampling,
    )


def slime_sampling(params: Mapping[str, Any], *, default_max_new_tokens: int) -> SamplingParams:
    """slime's per-sample sampling_params -> SamplingParams; max_new_tokens is a per-reply cap."""
    known = {k: params[k] for k in _SAMPLING_KEYS if params.get(k) is not None}
    known.setdefault("max_new_tokens", default_max_new_tokens)
    return sglang_to_params(known)


def _prompt_tokens(sample: Any, tokenizer: Any) -> list[int]:
    prompt = getattr(sample, "prompt", "")
    if isinstance(prompt, list):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    else:
        text = str(prompt or "")
    ids = list(tokenizer.encode(text, add_special_tokens=False)) if text else []
    return ids or [_eos(tokenizer)]


def _eos(tokenizer: Any) -> int:
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return int(eos) if isinstance(eos, int) else 0


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) else 0
