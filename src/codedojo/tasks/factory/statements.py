"""Problem statements for the difficulty tiers, written from observed behaviour.

The three tiers the factory deals out over its mutants, hardest last:
- `warmup` names the file and the line that is wrong (and quotes it);
- `easy` names the function (and its file);
- `hard` gives the symptom only: code to run, what it returns, what was expected.

Two curriculum tiers below warm-up restate the warm-up tier's own bugs (same mutants, same tests):
- `hinted` is warm-up plus the kind of bug ("the comparison on that line is the wrong way round");
- `guided` says what the faulty line should become, or what to insert where: it measures carrying out a
  known fix in a shell (reading the file, one exact edit, checking), not finding the fix.

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
"""The tiers dealt out over a repository's mutants, round-robin."""
CURRICULUM_TIERS = ("guided", "hinted")
"""Restatements of the warm-up tier's bugs, easiest first."""
ALL_TIERS = (*CURRICULUM_TIERS, *TIERS)
"""Every tier, easiest first."""

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


_BUG_KINDS = {
    "comparison_flip": "The comparison on that line points the wrong way.",
    "off_by_one": "A number on that line is off by one.",
    "wrong_constant": "A constant on that line has the wrong value.",
    "swapped_arguments": "Two arguments on that line are passed in the wrong order.",
    "swapped_operands": "Two operands on that line are the wrong way round.",
    "wrong_operator": "That line uses the wrong operator.",
    "negated_condition": "The condition on that line is inverted.",
    "dropped_statement": "A whole statement is missing there.",
    "wrong_return": "That line returns the wrong value.",
    "dropped_call": "A function call was dropped from that line: its argument is used as it is.",
    "wrong_variable": "That line uses the wrong variable.",
}
_GUIDED_REPLACE = (
    "Line {line} of `{path}` is wrong. It reads:",
    "The bug is on line {line} of `{path}`, which reads:",
    "Line {line} of `{path}` currently reads:",
)
_GUIDED_REPLACE_MANY = (
    "Lines {line}-{end} of `{path}` are wrong. They read:",
    "The bug is on lines {line}-{end} of `{path}`, which read:",
)
_GUIDED_BECOME = ("Change it to:", "It should read:", "Replace it with:")
_GUIDED_BECOME_MANY = ("Change them to:", "They should read:", "Replace them with:")
_GUIDED_INSERT = (
    "A line is missing in `{path}`. Insert it right before line {line}:",
    "In `{path}`, put this line just before line {line}:",
)
_GUIDED_INSERT_MANY = (
    "Lines are missing in `{path}`. Insert them right before line {line}:",
)


@dataclass(frozen=True)
class Fix:
    """The edit that undoes the bug, in whole lines of the buggy file (for the guided tier)."""

    line: int
    """1-based first line of the buggy file to change (or to insert before)."""
    old: tuple[str, ...]
    """Lines of the buggy file to replace (empty: an insertion)."""
    new: tuple[str, ...]
    """Lines of the fixed file, indentation included."""


def fix_between(buggy: str, fixed: str) -> Fix:
    """The one-hunk edit from `buggy` to `fixed` source (a mutant changes one place)."""
    import difflib

    a, b = buggy.splitlines(), fixed.splitlines()
    changes = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not changes:
        raise ValueError("the buggy and the fixed source are the same")
    first, last = changes[0], changes[-1]
    i1, i2, j1, j2 = first[1], last[2], first[3], last[4]
    return Fix(line=i1 + 1, old=tuple(a[i1:i2]), new=tuple(b[j1:j2]))


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
    bug_kind: str = ""
    """The mutation operator (for the hinted tier)."""
    fix: Fix | None = None
    """The reference edit (for the guided tier)."""


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
    if tier not in ALL_TIERS:
        raise ValueError(f"unknown tier {tier!r}; choose one of {', '.join(ALL_TIERS)}")
    if not observations:
        raise ValueError("a problem statement needs at least one observed failure")
    rng = random.Random(seed)
    parts = [rng.choice(_OPENINGS).format(repo=repo)]
    if tier == "guided":
        parts.extend(_guided(location, rng))
    elif tier in ("warmup", "hinted"):
        hints = _WARMUP_MISSING if location.missing else _WARMUP_HINTS
        parts.append(rng.choice(hints).format(line=location.line, path=location.path))
        parts.append(_block(location.line_text))
        if tier == "hinted":
            if location.bug_kind not in _BUG_KINDS:
                raise ValueError(f"no hint for bug kind {location.bug_kind!r}")
            parts.append(_BUG_KINDS[location.bug_kind])
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


def _guided(location: Location, rng: random.Random) -> list[str]:
    fix = location.fix
    if fix is None:
        raise ValueError("a guided statement needs the reference fix")
    if not fix.old:
        choices = _GUIDED_INSERT if len(fix.new) == 1 else _GUIDED_INSERT_MANY
        return [rng.choice(choices).format(line=fix.line, path=location.path), _block("\n".join(fix.new))]
    end = fix.line + len(fix.old) - 1
    one = end == fix.line
    opening = rng.choice(_GUIDED_REPLACE if one else _GUIDED_REPLACE_MANY).format(line=fix.line, end=end,
                                                                                 path=location.path)
    if not fix.new:
        return [opening, _block("\n".join(fix.old)), "Delete it." if one else "Delete them."]
    become = rng.choice(_GUIDED_BECOME if one else _GUIDED_BECOME_MANY)
    return [opening, _block("\n".join(fix.old)), become, _block("\n".join(fix.new))]


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
