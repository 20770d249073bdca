"""Oracle validation: oracle 1.0 twice and nop 0.0, or the task is dropped; verdicts resume from the journal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from codedojo.data.prefilter import Criteria, prefilter
from codedojo.data.validation import validate_tasks
from codedojo.trial import NopAgent, run_trial
from data_support import ALWAYS_PASSES, WRONG_SOLVE, make_answer_task, synthetic_row, write_rows


def test_validation_drops_flaky_broken_and_nop_passing_tasks(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    tasks = [make_answer_task(folder, "good"), make_answer_task(folder, "flaky"),
             make_answer_task(folder, "nop-passes", test_sh=ALWAYS_PASSES),
             make_answer_task(folder, "broken", solve_sh=WRONG_SOLVE)]
    source = write_rows(tmp_path / "all.jsonl", tasks)
    calls: list[tuple[str, str]] = []

    async def runner(task: Any, agent: Any, *, options: Any) -> Any:
        calls.append((task.name, agent.name))
        if task.name == "flaky" and calls.count(("flaky", "oracle")) == 2:
            agent = NopAgent()  # the second reference run does not fix it: a flaky task
        return await run_trial(task, agent, options=options)

    output = tmp_path / "validated.jsonl"
    asyncio.run(validate_tasks(source, output=output, workers=2, runner=runner))
    assert [json.loads(line)["label"] for line in output.read_text().splitlines()] == ["good"]
    checks = {r["task"]: r for r in map(json.loads, (tmp_path / "validated.checks.jsonl").read_text().splitlines()[1:])}
    assert checks["good"]["oracle"] == [1.0, 1.0] and checks["good"]["nop"] == 0.0
    assert checks["flaky"]["kind"] == "flaky" and checks["flaky"]["oracle"] == [1.0, 0.0]
    assert checks["nop-passes"]["kind"] == "nop" and checks["broken"]["kind"] == "oracle"
    provenance = json.loads((tmp_path / "validated.provenance.json").read_text())
    assert provenance["counts"] == {"input": 4, "kept": 1, "dropped": {"flaky": 1, "nop": 1, "oracle": 1}}
    assert provenance["inputs"][1]["tasks_sha256"]

    # A rerun reads every verdict from the journal and runs nothing.
    calls.clear()
    asyncio.run(validate_tasks(source, output=output, workers=2, runner=runner))
    assert calls == [] and output.read_text().count("\n") == 1


def test_prefilter_on_metadata(tmp_path: Path) -> None:
    rows = [synthetic_row("a", repository="r1", language="python", difficulty="easy"),
            synthetic_row("b", repository="r2", language="c", difficulty="easy"),
            synthetic_row("c", repository="r3", language="python", difficulty="hard"),
            synthetic_row("d", repository="r4", language="python", difficulty="easy")]
    rows[0]["metadata"]["quality"] = "A"
    rows[2]["metadata"]["quality"] = "A"
    rows[3]["metadata"]["quality"] = "B"
    source = tmp_path / "all.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, dropped = prefilter(source, output=tmp_path / "prefiltered.jsonl",
                             criteria=Criteria(languages=("Python",), difficulties=("easy",), min_grade="A"))
    assert [json.loads(line)["label"] for line in out.read_text().splitlines()] == ["a"]
    assert dropped == {"language": 1, "difficulty": 1, "quality grade": 1}
    assert json.loads((tmp_path / "prefiltered.provenance.json").read_text())["settings"]["min_grade"] == "A"
