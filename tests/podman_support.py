"""A Docker API for the container tests: $DOCKER_HOST when set, else a podman service started here.

No Docker daemon runs on the project's machines, but podman serves the same API (docs/sandbox.md). The
session fixture `docker_engine` (tests/conftest.py) uses this module to:

1. start `podman system service` on a socket in a temporary directory, as a child of the test process
   (it dies with it: setpriv --pdeathsig), with its own containers.conf (cgroupfs, runc, no default
   ulimits: crun and the default rlimits fail on these hosts);
2. make sure the base image exists: Debian bookworm (minbase + python3, git, bash, coreutils, patch) made
   by mmdebstrap and imported through the API, once per machine (about a minute), tagged by its package
   list so later sessions reuse it;
3. tag it as `debian:bookworm-slim` (and `ubuntu:24.04`) when no such image exists, since no registry is
   reachable and the bundled example tasks (and the Harbor compatibility suite) build FROM those names.

The docker SDK is imported inside the functions, so collecting the other tests never needs it.

A machine without the SDK or an engine skips the container tests, except under CI (the environment
variable CI set, as CI services set it): there they are part of the suite, so `unavailable` fails them
instead, and a missing engine cannot pass as a green run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

BASE_PACKAGES = ("python3", "git", "ca-certificates", "bash", "coreutils", "patch")
BASE_REPOSITORY = "localhost/codedojo-test-base"
BASE_TAG = "bookworm-" + hashlib.sha256(",".join(BASE_PACKAGES).encode()).hexdigest()[:8]
BASE_IMAGE = f"{BASE_REPOSITORY}:{BASE_TAG}"
# Names the bundled example Dockerfiles start FROM, and the Ubuntu base of the Harbor compatibility suite
# (tests/harbor_compat): no registry is reachable, so each is the same Debian root under another name. The
# suite's Ubuntu tasks check that the backend runs whatever base the engine has, not Ubuntu's contents.
STAND_INS = (("docker.io/library/debian", "bookworm-slim"), ("docker.io/library/debian", "bookworm"),
             ("docker.io/library/ubuntu", "24.04"))
API_VERSION = "1.41"  # a fixed version spares a slow /version call (as codedojo.sandbox.docker_host does)
CONTAINERS_CONF = '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n'


def unavailable(reason: str) -> NoReturn:
    """Skip a container test on a machine that lacks what it needs; fail it under CI (CI set)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, where the container tests must run, so this is an error, not a skip",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def docker_sdk() -> ModuleType:
    """The docker SDK module (for test modules that need it at import), by the rule of `unavailable`."""
    try:
        import docker
    except ImportError:
        docker = None
    if docker is None:  # outside the except block: the skip or failure carries no chained ImportError
        unavailable("the docker SDK is not installed (it is in the dev extra: pip install -e '.[dev]')")
    return docker


def missing_tools() -> list[str]:
    """Programs needed to serve the API with podman and build the base image (./dev setup installs them)."""
    return [tool for tool in ("podman", "runc", "mmdebstrap", "setpriv") if shutil.which(tool) is None]


@contextlib.contextmanager
def podman_service(workdir: Path) -> Iterator[str]:
    """Serve the Docker API from podman on a socket under `workdir`; yields its DOCKER_HOST url."""
    conf = workdir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    sock = workdir / "podman.sock"
    log = (workdir / "podman-service.log").open("wb")
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    # cwd: conmon, which podman starts per container, writes a file named `oom` into its working
    # directory when the container is OOM-killed; without this it landed in the checkout.
    proc = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", "podman", "system", "service", "--time=0",
                             f"unix://{sock}"], env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=workdir)
    url = f"unix://{sock}"
    try:
        _wait_until_serving(url, proc, workdir / "podman-service.log")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_until_serving(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import docker

    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"podman system service exited {proc.returncode}: {log.read_text()[-2000:]}")
        client = docker.DockerClient(base_url=url, version=API_VERSION, timeout=5)
        with contextlib.suppress(Exception), contextlib.closing(client):
            client.ping()
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"podman system service did not answer on {url} within 60 s")
        time.sleep(0.2)


def ensure_base_image(url: str, *, scratch: Path) -> str:
    """The base image's name, building it first when the engine does not have it."""
    import docker
    import docker.errors

    # Sessions on one machine share the engine's storage; one builds while the others wait.
    client = docker.DockerClient(base_url=url, version=API_VERSION, timeout=600)
    with contextlib.closing(client), _machine_lock("codedojo-test-base"):
        try:
            client.images.get(BASE_IMAGE)
        except docker.errors.ImageNotFound:
            _build_base(client, scratch)
        for repository, tag in STAND_INS:
            try:
                client.images.get(f"{repository}:{tag}")
            except docker.errors.ImageNotFound:
                client.images.get(BASE_IMAGE).tag(repository, tag)
    return BASE_IMAGE


def _build_base(client: object, scratch: Path) -> None:
    rootfs = scratch / "rootfs.tar"
    subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                    "bookworm", str(rootfs)], check=True, stdin=subprocess.DEVNULL)
    # podman's import endpoint ignores the tag it is given, so the image is tagged by id afterwards.
    reply = client.api.import_image_from_file(str(rootfs), repository=BASE_REPOSITORY)  # type: ignore[attr-defined]
    image_id = json.loads(reply.strip().splitlines()[-1])["status"]
    client.images.get(image_id).tag(BASE_REPOSITORY, BASE_TAG)  # type: ignore[attr-defined]
    rootfs.unlink()


@contextlib.contextmanager
def _machine_lock(name: str) -> Iterator[None]:
    with open(Path(tempfile.gettempdir()) / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
