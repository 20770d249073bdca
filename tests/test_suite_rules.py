"""The suite's own rules for missing dependencies: ray (a dev dependency) missing is an error, never a skip;
the container tests skip on a machine without the docker SDK or an engine, but fail when CI is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import podman_support

TESTS = Path(__file__).parent
# A machine without ray, podman's tools or the docker SDK, simulated inside a child pytest run.
PROBE = '''
import shutil
import sys

sys.modules["docker"] = None  # `import docker` raises ImportError
shutil.which = lambda *args, **kwargs: None  # no ray, podman, runc, mmdebstrap or setpriv on PATH

from ray_support import ray_head_fixture  # noqa: E402,F401


def test_live_ray(ray_head):
    pass


def test_docker_backend(docker_engine):
    pass
'''


def _outcomes(tmp_path: Path, *, ci: bool) -> str:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DOCKER_HOST")}
    env["COLUMNS"] = "400"  # the short summary keeps each reason whole
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent / "src"), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-rA", "-q",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return proc.stdout


@pytest.mark.parametrize("ci", [False, True])
def test_a_missing_ray_is_an_error_and_a_missing_engine_skips_only_off_ci(tmp_path: Path, ci: bool) -> None:
    out = _outcomes(tmp_path, ci=ci)
    assert "ERROR test_probe.py::test_live_ray - Failed: ray is not installed" in out, out
    assert "run `pip install -e .[dev]`" in out, out
    sdk = "the docker SDK is not installed (it is in the dev extra: pip install -e '.[dev]')"
    if ci:
        assert f"ERROR test_probe.py::test_docker_backend - Failed: {sdk}; CI is set" in out, out
    else:
        assert f"SKIPPED [1] test_probe.py:15: {sdk}" in out, out
    assert "passed" not in out.splitlines()[-1], out


def test_unavailable_skips_off_ci_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^no engine$"):
        podman_support.unavailable("no engine")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"^no engine; CI is set, where the container tests must run"):
        podman_support.unavailable("no engine")
