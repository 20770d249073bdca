"""The Dockerfile subset the local backend realises, and the errors for everything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from codedojo.tasks.dockerfile import BuildPlan, Copy, HostSystem, Run, UnsupportedEnvironment, parse_dockerfile

HOST = HostSystem(python_version=(3, 11), debian_version="12", debian_codename="bookworm")


@pytest.fixture
def context(tmp_path: Path) -> Path:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    return tmp_path


def plan(text: str, context: Path, **kw: object) -> BuildPlan:
    return parse_dockerfile(text, context=context, host=HOST, where="Dockerfile", **kw)  # type: ignore[arg-type]


def test_the_common_case_becomes_a_plan(context: Path) -> None:
    p = plan(
        "# a comment\n"
        "FROM python:3.11-slim\n"
        "ARG APP=/app\n"
        "ENV PYTHONDONTWRITEBYTECODE=1 GREETING=\"hi there\"\n"
        "RUN pip install --no-cache-dir pytest==7.2.1 'requests>=2' && \\\n"
        "    apt-get update && apt-get install -y git\n"
        "WORKDIR ${APP}\n"
        "COPY src/ ./\n"
        "COPY *.py lib/\n"
        "RUN git init -q && git add -A\n"
        "LABEL x=y\nCMD [\"python\"]\nEXPOSE 80\n",
        context,
    )
    assert p.base == "python:3.11-slim" and p.workdir == "/app"
    assert dict(p.env) == {"PYTHONDONTWRITEBYTECODE": "1", "GREETING": "hi there"}
    assert [(r.kind, r.name, r.specifier) for r in p.requirements] == [
        ("pip", "pytest", "==7.2.1"), ("pip", "requests", ">=2"), ("apt", "git", "")]
    assert p.steps[0] == Copy(sources=("src",), dest="/app", dest_is_dir=True)
    assert p.steps[1] == Copy(sources=("a.py", "b.py"), dest="/app/lib", dest_is_dir=True)
    assert isinstance(p.steps[2], Run) and p.steps[2].cwd == "/app"


def test_task_workdir_overrides_and_bounds_the_copies(context: Path) -> None:
    p = plan("FROM debian:bookworm\nWORKDIR /srv/app\nCOPY a.py /srv/app/\n", context, workdir_override="/srv")
    assert p.workdir == "/srv"


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        ("FROM ubuntu:22.04\nWORKDIR /app\n", "only python:<version> and debian:<release>"),
        ("FROM python:3.12\nWORKDIR /app\n", "needs Python 3.12, the host has 3.11"),
        ("FROM python:3.11-slim-bullseye\nWORKDIR /app\n", "based on bullseye"),
        ("FROM debian:bullseye\nWORKDIR /app\n", "the host is Debian 12"),
        ("FROM python:3.11 AS build\nFROM python:3.11\n", "a second FROM"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY --from=build /x /app/\n", "COPY --from"),
        ("FROM python:3.11\nWORKDIR /app\nADD https://x.org/f /app/\n", "ADD of a URL"),
        ("FROM python:3.11\nWORKDIR /app\nADD dist.tar.gz /app/\n", "ADD of an archive"),
        ("FROM python:3.11\nWORKDIR /app\nUSER nobody\n", "USER nobody"),
        ("FROM python:3.11\nWORKDIR /app\nSHELL [\"/bin/zsh\"]\n", "the SHELL instruction"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY a.py /etc/a.py\n", "outside the workdir /app"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY missing.py /app/\n", "does not exist in environment/"),
        ("FROM python:3.11\nWORKDIR /app\nCOPY ../secret /app/\n", "outside environment/"),
        ("FROM python:3.11\nCOPY a.py /a.py\n", "no WORKDIR and no [environment].workdir"),
        ("FROM python:3.11\nWORKDIR /app\nRUN pip install x && git init\n", "RUN mixes package installs"),
        ("FROM python:3.11\nWORKDIR /app\nRUN pip install -r requirements.txt\n", "list the packages explicitly"),
        ("WORKDIR /app\n", "WORKDIR before FROM"),
    ],
)
def test_unsupported_instructions_are_refused_by_name(context: Path, dockerfile: str, message: str) -> None:
    with pytest.raises(UnsupportedEnvironment) as err:
        plan(dockerfile, context)
    assert message in str(err.value)
    assert str(err.value).startswith("Dockerfile")


def test_refusals_name_the_line_and_the_backends(context: Path) -> None:
    with pytest.raises(UnsupportedEnvironment, match=r"^Dockerfile:3: .*use the docker or modal backend"):
        plan("FROM python:3.11\nWORKDIR /app\nONBUILD RUN true\n", context)
