"""slime's generate hook on real episodes: a `codedojo serve` process (tiny random model) behind a recording
router, the local sandbox, bundled and scripted tasks; the filled Sample fields and rewards are checked.

The stand-in Sample has exactly slime's field names and refuses any other attribute (tests/slime_support).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from codedojo.integrations import slime as hook
from codedojo.integrations.agentic_metrics import log_rollout_data
from codedojo.integrations.slime_engine import load_tokenizer
from codedojo.tasks.config import EnvironmentConfig
from codedojo.tasks.task import examples_dir
from codedojo.train.rollout_metrics import rollout_metrics
from conftest import MakeTask
from slime_support import Sample, Status

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 12, "stop": None,
            "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True,
            "spaces_between_special_tokens": False}


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    process = subprocess.Popen([sys.executable, "-m", "codedojo.cli", "serve", "--model", "tiny-llama", "--port", "0",
                                "--seed", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "serving" not in line:
            raise RuntimeError(f"codedojo serve did not start: {line}{process.stdout.read()}")
        yield line.split()[-1]
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class RecordingRouter:
    """Stands where slime's SGLang router stands: forwards to the server and records the routing keys.
    Replies to sessions named "abort-*" come back as SGLang answers requests that slime aborted."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.keys: list[str | None] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._forward)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _forward(self, request: web.Request) -> web.Response:
        key = request.headers.get("X-SMG-Routing-Key")
        if request.path == "/generate":
            self.keys.append(key)
        async with aiohttp.ClientSession() as http, http.post(
                self.upstream + request.path, data=await request.read(),
                headers={k: v for k, v in request.headers.items() if k.startswith("X-")} |
                {"Content-Type": "application/json"}) as reply:
            body = await reply.read()
            if request.path == "/generate" and (key or "").startswith("abort-"):
                data = json.loads(body)
                data["meta_info"]["finish_reason"] = {"type": "abort"}
                body = json.dumps(data).encode()
            return web.Response(body=body, status=reply.status, content_type="application/json")

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _args(port: int, **overrides: Any) -> SimpleNamespace:
    values = dict(sglang_router_ip="127.0.0.1", sglang_router_port=port, hf_checkpoint="tiny-llama",
                  rollout_max_response_len=12, rollout_max_context_len=4096, agentic_max_steps=2,
                  agentic_episode_timeout=60.0, agentic_eval_timeout=None, agentic_exec_timeout=10.0,
                  agentic_max_format_errors=1, agentic_max_infra_retries=0, agentic_sandbox_backend="local")
    return SimpleNamespace(**(values | overrides))


def _run(server_url: str, jobs: list[tuple[Sample, bool]], **overrides: Any) -> tuple[list[Sample], list[str | None]]:
    async def main() -> tuple[list[Sample], list[str | None]]:
        router = RecordingRouter(server_url)
        await router.start()
        try:
            args = _args(router.port, **overrides)
            done = await asyncio.gather(*(hook.generate(args, s, dict(SAMPLING), evaluation=e) for s, e in jobs))
        finally:
            await hook.close_clients()
            await router.stop()
        return list(done), router.keys

    return asyncio.run(main())


def _check_consistent(sample: Sample) -> None:
    n = sample.response_length
    assert n >= 1 and len(sample.tokens) > n
    assert len(sample.loss_mask) == n and len(sample.rollout_log_probs) == n
    assert set(sample.loss_mask) <= {0, 1}
    for mask, logprob in zip(sample.loss_mask, sample.rollout_log_probs, strict=True):
        if mask:
            assert math.isfinite(logprob) and logprob <= 0.0
        else:
            assert logprob == 0.0
    assert isinstance(sample.reward, float)
    assert sample.status is not Status.PENDING


def _scripted_task(make_task: MakeTask) -> Path:
    """A task whose verifier always reports half the failing tests fixed and nothing broken."""
    test_sh = ("#!/bin/bash\necho '{\"reward\": 0.0, \"fail_to_pass\": 0.5, \"pass_to_pass\": 1.0}' "
               "> /logs/verifier/reward.json\n")
    return make_task(test_sh=test_sh, name="half-fixed").path


def test_generate_fills_a_slime_sample_from_real_episodes(server_url: str, make_task: MakeTask) -> None:
    hello = examples_dir() / "hello-file"
    scripted = _scripted_task(make_task)
    jobs = [
        (Sample(group_index=0, index=0, prompt="Write hello.txt", metadata={"task_path": str(hello)}), False),
        (Sample(group_index=1, index=1, prompt="x", metadata={"task_path": str(scripted)}), False),
        (Sample(group_index=1, index=2, prompt="x", session_id="fixed-session",
                metadata={"task_path": str(scripted), "reward_shape": "fractional"}), False),
        (Sample(group_index=2, index=3, prompt="x", metadata={"task_path": str(scripted)}), True),
    ]
    samples, routed = _run(server_url, jobs)
    for sample in samples:
        _check_consistent(sample)
        assert sample.remove_sample is False and sample.status in (Status.COMPLETED, Status.TRUNCATED)
        assert sample.metadata["episode_status"] in ("format_error", "step_limit", "submitted")
        turns = sample.metadata["turns"]
        assert turns >= 1 and len(sample.weight_versions) == turns
        assert sum(sample.loss_mask) > 0  # the model's replies are trainable
        assert sample.loss_mask[0] == 1  # the response starts with the first reply
        assert sample.prefix_cache_info.total_prompt_tokens >= len(sample.tokens) - sample.response_length
        assert set(sample.metadata["timings"]) >= {"environment_setup", "agent", "verifier"}
    hello_sample, binary, fractional, evaluated = samples
    assert hello_sample.reward == 0.0 and hello_sample.metadata["task_path"] == str(hello)
    prompt = hello_sample.tokens[: len(hello_sample.tokens) - hello_sample.response_length]
    tokenizer = asyncio.run(load_tokenizer("tiny-llama"))
    assert "hello.txt" in tokenizer.decode(prompt)  # the opening prompt holds the task
    assert binary.reward == 0.0  # binary: not solved
    assert fractional.reward == 0.5  # the row's reward_shape wins over the run's
    assert fractional.session_id == "fixed-session"
    assert evaluated.metadata["evaluation"] is True
    # every request of an episode went to the router under that sample's session id
    assert set(routed) == {s.session_id for s in samples}
    assert sum(s.metadata["turns"] for s in samples) == len(routed)

    extra: dict[str, float] = {}
    assert log_rollout_data(0, SimpleNamespace(), samples, extra, 1.0) is False
    assert extra["agentic/removed_frac"] == 0.0 and extra["agentic/solved_frac"] == 0.0
    assert extra["agentic/turns_max"] == max(s.metadata["turns"] for s in samples)
    assert 0.0 < extra["agentic/trained_token_frac"] <= 1.0


def test_infrastructure_failures_come_back_masked_and_removed(server_url: str, make_task: MakeTask) -> None:
    # The local backend cannot run a prebuilt registry image: the sandbox never starts.
    unstartable = make_task(environment=EnvironmentConfig(docker_image="swerebenchv2/none:latest"),
                            name="needs-an-image").path
    scripted = _scripted_task(make_task)
    jobs = [
        (Sample(group_index=0, index=0, prompt="fix it", metadata={"task_path": str(unstartable)}), False),
        (Sample(group_index=0, index=1, prompt="no task path", metadata={}), False),
        (Sample(group_index=0, index=2, prompt="x", session_id="abort-1", metadata={"task_path": str(scripted)}),
         False),
    ]
    samples, routed = _run(server_url, jobs, agentic_max_infra_retries=1)
    for sample in samples:
        _check_consistent(sample)
        assert sample.remove_sample is True and sample.reward == 0.0  # never a bare sample with reward None
        assert sum(sample.loss_mask) == 0 and sample.session_id
    unstarted, no_path, aborted = samples
    assert unstarted.status is Status.FAILED and unstarted.metadata["episode_status"] == "sandbox_error"
    assert "did not start" in unstarted.metadata["error"] and unstarted.metadata["attempts"] == 2  # retried once
    assert no_path.status is Status.FAILED and no_path.metadata["episode_status"] == "internal_error"
    # slime aborted the rollout: the episode stops at once, is not retried, and says so
    assert aborted.status is Status.ABORTED and aborted.metadata["episode_status"] == "engine_error"
    assert aborted.metadata["attempts"] == 1 and routed == ["abort-1"]
    metrics = rollout_metrics(samples)
    assert metrics["agentic/removed_frac"] == 1.0 and metrics["agentic/trained_token_frac"] == 0.0


def test_metrics_read_local_trainer_records_too() -> None:
    records = [
        {"metadata": {"turns": t, "episode_status": s, "solved": s == "submitted", "attempts": 1,
                      "timings": {"agent": 2.0 * t}, "exec_timeouts": int(t > 5), "drift": t - 1},
         "remove_sample": False, "reward": float(s == "submitted"), "response_length": 10,
         "loss_mask": [1] * 5 + [0] * 5, "tokens": [7] * 14, "group_index": group,
         "weight_versions": [str(v) for v in range(t)]}
        for t, s, group in [(1, "submitted", 0), (3, "step_limit", 0), (10, "episode_timeout", 1),
                            (2, "format_error", 1)]
    ]
    m = rollout_metrics(records)
    assert m["agentic/turns_mean"] == 4.0 and m["agentic/turns_max"] == 10 and m["agentic/turns_p90"] == 10
    assert m["agentic/budget_hit_frac"] == 0.5 and m["agentic/solved_frac"] == 0.25
    assert m["agentic/status/submitted_frac"] == 0.25 and m["agentic/exec_timeout_frac"] == 0.25
    assert m["agentic/phase/agent_sec_mean"] == 8.0 and m["agentic/trained_token_frac"] == 0.5
    assert m["async/version_span"] == 9.0 and m["async/versions_in_batch"] == 10.0
    # group 0 has rewards 1 and 0 (mixed), group 1 has 0 and 0; 4 x 5 sampled of 4 x 14 tokens; drift 0+2+9+1
    assert (m["agentic/episodes"], m["agentic/valid"], m["agentic/reward_mean"]) == (4.0, 4.0, 0.25)
    assert m["agentic/mixed_group_frac"] == 0.5 and m["agentic/reward_by_status/submitted"] == 1.0
    assert (m["agentic/sampled_tokens"], m["agentic/total_tokens"], m["agentic/drift_tokens"]) == (20.0, 56.0, 12.0)
    # the local trainer's names for the same numbers
    local = rollout_metrics(records, prefix="rollout/")
    assert local["rollout/budget_hit_frac"] == 0.5 and "agentic/turns_mean" not in local
    assert local["async/version_span"] == 9.0
    json.dumps(m)
