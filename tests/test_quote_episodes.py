"""bench/quote_episodes.py: tasks are sorted by what the later model gained, the quote starts at the task
statement (not the worked example), and the counts are printed before any pick."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "quote_episodes.py"
spec = importlib.util.spec_from_file_location("quote_episodes", BENCH)
assert spec is not None and spec.loader is not None
quote = importlib.util.module_from_spec(spec)
spec.loader.exec_module(quote)

MESSAGES = [{"role": "system", "content": "shell"}, {"role": "user", "content": "example task"},
            {"role": "assistant", "content": f"```bash\necho {quote.SUBMIT}\n```"},
            {"role": "user", "content": "In calc.py line 3 is wrong."},
            {"role": "assistant", "content": "```bash\nsed -n 3p calc.py\n```"},
            {"role": "user", "content": "exit code 0\nreturn a - b\n"}]


def _write(folder: Path, task: str, rewards: list[float]) -> None:
    folder.mkdir(exist_ok=True)
    for i, reward in enumerate(rewards):
        episode = {"format": "codedojo-trajectory-1", "episode_id": f"{task}-s{i}", "task_name": task,
                   "status": "submitted", "reward": reward, "messages": MESSAGES}
        (folder / f"{task}-s{i}.json").write_text(json.dumps(episode))


def test_tasks_are_sorted_by_what_changed_and_the_quote_starts_at_the_task(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    for task, b, a in (("gain", [0.0, 0.0], [0.0, 1.0]), ("lost", [1.0, 0.0], [0.0, 0.0]),
                       ("neither", [0.0, 0.0], [0.0, 0.0]), ("both", [1.0, 1.0], [0.0, 1.0])):
        _write(before, task, b)
        _write(after, task, a)
    _write(after, "only-after", [1.0])  # not in both: no kind
    kinds = quote.kinds_of(quote.episodes_by_task(before), quote.episodes_by_task(after))
    assert kinds == {"gained": ["gain"], "lost": ["lost"], "both_failed": ["neither"], "both_solved": ["both"]}
    assert quote.main([str(before), str(after)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 tasks in both: 1 gained, 1 lost, 1 both failed, 1 both solved")
    assert "gained, after: gain (gain-s1)" in out  # the solved episode of the gained task
    assert "both failed, after: neither" in out
    assert "In calc.py line 3 is wrong." in out and "example task" not in out and "shell" not in out


def test_a_folder_without_trajectories_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no trajectory files"):
        quote.episodes_by_task(tmp_path / "empty")
    with pytest.raises(SystemExit, match="not a folder"):
        quote.episodes_by_task(tmp_path / "missing")
