"""Grade a SWE-rebench V2 test log on the host with the awk program task images run.

`grade.awk`, beside this file, is the only implementation of the log parsers. Converted tasks carry a copy
in tests/ and run it inside the image (many images have no Python); this module runs the same file with
`awk -f`, so a reward computed here is the one the verifier would write.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRADER = Path(__file__).with_name("grade.awk")
"""The grader; copied verbatim into every converted task's tests/."""

DEFAULT_AWK: tuple[str, ...] = ("awk",)


class GradingError(RuntimeError):
    """awk itself could not be run, or left output that is not what grade.awk writes."""


@dataclass(frozen=True)
class Grade:
    """What grade.awk wrote for one log."""

    reward: dict[str, float] | None
    """reward.json: "reward" (1 or 0), "fail_to_pass" and "pass_to_pass" (fractions passed); None when the
    log could not be graded, which a trial treats as a verifier error."""
    report: dict[str, Any]
    """report.json: the parser, per-test statuses of the expected tests and every parsed test."""
    error: str | None
    """Why no reward was written (unknown parser, no test found, ...); None on success."""


def format_ids(ids: Sequence[str]) -> str:
    """The id-list file grade.awk reads: one test id per line."""
    for test_id in ids:
        if "\n" in test_id or "\r" in test_id:
            raise ValueError(f"test id {test_id!r} contains a line break; grade.awk reads one id per line")
    return "".join(f"{test_id}\n" for test_id in ids)


def grade_log(
    log: str | bytes,
    *,
    parser: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    awk: Sequence[str] = DEFAULT_AWK,
    whole_log: bool = True,
) -> Grade:
    """Parse `log` with the dataset parser `parser` and grade it against the expected ids.

    With `whole_log` every line is test output; otherwise only the regions between test.sh's sentinel
    lines are. `awk` is the command to run (e.g. ("busybox", "awk")).
    """
    with tempfile.TemporaryDirectory(prefix="codedojo-grade-") as tmp:
        d = Path(tmp)
        (d / "test-output.log").write_bytes(
            log.encode("utf-8", "surrogateescape") if isinstance(log, str) else log
        )
        (d / "fail_to_pass.txt").write_text(format_ids(fail_to_pass), encoding="utf-8")
        (d / "pass_to_pass.txt").write_text(format_ids(pass_to_pass), encoding="utf-8")
        args = [
            *awk,
            "-v",
            f"parser={parser}",
            "-v",
            f"f2p={d / 'fail_to_pass.txt'}",
            "-v",
            f"p2p={d / 'pass_to_pass.txt'}",
            "-v",
            f"out={d}",
            "-v",
            f"whole={1 if whole_log else 0}",
            "-f",
            str(GRADER),
            str(d / "test-output.log"),
        ]
        proc = _run(args)
        report = _read_json(d / "report.json")
        if (d / "reward.json").exists():
            return Grade(reward=_read_json(d / "reward.json"), report=report or {}, error=None)
        error = proc.stderr.strip().removeprefix("grade.awk: error: ") or f"awk exited {proc.returncode}"
        return Grade(reward=None, report=report or {}, error=error)


@functools.cache
def supported_parsers(*, awk: Sequence[str] = DEFAULT_AWK) -> frozenset[str]:
    """The dataset parser names grade.awk implements."""
    proc = _run([*awk, "-v", "list=1", "-f", str(GRADER)])
    if proc.returncode != 0:
        raise GradingError(f"{' '.join(awk)} -v list=1 failed: {proc.stderr.strip()}")
    return frozenset(proc.stdout.split())


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    # Byte semantics: the parsers match UTF-8 marks byte by byte, identically in every awk.
    env = {**os.environ, "LC_ALL": "C"}
    try:
        return subprocess.run(args, capture_output=True, text=True, errors="replace", env=env, check=False)
    except FileNotFoundError:
        raise GradingError(
            f"{args[0]!r} is not installed; grading needs a POSIX awk (mawk, gawk or busybox)"
        ) from None


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GradingError(f"grade.awk wrote invalid JSON to {path.name}: {e}") from None
    if not isinstance(value, dict):
        raise GradingError(f"grade.awk wrote {path.name} that is not a JSON object")
    return value
