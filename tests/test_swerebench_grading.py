"""grade.awk's grading: the subset rule, timing-suffix normalisation, fail-closed errors, test regions."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from codedojo.tasks.swerebench.grading import GRADER, grade_log
from swerebench_support import awk_params

BEGIN = ">>>>> codedojo: test command output begins"
END = "<<<<< codedojo: test command output ends"


def _grade(log: str, f2p: list[str], p2p: list[str], awk: tuple[str, ...], **kw: object):
    return grade_log(log, parser="parse_log_jq", fail_to_pass=f2p, pass_to_pass=p2p, awk=awk, **kw)


@awk_params
def test_reward_is_one_when_every_expected_test_passes(awk: tuple[str, ...]) -> None:
    log = "PASS: a\nPASS: b\nPASS: c\nFAIL: unrelated\n"
    grade = _grade(log, ["a"], ["b", "c"], awk)
    assert grade.reward == {"reward": 1, "fail_to_pass": 1, "pass_to_pass": 1}
    assert grade.report["fail_to_pass"] == {"passed": 1, "total": 1, "tests": {"a": "PASSED"}}


@awk_params
def test_fractions_count_failed_and_missing_tests(awk: tuple[str, ...]) -> None:
    log = "PASS: a\nFAIL: b\nPASS: p1\nPASS: p2\nPASS: p3\n"
    grade = _grade(log, ["a", "b", "gone"], ["p1", "p2", "p3", "p4"], awk)
    assert grade.reward is not None
    assert grade.reward["reward"] == 0
    assert abs(grade.reward["fail_to_pass"] - 1 / 3) < 1e-9
    assert grade.reward["pass_to_pass"] == 0.75
    assert grade.report["fail_to_pass"]["tests"] == {"a": "PASSED", "b": "FAILED", "gone": "MISSING"}
    assert grade.report["pass_to_pass"]["tests"]["p4"] == "MISSING"


@awk_params
def test_empty_pass_to_pass_counts_as_all_passed(awk: tuple[str, ...]) -> None:
    grade = _grade("PASS: a\n", ["a"], [], awk)
    assert grade.reward == {"reward": 1, "fail_to_pass": 1, "pass_to_pass": 1}


@awk_params
def test_timing_suffixes_are_stripped_on_both_sides(awk: tuple[str, ...]) -> None:
    log = (
        "PASS: bracket [1.34 ms]\n"
        "PASS: paren (0.25s)\n"
        "PASS: botan ran 17 tests in 34.33 msec all ok\n"
        "PASS: seconds in 5 secs stays\n"
        "PASS: upper (12 MS)\n"
    )
    expected = ["bracket [99 ms]", "paren (7ms)", "botan ran 17 tests all ok", "seconds in 5 secs stays", "upper"]
    grade = _grade(log, expected, [], awk)
    assert grade.reward is not None and grade.reward["reward"] == 1, grade.report


@awk_params
def test_ids_that_collapse_take_the_last_status_in_first_seen_order(awk: tuple[str, ...]) -> None:
    # As a Python dict would: "x (1ms)" keeps its first position although reported again later.
    log = "PASS: x (1ms)\nFAIL: x (2ms)\nPASS: x (1ms)\n"
    grade = _grade(log, ["x"], [], awk)
    assert grade.report["fail_to_pass"]["tests"] == {"x": "FAILED"}
    assert list(grade.report["parsed"]) == ["x (1ms)", "x (2ms)"]


@awk_params
def test_unknown_parser_is_a_verifier_error(awk: tuple[str, ...]) -> None:
    grade = grade_log("PASS: a\n", parser="parse_log_cobol", fail_to_pass=["a"], pass_to_pass=[], awk=awk)
    assert grade.reward is None
    assert "unknown log parser" in (grade.error or "")


@awk_params
def test_log_without_any_test_scores_zero_with_a_warning(awk: tuple[str, ...]) -> None:
    # A broken build prints no result: every expected test is MISSING, so the reward is 0 (as upstream).
    grade = _grade("make: *** No rule to make target 'check'.  Stop.\n", ["a"], ["b"], awk)
    assert grade.reward is not None and grade.reward["reward"] == 0 and grade.error is None
    assert grade.report["tests_found"] == 0
    assert "found no test results" in grade.report["warning"]
    assert grade.report["fail_to_pass"]["tests"] == {"a": "MISSING"}
    assert grade.report["pass_to_pass"]["tests"] == {"b": "MISSING"}


@awk_params
def test_no_expected_tests_is_a_verifier_error(awk: tuple[str, ...]) -> None:
    grade = _grade("PASS: a\n", [], [], awk)
    assert grade.reward is None
    assert "no expected tests" in (grade.error or "")


@awk_params
def test_only_lines_between_sentinels_are_parsed(awk: tuple[str, ...]) -> None:
    log = (
        "PASS: before\n"
        f"{BEGIN}\nPASS: first\n{END}\r\n"
        "PASS: between\n"
        f"{BEGIN}\r\nFAIL: second\nPASS: unclosed region runs to the end\n"
    )
    grade = _grade(log, ["first"], ["before", "between"], awk, whole_log=False)
    assert list(grade.report["parsed"]) == ["first", "second", "unclosed region runs to the end"]
    assert grade.reward is not None and grade.reward["reward"] == 0


@awk_params
def test_a_log_without_sentinels_is_a_verifier_error(awk: tuple[str, ...]) -> None:
    grade = _grade("PASS: a\n", ["a"], [], awk, whole_log=False)
    assert grade.reward is None
    assert "no test output region" in (grade.error or "")


@awk_params
def test_reports_stay_valid_json_for_any_bytes(awk: tuple[str, ...]) -> None:
    log = b'PASS: quote " back \\ tab \t bell \x07\nPASS: caf\xc3\xa9\nPASS: broken \xff\xc3 utf8\n'
    grade = grade_log(log, parser="parse_log_jq", fail_to_pass=["caf\u00e9"], pass_to_pass=[], awk=awk)
    assert grade.reward is not None and grade.reward["reward"] == 1
    assert list(grade.report["parsed"]) == ['quote " back \\ tab \t bell \x07', "caf\u00e9", "broken \ufffd\ufffd utf8"]


@awk_params
def test_awk_writes_reward_file_last_and_exits_2_on_errors(tmp_path: Path, awk: tuple[str, ...]) -> None:
    (tmp_path / "log").write_text("nothing here\n")
    (tmp_path / "f2p").write_text("a\n")
    args = [*awk, "-v", "parser=parse_log_jq", "-v", f"f2p={tmp_path / 'f2p'}", "-v", f"out={tmp_path}",
            "-f", str(GRADER), str(tmp_path / "log")]  # no test region: the test command never ran
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, check=False)
    assert proc.returncode == 2
    assert not (tmp_path / "reward.json").exists()
    assert json.loads((tmp_path / "report.json").read_text())["error"].startswith("the log has no test output region")
    assert "no test output region" in proc.stderr
