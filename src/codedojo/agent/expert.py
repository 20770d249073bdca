"""Demonstrations: a scripted expert that knows a task's reference fix and works like a careful engineer.

The expert learns the fix by running the task's reference solution in a sandbox and reading `git diff`
(any task whose workdir is a git repository works). It then acts through the ordinary agent loop and a
fresh sandbox, in one of three routines:

- guided tasks (the statement gives the edit): look at the line, write the statement's line, run the
  suite, submit;
- hinted and warm-up tasks (the statement names the line, not the fix): look at the line and its
  neighbours and run the tests in one command, then edit the line and rerun the tests in one command per
  attempt, as a person does who finds the fix by trial: first some plausible wrong edits of that line (lines
  one mutation away from it, of the hinted kind when the statement names one; `line_variants`), each shown
  failing, then the right one, then submit. It submits as soon as a run passes;
- other tasks: look, sometimes reproduce the failure, edit with one shell command, rerun the failing
  tests, submit.

Thoughts, command choices and the number of wrong attempts are drawn from a seeded generator, so the data
is not one template. Its episodes are ordinary trajectories, verified by the task's own tests; only the
solved ones are kept.
"""

from __future__ import annotations

import ast
import asyncio
import random
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codedojo.agent.loop import AgentConfig, AgentLoop
from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.inference.protocol import Completion, SamplingParams
from codedojo.sandbox import start_sandbox
from codedojo.tasks.factory.mutations import apply_site, find_sites
from codedojo.tasks.task import Task
from codedojo.trial.agents import OracleAgent
from codedojo.trial.runner import TrialOptions, run_trial
from codedojo.trial.status import EpisodeStatus
from codedojo.trial.trajectory import Trajectory

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_SED_PATTERN_SPECIAL = set("\\/.*[]^$&")
_SED_REPLACEMENT_SPECIAL = set("\\/&")


class NoReferenceFix(RuntimeError):
    """The task's reference solution could not be turned into line edits."""


class DemonstrationOverBudget(ValueError):
    """An expert episode does not fit the episode budget it is recorded under: a reply longer than
    max_new_tokens, more replies than max_steps, or a conversation longer than max_context_tokens. SFT
    on it would teach replies that training and evaluation cut off, so it is an error, never a cut."""

    def __init__(self, problems: dict[str, str]) -> None:
        self.tasks = sorted(problems)
        lines = [f"  {name}: {problems[name]}" for name in self.tasks]
        super().__init__(f"{len(problems)} task(s) cannot be demonstrated within the episode budget:\n"
                         + "\n".join(lines) + "\nraise the budget (the model profile's, codedojo.agent.budget) "
                         "or leave these tasks out of the demonstrations")


@dataclass(frozen=True)
class LineEdit:
    """Replace lines `start`..`start + len(old) - 1` (1-based) of `path` with `new` (an insertion when
    `old` is empty: the new lines go after line `start - 1`)."""

    path: str
    start: int
    old: tuple[str, ...]
    new: tuple[str, ...]


def parse_diff(diff: str) -> list[LineEdit]:
    """Line edits of a `git diff -U0` output."""
    edits: list[LineEdit] = []
    path: str | None = None
    lines = diff.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("+++ "):
            target = line[4:]
            path = target[2:] if target.startswith("b/") else None
        m = _HUNK.match(line)
        if m and path is not None:
            old_start, old_count = int(m.group(1)), int(m.group(2) or "1")
            old, new = [], []
            i += 1
            while i < len(lines) and lines[i][:1] in ("-", "+", "\\"):
                if lines[i].startswith("-"):
                    old.append(lines[i][1:])
                elif lines[i].startswith("+"):
                    new.append(lines[i][1:])
                i += 1
            start = old_start if old_count else old_start + 1
            edits.append(LineEdit(path=path, start=start, old=tuple(old), new=tuple(new)))
            continue
        i += 1
    return edits


async def reference_edits(task: Task, *, backend: str = "local") -> list[LineEdit]:
    """Run the reference solution in a sandbox and read the edits it makes from `git diff`."""
    sandbox = await start_sandbox(task, backend=backend)
    try:
        outcome = await OracleAgent().run(task, sandbox, timeout_sec=task.config.agent.timeout_sec or 600)
        if outcome.exit_code not in (0, None):
            raise NoReferenceFix(f"{task.name}: solve.sh failed ({outcome.detail})")
        result = await sandbox.exec("git -c core.quotepath=off diff -U0 --no-color --no-ext-diff", timeout_sec=60)
    finally:
        await sandbox.close()
    if result.return_code != 0:
        raise NoReferenceFix(f"{task.name}: git diff failed in the workdir: {result.stdout[-300:]}")
    edits = parse_diff(result.stdout)
    if not edits:
        raise NoReferenceFix(f"{task.name}: the reference solution changes no tracked file")
    return edits


def _sed_escape(text: str, special: set[str]) -> str:
    return "".join("\\" + ch if ch in special else ch for ch in text)


def _fragments(old: str, new: str) -> tuple[str, str]:
    """The smallest differing middles of two lines, widened to whole words for readability."""
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    while prefix > 0 and (old[prefix - 1].isalnum() or old[prefix - 1] == "_"):
        prefix -= 1
    while suffix > 0 and (old[len(old) - suffix].isalnum() or old[len(old) - suffix] == "_"):
        suffix -= 1
    return old[prefix: len(old) - suffix], new[prefix: len(new) - suffix]


def _sed_text(lines: Sequence[str]) -> str:
    """The text of a sed `a`/`i`/`c` command for `lines`, to sit inside single quotes: GNU sed turns `\\n`
    into a line break and keeps leading spaces, so backslashes are doubled and quotes closed around."""
    text = "\\n".join(line.replace("\\", "\\\\") for line in lines)
    return (text or "\\").replace("'", "'\\''")


def edit_command(edit: LineEdit, *, rng: random.Random, whole_lines: bool = False) -> str:
    """One short shell command that applies `edit`: sed's s/// on the differing fragment when that is
    unambiguous, else sed's whole-line change, insert or delete (no escaping of regex characters).
    `whole_lines` always writes whole lines, and an insertion goes before its line (`Ni\\`): the commands that
    copy a guided statement's "line N should read" / "insert before line N" most directly."""
    path = shlex.quote(edit.path)
    end = edit.start + len(edit.old) - 1
    span = f"{edit.start},{end}" if end > edit.start else f"{edit.start}"
    if not edit.new:
        return f"sed -i '{span}d' {path}"
    if not edit.old:
        if edit.start > 1 and not whole_lines:
            return f"sed -i '{edit.start - 1}a\\{_sed_text(edit.new)}' {path}"
        return f"sed -i '{edit.start}i\\{_sed_text(edit.new)}' {path}"
    quotable = all("'" not in t and "\n" not in t for t in (*edit.old, *edit.new))
    if quotable and not whole_lines and len(edit.old) == 1 and len(edit.new) == 1 and rng.random() < 0.5:
        old, new = _fragments(edit.old[0], edit.new[0])
        if old and edit.old[0].count(old) == 1:
            pattern = _sed_escape(old, _SED_PATTERN_SPECIAL)
            replacement = _sed_escape(new, _SED_REPLACEMENT_SPECIAL)
            return f"sed -i '{edit.start}s/{pattern}/{replacement}/' {path}"
    return f"sed -i '{span}c\\{_sed_text(edit.new)}' {path}"


_LOOK = ("Let me look at the code around line {line} of {path}.", "First I read {path} near line {line}.",
         "I'll start by reading the relevant part of {path}.", "Let me see what {path} does around line {line}.")
_REPRODUCE = ("Let me reproduce the failure first.", "I'll run one failing test to see the error.",
              "Before changing anything, I run a failing test.")
_EDIT = ("Line {line} is wrong; I fix it.", "The bug is on line {line} of {path}. Fixing it:",
         "I'll correct line {line}.", "This line needs to change; applying the fix.")
_VERIFY = ("Now I rerun the tests that were failing.", "Let me check that the failing tests pass now.",
           "Rerunning the failing tests to confirm the fix.")
_SUBMIT = ("The tests pass. Submitting.", "All fixed; submitting the change.", "Done, submitting.")


def _reply(thought: str, command: str) -> str:
    return f"{thought}\n{_command(command)}"


def _command(command: str) -> str:
    return f"```bash\n{command}\n```"


_GUIDED_LOOK = ("The statement names line {line} of {path}. Let me see it.", "First I look at line {line} of {path}.",
                "Let me read {path} around line {line}.")
_GUIDED_EDIT = ("It matches the statement. I write the line it should become.", "Now I change line {line} as the "
                "statement says.", "Replacing line {line} with the corrected one.")
_GUIDED_INSERT = ("I insert the missing line before line {line}.", "Now I put the line in before line {line}.")
_GUIDED_VERIFY = ("Now I run the tests.", "Let me check that the tests pass.", "Running the tests.")


def guided_replies(edits: Sequence[LineEdit], *, rng: random.Random) -> list[str]:
    """The expert's replies for a guided task, whose statement spells out the edit: one steady routine (look
    at the line with numbers, write exactly the statement's line with sed, run the test suite, submit), so
    that what a small model learns is carrying out a given fix, not choosing among ways to."""
    first = edits[0]
    path = shlex.quote(first.path)
    replies = [_reply(rng.choice(_GUIDED_LOOK).format(line=first.start, path=first.path),
                      f"cat -n {path} | sed -n '{max(1, first.start - 2)},{first.start + 2}p'")]
    for edit in sorted(edits, key=lambda e: (e.path, -e.start)):
        thought = rng.choice(_GUIDED_EDIT if edit.old else _GUIDED_INSERT).format(line=edit.start)
        replies.append(_reply(thought, edit_command(edit, rng=rng, whole_lines=True)))
    replies.append(_reply(rng.choice(_GUIDED_VERIFY), "python3 -m pytest -q 2>&1 | tail -n 3"))
    replies.append(_reply(rng.choice(_SUBMIT), f"echo {SUBMIT_SENTINEL}"))
    return replies


SEARCH_TIERS = ("hinted", "warmup")
"""Tiers whose statement names the line but not the fix: the expert searches (`search_replies`)."""
TEST_COMMAND = "python3 -B -m pytest -qx --tb=line | grep -E ': [aA-Z]|^E  |passed|failed|error'"
"""The search routine's test run: the whole suite up to its first failure, shown as that failure's line
with the compared values or the exception (`file.py:10: assert 2 == -2`), a syntax error's lines, and the
counts (`1 failed, 3 passed`): what the next attempt needs, in a line or two. `-B` writes no bytecode:
two edits of the same length within one second would otherwise run the first edit's cached module."""
WRONG_ATTEMPTS = (0.35, 0.3, 0.2, 0.15)
"""Probability of 0, 1, 2 or 3 wrong edits before the right one in a search demonstration."""

_SEARCH_LOOK = ("Let me see line {line} of {path} and run the tests.", "First I read the code around line {line} "
                "and run the tests.", "I look at line {line} and its neighbours, and at the failing test.")


def line_variants(source: str, *, path: str, line: int, kinds: tuple[str, ...] | None = None) -> list[str]:
    """The texts line `line` of `source` takes under one mutation (the task factory's operators) of a node
    that lies on it alone (of `kinds`, default every kind): plausible wrong edits of that line, in site order,
    each once. Sites address nodes in `ast.walk` order (codedojo.tasks.factory.mutations)."""
    try:
        nodes = list(ast.walk(ast.parse(source)))
        sites = find_sites(source, path=path)
    except SyntaxError:
        return []
    lines = source.splitlines()
    if not 1 <= line <= len(lines):
        return []
    seen = {lines[line - 1]}
    out: list[str] = []
    for site in sites:
        node = nodes[site.node_index]
        if (kinds is not None and site.kind not in kinds) or getattr(node, "lineno", None) != line \
                or getattr(node, "end_lineno", None) != line:
            continue
        mutant = apply_site(source, site=site)
        mutated = mutant.source.splitlines() if mutant is not None else []
        if len(mutated) != len(lines) or mutated[: line - 1] != lines[: line - 1] or mutated[line:] != lines[line:]:
            continue
        if mutated[line - 1] not in seen:
            seen.add(mutated[line - 1])
            out.append(mutated[line - 1])
    return out


def decoy_lines(task: Task, edit: LineEdit, *, rng: random.Random, count: int) -> list[str]:
    """Up to `count` wrong rewrites of the line `edit` fixes: lines one mutation away from the buggy one (of
    the task's bug kind on a hinted task), never the fix itself, read from the task's own repository."""
    path = task.environment_dir / "repo" / edit.path
    if count < 1 or len(edit.old) != 1 or len(edit.new) != 1 or not path.is_file():
        return []
    metadata = task.config.metadata
    kind = metadata.get("bug_kind")
    kinds = (kind,) if metadata.get("tier") == "hinted" and isinstance(kind, str) else None
    fixed = edit.new[0].strip()
    variants = [v for v in line_variants(path.read_text(encoding="utf-8"), path=edit.path, line=edit.start,
                                         kinds=kinds) if v.strip() != fixed]
    return rng.sample(variants, min(count, len(variants)))


def search_replies(task: Task, edits: Sequence[LineEdit], *, rng: random.Random, max_steps: int | None = None
                   ) -> list[str]:
    """The expert's replies for a hinted or warm-up task: look and test, wrong attempts, the fix, submit.
    Attempts are whole-line rewrites (`Nc\\`) chained with `TEST_COMMAND`; the number of wrong ones is drawn
    from `WRONG_ATTEMPTS` and kept within `max_steps` replies."""
    first = edits[0]
    path = shlex.quote(first.path)
    fixes = sorted(edits, key=lambda e: (e.path, -e.start))  # bottom-up keeps earlier line numbers valid
    room = 3 if max_steps is None else max(0, max_steps - 2 - len(fixes))
    wanted = min(room, rng.choices(range(len(WRONG_ATTEMPTS)), weights=WRONG_ATTEMPTS)[0])
    decoys = decoy_lines(task, first, rng=rng, count=wanted) if len(edits) == 1 else []
    replies = [_reply(rng.choice(_SEARCH_LOOK).format(line=first.start, path=first.path),
                      f"cat -n {path} | sed -n '{max(1, first.start - 3)},{first.start + 3}p'; {TEST_COMMAND}")]
    # Attempts carry no thought: the line and the test command fill most of a small model's reply budget.
    for line in decoys:
        replies.append(_command(f"sed -i '{first.start}c\\{_sed_text([line])}' {path} && {TEST_COMMAND}"))
    for i, edit in enumerate(fixes):
        command = edit_command(edit, rng=rng, whole_lines=True)
        replies.append(_command(command + (f" && {TEST_COMMAND}" if i == len(fixes) - 1 else "")))
    replies.append(_reply(rng.choice(_SUBMIT), f"echo {SUBMIT_SENTINEL}"))
    return replies


def expert_replies(task: Task, edits: Sequence[LineEdit], *, rng: random.Random, max_steps: int | None = None
                   ) -> list[str]:
    """The expert's replies for one episode: `guided_replies` for a guided task, `search_replies` for a
    hinted or warm-up one, else look, perhaps reproduce, edit, verify, submit."""
    tier = task.config.metadata.get("tier")
    if tier == "guided":
        return guided_replies(edits, rng=rng)
    if tier in SEARCH_TIERS:
        return search_replies(task, edits, rng=rng, max_steps=max_steps)
    first = edits[0]
    around = max(1, first.start - rng.randint(2, 6))
    look = rng.choice([
        f"sed -n '{around},{first.start + rng.randint(2, 6)}p' {shlex.quote(first.path)}",
        f"cat -n {shlex.quote(first.path)} | sed -n '{around},{first.start + 4}p'",
        f"head -n {first.start + 5} {shlex.quote(first.path)} | tail -n {first.start + 5 - around + 1}",
    ])
    replies = [_reply(rng.choice(_LOOK).format(line=first.start, path=first.path), look)]
    failing = [t for t in task.config.metadata.get("FAIL_TO_PASS", []) if isinstance(t, str)]
    if failing and rng.random() < 0.5:
        replies.append(_reply(rng.choice(_REPRODUCE),
                              f"python3 -m pytest -q -x {shlex.quote(failing[0])} 2>&1 | tail -n 12"))
    for edit in sorted(edits, key=lambda e: (e.path, -e.start)):  # bottom-up keeps earlier line numbers valid
        replies.append(_reply(rng.choice(_EDIT).format(line=edit.start, path=edit.path), edit_command(edit, rng=rng)))
    if failing:
        ids = " ".join(shlex.quote(t) for t in failing[:4])
        if len(ids) > 90:  # long test ids: their files instead, so the reply stays short
            ids = " ".join(shlex.quote(f) for f in sorted({t.split("::")[0] for t in failing}))
        replies.append(_reply(rng.choice(_VERIFY), f"python3 -m pytest -q {ids} 2>&1 | tail -n 5"))
    else:
        replies.append(_reply(rng.choice(_VERIFY), "git diff --stat"))
    replies.append(_reply(rng.choice(_SUBMIT), f"echo {SUBMIT_SENTINEL}"))
    return replies


class ExpertPolicy(ScriptedPolicy):
    """A scripted policy whose script for each session is the expert's plan for that session's task."""

    def __init__(self, tokenizer: Any, *, tasks: Sequence[Task], edits: dict[str, list[LineEdit]], seed: int,
                 max_steps: int | None = None) -> None:
        self._tasks = {t.name[:40].replace("/", "_"): t for t in tasks}
        self._edits = edits
        self._seed = seed
        self._max_steps = max_steps
        self._plans: dict[str, list[str]] = {}
        self.over_budget: dict[str, str] = {}
        """Task name -> what did not fit (replies are still cut, so the episode fails, and the caller raises)."""
        super().__init__(tokenizer, self._plan, logprob=0.0)

    def _task(self, session_id: str) -> Task:
        return self._tasks[session_id.rsplit("-", 1)[0]]

    def _plan(self, session_id: str) -> list[str]:
        if session_id not in self._plans:
            task = self._task(session_id)
            rng = random.Random(f"{self._seed}:{session_id}")
            plan = expert_replies(task, self._edits[task.name], rng=rng, max_steps=self._max_steps)
            if self._max_steps is not None and len(plan) > self._max_steps:
                self.over_budget[task.name] = f"{len(plan)} replies, over max_steps {self._max_steps}"
            self._plans[session_id] = plan
        return self._plans[session_id]

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Completion:
        turn = self._turn.get(session_id or "", 0)
        if session_id is not None and turn > 1 and self._task(session_id).config.metadata.get("tier") in SEARCH_TIERS:
            plan = self._plan(session_id)
            if turn < len(plan) - 1 and _tests_passed(self.tokenizer.decode(list(prompt_ids[-160:]))):
                self._turn[session_id] = len(plan) - 1  # a wrong attempt that passes is a fix: submit now
                turn = len(plan) - 1
        completion = await super().generate(prompt_ids, params, session_id=session_id)
        if completion.finish_reason == "length" and session_id is not None:
            reply = self._plan(session_id)[min(turn, len(self._plan(session_id)) - 1)]
            tokens = len(self.tokenizer.encode(reply, add_special_tokens=False)) + 1
            self.over_budget.setdefault(
                self._task(session_id).name,
                f"a reply of {tokens} tokens, over max_new_tokens {params.max_new_tokens}: {reply[:80]!r}")
        return completion


_PASSED = re.compile(r"\b\d+ passed in ")
_FAILED = re.compile(r"\b\d+ (failed|error)")


def _tests_passed(tail: str) -> bool:
    """Whether the last command output at the end of a conversation (`tail`) is a test run that passed."""
    marker = max(tail.rfind("exit code"), tail.rfind("<returncode>"))
    last = tail[marker:] if marker >= 0 else ""
    return bool(_PASSED.search(last)) and not _FAILED.search(last)


async def demonstrations(tasks: Sequence[Task], *, tokenizer: Any, per_task: int, seed: int,
                         agent_config: AgentConfig, out_dir: Path | None = None, concurrency: int = 4,
                         backend: str = "local", leave_out_over_budget: bool = False
                         ) -> tuple[list[Trajectory], dict[str, Any]]:
    """Solved expert episodes (per_task each) as trajectories in the model's tokens, and counts. A task whose
    demonstration does not fit the budget raises DemonstrationOverBudget, or with `leave_out_over_budget` is
    left out (none of its episodes kept) and listed in counts["left_out"] with what did not fit."""
    gate = asyncio.Semaphore(concurrency)
    edits: dict[str, list[LineEdit]] = {}
    counts: dict[str, Any] = {"tasks": len(tasks), "no_reference_fix": 0, "episodes": 0, "solved": 0}

    async def learn(task: Task) -> None:
        async with gate:
            try:
                edits[task.name] = await reference_edits(task, backend=backend)
            except NoReferenceFix:
                counts["no_reference_fix"] += 1

    await asyncio.gather(*(learn(t) for t in tasks))
    usable = [t for t in tasks if t.name in edits]
    policy = ExpertPolicy(tokenizer, tasks=usable, edits=edits, seed=seed, max_steps=agent_config.max_steps)
    kept: list[Trajectory] = []

    async def episode(task: Task, index: int) -> None:
        agent = AgentLoop(policy, config=agent_config, seed=(seed * 7919 + index) % 2**31)
        async with gate:
            result = await run_trial(task, agent, options=TrialOptions(backend=backend))
        counts["episodes"] += 1
        if result.trajectory is not None and result.trajectory.status == EpisodeStatus.CONTEXT_LIMIT:
            policy.over_budget.setdefault(task.name, f"the conversation outgrew max_context_tokens "
                                                     f"{agent_config.max_context_tokens}")
        if result.solved and result.trajectory is not None:
            kept.append(result.trajectory)

    await asyncio.gather(*(episode(t, i * per_task + k) for i, t in enumerate(usable) for k in range(per_task)))
    if policy.over_budget and not leave_out_over_budget:
        raise DemonstrationOverBudget(policy.over_budget)
    if leave_out_over_budget:
        counts["left_out"] = dict(sorted(policy.over_budget.items()))
        kept = [t for t in kept if t.task_name not in policy.over_budget]
    counts["solved"] = len(kept)
    kept.sort(key=lambda t: t.episode_id)
    if out_dir is not None:
        for trajectory in kept:
            trajectory.save(out_dir / f"{trajectory.episode_id}.json")
    return kept, counts
