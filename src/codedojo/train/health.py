"""Health checks that catch a run whose rewards lie, evaluated after every step.

The failures that cost most in RL runs are silent: a grader that scores everything 0 (or 1), a task that is
"solved" without the agent doing anything, an engine left on stale weights, groups that never differ so GRPO
learns nothing, a training reward that has nothing to do with the held-out one. Each check below reads the
metrics the trainer already writes (rows of metrics.jsonl) and names what it saw and what usually causes it:

    identical_rewards     every reward of the last N steps was the same value (0 or 1 everywhere: a grader or
                          task bug, or a policy that cannot move)
    no_mixed_groups       no group with mixed rewards in the last N steps: GRPO's update is zero
    verifier_errors       the share of episodes whose verifier crashed, timed out or wrote no reward
    solved_without_work   solved episodes that ran no command but the submission
    logprob_mismatch      the trainer's and the sampler's logprobs of the same tokens differ by more than
                          precision explains (bf16 training against an fp32 engine measured 1e-3 to 8e-3 a
                          token): the engine is not sampling the weights being trained
    train_eval_gap        the training reward and the latest held-out pass@1 differ by more than the gap and
                          by more than three of the largest standard errors their sizes allow (0.5 over the
                          square root of the episodes and of the tasks): one of the two is scored wrongly

`HealthConfig.action` says what a finding does: "warn" prints it and logs `health/<check>` = 1 in the step's
row; "stop" does that and then stops the run after the step's checkpoint (nothing is lost: rerun with the same
command and a looser setting to continue); "off" runs no check. `check_step` and `check_evaluation` are pure
functions of the metrics rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codedojo.config.recipe import HealthConfig


class RunUnhealthy(RuntimeError):
    """A health check fired with `action="stop"`; the message names each finding and how to go on."""


@dataclass(frozen=True)
class Finding:
    check: str
    message: str


def check_step(train_rows: Sequence[dict[str, Any]], config: HealthConfig) -> list[Finding]:
    """What the latest training step (the last of `train_rows`, earlier ones for the checks over N steps) shows
    wrong, under `config`."""
    if config.action == "off" or not train_rows:
        return []
    last = train_rows[-1]
    found: list[Finding] = []
    recent = train_rows[-config.identical_reward_steps:]
    if len(recent) == config.identical_reward_steps and all(_same(r) for r in recent) \
            and len({r["rollout/reward_min"] for r in recent}) == 1:
        found.append(Finding("identical_rewards", f"every episode of the last {len(recent)} steps got reward "
                             f"{recent[0]['rollout/reward_min']:g}: check the verifier on a solved and an "
                             "unsolved task (`codedojo tasks check`), or the tasks' difficulty for this model"))
    recent = train_rows[-config.no_mixed_group_steps:]
    if len(recent) == config.no_mixed_group_steps and all(r.get("rollout/mixed_group_frac", 0.0) == 0.0
                                                          for r in recent):
        found.append(Finding("no_mixed_groups", f"no group had mixed rewards in the last {len(recent)} steps, so "
                             "GRPO learned nothing from them: use tasks the model solves sometimes, larger "
                             "groups (n_samples_per_prompt) or over-sampling with dynamic sampling"))
    errors = last.get("rollout/status/verifier_error_frac", 0.0)
    if errors > config.max_verifier_error_frac:
        found.append(Finding("verifier_errors", f"{errors:.0%} of this step's episodes had a verifier error "
                             f"(limit {config.max_verifier_error_frac:.0%}): read a trial's verifier output "
                             "(codedojo trial TASK) before trusting any reward"))
    lazy = last.get("rollout/solved_without_command", 0.0)
    if lazy > config.max_solved_without_command:
        found.append(Finding("solved_without_work", f"{lazy:g} episode(s) of this step were solved without "
                             "running a command: the task passes unchanged or its grader is broken; check it "
                             "with `codedojo tasks check` (a nop agent must score 0)"))
    mismatch = last.get("train/train_rollout_logprob_abs_diff")
    if mismatch is not None and mismatch > config.max_logprob_mismatch:
        found.append(Finding("logprob_mismatch", f"trainer and sampler logprobs differ by {mismatch:.2e} a token "
                             f"(limit {config.max_logprob_mismatch:.0e}; bf16 against fp32 gives up to ~8e-3): "
                             "the engine may be sampling other weights than the trainer's"))
    return found


def _same(row: dict[str, Any]) -> bool:
    return "rollout/reward_min" in row and row["rollout/reward_min"] == row.get("rollout/reward_max")


def check_evaluation(train_rows: Sequence[dict[str, Any]], evaluation: dict[str, Any], config: HealthConfig
                     ) -> list[Finding]:
    """An evaluation's pass@1 per eval set (`evaluation`: its metrics row) against the training reward of the
    last three steps before it."""
    if config.action == "off":
        return []
    recent = train_rows[-3:]
    episodes = sum(r.get("rollout/valid", 0.0) for r in recent)
    if not episodes:
        return []
    reward = sum(r["rollout/reward_mean"] * r.get("rollout/valid", 0.0) for r in recent) / episodes
    # The largest standard error a mean of values in [0, 1] can have over this many draws: an estimate from a few
    # tasks can be 0 (every task scored alike), so the bound, not the estimate, decides what noise covers.
    train_se = 0.5 / math.sqrt(episodes)
    found = []
    for key, value in evaluation.items():
        if not key.endswith("/pass@1") or value is None:
            continue
        name = key.removeprefix("eval/").removesuffix("/pass@1")
        tasks = evaluation.get(f"eval/{name}/tasks")
        se = 0.5 / math.sqrt(tasks) if tasks else evaluation.get(f"eval/{name}/pass@1_stderr") or 0.0
        gap = reward - value
        if abs(gap) > config.train_eval_gap and abs(gap) > 3 * math.hypot(train_se, se):
            found.append(Finding("train_eval_gap", f"training reward {reward:.2f} (last {len(recent)} steps) against "
                                 f"held-out pass@1 {value:.2f} on {name}: a gap of {gap:+.2f} (limit "
                                 f"{config.train_eval_gap:g}) is more than task difficulty explains; score a few "
                                 "episodes of each by hand"))
    return found


def report(findings: Sequence[Finding], *, step: int, config: HealthConfig) -> str:
    """The message a user sees for a step's findings."""
    lines = [f"health check after step {step}: {f.check}: {f.message}" for f in findings]
    if config.action == "stop":
        lines.append("the run stopped after saving this step (health.action = 'stop'); rerun the same command "
                     "with --set 'health={action=\"warn\"}' (or a looser limit) to continue")
    return "\n".join(lines)
