"""A cut evaluation resumes from its trajectory folder: finished episodes are read back, not run again, and the
report is the one an uncut run gives; a folder of another evaluation is refused, not mixed in."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from codedojo.agent.loop import AgentConfig
from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML
from codedojo.rollout.episodes import RolloutConfig
from codedojo.rollout.evaluation import SETTINGS_JOURNAL, evaluate
from codedojo.tasks.task import Task, examples_dir

TOKENIZER = byte_level_tokenizer(chat_template=CHATML)
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
N = 4


def script(session_id: str) -> list[str]:
    """Episode j of the task solves it when j is even (evaluate seeds episode j with ... + j)."""
    sample = int(session_id.rsplit("-s", 1)[1]) % 1009
    return ["```bash\necho world > hello.txt\n```" if sample % 2 == 0 else "```bash\nls\n```", SUBMIT]


class Recording(ScriptedPolicy):
    """The scripted policy, remembering every session it generated for."""

    def __init__(self) -> None:
        super().__init__(TOKENIZER, script)
        self.sessions: set[str] = set()

    async def generate(self, prompt_ids, params, *, session_id=None):  # type: ignore[no-untyped-def]
        self.sessions.add(session_id or "")
        return await super().generate(prompt_ids, params, session_id=session_id)


def run(folder: Path, *, model: str = "scripted", n: int = N) -> tuple[dict, set[str]]:
    engine = Recording()
    tasks = [Task.load(examples_dir() / "hello-file")]
    report = asyncio.run(evaluate(tasks, engine=engine, n=n, agent_config=AgentConfig(max_steps=3),
                                  rollout=RolloutConfig(max_open_sandboxes=4), trajectory_dir=folder, model=model))
    data = report.to_dict()
    data.pop("wall_sec")
    return data, engine.sessions  # the episodes this run played


def test_a_cut_evaluation_resumes_with_the_same_report(tmp_path: Path) -> None:
    folder = tmp_path / "eval"
    whole, played = run(folder)
    assert len(played) == N and whole["per_task"][0]["solved"] == 2
    assert json.loads((folder / SETTINGS_JOURNAL).read_text())["settings"]["model"] == "scripted"
    files = sorted(folder.glob("*.json"))
    assert len(files) == N
    for cut in files[1:3]:  # the run was cut before these two finished
        cut.unlink()
    again, played = run(folder)
    assert again == whole
    assert played == {f.stem for f in files[1:3]}  # only the missing episodes ran
    nothing_left, played = run(folder)
    assert nothing_left == whole and played == set()


def test_an_episode_without_a_valid_reward_is_run_again(tmp_path: Path) -> None:
    folder = tmp_path / "eval"
    whole, _ = run(folder)
    first = sorted(folder.glob("*.json"))[0]
    data = json.loads(first.read_text())
    data["metadata"]["valid"] = False  # as an infrastructure failure is written
    first.write_text(json.dumps(data))
    again, played = run(folder)
    assert played == {first.stem} and again == whole


def test_a_folder_of_another_evaluation_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "eval"
    whole, _ = run(folder)
    with pytest.raises(ValueError, match=r"\(model differ\)"):
        run(folder, model="another-model")
    with pytest.raises(ValueError, match=r"\(n differ\)"):
        run(folder, n=2)
    assert run(folder)[0] == whole  # the refusals left the folder as it was
    (folder / SETTINGS_JOURNAL).unlink()  # trajectory files no journal describes (an older or foreign folder)
    with pytest.raises(ValueError, match="no evaluation journal"):
        run(folder)
