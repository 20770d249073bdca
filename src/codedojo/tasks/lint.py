"""The checks Harbor 0.25 applies to a task's configuration when it loads it, as problems to report.

Harbor refuses these when it parses task.toml (pydantic validators in `harbor.models.task.config`), so a
task that fails one does not load in Harbor at all; `codedojo tasks validate` reports each, naming the
key and the fix:

* `[task].name` is "org/name": letters, digits, `.`, `_`, `-`, each part starting with a letter or digit,
  no `..` anywhere;
* step names are portable directory names that stay inside `steps/`: not empty, not `.` or `..`, no
  `/ \\ < > : " | ? *` or control characters, no trailing dot or space, not a Windows device name, at
  most 255 UTF-8 bytes, and unique ignoring case;
* artifact sources have no `..` component; destinations are relative, use `/`, have no `..` and are not
  `manifest.json` (reserved);
* `allowed_hosts` entries are hostnames (`*.suffix` wildcards allowed), IP addresses or CIDR ranges, not
  URLs, ports or paths, and are given only with `network_mode = "allowlist"`.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from pathlib import PurePosixPath

from codedojo.tasks.config import Artifact, NetworkMode, TaskConfig

ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_STEP_BAD_CHARS = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_DEVICE = re.compile(r"^(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|(?:COM|LPT)[1-9¹²³])$", re.IGNORECASE)
_HOST_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def step_name_problem(name: str) -> str | None:
    """Why `name` cannot be a step name (a directory under steps/), or None."""
    if (not name.strip() or name in (".", "..") or name.endswith((".", " ")) or _STEP_BAD_CHARS.search(name)
            or _DEVICE.fullmatch(name.partition(".")[0].rstrip(" "))):
        return (f"step name {name!r} is not a portable directory name inside steps/ (no path separators, "
                "control or reserved characters, device names, or trailing dots/spaces)")
    if len(name.encode("utf-8")) > 255:
        return f"step name {name[:40]!r}... is longer than 255 UTF-8 bytes"
    return None


def allowed_host_problem(host: str) -> str | None:
    """Why `host` is not a valid allowlist entry (Harbor's rules), or None."""
    entry = host.strip().lower().rstrip(".")
    if not entry:
        return "an empty entry"
    if "/" in entry or ":" in entry:
        try:
            if "/" in entry:
                ipaddress.ip_network(entry, strict=True)
            else:
                ipaddress.IPv6Address(entry)
            return None
        except ValueError:
            return f"{host!r} is not a hostname, IP address or CIDR range (URLs, ports and paths are not allowed)"
    if "[" in entry or "]" in entry:
        return f"{host!r} is not a hostname, IP address or CIDR range"
    if entry.startswith("*."):
        entry = entry[2:]
        try:
            ipaddress.ip_address(entry)
            return f"{host!r}: a wildcard must name hosts, not an IP address"
        except ValueError:
            pass
    elif "*" in entry:
        return f"{host!r}: a wildcard must be a leading '*.'"
    if not all(_HOST_LABEL.match(label) for label in entry.split(".")):
        return f"{host!r} is not a valid hostname (letters, digits, hyphens and dots)"
    return None


def _artifact_problems(entries: tuple[str | Artifact, ...], where: str) -> list[str]:
    problems = []
    for i, entry in enumerate(entries):
        source = entry.source if isinstance(entry, Artifact) else entry
        if ".." in PurePosixPath(source).parts:
            problems.append(f"{where}[{i}]: artifact source {source!r} must not contain '..'")
        destination = entry.destination if isinstance(entry, Artifact) else None
        if destination:
            path = PurePosixPath(destination)
            if "\\" in destination or path.is_absolute() or ".." in path.parts:
                problems.append(f"{where}[{i}]: artifact destination {destination!r} must be a relative path with "
                                "'/' separators and no '..'")
            elif destination.rstrip("/") == "manifest.json":
                problems.append(f"{where}[{i}]: artifact destination 'manifest.json' is reserved")
    return problems


def _network_problems(mode: NetworkMode | None, hosts: tuple[str, ...] | None, where: str, *,
                      phase: bool) -> list[str]:
    problems = [f"{where}.allowed_hosts: {why}" for h in hosts or () if (why := allowed_host_problem(h))]
    given = hosts is not None if phase else bool(hosts)
    if given and mode != "allowlist":
        problems.append(f"{where}.allowed_hosts is set but {where}.network_mode is {mode!r}; allowed_hosts is "
                        'only valid with network_mode = "allowlist"')
    return problems


def lint_config(config: TaskConfig) -> list[str]:
    """Every configuration problem Harbor would refuse the task for (empty when none)."""
    problems: list[str] = []
    info = config.task
    if info is not None:
        if not info.name:
            problems.append("[task] has no name; Harbor requires name = \"org/name\" in [task]")
        elif not ORG_NAME.match(info.name) or ".." in info.name:
            problems.append(f"[task].name = {info.name!r} is not 'org/name' (letters, digits, '.', '_', '-'; each "
                            "part starting with a letter or digit; no '..')")
    seen: dict[str, str] = {}
    for i, step in enumerate(config.steps):
        why = step_name_problem(step.name)
        if why:
            problems.append(f"steps[{i}]: {why}")
        key = unicodedata.normalize("NFC", step.name).casefold()
        if key in seen:
            problems.append(f"steps[{i}]: step name {step.name!r} repeats {seen[key]!r} (names are compared "
                            "ignoring case)")
        seen.setdefault(key, step.name)
        problems.extend(_artifact_problems(step.artifacts, f"steps[{i}].artifacts"))
    problems.extend(_artifact_problems(config.artifacts, "artifacts"))
    env = config.environment
    problems.extend(_network_problems(env.network_mode, env.allowed_hosts, "environment", phase=False))
    problems.extend(_network_problems(config.agent.network_mode, config.agent.allowed_hosts, "agent", phase=True))
    problems.extend(_network_problems(config.verifier.network_mode, config.verifier.allowed_hosts, "verifier",
                                      phase=True))
    if config.verifier.environment is not None:
        venv = config.verifier.environment
        problems.extend(_network_problems(venv.network_mode, venv.allowed_hosts, "verifier.environment",
                                          phase=False))
    return problems
