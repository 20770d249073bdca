"""The difficulty probe (resumable, one journal line per episode), the mixed-reward filter and eval dumps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from codedojo.agent.loop import AgentConfig
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.data.dumps import probe_from_dump
from codedojo.data.mixed import mixed_subset
from codedojo.data.probe import TaskCounts, episode_seed, load_counts, probe_tasks, save_counts
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML
from codedojo.journal import JournalError
from codedojo.rollout.episodes import RolloutConfig
from data_support import RIGHT, SUBMIT, WRONG, make_answer_task, synthetic_row, write_rows

TOKENIZER = byte_level_tokenizer(chat_template=CHATML)
N = 4
# Which samples of each task the scripted policy solves: one task always, one never, one half the time.
SOLVES = {"always": range(N), "never": range(0), "mixed": range(2)}


class CountingPolicy(ScriptedPolicy):
    """A scripted policy that records every episode (session) it serves and can interrupt the run."""

    def __init__(self, script: Any, *, interrupt_at: int | None = None) -> None:
        super().__init__(TOKENIZER, script)
        self.sessions: list[str] = []
        self.interrupt_at = interrupt_at
        self.run: asyncio.Task[Any] | None = None

    async def generate(self, prompt_ids, params, *, session_id=None):  # type: ignore[no-untyped-def]
        if session_id not in self.sessions:
            self.sessions.append(session_id)
            if self.interrupt_at is not None and len(self.sessions) == self.interrupt_at and self.run is not None:
                self.run.cancel()  # as if the process were stopped in the middle of this episode
        return await super().generate(prompt_ids, params, session_id=session_id)


def _script_for(seed: int) -> Any:
    sessions = {f"{task}-s{episode_seed(seed, task, j):010d}": j in solved
                for task, solved in SOLVES.items() for j in range(N)}

    def script(session_id: str) -> list[str]:
        return [RIGHT if sessions[session_id] else WRONG, SUBMIT]

    return script


@pytest.fixture
def source(tmp_path: Path) -> Path:
    tasks = [make_answer_task(tmp_path / "tasks", name, repository=f"repo-{name}") for name in SOLVES]
    return write_rows(tmp_path / "train-3.jsonl", tasks)


async def _probe(source: Path, engine: CountingPolicy, **overrides: Any) -> Path:
    options: dict[str, Any] = dict(engine=engine, model="scripted", n=N, seed=0, agent_config=AgentConfig(max_steps=3),
                                   rollout=RolloutConfig(max_open_sandboxes=1))
    return await probe_tasks(source, **{**options, **overrides})


def test_an_interrupted_probe_resumes_without_repeating_episodes(source: Path) -> None:
    first = CountingPolicy(_script_for(0), interrupt_at=6)

    async def interrupted() -> None:
        first.run = asyncio.current_task()
        await _probe(source, first)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(interrupted())
    journal = source.with_name("train-3-probe-scripted-n4.episodes.jsonl")
    finished = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    assert len(finished) == 5  # five episodes ended; the sixth was cut off and left no line
    # The counts so far are saved on the way out, and can be read from the journal itself at any time.
    partial = load_counts(source.with_name("train-3-probe-scripted-n4.json"))
    assert partial == load_counts(journal) and sum(c.total for c in partial[2].values()) == 5

    second = CountingPolicy(_script_for(0))
    counts_path = asyncio.run(_probe(source, second))
    assert len(second.sessions) == 3 * N - 5
    assert not set(first.sessions[:5]) & set(second.sessions)
    assert len(journal.read_text().splitlines()) == 1 + 3 * N
    n, model, counts = load_counts(counts_path)
    assert (n, model) == (N, "scripted")
    assert {k: (c.total, c.valid, c.solved) for k, c in counts.items()} == {
        "always": (4, 4, 4), "never": (4, 4, 0), "mixed": (4, 4, 2)}
    provenance = json.loads(counts_path.with_name("train-3-probe-scripted-n4.provenance.json").read_text())
    assert provenance["settings"]["reused_from_journal"] == 5 and provenance["model"] == "scripted"
    assert provenance["counts"]["success_histogram"] == {"0": 1, "1": 0, "2": 1, "3": 0, "4": 1}

    # A finished probe reruns for free, and the filter needs no episode at all.
    third = CountingPolicy(_script_for(0))
    asyncio.run(_probe(source, third))
    assert third.sessions == []
    report = mixed_subset(source, probe=counts_path)
    assert [r["label"] for r in report.rows] == ["mixed"]
    assert report.path.name == "train-3-mixed-reward-scripted-agentic-n4.jsonl"
    assert [json.loads(x)["label"] for x in report.path.read_text().splitlines()] == ["mixed"]
    assert [(t.tier, t.probed, t.kept, t.all_failed, t.all_solved) for t in report.tiers] == [("warmup", 3, 1, 1, 1)]


def test_resuming_with_other_settings_is_refused(source: Path) -> None:
    asyncio.run(_probe(source, CountingPolicy(_script_for(0)), n=1))
    with pytest.raises(JournalError, match="agent"):
        asyncio.run(_probe(source, CountingPolicy(_script_for(0)), n=1, agent_config=AgentConfig(max_steps=5)))


def test_the_filter_keeps_exactly_the_fully_gradeable_mixed_tasks(tmp_path: Path) -> None:
    names = ["all-fail", "one", "seven", "all-pass", "infra", "short", "unprobed"]
    source = tmp_path / "train-7.jsonl"
    source.write_text("".join(json.dumps(synthetic_row(name, repository=name, language="python", difficulty=tier))
                              + "\n" for name, tier in zip(names, ["warmup", "warmup", "easy", "easy", "hard",
                                                                    "hard", "hard"], strict=True)))
    counts = {"all-fail": TaskCounts(task="all-fail", total=8, valid=8, solved=0, statuses={}),
              "one": TaskCounts(task="one", total=8, valid=8, solved=1, statuses={}),
              "seven": TaskCounts(task="seven", total=8, valid=8, solved=7, statuses={}),
              "all-pass": TaskCounts(task="all-pass", total=8, valid=8, solved=8, statuses={}),
              "infra": TaskCounts(task="infra", total=8, valid=7, solved=3, statuses={}),  # one reward missing
              "short": TaskCounts(task="short", total=5, valid=5, solved=2, statuses={})}  # cut off at 5 of 8
    probe = save_counts(tmp_path / "probe.json", counts, n=8, model="SmolLM2-135M-Instruct")
    with pytest.raises(ValueError, match="lacks complete probes of 2"):
        mixed_subset(source, probe=probe)
    report = mixed_subset(source, probe=probe, allow_partial=True)
    assert [r["label"] for r in report.rows] == ["one", "seven"]
    assert report.path.name == "train-7-mixed-reward-smollm2-135m-instruct-agentic-n8.jsonl"
    assert {t.tier: (t.kept, t.incomplete) for t in report.tiers} == {"easy": (1, 0), "hard": (0, 3),
                                                                      "warmup": (1, 0)}
    provenance = json.loads(tmp_path.joinpath(report.path.name.replace(".jsonl", ".provenance.json")).read_text())
    assert provenance["counts"]["kept_tasks"] == ["one", "seven"] and provenance["inputs"][1]["sha256"]


def test_counts_from_an_eval_dump(tmp_path: Path) -> None:
    source = write_rows(tmp_path / "train-2.jsonl", [make_answer_task(tmp_path / "tasks", name) for name in
                                                     ("alpha", "beta")])
    samples = []
    for task, rewards in (("alpha", [1.0, 0.0, 0.0]), ("beta", [1.0, 1.0, None])):
        for reward in rewards:
            samples.append({"label": task, "reward": reward, "remove_sample": reward is None,
                            "metadata": {"task_path": f"tasks/{task}", "solved": reward == 1.0,
                                         "episode_status": "submitted" if reward is not None else "sandbox_error"}})
    dump = tmp_path / "rollout_eval_0.pt"
    torch.save({"rollout_id": "eval_0", "samples": samples}, dump)
    path = probe_from_dump(source, dump=dump, model="smollm2", n=3)
    _, _, counts = load_counts(path)
    assert {k: (c.total, c.valid, c.solved) for k, c in counts.items()} == {"alpha": (3, 3, 1), "beta": (3, 2, 2)}
    assert [r["label"] for r in mixed_subset(source, probe=path).rows] == ["alpha"]
    with pytest.raises(ValueError, match="n=4"):
        probe_from_dump(source, dump=dump, model="smollm2", n=4)


def test_counts_from_the_trajectories_of_codedojo_eval(source: Path, tmp_path: Path) -> None:
    from codedojo.rollout.evaluation import evaluate
    from codedojo.tasks.task import Task

    def script(session_id: str) -> list[str]:
        task, seed = session_id.rsplit("-s", 1)
        sample = int(seed) % 1009  # evaluate seeds episode j of task i with i * 1009 + j
        return [RIGHT if sample in SOLVES[task] else WRONG, SUBMIT]

    tasks = [Task.load(source.parent / "tasks" / name) for name in SOLVES]
    folder = tmp_path / "trajectories"
    asyncio.run(evaluate(tasks, engine=ScriptedPolicy(TOKENIZER, script), n=N, agent_config=AgentConfig(max_steps=3),
                         rollout=RolloutConfig(max_open_sandboxes=4), trajectory_dir=folder))
    _, _, counts = load_counts(probe_from_dump(source, dump=folder, model="scripted", n=N))
    assert {k: (c.total, c.valid, c.solved) for k, c in counts.items()} == {
        "always": (4, 4, 4), "never": (4, 4, 0), "mixed": (4, 4, 2)}
    # The counts come from each file's recorded verdicts, not from re-reading its rewards: an episode the
    # trial judged invalid stays invalid though its rewards say 1.0.
    first = sorted(folder.glob("always-*.json"))[0]
    data = json.loads(first.read_text())
    assert (data["metadata"]["valid"], data["metadata"]["solved"], data["rewards"]["reward"]) == (True, True, 1.0)
    data["metadata"]["valid"] = data["metadata"]["solved"] = False
    first.write_text(json.dumps(data))
    _, _, counts = load_counts(probe_from_dump(source, dump=folder, model="scripted", n=N))
    assert (counts["always"].total, counts["always"].valid, counts["always"].solved) == (4, 3, 3)


def test_counts_from_a_local_trainers_eval_dump(source: Path, tmp_path: Path) -> None:
    """The records the trainer dumps (train.samples.slime_sample) are plain data: the dump loads with
    weights_only (no codedojo class pickled in it) and gives the counts of its episodes."""
    from codedojo.rollout.evaluation import evaluate
    from codedojo.tasks.task import Task
    from codedojo.train.samples import slime_sample

    def script(session_id: str) -> list[str]:
        task, seed = session_id.rsplit("-s", 1)
        return [RIGHT if int(seed) % 1009 in SOLVES[task] else WRONG, SUBMIT]

    tasks = [Task.load(source.parent / "tasks" / name) for name in SOLVES]
    report = asyncio.run(evaluate(tasks, engine=ScriptedPolicy(TOKENIZER, script), n=N,
                                  agent_config=AgentConfig(max_steps=3), rollout=RolloutConfig(max_open_sandboxes=4)))
    dump = tmp_path / "rollout_eval_0.pt"
    torch.save({"rollout_id": "eval_0", "samples": [slime_sample(e, index=i) for i, e in enumerate(report.episodes)]},
               dump)
    _, _, counts = load_counts(probe_from_dump(source, dump=dump, model="scripted", n=N))
    assert {k: (c.total, c.valid, c.solved) for k, c in counts.items()} == {
        "always": (4, 4, 4), "never": (4, 4, 0), "mixed": (4, 4, 2)}


def test_tasks_are_probed_in_turn_over_repositories() -> None:
    from codedojo.data.probe import interleaved

    rows = [synthetic_row(name, repository=name[0], language="python", difficulty="easy")
            for name in ("a1", "a2", "a3", "b1", "c1", "c2")]
    assert [rows[i]["label"] for i in interleaved(rows)] == ["a1", "b1", "c1", "a2", "c2", "a3"]
