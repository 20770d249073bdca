"""Verification with Harbor's semantics: clear stale results, upload tests/, run test.sh, read the reward.

Order and rules (Harbor 0.25 `Verifier.verify`): everything in /logs/verifier is deleted first (so a
reward the agent planted never counts); tests/ is uploaded to /tests only now; `/tests/test.sh` runs
from the task workdir with `[verifier].env`, its stdout and stderr in /logs/verifier/test-stdout.txt;
its exit code is ignored; then /logs/verifier/reward.json (a flat object of finite numbers) is read, or
else reward.txt (one number). A missing, empty or malformed reward is a verifier error, never a zero.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping

from codedojo.sandbox.base import Sandbox, SandboxPathError
from codedojo.tasks.task import Task

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_RESET = (
    "if [ -L /logs/verifier ] || [ ! -d /logs/verifier ]; then rm -rf /logs/verifier; mkdir -p /logs/verifier; fi; "
    "chmod -R u+rwX /logs/verifier 2>/dev/null; find /logs/verifier -mindepth 1 -delete"
)
_RUN = "chmod +x /tests/test.sh 2>/dev/null; /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1"


class VerifierError(RuntimeError):
    """Verification produced no valid reward."""


def resolve_env(env: Mapping[str, str], host_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Expand `${VAR}` and `${VAR:-default}` in verifier env values from the host environment."""
    host = os.environ if host_env is None else host_env

    def expand(m: re.Match[str]) -> str:
        return host.get(m.group(1), m.group(2) if m.group(2) is not None else "")

    return {k: _ENV_REF.sub(expand, v) for k, v in env.items()}


def parse_reward_json(data: bytes) -> dict[str, float]:
    if not data.strip():
        raise VerifierError("reward.json is empty")
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise VerifierError(f"reward.json is not valid JSON: {e}") from None
    if not isinstance(value, dict) or not value:
        raise VerifierError("reward.json must be a non-empty JSON object of numbers")
    rewards = {}
    for key, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise VerifierError(f"reward.json: {key!r} is {v!r}, not a finite number")
        rewards[key] = float(v)
    if "reward" not in rewards:
        if len(rewards) != 1:
            raise VerifierError(f"reward.json has no 'reward' key (keys: {', '.join(sorted(rewards))})")
        rewards["reward"] = next(iter(rewards.values()))
    return rewards


def parse_reward_txt(data: bytes) -> dict[str, float]:
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise VerifierError("reward.txt is empty")
    try:
        value = float(text)
    except ValueError:
        raise VerifierError(f"reward.txt holds {text[:80]!r}, not a number") from None
    if not math.isfinite(value):
        raise VerifierError(f"reward.txt holds {text!r}, not a finite number")
    return {"reward": value}


async def verify(task: Task, sandbox: Sandbox, *, timeout_sec: float) -> dict[str, float]:
    """Run the task's verifier in `sandbox` and return its rewards; raises VerifierError."""
    reset = await sandbox.exec(_RESET, timeout_sec=60)
    if reset.return_code != 0:
        raise VerifierError(f"could not clear /logs/verifier: {reset.stderr.strip()[:500]}")
    await sandbox.upload_dir(task.tests_dir, "/tests")
    result = await sandbox.exec(_RUN, env=resolve_env(task.config.verifier.env), timeout_sec=timeout_sec)
    if result.timed_out:
        raise VerifierError(f"tests/test.sh ran past the verifier timeout of {timeout_sec:g}s")
    for name, parse in (("reward.json", parse_reward_json), ("reward.txt", parse_reward_txt)):
        try:
            data = await sandbox.read_file(f"/logs/verifier/{name}")
        except FileNotFoundError:
            continue
        except SandboxPathError as e:
            raise VerifierError(f"cannot read {name}: {e}") from None
        return parse(data)
    hint = f" (test.sh exited {result.return_code})" if result.return_code else ""
    raise VerifierError(f"tests/test.sh wrote neither /logs/verifier/reward.json nor reward.txt{hint}")
