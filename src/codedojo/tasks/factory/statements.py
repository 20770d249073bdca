"""Problem statements for the three difficulty tiers, written from observed behaviour.

- `warmup` names the file and the line that is wrong (and quotes it): a small model can solve some of
  these by editing one line, which gives GRPO a signal at laptop scale.
- `easy` names the function (and its file).
- `hard` gives the symptom only: code to run, what it returns, what was expected.

The symptom in every tier comes from `Observation`s (the test run), never from the mutation; only the
location hint of warmup and easy uses where the edit is. Wording is picked from small template lists
with a seeded random generator, so the same seed gives the same text.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from codedojo.tasks.factory.observations import Observation

TIERS = ("warmup", "easy", "hard")

_OPENINGS = (
    "There is a bug in `{repo}`.",
    "`{repo}` does not behave as documented.",
    "A user of `{repo}` reports wrong behaviour.",
    "Bug report for `{repo}`.",
    "Something is broken in `{repo}`.",
)
_SHOW = (
    "Running this:",
    "Steps to reproduce:",
    "For example:",
    "This code shows it:",
)
_MORE = (
    "It also shows up elsewhere:",
    "A second example:",
    "The same problem appears here:",
)
_WARMUP_HINTS = (
    "The mistake is on line {line} of `{path}`:",
    "Look at line {line} of `{path}`; it is wrong:",
    "Line {line} of `{path}` is the faulty one:",
)
_WARMUP_MISSING = (
    "A statement is missing in `{path}`, just before line {line}:",
    "In `{path}`, something that should happen right before line {line} was left out:",
)
_EASY_HINTS = (
    "The problem is in `{function}` in `{path}`.",
    "The faulty code is `{function}` (in `{path}`).",
    "`{function}` in `{path}` is where it goes wrong.",
)
_EASY_MODULE_HINTS = (
    "The problem is in the module-level code of `{path}`.",
    "The faulty code is at the top level of `{path}`.",
)
_FAILING_TESTS = (
    "Currently failing: {tests}.",
    "These tests fail right now: {tests}.",
)
_CLOSINGS = (
    "Fix the library code so that it behaves as expected. Do not change the tests; they are restored "
    "before grading.",
    "Please fix the code (not the tests: the original tests are used for grading).",
    "Make the code behave correctly. The tests are reset to their original state before your fix is "
    "checked, so change the source, not the tests.",
)


@dataclass(frozen=True)
class Location:
    """Where the bug is, for the warmup and easy hints."""

    path: str
    """File relative to the repository root."""
    line: int
    """1-based line of the edit in the buggy file."""
    line_text: str
    """That line of the buggy file, stripped."""
    function: str | None
    """Qualified function name, None at module level."""
    missing: bool
    """The bug is a deleted statement (so the line shown is the one after the gap)."""


def _block(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def write_statement(
    *,
    tier: str,
    repo: str,
    observations: Sequence[Observation],
    location: Location,
    seed: str,
) -> str:
    """The instruction.md text for one task."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
    if not observations:
        raise ValueError("a problem statement needs at least one observed failure")
    rng = random.Random(seed)
    parts = [rng.choice(_OPENINGS).format(repo=repo)]
    if tier == "warmup":
        hints = _WARMUP_MISSING if location.missing else _WARMUP_HINTS
        parts.append(rng.choice(hints).format(line=location.line, path=location.path))
        parts.append(_block(location.line_text))
    elif tier == "easy":
        if location.function:
            parts.append(rng.choice(_EASY_HINTS).format(function=location.function, path=location.path))
        else:
            parts.append(rng.choice(_EASY_MODULE_HINTS).format(path=location.path))
    first, *rest = observations
    if first.snippet:
        parts.append(rng.choice(_SHOW))
        parts.append(_block(first.snippet))
    parts.append(first.summary)
    for extra in rest:
        parts.append(rng.choice(_MORE))
        if extra.snippet:
            parts.append(_block(extra.snippet))
        parts.append(extra.summary)
    if tier != "hard":
        tests = ", ".join(f"`{o.test_id}`" for o in observations)
        parts.append(rng.choice(_FAILING_TESTS).format(tests=tests))
    parts.append(rng.choice(_CLOSINGS))
    return "\n\n".join(parts) + "\n"


def pick_observations(observations: Sequence[Observation], *, limit: int = 2) -> list[Observation]:
    """The clearest few: ones quoting actual and expected values first, one per test function."""
    ranked = sorted(observations, key=lambda o: (not o.has_values, o.test_id))
    chosen: list[Observation] = []
    seen: set[str] = set()
    for obs in ranked:
        function = obs.test_id.split("[")[0]
        if function in seen:
            continue
        seen.add(function)
        chosen.append(obs)
        if len(chosen) == limit:
            break
    return chosen
