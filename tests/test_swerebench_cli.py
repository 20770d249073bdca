"""`codedojo tasks from-swe-rebench`: converts, validates, and reports skipped rows with reasons."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from codedojo.tasks.swerebench import cli
from codedojo.tasks.task import validate_task_dir

SAMPLE = Path(__file__).parent / "fixtures" / "swerebench" / "swe_rebench_v2_sample.json"


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_converts_and_lists_skipped_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = json.loads(SAMPLE.read_text())[0]
    rows = [row, {**row, "instance_id": "acme__x-1", "image_name": ""}, {**row, "instance_id": "acme__x-2",
            "install_config": {**row["install_config"], "log_parser": "parse_log_cobol"}}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "tasks"
    code = _main(["from-swe-rebench", "--input", str(tmp_path / "rows.jsonl"), "--out", str(out),
                  "--cpus", "1", "--memory-mb", "8192"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "1 task(s) written" in printed and "2 row(s) skipped" in printed
    assert "skipped 1: no image_name" in printed and "(acme__x-1)" in printed
    assert "parse_log_cobol is not supported" in printed
    task = out / "unidata__netcdf-c-1925"
    assert validate_task_dir(task) == []
    assert "cpus = 1\n" in (task / "task.toml").read_text() and "memory_mb = 8192" in (task / "task.toml").read_text()


def test_nothing_written_is_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["from-swe-rebench", "--input", str(SAMPLE), "--out", str(tmp_path), "--limit", "1"]) == 0
    assert _main(["from-swe-rebench", "--input", str(SAMPLE), "--out", str(tmp_path)]) == 1
    assert "exists" in capsys.readouterr().out
    assert _main(["from-swe-rebench", "--input", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 1
    assert "no such file" in capsys.readouterr().err
