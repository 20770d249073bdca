"""Chaos bench: real `codedojo train` runs with faults injected at seeded points, against a straight run.

    nice -n 10 .venv/bin/python bench/chaos.py --seed 0 --runs 3 --out docs/results/chaos.json

Every run trains the tiny test model ("tiny-llama") for 3 steps of 2 tasks x 2 samples with local sandboxes,
sampling over HTTP from a `codedojo serve` server that this process keeps running (and restarts when it
dies), with `codedojo train --engine-url`; a 2-episode evaluation follows every step and checkpoints go to a
small tmpfs. A reference run without faults comes first; then each chaos run gets its own seeded plan:

| fault | how it is injected |
|---|---|
| `sandbox_killed` | every process of the sandbox (its init included) SIGKILLed while the agent's command runs |
| `sandbox_start_failed` | the sandbox's shell fails while the sandbox is being built (the real teardown runs) |
| `verifier_hang` | the task's real test.sh sleeps past its 10 s verifier timeout |
| `verifier_bad_reward` | test.sh writes a malformed reward.json, or no reward file at all |
| `output_100mb`, `_binary`, `_invalid_utf8` | the agent's command prints 100 MB, /bin/sh's bytes, invalid UTF-8 |
| `engine_restart` | the engine server SIGKILLed before an episode's model turn, and restarted |
| `disk_full` | the checkpoint tmpfs filled to a seeded number of free bytes as a checkpoint is written |
| `trainer_killed` | the trainer SIGKILLed in a rollout, an update, a checkpoint write or an evaluation, relaunched |

The policy is the model over HTTP, except each episode's first reply, which is a scripted command (one of
the output commands, a slow `sleep`, or hello-file's fix, so groups have mixed rewards): the same in every
run, so a chaos run that handles its faults ends with the reference run's numbers. Faults that need the
inside of the trainer (sandboxes, verifiers, kills) are injected by this file's `worker` mode, which patches
the seams and then runs `codedojo train` (`python bench/chaos.py worker PLAN -- TRAIN ARGS`); each injection
is logged to RUN/chaos.jsonl before it happens and fires once across relaunches.

The JSON: injections per kind; episodes lost (an episode of a step or an evaluation without a valid reward
at the end); infrastructure failures scored (an attempt with an injected fault that ended with a valid
reward); groups whose statistics included an infrastructure failure; checkpoints left corrupt (`latest`
missing, unloadable, or behind the last checkpoint written); runs whose final weights, optimizer state,
checkpointed state and metrics equal the reference run's; every error message the runs printed or recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

STEPS = 3
GROUPS = 2
SAMPLES = 2
EVAL_TASKS = ("hello-file", "fix-add")
TRAIN_TASKS = ("hello-file", "fix-add")
VERIFIER_TIMEOUT_SEC = 10.0
TMPFS_BYTES = 24 << 20
MAX_LAUNCHES = 12
MIN_INJECTIONS = 5
"""Injections of each fault kind the whole bench makes at least (spread over its runs)."""

COMMANDS = {
    "output_100mb": "head -c 100000000 /dev/zero | tr '\\0' x",
    "output_binary": "head -c 4096 /bin/sh",
    "output_invalid_utf8": "printf 'caf\\xe9 \\xc3\\x28 \\xed\\xa0\\x80 \\xf0\\x28\\x8c\\x28 \\xc0\\xaf\\n'",
    "slow": "sleep 2; ls",
    "solve": "echo world > hello.txt",
}
"""The scripted first reply of each episode, by name (`first_command` picks one per episode)."""
OUTPUT_KINDS = ("output_100mb", "output_binary", "output_invalid_utf8")
EPISODE_FAULTS = ("sandbox_killed", "sandbox_start_failed", "verifier_hang", "verifier_bad_reward", "engine_restart")
KILL_PHASES = ("rollout", "update", "checkpoint", "eval")
KINDS = (*EPISODE_FAULTS, *OUTPUT_KINDS, "disk_full", "trainer_killed")

CHAOS_TEST_SH = """#!/bin/bash
# chaos bench: a fault planted for this verification only (/tmp/chaos-verifier, written by bench/chaos.py)
case "$(cat /tmp/chaos-verifier 2>/dev/null)" in
  hang) sleep 3600 ;;
  malformed) echo '{"reward": 1,' > /logs/verifier/reward.json; exit 0 ;;
  missing) echo "no reward written"; exit 0 ;;
esac
"""


def first_command(phase: str, step: int, group: int, sample: int, task: str) -> str:
    """The scripted first reply's command of an episode: a fixed function of its place, the same in every run.
    Slow in the last sample of each rollout group (every step has episodes a kill can catch mid-command);
    hello-file's fix in half of its first samples (groups with mixed rewards); otherwise an output command,
    and in evaluations each output command twice a run."""
    if phase == "rollout" and sample == SAMPLES - 1:
        return "slow"
    if phase == "rollout" and task == "hello-file" and (step + group) % 2 == 0:
        return "solve"
    return OUTPUT_KINDS[(step * GROUPS + group) % len(OUTPUT_KINDS)]


# ----- the plan of a chaos run -------------------------------------------------------------------------


def make_plan(rng: random.Random, *, index: int, per_run: int) -> dict[str, Any]:
    """One chaos run's faults: `per_run` of each episode fault, each on its own rollout episode (a kill on a
    slow one); `per_run` full disks at distinct steps; `per_run + 1` trainer kills, their phases taken in turn
    across runs and their steps and points in the phase drawn."""
    slots = [(step, g, s) for step in range(STEPS) for g in range(GROUPS) for s in range(SAMPLES)]
    slow = [slot for slot in slots if slot[2] == SAMPLES - 1]
    faults: dict[str, str] = {}
    for slot in rng.sample(slow, per_run):
        faults[_slot_key("rollout", *slot)] = "sandbox_killed"
    rest = [slot for slot in slots if _slot_key("rollout", *slot) not in faults]
    kinds = [kind for kind in EPISODE_FAULTS[1:] for _ in range(per_run)]
    for kind, slot in zip(kinds, rng.sample(rest, len(kinds)), strict=True):
        faults[_slot_key("rollout", *slot)] = kind
    bad = sorted(key for key, kind in faults.items() if kind == "verifier_bad_reward")
    verifier_modes = {key: ("malformed", "missing")[i % 2] for i, key in enumerate(bad)}  # both, every run
    kills = []
    for j in range(per_run + 1):
        phase = KILL_PHASES[(index * (per_run + 1) + j) % len(KILL_PHASES)]
        kills.append({"phase": phase, "step": rng.randrange(STEPS), "point": _kill_point(rng, phase)})
    kills.sort(key=lambda k: (k["step"], KILL_PHASES.index(k["phase"])))
    disk_full = [{"step": step, "free_bytes": rng.randrange(0, 1 << 20)}
                 for step in sorted(rng.sample(range(STEPS), per_run))]
    return {"faults": faults, "verifier_modes": verifier_modes, "kills": kills, "disk_full": disk_full}


def _kill_point(rng: random.Random, phase: str) -> int:
    if phase == "rollout":
        return rng.randrange(1, GROUPS * SAMPLES)  # after this many of the step's episodes finished
    if phase == "eval":
        return 1  # after the first of the evaluation's two episodes
    if phase == "update":
        return rng.randrange(1, 3)  # before this optimizer step (two per rollout)
    return rng.randrange(1, 7)  # before this file operation of the checkpoint (3 saves, renames, latest)


def _slot_key(phase: str, step: int, group: int, sample: int) -> str:
    return f"{phase}:{step}:{group}:{sample}"


# ----- the worker: `codedojo train` with the plan's faults -----------------------------------------------

SLOT: contextvars.ContextVar[tuple[str, int, int, int, str] | None] = contextvars.ContextVar("slot", default=None)
"""The episode the current asyncio task runs: (phase, step, group, sample, task name)."""
FAIL_SHELL: contextvars.ContextVar[bool] = contextvars.ContextVar("fail_shell", default=False)


class Worker:
    """Patches the trainer's seams in this process (see the module docstring) from `plan`."""

    def __init__(self, plan: dict[str, Any], *, log: Path) -> None:
        self.plan = plan
        self.log_path = log
        self.fired = {r["id"] for r in _read_log(log) if r["event"] == "inject"}
        self.phase, self.step = "start", 0
        self.finished = 0
        self.attempts: Counter[str] = Counter()
        self.turns: dict[str, int] = {}

    def log(self, **record: Any) -> None:
        with self.log_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def inject(self, fault_id: str, kind: str, **detail: Any) -> bool:
        """Log the injection (before it happens) and say whether it is due: each fires once, across relaunches."""
        if fault_id in self.fired:
            return False
        self.fired.add(fault_id)
        self.log(event="inject", id=fault_id, kind=kind, phase=self.phase, step=self.step, **detail)
        return True

    def die(self, fault_id: str, **detail: Any) -> None:
        if self.inject(fault_id, "trainer_killed", **detail):
            os.kill(os.getpid(), signal.SIGKILL)

    def fault(self) -> str | None:
        slot = SLOT.get()
        return None if slot is None else self.plan["faults"].get(_slot_key(*slot[:4]))

    def kill_planned(self, phase: str) -> dict[str, Any] | None:
        return next((k for k in self.plan["kills"] if k["phase"] == phase and k["step"] == self.step), None)

    def install(self) -> None:
        import codedojo.rollout.episodes as rollout
        import codedojo.sandbox.local as local
        import codedojo.train.observability as observability
        import codedojo.train.served as served
        import codedojo.train.trainer as trainer
        import codedojo.trial.runner as runner

        worker = self
        original = {"span": observability.Trace.span, "factory": served.served_engine_factory,
                    "episode": rollout.run_episode, "trial": rollout.run_trial, "start": runner.start_sandbox,
                    "verify": runner.verify, "exec": local.LocalSandbox.exec, "shell": local.IsolatedShell.start,
                    "update": trainer.update, "save": trainer.save_checkpoint}

        @contextlib.contextmanager
        def span(trace: Any, name: str, **kwargs: Any) -> Any:
            """The trainer's phases, from its trace spans: rollout, train, eval (after `step` steps), checkpoint."""
            before = worker.phase, worker.step
            if name in ("rollout", "train", "eval", "checkpoint"):
                worker.phase, worker.finished = name, 0
                worker.step = kwargs["step"] - 1 if name == "eval" else kwargs["step"]
            try:
                with original["span"](trace, name, **kwargs):
                    yield
            finally:
                worker.phase, worker.step = before

        def served_engine_factory(url: str, **kwargs: Any) -> Any:
            opener = original["factory"](url, **kwargs)

            async def open_engine(loaded: Any) -> Any:
                return ChaosPolicy(await opener(loaded), worker)

            return open_engine

        async def run_episode(request: Any, **kwargs: Any) -> Any:
            SLOT.set((worker.phase, worker.step, request.group, request.sample, request.task.name))
            episode = await original["episode"](request, **kwargs)
            slot = SLOT.get()
            assert slot is not None
            worker.log(event="episode", slot=_slot_key(*slot[:4]), status=str(episode.status), valid=episode.valid,
                       reward=episode.reward, attempts=episode.attempts, error=episode.error)
            worker.finished += 1
            kill = worker.kill_planned(worker.phase)
            if kill is not None and worker.finished == kill["point"]:
                worker.die(f"kill:{worker.phase}:{worker.step}", point=kill["point"])
            return episode

        async def run_trial(task: Any, agent: Any, **kwargs: Any) -> Any:
            slot = SLOT.get()
            assert slot is not None
            key = _slot_key(*slot[:4])
            worker.attempts[key] += 1
            before = set(worker.fired)
            result = await original["trial"](task, agent, **kwargs)
            injected = [f for f in worker.fired - before if f.endswith(key)]
            worker.log(event="attempt", slot=key, attempt=worker.attempts[key], status=str(result.status),
                       infrastructure=result.status.is_infrastructure, valid=result.reward_valid,
                       error=result.error, injected=injected)
            return result

        async def start_sandbox(task: Any, **kwargs: Any) -> Any:
            key = _slot_key(*SLOT.get()[:4])  # type: ignore[index]
            if worker.fault() == "sandbox_start_failed" and worker.inject(f"sandbox_start_failed@{key}",
                                                                          "sandbox_start_failed"):
                FAIL_SHELL.set(True)
            try:
                return await original["start"](task, **kwargs)
            finally:
                FAIL_SHELL.set(False)

        async def shell_start(*args: Any, **kwargs: Any) -> Any:
            if FAIL_SHELL.get():
                from codedojo.sandbox.base import SandboxStartError

                raise SandboxStartError("bubblewrap exited before the sandbox's init was ready (chaos bench)")
            return await original["shell"](*args, **kwargs)

        async def sandbox_exec(self: Any, command: str, **kwargs: Any) -> Any:
            slot = SLOT.get()
            if slot is None or worker.fault() != "sandbox_killed" or not command.startswith("exec 2>&1\n"):
                return await original["exec"](self, command, **kwargs)
            key = _slot_key(*slot[:4])
            if f"sandbox_killed@{key}" in worker.fired:
                return await original["exec"](self, command, **kwargs)
            import asyncio

            running = asyncio.ensure_future(original["exec"](self, command, **kwargs))
            deadline = time.monotonic() + 30
            while not self.command_pids() and not running.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # a bounded poll: until the command's processes exist
            if self.command_pids() and worker.inject(f"sandbox_killed@{key}", "sandbox_killed", command=command):
                for pid in self.pids():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            return await running

        async def verify(task: Any, sandbox: Any, **kwargs: Any) -> Any:
            slot = SLOT.get()
            kind = worker.fault()
            if slot is not None and kind in ("verifier_hang", "verifier_bad_reward"):
                key = _slot_key(*slot[:4])
                mode = "hang" if kind == "verifier_hang" else worker.plan["verifier_modes"][key]
                if worker.inject(f"{kind}@{key}", kind, mode=mode):
                    await sandbox.exec(f"echo {mode} > /tmp/chaos-verifier", timeout_sec=30, user="root")
            return await original["verify"](task, sandbox, **kwargs)

        def update(policy: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            kill = worker.kill_planned("update")
            if kill is not None:
                step, calls = optimizer.step, [0]

                def stepping(*a: Any, **k: Any) -> Any:
                    calls[0] += 1
                    if calls[0] == kill["point"]:
                        worker.die(f"kill:update:{worker.step}", point=kill["point"])
                    return step(*a, **k)

                optimizer.step = stepping
            try:
                return original["update"](policy, optimizer, *args, **kwargs)
            finally:
                optimizer.__dict__.pop("step", None)

        def save_checkpoint(root: Path, name: str, state: Any, **kwargs: Any) -> Any:
            for full in worker.plan["disk_full"]:
                if full["step"] == worker.step and worker.inject(f"disk_full:{worker.step}", "disk_full",
                                                                 free_bytes=full["free_bytes"]):
                    fill(root, full["free_bytes"])
            kill = worker.kill_planned("checkpoint")
            if kill is None or f"kill:checkpoint:{worker.step}" in worker.fired:
                out = original["save"](root, name, state, **kwargs)
            else:
                with _killing_before(kill["point"], lambda: worker.die(f"kill:checkpoint:{worker.step}",
                                                                       point=kill["point"], name=name)):
                    out = original["save"](root, name, state, **kwargs)
            worker.log(event="checkpoint", step=state.step, name=name)
            return out

        observability.Trace.span = span  # type: ignore[assignment,method-assign]
        served.served_engine_factory = served_engine_factory
        rollout.run_episode = run_episode  # type: ignore[assignment]
        rollout.run_trial = run_trial  # type: ignore[assignment]
        runner.start_sandbox = start_sandbox  # type: ignore[assignment]
        runner.verify = verify  # type: ignore[assignment]
        local.LocalSandbox.exec = sandbox_exec  # type: ignore[method-assign]
        local.IsolatedShell.start = shell_start  # type: ignore[method-assign]
        trainer.update = update  # type: ignore[assignment]
        trainer.save_checkpoint = save_checkpoint  # type: ignore[assignment]


def fill(root: Path, free_bytes: int) -> None:
    """Fill the filesystem of `root` until `free_bytes` are left (a file the driver removes after the crash)."""
    root.mkdir(parents=True, exist_ok=True)
    stats = os.statvfs(root)
    size = max(0, stats.f_bavail * stats.f_frsize - free_bytes)
    with (root / "ballast").open("wb") as f:
        while size > 0:
            chunk = min(size, 1 << 20)
            try:
                f.write(b"\0" * chunk)
                f.flush()
            except OSError:
                break
            size -= chunk


@contextlib.contextmanager
def _killing_before(point: int, kill: Any) -> Any:
    """Count the file operations of a checkpoint write (torch.save, rename, replace, write_text) and call
    `kill` before the `point`-th."""
    import torch

    calls = [0]
    saved = {"save": torch.save, "rename": Path.rename, "replace": Path.replace, "write_text": Path.write_text}

    def counted(name: str) -> Any:
        def operation(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] == point:
                kill()
            return saved[name](*args, **kwargs)
        return operation

    torch.save = counted("save")
    for name in ("rename", "replace", "write_text"):
        setattr(Path, name, counted(name))
    try:
        yield
    finally:
        torch.save = saved["save"]
        for name in ("rename", "replace", "write_text"):
            setattr(Path, name, saved[name])


class ChaosPolicy:
    """The trainer's engine with each episode's first reply scripted (`first_command`) and the engine server
    killed before the model's turn of an `engine_restart` episode."""

    def __init__(self, engine: Any, worker: Worker) -> None:
        self.engine = engine
        self.worker = worker
        self.tokenizer = engine.tokenizer

    async def generate(self, prompt_ids: Any, params: Any, *, session_id: str | None = None) -> Any:
        from codedojo.inference.protocol import Completion

        slot = SLOT.get()
        key = session_id or ""
        turn = self.worker.turns.get(key, 0)
        self.worker.turns[key] = turn + 1
        if turn == 0 and slot is not None:
            text = f"```bash\n{COMMANDS[first_command(*slot)]}\n```"
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            return Completion(token_ids=tuple(ids), logprobs=tuple([-0.5] * len(ids)), finish_reason="stop",
                              prompt_tokens=len(prompt_ids), cached_tokens=0, weight_version=self.engine.loads)
        if slot is not None and self.worker.fault() == "engine_restart":
            slot_key = _slot_key(*slot[:4])
            pid_file = Path(os.environ["CHAOS_SERVER_PID"])
            if self.worker.inject(f"engine_restart@{slot_key}", "engine_restart"):
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
        return await self.engine.generate(prompt_ids, params, session_id=session_id)

    async def end_session(self, session_id: str) -> None:
        self.worker.turns.pop(session_id, None)
        await self.engine.end_session(session_id)

    async def update_weights(self, state: Any) -> int:
        return int(await self.engine.update_weights(state))

    async def flush_cache(self) -> bool:
        return bool(await self.engine.flush_cache())

    async def close(self) -> None:
        await self.engine.close()


def worker_main(plan_path: Path, train_args: list[str]) -> int:
    plan = json.loads(plan_path.read_text())
    run_dir = Path(train_args[train_args.index("--run-dir") + 1])
    Worker(plan, log=run_dir / "chaos.jsonl").install()
    from codedojo.cli import main

    return main(["train", *train_args])


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ----- the driver ---------------------------------------------------------------------------------------


class Server:
    """`codedojo serve --model tiny-llama` on a fixed port, restarted whenever it exits until `stop`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pid_file = folder / "server.pid"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.restarts = -1
        self._stopping = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._supervise, daemon=True)

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 300
        while not self._healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"codedojo serve did not come up on {self.url}")
            time.sleep(0.2)  # a bounded poll: until the server answers /health

    def _healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def _supervise(self) -> None:
        log = (self.folder / "server.log").open("ab")
        while not self._stopping.is_set():
            self.restarts += 1
            self._proc = subprocess.Popen(
                ["nice", "-n", "10", sys.executable, "-m", "codedojo.cli", "serve", "--model", "tiny-llama",
                 "--port", str(self.port), "--seed", "0"], stdout=log, stderr=log)
            self.pid_file.write_text(str(self._proc.pid))
            self._proc.wait()

    def stop(self) -> None:
        self._stopping.set()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(30)
        self._thread.join(60)


def make_tasks(root: Path) -> dict[str, Path]:
    """Copies of the example tasks whose test.sh first reads the planted fault (CHAOS_TEST_SH) and whose
    verifier times out after VERIFIER_TIMEOUT_SEC; the training and evaluation datasets over them."""
    from codedojo.config import task_row
    from codedojo.tasks.task import Task, examples_dir

    for name in {*TRAIN_TASKS, *EVAL_TASKS}:
        target = root / "tasks" / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(examples_dir() / name, target)
        test_sh = target / "tests" / "test.sh"
        test_sh.write_text(CHAOS_TEST_SH + test_sh.read_text().removeprefix("#!/bin/bash\n"))
        toml = target / "task.toml"
        toml.write_text(re.sub(r"(\[verifier\]\ntimeout_sec = )[0-9.]+", rf"\g<1>{VERIFIER_TIMEOUT_SEC}",
                               toml.read_text()))
    datasets = {}
    for name, tasks in (("train", TRAIN_TASKS), ("eval", EVAL_TASKS)):
        rows = [task_row(root / "tasks" / t, instruction=Task.load(root / "tasks" / t).instruction) for t in tasks]
        datasets[name] = root / f"{name}.jsonl"
        datasets[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return datasets


def train_args(datasets: dict[str, Path], run_dir: Path, checkpoints: Path, url: str) -> list[str]:
    settings = [f"num_rollout={STEPS}", f"rollout_batch_size={GROUPS}", f"n_samples_per_prompt={SAMPLES}",
                "global_batch_size=2", "rollout_max_response_len=96", "lr=1e-3", "entropy_coef=0.01", "bf16=false",
                "seed=5", "dynamic_sampling=false", f"save=\"{checkpoints}\"", "save_interval=2", "eval_interval=1",
                "n_samples_per_eval_prompt=1",
                "extra_config={agentic_max_steps=2, skip_eval_before_train=true, agentic_exec_timeout=60}"]
    args = ["--dataset", str(datasets["train"]), "--eval-dataset", str(datasets["eval"]), "--model", "tiny-llama",
            "--device", "cpu", "--run-dir", str(run_dir), "--engine-url", url]
    for item in settings:
        args += ["--set", item]
    return args


def launch_until_done(run_dir: Path, plan: dict[str, Any], *, args: list[str], checkpoints: Path,
                      env: dict[str, str]) -> list[dict[str, Any]]:
    """Run the worker with `plan` and relaunch it with the same command after each crash, until it finishes;
    after each crash, the checkpoint it would resume from is checked. One entry per launch."""
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_path = run_dir / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    command = ["nice", "-n", "10", sys.executable, str(Path(__file__).resolve()), "worker", str(plan_path), "--",
               *args]
    launches: list[dict[str, Any]] = []
    while len(launches) < MAX_LAUNCHES:
        logged = len(_read_log(run_dir / "chaos.jsonl"))
        started = time.monotonic()
        stderr_path = run_dir / f"launch{len(launches)}.stderr"
        with stderr_path.open("w") as stderr:
            proc = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        text = stderr_path.read_text(errors="replace")
        events = _read_log(run_dir / "chaos.jsonl")[logged:]
        injected = [e for e in events if e["event"] == "inject"]
        resumed = re.search(r"at\s+step\s+(\d+)", " ".join(text.split()))
        entry: dict[str, Any] = {"returncode": proc.returncode, "seconds": round(time.monotonic() - started, 1),
                                 "resumed_at_step": int(resumed.group(1)) if "resumed from" in text and resumed else 0,
                                 "ended_by": next((e["kind"] for e in reversed(injected)
                                                   if e["kind"] in ("trainer_killed", "disk_full")), None)}
        if proc.returncode not in (0, -signal.SIGKILL):
            entry["message"] = _last_message(text)
        warnings = sorted({line.split(":", 1)[1].strip() for line in " ".join(text.split()).split("health check after")
                           [1:] if ":" in line})
        if warnings:
            entry["health_warnings"] = sorted({re.sub(r"\d+(\.\d+)?(e[+-]\d+)?", "<n>", w.split(" (limit")[0])[:200]
                                               for w in warnings})
        launches.append(entry)
        if proc.returncode == 0:
            break
        with contextlib.suppress(FileNotFoundError):
            (checkpoints / "ballast").unlink()  # the user frees the disk before relaunching
        written = [e["step"] for e in _read_log(run_dir / "chaos.jsonl") if e["event"] == "checkpoint"]
        entry["checkpoint"] = check_checkpoint(checkpoints, expected_step=max(written, default=0))
    return launches


def _last_message(stderr: str) -> str:
    """What the trainer said as it stopped: its own `codedojo train:` line, else the last exception line (and
    anything asyncio complained about on the way out, which a user sees too)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("codedojo train:")]
    errors = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line)]
    noise = [line for line in lines if "never retrieved" in line]
    return "; ".join([(said or errors or lines or [""])[-1][:500], *sorted(set(noise))])


def check_checkpoint(root: Path, *, expected_step: int) -> dict[str, Any]:
    """What a relaunch would resume from: `latest` loads completely and is the last checkpoint written."""
    import torch

    from codedojo.train.checkpoint import latest_checkpoint

    if expected_step == 0:
        return {"ok": True, "step": 0}
    try:
        path = latest_checkpoint(root)
        if path is None:
            return {"ok": False, "why": f"no loadable checkpoint; {expected_step} was written"}
        loaded = {name: torch.load(path / name, weights_only=False) for name in ("policy.pt", "optimizer.pt",
                                                                                  "state.pt")}
    except Exception as e:  # anything a relaunch would trip over
        return {"ok": False, "why": f"{type(e).__name__}: {e}"}
    step = int(loaded["state.pt"]["step"])
    if step != expected_step:
        return {"ok": False, "step": step, "why": f"latest is step {step}, the last written was {expected_step}"}
    return {"ok": True, "step": step, "name": path.name}


VOLATILE = ("time", "perf/", "rollout/phase/", "cost/", "rollout/prefilled_tokens")
"""Metric keys that no two runs share, faults or not: wall time (beside `*_seconds` and `*/wall_sec`), what is
priced from it, and the prompt tokens the server computed rather than found in its prefix cache (which
depends on which requests overlapped); and the retries the faults themselves caused
(`rollout/infra_retries_mean`)."""
SAMPLER = ("train/train_rollout_logprob_abs_diff", "train/train_rollout_kl")
"""Computed from the server's logprobs, which move by ~1e-8 with how its batches were formed."""


def _volatile(key: str) -> bool:
    return (key.startswith(VOLATILE) or key.endswith(("_seconds", "/wall_sec"))
            or key == "rollout/infra_retries_mean")


def compare_runs(straight: Path, chaos: Path, straight_ckpt: Path, chaos_ckpt: Path) -> dict[str, Any]:
    """Weights, optimizer and state of the last checkpoint, the final HF weights, and every metrics row."""
    import torch
    from safetensors.torch import load_file

    def final_name(root: Path) -> Path:
        return root / (root / "latest").read_text().strip()

    a, b = final_name(straight_ckpt), final_name(chaos_ckpt)
    out: dict[str, Any] = {}
    pa, pb = torch.load(a / "policy.pt"), torch.load(b / "policy.pt")
    out["weights_equal"] = pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    oa, ob = torch.load(a / "optimizer.pt", weights_only=False), torch.load(b / "optimizer.pt", weights_only=False)
    out["optimizer_equal"] = _equal(oa, ob)
    sa, sb = torch.load(a / "state.pt", weights_only=False), torch.load(b / "state.pt", weights_only=False)
    out["state_equal"] = _equal(sa, sb)
    fa, fb = load_file(str(straight / "final" / "model.safetensors")), load_file(str(chaos / "final" /
                                                                                      "model.safetensors"))
    out["final_model_equal"] = fa.keys() == fb.keys() and all(torch.equal(fa[k], fb[k]) for k in fa)
    rows_a, rows_b = _metrics(straight), _metrics(chaos)
    out["metric_rows"] = [len(rows_a), len(rows_b)]
    exact, close = [], []
    for ra, rb in zip(rows_a, rows_b, strict=False):
        for key in sorted(ra.keys() | rb.keys()):
            va, vb = ra.get(key), rb.get(key)
            if va == vb:
                continue
            if key in SAMPLER and isinstance(va, float) and isinstance(vb, float) and abs(va - vb) <= 1e-6:
                close.append(key)
            else:
                exact.append(f"{ra.get('kind')} step {ra.get('step')}: {key} {va!r} vs {vb!r}")
    out["metrics_equal"] = len(rows_a) == len(rows_b) and not exact
    out["metrics_within_1e-6_only"] = sorted(set(close))
    out["metric_differences"] = exact[:20]
    out["equal"] = all(out[k] for k in ("weights_equal", "optimizer_equal", "state_equal", "final_model_equal",
                                        "metrics_equal"))
    return out


def _equal(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not _volatile(k)} for r in rows]


def final_episodes(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Each episode's record from the launch whose step was kept (the last one logged)."""
    final: dict[str, dict[str, Any]] = {}
    for e in _read_log(run_dir / "chaos.jsonl"):
        if e["event"] == "episode":
            final[e["slot"]] = e
    return final


def tally(run_dir: Path, straight: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One run's injections, lost episodes, infrastructure failures scored and groups with one in their
    statistics, from its chaos.jsonl against the straight run's episodes (`final_episodes`)."""
    events = _read_log(run_dir / "chaos.jsonl")
    injections = Counter(e["kind"] for e in events if e["event"] == "inject")
    kill_phases = Counter(e["id"].split(":")[1] for e in events if e["event"] == "inject"
                          and e["kind"] == "trainer_killed")
    final = final_episodes(run_dir)
    for slot in final:
        phase, step, group, sample = slot.split(":")
        kind = first_command(phase, int(step), int(group), int(sample), _task_of(run_dir, phase, int(step), int(group)))
        if kind in OUTPUT_KINDS:
            injections[kind] += 1
    expected = {f"rollout:{s}:{g}:{k}" for s in range(STEPS) for g in range(GROUPS) for k in range(SAMPLES)}
    expected |= {f"eval:{s}:{g}:0" for s in range(STEPS) for g in range(len(EVAL_TASKS))}
    lost = sorted(slot for slot, e in final.items() if not e["valid"]) + sorted(expected - final.keys())
    # an attempt whose fault it survived scores nothing of the fault: retried faults must end invalid, and an
    # engine restart (repeated generations) must leave the episode as the straight run had it
    scored = []
    for e in events:
        if e["event"] != "attempt" or not e["injected"] or not e["valid"]:
            continue
        kinds = {f.split("@")[0] for f in e["injected"]}
        same = {k: v for k, v in final[e["slot"]].items() if k in ("status", "reward", "valid")} == \
            {k: v for k, v in straight.get(e["slot"], {}).items() if k in ("status", "reward", "valid")}
        if kinds != {"engine_restart"} or not same:
            scored.append(e["slot"])
    groups = {slot.rsplit(":", 1)[0] for slot in scored if slot.startswith("rollout:")}
    errors = Counter(_normalise(e["error"]) for e in events if e["event"] == "attempt" and e["infrastructure"])
    return {"injections": dict(injections), "kill_phases": dict(kill_phases), "episodes_lost": len(lost),
            "lost": lost, "infra_scored": len(scored),
            "scored": scored, "groups_with_infra_in_statistics": len(groups), "episode_errors": dict(errors)}


def _task_of(run_dir: Path, phase: str, step: int, group: int) -> str:
    """The task of a rollout group or an evaluation episode (from the step's episode file, or the eval set)."""
    if phase == "eval":
        return EVAL_TASKS[group]
    rows = [json.loads(line) for line in (run_dir / "episodes" / f"step_{step + 1:06d}.jsonl").read_text()
            .splitlines()]
    return str(rows[group * SAMPLES]["task"])


def _normalise(message: str | None) -> str:
    """An error message with its run-specific parts (sandbox ids, pids, ports, seconds) masked."""
    text = (message or "").strip().splitlines()[0] if message else ""
    text = re.sub(r"-[0-9a-f]{8}\b", "-<id>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    return re.sub(r"\b\d+(\.\d+)?s\b", "<n>s", text)[:300]


def unmount_under(root: Path) -> None:
    """Unmount what an earlier bench left mounted under `root` (its tmpfs, a killed run's sandboxes)."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False)


def driver(args: argparse.Namespace) -> dict[str, Any]:
    from codedojo.sandbox.host import state_root

    root = Path(args.workdir).resolve()
    if root.exists():
        unmount_under(root)
        shutil.rmtree(root)
    root.mkdir(parents=True)
    env = {**os.environ, "CODEDOJO_SANDBOX_DIR": str(root / "sandboxes"), "PYTHONUNBUFFERED": "1"}
    os.environ["CODEDOJO_SANDBOX_DIR"] = env["CODEDOJO_SANDBOX_DIR"]
    datasets = make_tasks(root)
    server = Server(root)
    env["CHAOS_SERVER_PID"] = str(server.pid_file)
    started = time.monotonic()
    server.start()
    report: dict[str, Any] = {"seed": args.seed, "runs": args.runs, "steps_per_run": STEPS,
                              "episodes_per_step": GROUPS * SAMPLES, "eval_episodes_per_step": len(EVAL_TASKS)}
    try:
        straight_dir = root / "straight"
        straight_ckpt = straight_dir / "checkpoints"
        report["straight"] = launch_until_done(straight_dir, {"faults": {}, "verifier_modes": {}, "kills": [],
                                                              "disk_full": []},
                                               args=train_args(datasets, straight_dir, straight_ckpt, server.url),
                                               checkpoints=straight_ckpt, env=env)
        rng = random.Random(args.seed)
        runs = []
        for index in range(args.runs):
            run_dir = root / f"run{index}"
            checkpoints = run_dir / "checkpoints"
            checkpoints.mkdir(parents=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(checkpoints)],
                           check=True)
            try:
                plan = make_plan(rng, index=index, per_run=-(-MIN_INJECTIONS // args.runs))
                launches = launch_until_done(run_dir, plan, args=train_args(datasets, run_dir, checkpoints,
                                                                            server.url),
                                             checkpoints=checkpoints, env=env)
                done = launches[-1]["returncode"] == 0
                entry = {"plan": plan, "launches": launches, **tally(run_dir, final_episodes(straight_dir))}
                entry["comparison"] = compare_runs(straight_dir, run_dir, straight_ckpt, checkpoints) if done \
                    else {"equal": False, "why": "the run did not finish"}
                runs.append(entry)
            finally:
                subprocess.run(["umount", "-l", str(checkpoints)], check=False)
            print(f"run {index}: {len(launches)} launches, equal={entry['comparison'].get('equal')}", file=sys.stderr)
        report["chaos_runs"] = runs
    finally:
        server.stop()
    report["engine_restarts"] = server.restarts
    leftovers = [p.name for p in state_root().iterdir()] if state_root().is_dir() else []
    report["sandboxes_left_behind"] = len(leftovers)
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    return summarise(report)


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    runs = report.get("chaos_runs", [])
    injections: Counter[str] = Counter()
    for run in runs:
        injections.update(run["injections"])
    checkpoints = [launch["checkpoint"] for run in runs for launch in run["launches"] if "checkpoint" in launch]
    relaunches = sum(len(run["launches"]) - 1 for run in runs)
    messages: Counter[str] = Counter()
    for run in runs:
        messages.update({f"attempt retried (shown only as rollout/infra_retries_mean): {k}": v
                         for k, v in run["episode_errors"].items()})
        messages.update(f"trainer exited: {launch['message']}" for launch in run["launches"] if "message" in launch)
        messages.update(f"health check: {w}" for launch in run["launches"] for w in launch.get("health_warnings", []))
    kill_phases: Counter[str] = Counter()
    for run in runs:
        kill_phases.update(run["kill_phases"])
    return {
        "injections": {kind: injections.get(kind, 0) for kind in KINDS},
        "trainer_kills_by_phase": dict(kill_phases),
        "episodes_lost": sum(run["episodes_lost"] for run in runs),
        "infra_scored": sum(run["infra_scored"] for run in runs),
        "groups_with_infra_in_statistics": sum(run["groups_with_infra_in_statistics"] for run in runs),
        "corrupt_checkpoints": sum(not c["ok"] for c in checkpoints),
        "checkpoints_checked": len(checkpoints),
        "relaunches": relaunches,
        "runs_equal_to_straight": sum(bool(run["comparison"].get("equal")) for run in runs),
        "runs": len(runs),
        "bit_equal": {"weights": "policy.pt and final/model.safetensors, torch.equal",
                      "optimizer": "optimizer.pt (AdamW moments, step counts, schedule), torch.equal",
                      "state": "state.pt (step, task sampler, shuffle and torch generators), equal",
                      "metrics": "every metrics.jsonl row equal but wall-time keys, rollout/prefilled_tokens and "
                                 "rollout/infra_retries_mean; the train/sampler logprob gap within 1e-6",
                      "not_compared": "wall time (perf/*, *_seconds, cost/*), rollout/prefilled_tokens (the "
                                      "server's prefix-cache hits depend on which requests overlapped), "
                                      "rollout/infra_retries_mean (the faults' own retries)"},
        "errors_seen": dict(sorted(messages.items())),
        "engine_restarts": report.get("engine_restarts"),
        "sandboxes_left_behind": report.get("sandboxes_left_behind"),
        "wall_seconds": report.get("wall_seconds"),
        "detail": report,
    }


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        split = sys.argv.index("--")
        return worker_main(Path(sys.argv[2]), sys.argv[split + 1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="draws every chaos run's plan")
    parser.add_argument("--runs", type=int, default=3, help="chaos runs (each injects every fault kind)")
    parser.add_argument("--workdir", default="/tmp/codedojo-chaos", help="scratch folder (emptied first)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    result = driver(args)
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
