"""The shell scripts of a converted task (tests/test.sh, solution/solve.sh) and the diff reading they need.

Both scripts are bash, run inside the dataset's image from any directory, and use only git, patch, awk
and coreutils, which every image has. The values specific to a task sit in variables at the top; the
rest of each script is the same for every task.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

BEGIN_MARK = ">>>>> codedojo: test command output begins"
END_MARK = "<<<<< codedojo: test command output ends"
"""Sentinel lines around each test command's output; grade.awk parses only what lies between them."""

GIT_APPLY = "git apply -v --3way --recount --ignore-space-change --whitespace=nowarn"
"""The dataset's own flags for applying a patch (upstream scripts/eval.py)."""
PATCH_FALLBACK = "patch --batch --fuzz=5 -p1 -i"
"""What to try when git apply refuses."""

_HERE = """\
here=${0%/*}
[ "$here" = "$0" ] && here=.
"""


def test_script(
    *,
    instance_id: str,
    workdir: str,
    base_commit: str,
    log_parser: str,
    test_commands: Sequence[str],
) -> str:
    """tests/test.sh: restore the test files, apply test.patch, run the commands, grade with grade.awk."""
    runs = "".join(
        f"begin_region\n{command.rstrip()}\nend_region {i}\n" for i, command in enumerate(test_commands, 1)
    )
    return f"""\
#!/bin/bash
# SWE-rebench V2 verifier for {instance_id}, written by codedojo (see docs/swe-rebench.md).
#
#  1. Every file the test patch touches goes back to the base commit and files it creates are removed,
#     so whatever the agent did to the tests cannot change the verdict; then the test patch is applied.
#  2. Each test command runs in one shell, in order, between sentinel lines; a failing command does not
#     stop the ones after it. stdout and stderr are kept apart and joined stdout-first, as upstream.
#  3. grade.awk parses the output with the dataset's parser and writes $LOGS_DIR/reward.json
#     ({{"reward", "fail_to_pass", "pass_to_pass"}}) and report.json. When the output cannot be graded
#     it writes no reward.json: that, not the exit status, is what marks a verifier failure.
#
# CODEDOJO_WORKDIR and CODEDOJO_LOGS_DIR move the repository and the log directory (for tests run
# outside a container); the other files are read from this script's directory.

WORKDIR=${{CODEDOJO_WORKDIR:-{shlex.quote(workdir)}}}
LOGS_DIR=${{CODEDOJO_LOGS_DIR:-/logs/verifier}}
BASE_COMMIT={shlex.quote(base_commit)}
LOG_PARSER={shlex.quote(log_parser)}
BEGIN_MARK={shlex.quote(BEGIN_MARK)}
END_MARK={shlex.quote(END_MARK)}

{_HERE}TESTS_DIR=$(cd "$here" && pwd) || exit 1

begin_region() {{
    printf '%s\\n' "$BEGIN_MARK"
    printf '%s\\n' "$BEGIN_MARK" >&2
}}

end_region() {{
    local status=$?
    printf '\\n%s\\n' "$END_MARK"
    printf '\\n%s\\n' "$END_MARK" >&2
    echo "codedojo: test command $1 exited with status $status"
}}

mkdir -p "$LOGS_DIR" || exit 1
rm -f "$LOGS_DIR/reward.json" "$LOGS_DIR/report.json"
cd "$WORKDIR" || {{ echo "codedojo: cannot enter $WORKDIR" >&2; exit 1; }}

echo "codedojo: restoring the files the test patch touches to $BASE_COMMIT"
while IFS= read -r path; do
    if git cat-file -e "$BASE_COMMIT:$path" 2>/dev/null; then
        git --literal-pathspecs checkout -q "$BASE_COMMIT" -- "$path"
    else
        git --literal-pathspecs rm -q -f --cached --ignore-unmatch -- "$path" >/dev/null 2>&1
        rm -rf -- "$path"
    fi
done < "$TESTS_DIR/test_files.txt"

echo "codedojo: applying the test patch"
if ! {GIT_APPLY} "$TESTS_DIR/test.patch"; then
    echo "codedojo: git apply refused the test patch; trying patch" >&2
    {PATCH_FALLBACK} "$TESTS_DIR/test.patch" || echo "codedojo: the test patch did not apply" >&2
fi

export _JAVA_OPTIONS="${{_JAVA_OPTIONS:--Djava.net.preferIPv6Addresses=false}}"
run_dir=$(mktemp -d "${{TMPDIR:-/tmp}}/codedojo-tests.XXXXXX") || exit 1
echo "codedojo: running {len(test_commands)} test command(s)"
(
{runs}) > "$run_dir/stdout" 2> "$run_dir/stderr" < /dev/null
cat "$run_dir/stdout" "$run_dir/stderr" | tr -d '\\000' > "$LOGS_DIR/test-output.log"
rm -rf "$run_dir"
echo "codedojo: test output is in $LOGS_DIR/test-output.log; its last lines:"
tail -n 60 "$LOGS_DIR/test-output.log"

LC_ALL=C awk -v parser="$LOG_PARSER" -v f2p="$TESTS_DIR/fail_to_pass.txt" \\
    -v p2p="$TESTS_DIR/pass_to_pass.txt" -v out="$LOGS_DIR" \\
    -f "$TESTS_DIR/grade.awk" "$LOGS_DIR/test-output.log"
status=$?
[ -f "$LOGS_DIR/reward.json" ] && cat "$LOGS_DIR/reward.json"
exit $status
"""


def solve_script(*, instance_id: str, workdir: str) -> str:
    """solution/solve.sh: apply solution/fix.patch the way the dataset applies patches."""
    return f"""\
#!/bin/bash
# Reference solution for {instance_id}: the upstream fix, applied with the dataset's git apply flags
# (patch as a fallback). CODEDOJO_WORKDIR moves the repository, for runs outside a container.
{_HERE}SOLUTION_DIR=$(cd "$here" && pwd) || exit 1
cd "${{CODEDOJO_WORKDIR:-{shlex.quote(workdir)}}}" || exit 1
{GIT_APPLY} "$SOLUTION_DIR/fix.patch" || {PATCH_FALLBACK} "$SOLUTION_DIR/fix.patch"
"""


def patch_paths(diff: str) -> tuple[str, ...]:
    """Repository paths a git diff touches (both names of a rename), in order of first mention.

    Paths come from a file section's header lines only (never from hunk bodies, where a removed line
    "-- x" reads like "--- x"); quoted paths are unquoted and the a/ b/ prefixes dropped.
    """
    paths: dict[str, None] = {}
    lines = diff.split("\n")
    in_header = True
    for i, line in enumerate(lines):
        if line.startswith("diff --git "):
            in_header = True
            for p in _header_paths(line[len("diff --git ") :]):
                paths.setdefault(p, None)
            continue
        if line.startswith("@@"):
            in_header = False
            continue
        # A plain (non-git) diff starts its next file with "---", "+++", "@@" right after a hunk.
        if (
            not in_header
            and line.startswith("--- ")
            and i + 2 < len(lines)
            and lines[i + 1].startswith("+++ ")
            and lines[i + 2].startswith("@@")
        ):
            in_header = True
        if not in_header:
            continue
        if line.startswith(("--- ", "+++ ")):
            p = _strip_prefix(_unquote(line[4:], cut_tab=True))
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            p = _unquote(line.split(" ", 2)[2], cut_tab=False)
        else:
            continue
        if p and p != "/dev/null":
            paths.setdefault(p, None)
    return tuple(paths)


def unsafe_paths(paths: Sequence[str]) -> list[str]:
    """The paths that would leave the repository (absolute, or through "..") or hold a line break."""
    return [p for p in paths if p.startswith("/") or ".." in p.split("/") or "\n" in p or "\r" in p or not p]


def _header_paths(rest: str) -> list[str]:
    """ "a/x b/x" from a diff --git line when it can be split unambiguously (the names agree)."""
    if rest.startswith('"'):
        first, _, second = _split_quoted(rest)
        return [p for p in (_strip_prefix(first), _strip_prefix(second.strip())) if p]
    for i in range(len(rest)):
        if rest.startswith(" b/", i) and rest[:i].startswith("a/") and rest[2:i] == rest[i + 3 :]:
            return [rest[2:i]]
    return []


def _split_quoted(rest: str) -> tuple[str, str, str]:
    i = 1
    while i < len(rest) and rest[i] != '"':
        i += 2 if rest[i] == "\\" else 1
    return _unquote(rest[: i + 1], cut_tab=False), " ", _unquote(rest[i + 2 :], cut_tab=False)


def _strip_prefix(path: str) -> str:
    if path == "/dev/null":
        return path
    return path.split("/", 1)[1] if "/" in path else path


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(text: str, *, cut_tab: bool) -> str:
    """Git's C-style quoting ("a/caf\\303\\251.txt"); unquoted names end at a tab (a timestamp)."""
    if not (text.startswith('"') and text.endswith('"') and len(text) >= 2):
        return text.split("\t", 1)[0] if cut_tab else text
    body = text[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            digits = body[i + 1 : i + 4]
            if len(digits) == 3 and all(ch in "01234567" for ch in digits):
                out.append(int(digits, 8))
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out.extend(c.encode("utf-8", "surrogateescape"))
        i += 1
    return out.decode("utf-8", "surrogateescape")
