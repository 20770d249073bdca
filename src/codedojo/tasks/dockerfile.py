"""The subset of Dockerfiles that a container-free backend can realise, as a build plan.

Harbor tasks describe their environment with a Dockerfile. The local sandbox never builds images: it
runs on the host's own read-only system and lays the task's files over it. That works for the simple,
common case, and this module decides whether a Dockerfile is that case:

* exactly one `FROM`, of a `python:<tag>` image whose Python major.minor is the host's `python3`, or of
  a `debian:<tag>` image of the host's Debian release (`docker.io/library/` prefixes allowed);
* `WORKDIR`; `COPY`/`ADD` of files from environment/ to places under the final workdir (no `--from`, no
  URLs; `--chown`/`--chmod`/`--link` are accepted and have no effect because the sandbox user owns the
  whole workspace);
* `ENV` and `ARG` (with `${VAR}` / `$VAR` substitution in later instructions);
* `RUN` steps of two kinds: package installs (`pip install`, `python -m pip install`, `apt-get install`,
  plus `apt-get update`/`clean` and apt list clean-up) that the host already satisfies — checked, then
  skipped — and commands that change only the workspace (e.g. `git init && git add -A && git commit`),
  run once at preparation time inside a sandbox whose only writable path is the workdir. A RUN that
  mixes the two kinds is refused: split it in two;
* `USER root`/`USER 0`; `LABEL`, `EXPOSE`, `CMD`, `ENTRYPOINT`, `STOPSIGNAL`, `MAINTAINER`, `VOLUME` and
  `HEALTHCHECK` (nothing to realise: commands are exec'd one at a time).

Everything else — other bases, multi-stage builds, `SHELL`, `ONBUILD`, another `USER`, packages the host
lacks, a prebuilt `[environment].docker_image`, compose files — raises `UnsupportedEnvironment` naming the
instruction, its line, and the backends that can run it.
"""

from __future__ import annotations

import glob
import json
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

CONTAINER_BACKENDS = "the docker or modal backend"
COMPOSE_NOTE = f"the local backend realises only a Dockerfile (use {CONTAINER_BACKENDS})"
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_IGNORED = {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "STOPSIGNAL", "MAINTAINER", "VOLUME", "HEALTHCHECK"}
_PIP_FLAGS_WITH_VALUE = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host",
                         "-c", "--constraint", "--target", "-t", "--prefix", "--root", "--platform",
                         "--python-version", "--implementation", "--abi", "--progress-bar", "--timeout",
                         "--retries", "--cache-dir", "--src", "--upgrade-strategy", "--log"}
_ALWAYS_SATISFIED_PIP = {"pip", "setuptools", "wheel"}


class UnsupportedEnvironment(ValueError):
    """The environment cannot be realised without a container engine."""


@dataclass(frozen=True)
class Copy:
    """Copy `sources` (paths relative to environment/) to `dest` (absolute path in the sandbox)."""

    sources: tuple[str, ...]
    dest: str
    dest_is_dir: bool


@dataclass(frozen=True)
class Run:
    """A workspace command, run at preparation time with cwd = `cwd` and `env` in effect."""

    command: str
    cwd: str
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Requirement:
    """A package the host must already have: kind "pip" (with an optional version specifier) or "apt"."""

    kind: str
    name: str
    specifier: str
    line: int


@dataclass(frozen=True)
class BuildPlan:
    """What a Dockerfile amounts to for a container-free backend."""

    base: str
    workdir: str
    env: tuple[tuple[str, str], ...]
    steps: tuple[Copy | Run, ...]
    requirements: tuple[Requirement, ...]


@dataclass(frozen=True)
class HostSystem:
    """What the host offers: its python3 version, Debian release and installed packages."""

    python_version: tuple[int, int]
    debian_version: str
    debian_codename: str


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[int, str, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not buf:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = i
        elif line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        joined = " ".join(part.strip() for part in buf).strip()
        buf = []
        word, _, rest = joined.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    if buf:
        joined = " ".join(part.strip() for part in buf).strip()
        word, _, rest = joined.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    return out


def _substitute(value: str, variables: Mapping[str, str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2)
        if name in variables:
            return variables[name]
        return default if default is not None else ""

    return _VAR.sub(repl, value)


def _exec_form(args: str) -> list[str] | None:
    if args.startswith("["):
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            return None
        if isinstance(parsed, list) and all(isinstance(x, str) for x in parsed):
            return parsed
    return None


def _split_flags(words: list[str]) -> tuple[dict[str, str], list[str]]:
    flags: dict[str, str] = {}
    rest = list(words)
    while rest and rest[0].startswith("--"):
        key, _, value = rest.pop(0)[2:].partition("=")
        flags[key] = value
    return flags, rest


def parse_dockerfile(
    text: str,
    *,
    context: Path,
    host: HostSystem,
    workdir_override: str | None = None,
    where: str = "Dockerfile",
) -> BuildPlan:
    """Turn a Dockerfile into a BuildPlan, or raise UnsupportedEnvironment naming what cannot be run."""

    def refuse(line: int, what: str) -> UnsupportedEnvironment:
        return UnsupportedEnvironment(
            f"{where}:{line}: {what}; the local backend cannot realise it (use {CONTAINER_BACKENDS})"
        )

    base: str | None = None
    workdir = "/"
    variables: dict[str, str] = {}
    env: dict[str, str] = {}
    steps: list[Copy | Run] = []
    requirements: list[Requirement] = []
    for line, word, args in _instructions(text):
        if word == "FROM":
            if base is not None:
                raise refuse(line, "a second FROM (multi-stage build)")
            image = _substitute(args, variables).split()[0]
            _check_base(image, host=host, line=line, refuse=refuse)
            base = image
            continue
        if base is None and word not in ("ARG",):
            raise UnsupportedEnvironment(f"{where}:{line}: {word} before FROM")
        if word == "ARG":
            name, _, default = args.partition("=")
            variables.setdefault(name.strip(), _substitute(default.strip().strip('"'), variables))
        elif word == "ENV":
            for key, value in _env_pairs(_substitute(args, {**variables, **env}), line=line, where=where):
                env[key] = value
        elif word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, _substitute(args, {**variables, **env})))
        elif word in ("COPY", "ADD"):
            words = _exec_form(args) or shlex.split(_substitute(args, {**variables, **env}))
            flags, paths = _split_flags(words)
            if "from" in flags:
                raise refuse(line, f"{word} --from (copies from another image)")
            if len(paths) < 2:
                raise UnsupportedEnvironment(f"{where}:{line}: {word} needs a source and a destination")
            *sources, dest = paths
            for src in sources:
                if word == "ADD" and (re.match(r"^[a-z]+://", src) or src.startswith("git@")):
                    raise refuse(line, f"ADD of a URL ({src})")
                if word == "ADD" and re.search(r"\.(tar|tgz|tar\.gz|tar\.bz2|tar\.xz|txz)$", src):
                    raise refuse(line, f"ADD of an archive ({src}) that Docker would unpack")
            resolved = tuple(_resolve_sources(sources, context=context, line=line, where=where))
            dest_is_dir = dest.endswith("/") or len(resolved) > 1 or any(
                (context / s).is_dir() for s in resolved
            )
            steps.append(Copy(sources=resolved, dest=posixpath.normpath(posixpath.join(workdir, dest)),
                              dest_is_dir=dest_is_dir))
        elif word == "RUN":
            command = " ".join(_exec_form(args) or [args]) if args.startswith("[") else args
            reqs, is_install = _classify_run(command, line=line, where=where)
            if is_install:
                requirements.extend(reqs)
            else:
                steps.append(Run(command=command, cwd=workdir, env=tuple(env.items())))
        elif word == "USER":
            if _substitute(args, variables).split(":")[0] not in ("root", "0"):
                raise refuse(line, f"USER {args} (the local sandbox runs commands as root)")
        elif word in _IGNORED:
            continue
        else:
            raise refuse(line, f"the {word} instruction")
    if base is None:
        raise UnsupportedEnvironment(f"{where}: no FROM instruction")
    final = posixpath.normpath(workdir_override) if workdir_override else workdir
    if final == "/":
        raise UnsupportedEnvironment(
            f"{where}: no WORKDIR and no [environment].workdir; the local backend needs a workdir to hold "
            "the task's files (add WORKDIR /app, or set workdir in task.toml)"
        )
    for step in steps:
        if isinstance(step, Copy) and not _is_within(step.dest, final) and not (
            step.dest_is_dir and step.dest == final
        ):
            raise UnsupportedEnvironment(
                f"{where}: COPY to {step.dest} is outside the workdir {final}; the local backend places "
                f"files only under the workdir (use {CONTAINER_BACKENDS})"
            )
        if isinstance(step, Run) and not _is_within(step.cwd, final):
            raise UnsupportedEnvironment(
                f"{where}: RUN {step.command!r} runs in {step.cwd}, outside the workdir {final}"
            )
    return BuildPlan(base=base, workdir=final, env=tuple(env.items()), steps=tuple(steps),
                     requirements=tuple(requirements))


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _check_base(
    image: str, *, host: HostSystem, line: int, refuse: Callable[[int, str], UnsupportedEnvironment]
) -> None:
    name = re.sub(r"^(docker\.io/)?(library/)?", "", image)
    repo, _, tag = name.partition(":")
    tag = tag or "latest"
    if repo == "python":
        m = re.match(r"^(\d+)(?:\.(\d+))?", tag)
        if m:
            major, minor = int(m.group(1)), m.group(2)
            if major != host.python_version[0] or (minor is not None and int(minor) != host.python_version[1]):
                have = ".".join(map(str, host.python_version))
                raise refuse(line, f"FROM {image} needs Python {m.group(0)}, the host has {have}")
        elif tag not in ("latest", "slim", "3"):
            raise refuse(line, f"FROM {image} (an unrecognised python tag)")
        variant = re.search(r"-(bullseye|buster|bookworm|trixie|alpine[\d.]*)", tag)
        if variant and variant.group(1) != host.debian_codename:
            raise refuse(line, f"FROM {image} is based on {variant.group(1)}, the host is {host.debian_codename}")
    elif repo == "debian":
        release = tag.removesuffix("-slim")
        if release not in ("latest", "stable", "stable-slim", host.debian_codename, host.debian_version):
            raise refuse(line, f"FROM {image}: the host is Debian {host.debian_version} ({host.debian_codename})")
    else:
        raise refuse(line, f"FROM {image} (only python:<version> and debian:<release> images are realised)")


def _env_pairs(args: str, *, line: int, where: str) -> list[tuple[str, str]]:
    words = shlex.split(args)
    if not words:
        raise UnsupportedEnvironment(f"{where}:{line}: ENV without a value")
    if "=" not in words[0]:
        key, _, value = args.partition(" ")
        return [(key.strip(), value.strip().strip('"'))]
    pairs = []
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise UnsupportedEnvironment(f"{where}:{line}: ENV {word!r} is not KEY=VALUE")
        pairs.append((key, value))
    return pairs


def _resolve_sources(sources: list[str], *, context: Path, line: int, where: str) -> list[str]:
    out: list[str] = []
    root = context.resolve()
    for src in sources:
        rel = posixpath.normpath(src.lstrip("/"))
        if rel.startswith("..") or rel == "..":
            raise UnsupportedEnvironment(f"{where}:{line}: COPY source {src!r} is outside environment/")
        matches = sorted(glob.glob(str(context / rel))) if glob.has_magic(rel) else [str(context / rel)]
        if not matches or not all(Path(m).exists() for m in matches):
            raise UnsupportedEnvironment(f"{where}:{line}: COPY source {src!r} does not exist in environment/")
        for m in matches:
            resolved = Path(m).resolve()
            if resolved != root and root not in resolved.parents:
                raise UnsupportedEnvironment(f"{where}:{line}: COPY source {src!r} leaves environment/")
            out.append(str(resolved.relative_to(root)) if resolved != root else ".")
    return out


def _simple_commands(command: str) -> list[list[str]] | None:
    """Split on `&&` and `;`; None when the command uses anything else (pipes, ||, subshells)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    parts: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", ";"):
            parts.append([])
        elif set(token) <= set(";&|()<>"):
            return None
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def _classify_run(command: str, *, line: int, where: str) -> tuple[list[Requirement], bool]:
    """(requirements, True) for an install-only RUN; ([], False) for a workspace command."""
    simple = _simple_commands(command)
    if simple is None:
        return [], False
    kinds = [_install_kind(words) for words in simple]
    if all(k is None for k in kinds):
        return [], False
    if any(k is None for k in kinds):
        raise UnsupportedEnvironment(
            f"{where}:{line}: RUN mixes package installs with other commands ({command!r}); split it into "
            "one RUN for the installs and one for the workspace commands"
        )
    reqs: list[Requirement] = []
    for words, kind in zip(simple, kinds, strict=True):
        if kind == "pip":
            reqs.extend(_pip_requirements(words, line=line, where=where))
        elif kind == "apt":
            reqs.extend(_apt_requirements(words, line=line))
    return reqs, True


def _install_kind(words: list[str]) -> str | None:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]  # leading VAR=value assignments
    if not words:
        return None
    head = posixpath.basename(words[0])
    if head in ("pip", "pip3") and "install" in words[1:]:
        return "pip"
    if re.match(r"^python3?(\.\d+)?$", head) and words[1:3] == ["-m", "pip"] and "install" in words[3:]:
        return "pip"
    if head in ("apt-get", "apt"):
        sub = [w for w in words[1:] if not w.startswith("-")]
        if sub and sub[0] in ("install", "update", "clean", "autoclean", "autoremove"):
            return "apt"
    if head == "rm" and all(w.startswith("-") or w.startswith("/var/lib/apt/lists") or w.startswith("/root/.cache")
                            or w.startswith("/tmp/") for w in words[1:]):
        return "cleanup"
    return None


def _pip_requirements(words: list[str], *, line: int, where: str) -> list[Requirement]:
    args = words[words.index("install") + 1:]
    reqs = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in ("-r", "--requirement", "-e", "--editable"):
            raise UnsupportedEnvironment(
                f"{where}:{line}: pip install {arg} {args[i + 1] if i + 1 < len(args) else ''}: list the "
                "packages explicitly so the local backend can check the host has them"
            )
        if arg in _PIP_FLAGS_WITH_VALUE:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$", arg)
        if not m:
            raise UnsupportedEnvironment(f"{where}:{line}: pip requirement {arg!r} is not name[spec]")
        name = m.group(1)
        if name.lower() in _ALWAYS_SATISFIED_PIP:
            continue
        reqs.append(Requirement(kind="pip", name=name, specifier=m.group(3).strip(), line=line))
    return reqs


def _apt_requirements(words: list[str], *, line: int) -> list[Requirement]:
    positional = [w for w in words[1:] if not w.startswith("-")]
    if not positional or positional[0] != "install":
        return []
    return [Requirement(kind="apt", name=p.split("=")[0], specifier="", line=line) for p in positional[1:]]
