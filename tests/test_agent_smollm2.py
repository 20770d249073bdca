"""Real SmolLM2 episodes keep token-faithful trajectories (the model's own sampling, not a script)."""

from __future__ import annotations

import asyncio
import math

import pytest

from codedojo.agent.loop import AgentConfig, AgentLoop
from codedojo.inference.engine import LocalEngine
from codedojo.inference.protocol import SamplingParams
from codedojo.tasks.task import Task, examples_dir
from codedojo.trial import TrialResult, run_trial


@pytest.mark.slow
def test_real_smollm2_episodes_round_trip() -> None:
    config = AgentConfig(max_steps=2, max_new_tokens=24, max_context_tokens=4096, prompt_profile="small",
                         sampling=SamplingParams(temperature=0.8))
    task = Task.load(examples_dir() / "hello-file")

    async def go() -> tuple[list[TrialResult], object]:
        engine = LocalEngine.from_spec("smollm2-135m-instruct")
        try:
            results = await asyncio.gather(*(run_trial(task, AgentLoop(engine, config=config, seed=s))
                                             for s in (1, 2)))
            return list(results), engine.tokenizer
        finally:
            await engine.close()

    results, tok = asyncio.run(go())
    for result in results:
        assert not result.status.is_infrastructure, result.error
        trajectory = result.trajectory
        trajectory.validate()
        ends_with_reply = trajectory.messages[-1]["role"] == "assistant"
        rendered = tok.apply_chat_template(trajectory.messages, tokenize=False,  # type: ignore[attr-defined]
                                           add_generation_prompt=not ends_with_reply)
        kept = tok.decode(trajectory.token_ids, skip_special_tokens=False)  # type: ignore[attr-defined]
        # the kept tokens decode to the conversation; a final reply may lack what the template appends after it
        assert rendered.startswith(kept) and rendered[len(kept):] in ("", "\n", "<|im_end|>\n")
        sampled = [i for i, m in enumerate(trajectory.loss_mask) if m]
        assert len(sampled) == sum(t.sampled_tokens for t in trajectory.turns) > 0
        assert all(math.isfinite(trajectory.logprobs[i]) and trajectory.logprobs[i] <= 0 for i in sampled)
        assert any(trajectory.logprobs[i] < 0 for i in sampled)
        if len(trajectory.turns) > 1:
            assert trajectory.turns[1].cached_tokens > 0  # the second turn reused the session's KV cache
