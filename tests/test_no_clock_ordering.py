"""No test orders events with a wall-clock sleep (issue 38).

A test that starts something, sleeps, and then assumes it has (or has not) happened races the machine: on a
fast CPU it has finished, on a loaded one it has not started. Such a test waits on what the code exposes
instead: a future, an event, a file the command touches, a StepGate (tests/engine_gate.py), a clock it moves
itself. This scans the Python code of every file under tests/ for calls named `sleep` (`time.sleep`,
`asyncio.sleep`, ...; a `sleep` inside a shell command is a string, not a call, and is the workload) and fails
on each one not listed in ALLOWED with its reason, which says it is one of:

- a bounded poll: a deadline, and the loop says what it waits for;
- a yield: `asyncio.sleep(0)`, which hands the loop to the tasks already ready and reads no clock;
- a fake clock: time that the test moves, nothing waits.

An entry names the file, the enclosing function and the call as written; it covers that call wherever it
appears in that function. An entry that matches nothing any more fails too, so the list stays true.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).parent
KINDS = ("bounded poll: ", "yield: ", "fake clock: ")

ALLOWED: dict[tuple[str, str, str], str] = {
    ("podman_support.py", "_wait_until_serving", "time.sleep(0.2)"):
        "bounded poll: until podman's service answers a ping, 60 s, then a RuntimeError saying so",
    ("ray_support.py", "ray_head_fixture", "time.sleep(0.5)"):
        "bounded poll: until the Ray head answers /api/version, STARTUP_LIMIT_SEC, then a RuntimeError",
    ("ray_support.py", "_stop_group", "time.sleep(0.2)"):
        "bounded poll: until the head's process group has exited, 5 s, then SIGKILL to what is left",
    ("test_faults.py", "test_a_sandbox_killed_mid_command_is_retried_not_scored.go", "asyncio.sleep(0.01)"):
        "bounded poll: until the agent's command runs in the first sandbox, 60 s, then an assertion saying so",
    ("test_inference_engine.py", "test_cancelled_requests_free_their_row.run", "asyncio.sleep(0)"):
        "yield: the new request's task posts it to the engine (generate posts before its first await)",
    ("test_inference_engine.py", "test_many_concurrent_sessions.episode", "asyncio.sleep(0)"):
        "yield: staggers the sessions' turns by a few loop turns; no assertion depends on it",
    ("test_inference_openai.py", "test_a_client_that_disconnects_cancels_its_generation.run", "asyncio.sleep(0.1)"):
        "bounded poll: /stats until nothing is running after the client hung up, 30 s",
    ("test_inference_server.py", "test_router_keeps_sessions_on_one_server_and_reuses_their_cache.run.episode",
     "asyncio.sleep(0)"):
        "yield: staggers the sessions' turns by a few loop turns; no assertion depends on it",
    ("test_inference_server.py", "stats_until", "asyncio.sleep(0.01)"):
        "bounded poll: /stats until a condition holds (a paused server holds a request, has refused one), 30 s",
    ("test_integrations_modal_sandbox.py", "test_a_creation_cancelled_midway_is_terminated_once_it_exists.run",
     "asyncio.sleep(0)"):
        "yield: the fakes are plain coroutines and events, so each yield runs the ready tasks one turn",
    ("test_integrations_modal_sandbox.py", "test_a_sandbox_that_dies_of_oom_is_an_infrastructure_failure.run",
     "asyncio.sleep(0, result=137)"):
        "yield: a fake poll() that answers 137 at once",
    ("test_integrations_slime_command.py", "test_launch_submits_the_rendered_job_to_a_real_ray_head",
     "time.sleep(1)"):
        "bounded poll: the job's status until it has ended, 300 s, then an assertion naming the status",
    ("test_sandbox_docker.py", "test_a_start_cancelled_at_any_point_leaves_no_container.go", "asyncio.sleep(0.1)"):
        "bounded poll: until containers created after their start was cancelled are removed, 30 s",
    ("test_sandbox_docker_security.py", "test_close_leaves_no_process_behind.go", "asyncio.sleep(0.05)"):
        "bounded poll: until the command's process is seen on the host, 60 s",
    ("test_sandbox_local.py", "test_the_init_and_its_commands_are_inside_every_sandbox_cgroup.go",
     "asyncio.sleep(0.01)"):
        "bounded poll: until the command has touched /tmp/started, 30 s",
    ("test_sandbox_workspace_lock.py", "test_waiters_hold_no_worker_thread_and_take_the_lock_one_at_a_time.waiter",
     "asyncio.sleep(0)"):
        "yield: the holder lets the other waiters run while it holds the lock",
    ("test_sandbox_workspace_lock.py", "test_waiters_hold_no_worker_thread_and_take_the_lock_one_at_a_time.main",
     "asyncio.sleep(0)"):
        "yield: every waiter takes its first step (tries the lock) before the checks",
    ("test_threads.py", "os_threads_settled", "time.sleep(0.01)"):
        "bounded poll: until the thread count reads what the test expects (a joined thread still listed), 5 s",
    ("test_threads.py", "test_the_engine_frees_its_builders_pool_and_its_idle_workers.serve", "asyncio.sleep(0.02)"):
        "bounded poll: until the idle worker's helper thread is gone, 30 s",
    ("test_trial.py", "test_a_slow_or_failing_agent_is_still_verified.time_out_after_the_work", "asyncio.sleep(0.01)"):
        "bounded poll: until solve.sh has touched /app/started, 20 s; then the test moves the loop's clock",
}


def sleep_calls(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, enclosing function as a dotted path, the call as written) for each call named `sleep`."""

    def walk(node: ast.AST, scope: tuple[str, ...]) -> Iterator[tuple[int, str, str]]:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = (*scope, child.name)
            elif isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name == "sleep":
                    yield child.lineno, ".".join(scope), ast.unparse(child)
            yield from walk(child, inner)

    yield from walk(ast.parse(source), ())


def test_every_sleep_in_the_tests_is_a_bounded_poll_a_yield_or_a_fake_clock() -> None:
    found: dict[tuple[str, str, str], int] = {}
    for path in sorted(TESTS.rglob("*.py")):
        for line, scope, call in sleep_calls(path.read_text(encoding="utf-8")):
            found.setdefault((path.relative_to(TESTS).as_posix(), scope, call), line)
    unlisted = [f"tests/{file}:{line} {call} (in {scope})" for (file, scope, call), line in found.items()
                if (file, scope, call) not in ALLOWED]
    assert not unlisted, ("a sleep that may order events by the clock; wait on what the code exposes instead "
                          "(see this file's docstring), or list it in ALLOWED with its reason:\n" + "\n".join(unlisted))
    stale = [key for key in ALLOWED if key not in found]
    assert not stale, f"ALLOWED entries that match no call any more: {stale}"
    assert all(reason.startswith(KINDS) for reason in ALLOWED.values())


def test_the_scan_sees_calls_not_shell_strings_or_references() -> None:
    source = '''
import asyncio, time

async def waits(sb, clock):
    await sb.exec("sleep 30", timeout_sec=1)  # the workload: a string
    await bucket.acquire(sleep=clock.sleep)  # a reference
    await asyncio.sleep(0.5)

def polls():
    time.sleep(1)
'''
    assert list(sleep_calls(source)) == [(7, "waits", "asyncio.sleep(0.5)"), (10, "polls", "time.sleep(1)")]
