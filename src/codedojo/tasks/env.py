"""`${VAR}` templates in task.toml's env tables, resolved from the host as Harbor 0.25 resolves them.

Harbor's rule (`harbor.utils.env.resolve_env_vars`), which this module follows exactly: a value that is
*entirely* one template, `${NAME}` or `${NAME:-default}`, becomes the host's `NAME` (or the default when
the host has no `NAME`); a template embedded in other text (`x-${NAME}`) is not a template and passes
through literally, as does every other value. A whole-value template whose variable the host lacks and
that has no default is an error naming the variable and where it was asked for: it is never silently "".

It applies to `[environment].env`, `[solution].env` and `[verifier].env` (and each step's `[verifier].env`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Harbor's pattern, matched against the whole value: the name is anything up to `}` or `:`.
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")


class MissingVariable(ValueError):
    """A `${NAME}` template names a variable the host does not have and gives no default."""


def resolve_env(env: Mapping[str, str], *, section: str, host_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` with every whole-value `${NAME}` / `${NAME:-default}` replaced from `host_env` (default: os.environ).

    `section` names the table for the error message, e.g. "[verifier].env"."""
    host = os.environ if host_env is None else host_env
    resolved: dict[str, str] = {}
    for key, value in env.items():
        match = _TEMPLATE.fullmatch(value)
        if match is None:
            resolved[key] = value
            continue
        name, default = match.group(1), match.group(2)
        if name in host:
            resolved[key] = host[name]
        elif default is not None:
            resolved[key] = default
        else:
            raise MissingVariable(
                f"{section} {key} = {value!r}: the host has no environment variable {name!r}; set it before "
                f"running, or give a default with ${{{name}:-value}}"
            )
    return resolved
