"""`config.launch(backend="modal")`: the Modal app that runs the recipe's slime command on GPU containers.

The app is described first as plain data, `ModalTrainPlan` (image build steps, GPU spec and node count,
volumes, environment, the rendered slime command and its YAML files), so it can be inspected and tested
offline; `build_app(plan)` turns the plan into a `modal.App` (constructible without credentials: Modal
objects are lazy until the app runs); `launch_modal(config)` builds and runs it, detached.

Layout: every container is one node of `gpu_type:actor_num_gpus_per_node` GPUs; `num_nodes` covers the
actor GPUs plus, when not colocated, the rollout GPUs (the tutorial's full recipe: 16 + 32 H200 = 6
nodes). Several nodes form a Modal cluster (`modal.clustered`, RDMA); rank 0 starts a Ray head, the
others join it, and rank 0 submits the slime command with `ray job submit`, as slime's own scripts do.

Image: slime's image (`DEFAULT_SLIME_IMAGE`, pin it by digest for reproducible runs), its checkout at
/root/slime replaced by `slime_git_repository` at `slime_git_revision` when set, the recipe's
`image_run_commands`, then codedojo itself (this checkout, installed without dependencies: the image
already has torch and transformers) plus the few packages codedojo's hooks need.
Volumes: /data (`data_volume_name`), /checkpoints (per app), the Hugging Face cache.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codedojo.integrations.slime_command import render_slime_command
from codedojo.integrations.slime_launch import ray_submit_argv

DEFAULT_SLIME_IMAGE = "slimerl/slime:latest"
SLIME_ROOT = "/root/slime"
CODEDOJO_ROOT = "/root/codedojo"
RUN_FILES = "/root/codedojo-run"
DATA_PATH = "/data"
CHECKPOINTS_PATH = "/checkpoints"
HF_CACHE_PATH = "/root/.cache/huggingface"
DEFAULT_TIMEOUT_SEC = 24 * 3600
RAY_PORT = 6379
RAY_DASHBOARD = "http://127.0.0.1:8265"
# What codedojo's generate hook and Modal sandboxes need beyond slime's image (which has torch,
# transformers and numpy).
HOOK_PACKAGES = ("aiohttp>=3.9", "jinja2>=3.1", "rich>=13", "pyyaml>=6", "modal>=1.0")


@dataclass(frozen=True, kw_only=True)
class ModalTrainPlan:
    """The Modal app of one run, as data."""

    run_id: str
    app_name: str
    app_tags: dict[str, str]
    image_steps: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...]
    """(Image method, args, kwargs) applied in order, starting with Image.from_registry."""
    gpu: str
    """Per container, e.g. "H200:8"."""
    num_nodes: int
    volumes: dict[str, str]
    """Mount path -> Modal volume name."""
    env: dict[str, str]
    command: str
    """The slime command (one bash line), run from `files_dir`."""
    files: dict[str, str]
    """YAML files the command names, written into `files_dir` on the head node."""
    files_dir: str = RUN_FILES
    timeout_sec: int = DEFAULT_TIMEOUT_SEC
    memory: int | tuple[int, ...] | None = None
    function_kwargs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _git_overlay(repository: str, revision: str) -> str:
    """Replace the image's slime checkout with `repository` at exactly `revision` (verified)."""
    if not re.fullmatch(r"[0-9a-fA-F]{40}", revision):
        raise ValueError(f"slime_git_revision must be a full 40-character commit SHA, got {revision!r} "
                         "(branches and tags move between runs)")
    checkout = "/tmp/slime-checkout"
    repo, sha = shlex.quote(repository), shlex.quote(revision.lower())
    return (f"set -eux; rm -rf {checkout}; git init -q {checkout}; git -C {checkout} remote add origin {repo}; "
            f"git -C {checkout} fetch -q --depth=1 origin {sha}; git -C {checkout} checkout -q --detach FETCH_HEAD; "
            f'test "$(git -C {checkout} rev-parse HEAD)" = {sha}; rm -rf {SLIME_ROOT}; mv {checkout} {SLIME_ROOT}')


def codedojo_source() -> Path | None:
    """This checkout's root (the folder with pyproject.toml), or None for an installed wheel."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "codedojo").is_dir() else None


def image_steps(recipe: Any, *, slime_image: str) -> tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...]:
    steps: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("from_registry", (slime_image,), {}),
        ("entrypoint", ([],), {}),
    ]
    if bool(recipe.slime_git_repository) != bool(recipe.slime_git_revision):
        raise ValueError("slime_git_repository and slime_git_revision must be set together")
    if recipe.slime_git_repository:
        steps.append(("run_commands", (_git_overlay(recipe.slime_git_repository, recipe.slime_git_revision),), {}))
    if recipe.image_run_commands:
        steps.append(("run_commands", tuple(recipe.image_run_commands), {}))
    source = codedojo_source()
    install = f"python3 -m pip install -q {shlex.join(HOOK_PACKAGES)}"
    if source is not None:
        ignore = [".venv", ".git", "runs", "**/__pycache__", "**/*.pyc", "*.egg-info"]
        steps.append(("add_local_dir", (str(source), CODEDOJO_ROOT), {"copy": True, "ignore": ignore}))
        steps.append(("run_commands", (f"python3 -m pip install -q --no-deps {CODEDOJO_ROOT}", install), {}))
    else:
        steps.append(("run_commands", (install,), {}))
        steps.append(("add_local_python_source", ("codedojo",), {"copy": True}))
    if recipe.image_env:
        steps.append(("env", (dict(recipe.image_env),), {}))
    return tuple(steps)


def num_nodes(recipe: Any) -> int:
    """Containers of actor_num_gpus_per_node GPUs for the actor plus (not colocated) the rollout engines."""
    per_node = recipe.actor_num_gpus_per_node
    gpus = recipe.actor_num_nodes * per_node
    if not recipe.colocate:
        gpus += recipe.rollout_num_gpus or 0
    return max(1, -(-gpus // per_node))


def build_plan(config: Any, *, run_id: str | None = None, slime_image: str = DEFAULT_SLIME_IMAGE) -> ModalTrainPlan:
    """The Modal app of `config` (a TrainConfig) as data; no Modal call is made."""
    recipe = config.recipe
    run_id = run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    if not recipe.gpu_type:
        raise ValueError("the modal backend needs recipe.gpu_type (e.g. 'H200')")
    command = render_slime_command(recipe, model=config.model, dataset=config.dataset, files_dir=".")
    app_name = f"codedojo-{type(recipe).__name__.lower().replace('_recipe', '')}"
    env = {**command.env, "CODEDOJO_RUN_ID": run_id, "CODEDOJO_MODAL_APP": f"{app_name}-sandboxes"}
    function_kwargs = dict(recipe.train_function_kwargs)
    timeout = int(function_kwargs.pop("timeout", DEFAULT_TIMEOUT_SEC))
    return ModalTrainPlan(
        run_id=run_id, app_name=app_name, app_tags={"codedojo.run": run_id, **recipe.app_tags},
        image_steps=image_steps(recipe, slime_image=slime_image),
        gpu=f"{recipe.gpu_type}:{recipe.actor_num_gpus_per_node}", num_nodes=num_nodes(recipe),
        volumes={DATA_PATH: recipe.data_volume_name or "codedojo-data",
                 CHECKPOINTS_PATH: f"{app_name}-checkpoints", HF_CACHE_PATH: "codedojo-hf-cache"},
        env=env, command=command.shell(slime_root=SLIME_ROOT), files=command.files, timeout_sec=timeout,
        memory=recipe.memory, function_kwargs=function_kwargs,
    )


def build_image(steps: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...]) -> Any:
    import modal

    (first, args, kwargs), *rest = steps
    image = getattr(modal.Image, first)(*args, **kwargs)
    for method, args, kwargs in rest:
        image = getattr(image, method)(*args, **kwargs)
    return image


@dataclass(frozen=True)
class ModalApp:
    app: Any
    """The modal.App."""
    train: Any
    """Its one function: call `.spawn(plan.to_dict())` inside `app.run()`."""


def build_app(plan: ModalTrainPlan) -> ModalApp:
    """A `modal.App` with one function, `train`, that runs the plan on `plan.num_nodes` containers."""
    import modal

    app = modal.App(plan.app_name, tags=plan.app_tags)
    volumes = {path: modal.Volume.from_name(name, create_if_missing=True) for path, name in plan.volumes.items()}
    function: Any = train
    if plan.num_nodes > 1:
        function = modal.clustered(size=plan.num_nodes, rdma=True)(function)
    registered = app.function(image=build_image(plan.image_steps), gpu=plan.gpu, volumes=volumes, env=plan.env,
                              timeout=plan.timeout_sec, memory=plan.memory, serialized=True,
                              **plan.function_kwargs)(function)
    return ModalApp(app=app, train=registered)


def node_commands(*, rank: int, head_ip: str, gpus: int) -> list[list[str]]:
    """Ray start-up of one node: rank 0 is the head, the others join it and block."""
    if rank == 0:
        return [["ray", "start", "--head", f"--port={RAY_PORT}", f"--num-gpus={gpus}", "--dashboard-host=0.0.0.0",
                 "--disable-usage-stats"]]
    return [["ray", "start", f"--address={head_ip}:{RAY_PORT}", f"--num-gpus={gpus}", "--block",
             "--disable-usage-stats"]]


def train(plan: dict[str, Any]) -> int:
    """Runs in every container of the app (serialized by Modal; codedojo is installed in the image)."""
    import subprocess

    spec = ModalTrainPlan(**{**plan, "image_steps": tuple(plan["image_steps"])})
    rank, head_ip = 0, "127.0.0.1"
    if spec.num_nodes > 1:
        import modal

        cluster = modal.experimental.get_cluster_info()
        rank, head_ip = cluster.rank, cluster.container_ipv4_ips[0]
    gpus = int(spec.gpu.rsplit(":", 1)[1])
    for argv in node_commands(rank=rank, head_ip=head_ip, gpus=gpus):
        subprocess.run(argv, check=True)
    if rank != 0:
        return 0
    _wait_for_nodes(spec.num_nodes)
    files = Path(spec.files_dir)
    files.mkdir(parents=True, exist_ok=True)
    for name, text in spec.files.items():
        (files / name).write_text(text)
    argv = ray_submit_argv(address=RAY_DASHBOARD, submission_id=spec.run_id, working_dir=files, env=spec.env,
                           entrypoint=["bash", "-c", spec.command], wait=True)
    return subprocess.run(argv, check=False).returncode


def _wait_for_nodes(count: int, *, timeout_sec: float = 900.0) -> None:
    import ray

    ray.init(address="auto")
    deadline = time.monotonic() + timeout_sec
    while sum(1 for node in ray.nodes() if node.get("Alive")) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(ray.nodes())} of {count} nodes joined the Ray cluster")
        time.sleep(5)
    ray.shutdown()


def launch_modal(config: Any, *, console: Any = None) -> Any:
    """Build the app for `config` and run it detached; returns a `Run` with the Modal app's URL."""
    from rich.console import Console

    from codedojo.config.run import BackendRequired, Run

    try:
        import modal
    except ImportError:
        raise BackendRequired("the modal backend needs the modal package: pip install 'codedojo[modal]'") from None
    console = console or Console(stderr=True)
    plan = build_plan(config)
    run_dir = Path(config.run_dir) if config.run_dir else Path("runs") / plan.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "modal_plan.json").write_text(json.dumps(plan.to_dict(), indent=2, default=str) + "\n")
    console.print(f"[bold]codedojo modal[/bold] run {plan.run_id}: app {plan.app_name}, {plan.num_nodes} x {plan.gpu}")
    built = build_app(plan)
    with modal.enable_output(), built.app.run(detach=True):
        call = built.train.spawn(plan.to_dict())
        url = built.app.get_dashboard_url()
    console.print(f"started {call.object_id} on {url}; the app keeps running detached (stop it with "
                  f"`modal app stop {plan.app_name}`)")
    return Run(training_run_id=plan.run_id, run_dir=run_dir, backend="modal",
               summary={"plan": str(run_dir / "modal_plan.json"), "function_call": call.object_id},
               modal_app_url=url)
