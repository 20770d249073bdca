"""`config.launch(backend="slime")`: submit the rendered slime command to a Ray cluster, or a dry run.

With a Ray address (the `address` argument, else CODEDOJO_RAY_ADDRESS, else RAY_ADDRESS) the command
is submitted with `ray job submit --no-wait` under the run id as its submission id; the YAML files
travel in the job's working directory and the environment in its runtime env. Without one, nothing
is started: the files are written into the run directory and the full command is printed (a dry run).

A launcher only starts and stops what it owns: this submits one job and never stops or kills anything;
`ray job stop <run id>` is printed for the user. `job_status` and `job_logs` read a submitted job back
(Ray's job SDK, imported only when called).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codedojo.integrations.slime_command import SlimeCommand, render_slime_command

ADDRESS_VARIABLES = ("CODEDOJO_RAY_ADDRESS", "RAY_ADDRESS")
DEFAULT_SLIME_ROOT = "/root/slime"
"""Where slime is checked out on the cluster (slime's images and the Modal image put it there)."""

Runner = Callable[[list[str]], Any]


def ray_address(address: str | None = None) -> str | None:
    if address:
        return address
    return next((os.environ[v] for v in ADDRESS_VARIABLES if os.environ.get(v)), None)


def ray_executable() -> str | None:
    """The `ray` command: on PATH, else beside this Python (a virtual environment that is not activated)."""
    found = shutil.which("ray")
    beside = Path(sys.executable).parent / "ray"
    return found or (str(beside) if beside.is_file() else None)


def ray_submit_argv(*, address: str, submission_id: str, working_dir: Path, env: dict[str, str],
                    entrypoint: list[str], wait: bool = False, ray: str = "ray") -> list[str]:
    """`ray job submit` of `entrypoint` run in the uploaded `working_dir` with `env`; without `wait` it
    returns once the job is accepted."""
    runtime_env = json.dumps({"env_vars": env}, sort_keys=True)
    return [ray, "job", "submit", "--address", address, "--submission-id", submission_id,
            "--working-dir", str(working_dir), "--runtime-env-json", runtime_env,
            *([] if wait else ["--no-wait"]), "--", *entrypoint]


def write_files(command: SlimeCommand, directory: Path, *, slime_root: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in command.files.items():
        (directory / name).write_text(text, encoding="utf-8")
    (directory / "runtime_env.json").write_text(json.dumps({"env_vars": command.env}, indent=2) + "\n")
    (directory / "command.sh").write_text("#!/bin/bash\nset -euo pipefail\n"
                                          + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in command.env.items())
                                          + command.shell(slime_root=slime_root) + "\n")


def launch_slime(config: Any, *, address: str | None = None, slime_root: str | None = None,
                 runner: Runner | None = None, console: Any = None) -> Any:
    """Render, write and (with a Ray address) submit; returns a `Run`."""
    from rich.console import Console

    from codedojo.config.run import BackendRequired, Run

    console = console or Console(stderr=True)
    root = slime_root or os.environ.get("SLIME_ROOT", DEFAULT_SLIME_ROOT)
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    run_dir = Path(config.run_dir) if config.run_dir else Path("runs") / run_id
    files_dir = (run_dir / "slime").resolve()
    target = ray_address(address)
    # Submitted jobs run inside their uploaded working directory, so their flags name the files relatively.
    command = render_slime_command(config.recipe, model=config.model, dataset=config.dataset,
                                   files_dir="." if target else str(files_dir))
    write_files(command, files_dir, slime_root=root)
    console.print(f"[bold]codedojo slime[/bold] run {run_id}; files in {files_dir}")
    for line in command.report:
        console.print(f"  {line}")
    for warning in command.warnings:
        console.print(f"  [yellow]warning:[/yellow] {warning}")
    for name, reason in command.dropped:
        console.print(f"  [dim]not a slime flag: {name} ({reason})[/dim]")
    summary: dict[str, Any] = {"command": command.shell(slime_root=root), "files_dir": str(files_dir),
                               "env": command.env, "address": target, "submitted": False}
    if target is None:
        console.print("no Ray address (CODEDOJO_RAY_ADDRESS / RAY_ADDRESS): dry run, nothing started. Command:")
        console.print(summary["command"], markup=False, soft_wrap=True)
        return Run(training_run_id=run_id, run_dir=run_dir, backend="slime", summary=summary)
    ray = ray_executable()
    argv = ray_submit_argv(address=target, submission_id=run_id, working_dir=files_dir, env=command.env,
                           entrypoint=["bash", "-c", command.shell(slime_root=root)], ray=ray or "ray")
    if runner is None:
        if ray is None:
            raise BackendRequired("submitting to a Ray cluster needs the `ray` command (pip install 'ray[default]')")
        runner = _run_checked
    runner(argv)
    summary.update(submitted=True, submit_argv=argv)
    console.print(f"submitted job {run_id} to {target}; follow with `ray job logs -f {run_id} --address {target}`,"
                  f" stop with `ray job stop {run_id} --address {target}`")
    return Run(training_run_id=run_id, run_dir=run_dir, backend="slime", summary=summary)


def job_status(run_id: str, *, address: str) -> str:
    """The job's state as Ray names it: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED."""
    return str(_job_client(address).get_job_status(run_id).value)


def job_logs(run_id: str, *, address: str) -> str:
    """Everything the job's entrypoint printed so far."""
    return str(_job_client(address).get_job_logs(run_id))


def _job_client(address: str) -> Any:
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as e:
        from codedojo.config.run import BackendRequired

        raise BackendRequired(f"reading a Ray job back needs ray (pip install 'ray[default]'): {e}") from None
    return JobSubmissionClient(address)


def _run_checked(argv: list[str]) -> None:
    subprocess.run(argv, check=True)
