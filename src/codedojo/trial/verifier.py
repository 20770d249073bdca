"""Verification with Harbor's semantics: clear stale results, upload tests/, run test.sh, read the reward.

Order and rules (Harbor 0.25 `Verifier.verify`): everything in /logs/verifier and /tests is deleted first,
as root (so a reward or a test the agent planted never counts); the task's tests/ (for a step of a
multi-step task: the shared tests/ with the step's tests/ merged over it) is uploaded to /tests only now,
with test.sh made executable on the host (see trial.staging: a 644 test.sh runs, as in Harbor);
`/tests/test.sh` (the step's own when it has one) runs from the task workdir as `[verifier].user` (the
image's default user when unset) with `[verifier].env` (the step's over the task's; `${VAR}` templates
resolved from the host, a missing variable is an error naming it), its stdout and stderr in
/logs/verifier/test-stdout.txt; its exit code is ignored; then /logs/verifier/reward.json is read, or
else reward.txt (one number); when neither exists the error gives the exit code and the end of
test-stdout.txt.

One step is ours, not Harbor's: before the tests run, compiled Python bytecode the repository does not
track is removed from the workdir (`__pycache__` folders, and untracked `*.pyc`/`*.pyo` files elsewhere).
Python imports a cached module whose recorded source size and mtime match the file, and a sourceless
`name.pyc` in place of a deleted `name.py`: bytecode of a fixed module passed off that way would pass the
tests with the bug still in the source (tests/test_hacking.py plays both). Python rebuilds what it needs.

reward.json is a flat JSON object with any keys whose values are numbers or booleans (true = 1, false =
0), as Harbor accepts. The scalar codedojo trains on is its `reward` key; when there is none it is the
mean of all the values, and `reward` is added with it (one key: that value). Harbor itself has no scalar
for several keys: its metrics average each key over trials separately; the mean of the keys is the
scalar whose average over trials equals the mean of those per-key averages. A missing, empty or
malformed reward (or an empty object) is a verifier error, never a zero.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping

from codedojo.sandbox.base import Sandbox, SandboxPathError
from codedojo.tasks.config import StepConfig
from codedojo.tasks.env import MissingVariable, resolve_env
from codedojo.tasks.task import Task
from codedojo.trial.staging import staged

_RESET = (
    "if [ -L /logs/verifier ] || [ ! -d /logs/verifier ]; then rm -rf /logs/verifier; mkdir -p /logs/verifier; fi; "
    "chmod -R u+rwX /logs/verifier 2>/dev/null; find /logs/verifier -mindepth 1 -delete && chmod 777 /logs/verifier"
)
_CLEAR_BYTECODE = r"""
cd "$1" 2>/dev/null || exit 0
find . -name .git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --others --ignored --exclude-standard -- '*.pyc' '*.pyo' | xargs -0 -r rm -f --
    git ls-files -z --others --exclude-standard -- '*.pyc' '*.pyo' | xargs -0 -r rm -f --
else
    find . -name .git -prune -o -type f \( -name '*.pyc' -o -name '*.pyo' \) -exec rm -f {} + 2>/dev/null
fi
exit 0
"""
"""Argument: the workdir. Removes bytecode the repository does not track (see the module docstring)."""
_OUTPUT = "/logs/verifier/test-stdout.txt"
_RUN = f"/tests/test.sh > {_OUTPUT} 2>&1"
_HINT_BYTES = 300


class VerifierError(RuntimeError):
    """Verification produced no valid reward."""


def verifier_env(task: Task, host_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment test.sh runs with: `[verifier].env`, the step's `[verifier].env` over it, templates
    resolved; MissingVariable names a variable the host lacks."""
    env = dict(task.config.verifier.env)
    section = "[verifier].env"
    step = _step_config(task)
    if step is not None and step.verifier is not None:
        env.update(step.verifier.env)
        section = f"[verifier].env (with steps '{step.name}')"
    return resolve_env(env, section=section, host_env=host_env)


def verifier_user(task: Task) -> str | int | None:
    """The step's `[verifier].user`, else the task's; None is the image's default user."""
    step = _step_config(task)
    if step is not None and step.verifier is not None and step.verifier.user is not None:
        return step.verifier.user
    return task.config.verifier.user


def _step_config(task: Task) -> StepConfig | None:
    return next((s for s in task.config.steps if s.name == task.step), None) if task.step else None


def _shown(value: object) -> str:
    """`value`'s repr cut to a line: a reward file can be megabytes, an error message should not be."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


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
        if not isinstance(v, int | float) or not math.isfinite(v):
            raise VerifierError(f"reward.json: {_shown(key)} is {_shown(v)}, not a finite number or a boolean")
        rewards[key] = float(v)  # True -> 1.0, False -> 0.0
    if "reward" not in rewards:
        rewards["reward"] = sum(rewards.values()) / len(rewards)
    return rewards


def parse_reward_txt(data: bytes) -> dict[str, float]:
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise VerifierError("reward.txt is empty")
    try:
        value = float(text)
    except ValueError:
        raise VerifierError(f"reward.txt holds {_shown(text)}, not a number") from None
    if not math.isfinite(value):
        raise VerifierError(f"reward.txt holds {_shown(text)}, not a finite number")
    return {"reward": value}


async def verify(task: Task, sandbox: Sandbox, *, timeout_sec: float) -> dict[str, float]:
    """Run the task's (or the step's) verifier in `sandbox` and return its rewards; raises VerifierError."""
    try:
        env = verifier_env(task)
    except MissingVariable as e:
        raise VerifierError(str(e)) from None
    reset = await sandbox.exec(_RESET, timeout_sec=60, user="root")
    if reset.return_code != 0:
        raise VerifierError(f"could not clear /logs/verifier: {reset.stderr.strip()[:500]}")
    clear = await sandbox.exec("sh -c " + shlex.join([_CLEAR_BYTECODE, "clear", sandbox.workdir]), timeout_sec=120,
                               user="root")
    if clear.return_code != 0 or clear.timed_out:
        raise VerifierError(f"could not clear compiled bytecode from {sandbox.workdir}: {clear.stderr.strip()[:500]}")
    sources = task.test_sources
    if not sources:
        raise VerifierError(f"{task.path}: no tests/ directory to upload")
    with staged(sources, executable="test.sh") as tests:
        await sandbox.upload_dir(tests, "/tests")
    result = await sandbox.exec(_RUN, env=env, timeout_sec=timeout_sec, user=verifier_user(task))
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
    raise VerifierError(f"tests/test.sh wrote neither /logs/verifier/reward.json nor reward.txt "
                        f"({await _output_hint(sandbox, return_code=result.return_code)})")


async def _output_hint(sandbox: Sandbox, *, return_code: int) -> str:
    """The exit code and the end of test.sh's output: it went to test-stdout.txt, so the exec's own stdout
    and stderr are empty; the end is where a failing script says why."""
    tail = await sandbox.exec(f"tail -c {_HINT_BYTES} {_OUTPUT}", timeout_sec=30, user="root")
    text = tail.stdout.strip() if tail.return_code == 0 else ""
    return f"test.sh exited {return_code}; its output ends: {text}" if text else f"test.sh exited {return_code}"
