"""Converting SWE-rebench V2 rows: the real fixture row, other encodings of the same row, skips, inputs."""

from __future__ import annotations

import copy
import json
import os
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from codedojo.tasks.swerebench.convert import ConvertConfig, convert_row, convert_rows
from codedojo.tasks.swerebench.grading import GRADER
from codedojo.tasks.swerebench.row import RowError, parse_row
from codedojo.tasks.swerebench.scripts import BEGIN_MARK, END_MARK, patch_paths
from codedojo.tasks.swerebench.source import SourceError, read_rows
from codedojo.tasks.task import validate_task_dir

# One real row of nebius/SWE-rebench-V2 (CC BY 4.0): a C project graded by parse_log_jq.
SAMPLE = Path(__file__).parent / "fixtures" / "swerebench" / "swe_rebench_v2_sample.json"


@pytest.fixture
def row() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))[0]


def test_real_row_becomes_a_valid_task(row: dict[str, Any], tmp_path: Path) -> None:
    task = convert_row(row, out_dir=tmp_path)
    d = task.path
    assert d.name == "unidata__netcdf-c-1925"
    assert validate_task_dir(d) == []
    assert not (d / "environment").exists()
    assert task.instruction == row["problem_statement"].replace("\r\n", "\n").strip() + "\n"

    toml = tomllib.loads((d / "task.toml").read_text())
    assert toml["environment"] == {
        "build_timeout_sec": 1800.0, "docker_image": "docker.io/swerebenchv2/unidata-netcdf-c:1925-ad6bff3",
        "cpus": 2, "memory_mb": 4096, "storage_mb": 10240, "workdir": "/netcdf-c", "network_mode": "no-network",
    }
    assert toml["agent"] == {"timeout_sec": 1800.0}
    assert toml["verifier"] == {"timeout_sec": 1800.0}
    meta = toml["metadata"]
    assert meta["source"] == "swe-rebench-v2"
    assert meta["instance_id"] == "unidata__netcdf-c-1925"
    assert meta["repository"] == "Unidata/netcdf-c"
    assert (meta["language"], meta["difficulty"], meta["quality"], meta["quality_flags"]) == ("c", "medium", "A", [])
    assert meta["base_commit"] == row["base_commit"]
    assert meta["created_at"] == "2020-12-30T03:14:33Z"
    assert meta["log_parser"] == "parse_log_jq"
    assert meta["test_commands"] == ["make check"]
    assert meta["fail_to_pass"] == row["FAIL_TO_PASS"] and len(meta["pass_to_pass"]) == 177

    tests = d / "tests"
    assert (tests / "grade.awk").read_bytes() == GRADER.read_bytes()
    assert (tests / "test.patch").read_text() == row["test_patch"]
    assert (tests / "fail_to_pass.txt").read_text().splitlines() == row["FAIL_TO_PASS"]
    assert (tests / "pass_to_pass.txt").read_text().splitlines() == row["PASS_TO_PASS"]
    touched = (tests / "test_files.txt").read_text().splitlines()
    assert {"nc_test4/tst_filter.sh", "nc_test4/test_filter_order.c", "nczarr_test/Makefile.am"} <= set(touched)

    script = (tests / "test.sh").read_text()
    assert os.access(tests / "test.sh", os.X_OK)
    assert "WORKDIR=${CODEDOJO_WORKDIR:-/netcdf-c}" in script
    assert f"BASE_COMMIT={row['base_commit']}" in script
    assert "LOG_PARSER=parse_log_jq" in script
    assert "begin_region\nmake check\nend_region 1\n" in script
    assert "git apply -v --3way --recount --ignore-space-change --whitespace=nowarn" in script
    assert "set -e" not in script
    assert BEGIN_MARK in script and END_MARK in script

    assert (d / "solution" / "fix.patch").read_text() == row["patch"]
    assert "--3way --recount" in (d / "solution" / "solve.sh").read_text()


def test_struct_columns_may_arrive_as_json_or_python_literal_strings(row: dict[str, Any], tmp_path: Path) -> None:
    plain = convert_row(row, out_dir=tmp_path / "plain")
    encoded = copy.deepcopy(row)
    encoded["install_config"] = json.dumps(row["install_config"])
    encoded["meta"] = repr({**row["meta"], "llm_metadata": row["meta"]["llm_metadata"][0]})  # dict, not list
    encoded["FAIL_TO_PASS"] = json.dumps(row["FAIL_TO_PASS"])
    encoded["PASS_TO_PASS"] = repr(row["PASS_TO_PASS"])
    other = convert_row(encoded, out_dir=tmp_path / "encoded")
    assert (other.path / "task.toml").read_text() == (plain.path / "task.toml").read_text()
    assert (other.path / "tests" / "test.sh").read_text() == (plain.path / "tests" / "test.sh").read_text()


def test_resources_come_from_the_config(row: dict[str, Any], tmp_path: Path) -> None:
    config = ConvertConfig(cpus=0.5, memory_mb=2048, storage_mb=4096, network_mode="public",
                           agent_timeout_sec=600, verifier_timeout_sec=900, include_interface=True)
    task = convert_row(row, out_dir=tmp_path, config=config)
    env = task.config.environment
    assert (env.cpus, env.memory_mb, env.storage_mb, env.network_mode) == (0.5, 2048, 4096, "public")
    assert (task.config.agent.timeout_sec, task.config.verifier.timeout_sec) == (600, 900)
    assert "nc_inq_var_filter_ids" in task.instruction.split("The tests use this interface:")[1]


def _variant(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(row)
    for key, value in changes.items():
        if key == "log_parser":
            out["install_config"]["log_parser"] = value
        elif key == "test_cmd":
            out["install_config"]["test_cmd"] = value
        else:
            out[key] = value
    return out


def test_rows_that_cannot_become_tasks_are_skipped_with_reasons(row: dict[str, Any], tmp_path: Path) -> None:
    rows = [
        row,
        row,
        _variant(row, instance_id="a__no-image-1", image_name=None),
        _variant(row, instance_id="a__no-tests-1", FAIL_TO_PASS=[], PASS_TO_PASS=[]),
        _variant(row, instance_id="a__parser-1", log_parser="parse_log_cobol"),
        _variant(row, instance_id="a__no-patch-1", test_patch=""),
        _variant(row, instance_id="a__no-cmd-1", test_cmd=[]),
        _variant(row, instance_id="a__repo-1", repo="netcdf-c"),
        _variant(row, instance_id="a__newline-1", FAIL_TO_PASS=["two\nlines"]),
        _variant(row, instance_id="a__escape-1", test_patch="diff --git a/../x b/../x\n--- a/../x\n+++ b/../x\n"),
        _variant(row, instance_id=None),
    ]
    report = convert_rows(rows, out_dir=tmp_path)
    assert [p.name for p in report.converted] == ["unidata__netcdf-c-1925"]
    reasons = {s.instance_id: s.reason for s in report.skipped}
    assert reasons["unidata__netcdf-c-1925"].startswith("duplicate instance_id")
    assert reasons["a__no-image-1"].startswith("no image_name")
    assert reasons["a__no-tests-1"].startswith("no tests")
    assert reasons["a__parser-1"] == "log parser parse_log_cobol is not supported by grade.awk (docs/swe-rebench.md)"
    assert reasons["a__no-patch-1"] == "no test_patch"
    assert reasons["a__no-cmd-1"].startswith("no test command")
    assert "not of the form owner/name" in reasons["a__repo-1"]
    assert "line break" in reasons["a__newline-1"]
    assert "outside the repository" in reasons["a__escape-1"]
    assert reasons[""] == "no instance_id"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unidata__netcdf-c-1925"]


def test_limit_counts_tasks_written_and_existing_tasks_are_kept(row: dict[str, Any], tmp_path: Path) -> None:
    rows = [_variant(row, instance_id=f"acme__lib-{i}") for i in range(5)]
    assert len(convert_rows(rows, out_dir=tmp_path, limit=2).converted) == 2
    again = convert_rows(rows, out_dir=tmp_path, limit=2)
    assert [p.name for p in again.converted] == ["acme__lib-2", "acme__lib-3"]
    assert [s.instance_id for s in again.skipped] == ["acme__lib-0", "acme__lib-1"]
    assert len(convert_rows(rows[:1], out_dir=tmp_path, overwrite=True).converted) == 1


def test_rows_are_read_from_json_jsonl_and_parquet(row: dict[str, Any], tmp_path: Path) -> None:
    rows = [row, _variant(row, instance_id="acme__lib-2")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["instance_id"] for r in read_rows(tmp_path / "rows.jsonl")] == [row["instance_id"], "acme__lib-2"]
    (tmp_path / "server.json").write_text(json.dumps({"rows": [{"row": r} for r in rows]}))
    assert len(list(read_rows(tmp_path / "server.json"))) == 2
    with pytest.raises(SourceError, match="unknown file type"):
        read_rows(_touch(tmp_path / "rows.csv"))
    with pytest.raises(SourceError, match="not a Hugging Face dataset name"):
        read_rows(tmp_path / "missing.json")

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    report = convert_rows(read_rows(tmp_path / "rows.parquet"), out_dir=tmp_path / "tasks")
    assert len(report.converted) == 2 and not report.skipped


def _touch(path: Path) -> Path:
    path.write_text("")
    return path


def test_created_at_and_quality_flags_decode(row: dict[str, Any]) -> None:
    meta = copy.deepcopy(row["meta"])
    meta["llm_metadata"][0]["detected_issues"]["B4"] = True
    parsed = parse_row({**row, "created_at": 1609298073, "meta": meta})
    assert parsed.created_at == "2020-12-30T03:14:33Z"
    assert parsed.quality_flags == ("B4",)
    assert parse_row({**row, "created_at": datetime(2021, 1, 2, tzinfo=UTC)}).created_at == "2021-01-02T00:00:00Z"
    assert parse_row({**row, "created_at": "2021-01-02T03:04:05Z"}).created_at == "2021-01-02T03:04:05Z"
    with pytest.raises(RowError, match="neither JSON nor a Python literal"):
        parse_row({**row, "install_config": "{not a literal"})


def test_patch_paths_reads_headers_not_hunk_bodies() -> None:
    diff = "\n".join([
        "diff --git a/tests/test_a.py b/tests/test_a.py",
        "index 1..2 100644",
        "--- a/tests/test_a.py",
        "+++ b/tests/test_a.py",
        "@@ -1,2 +1,2 @@",
        "--- not a header: a removed line starting with two dashes",
        "+++ nor is this",
        "diff --git a/tests/new.py b/tests/new.py",
        "new file mode 100644",
        "--- /dev/null",
        "+++ b/tests/new.py",
        "@@ -0,0 +1 @@",
        "+x = 1",
        "diff --git a/old name.txt b/new name.txt",
        "similarity index 90%",
        "rename from old name.txt",
        "rename to new name.txt",
        'diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"',
        "Binary files a/caf\u00e9.txt and b/caf\u00e9.txt differ",
        "diff --git a/gone.txt b/gone.txt",
        "deleted file mode 100644",
        "--- a/gone.txt",
        "+++ /dev/null",
    ])
    assert patch_paths(diff) == (
        "tests/test_a.py", "tests/new.py", "old name.txt", "new name.txt", "caf\u00e9.txt", "gone.txt",
    )


def test_test_commands_may_be_a_string_or_a_serialised_list(row: dict[str, Any]) -> None:
    plain = _variant(row, test_cmd="make check")
    listed = _variant(row, test_cmd='["make -C nc_test check", "make -C nc_test4 check"]')
    assert parse_row(plain).test_commands == ("make check",)
    assert parse_row(listed).test_commands == ("make -C nc_test check", "make -C nc_test4 check")


def test_test_commands_that_bash_cannot_parse_are_skipped(row: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(RowError, match="not valid bash"):
        convert_row(_variant(row, test_cmd=["make check 'unterminated"]), out_dir=tmp_path)
