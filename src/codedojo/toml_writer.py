"""A small, deterministic TOML writer (the standard library only reads TOML).

Output is canonical for the data given: scalars of a table first in insertion order, then its
sub-tables, then its arrays of tables. Writing the result of `tomllib.loads(dumps(d))` again yields the
same bytes, which is what makes task files we write round-trip byte-stable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
# Arrays longer than this (rendered inline) are written one item per line.
_INLINE_ARRAY_WIDTH = 88


def dumps(data: Mapping[str, Any]) -> str:
    lines: list[str] = []
    _write_table(data, prefix=(), lines=lines)
    text = "\n".join(lines).strip("\n")
    return text + "\n" if text else ""


def _key(k: str) -> str:
    if not isinstance(k, str):
        raise TypeError(f"TOML keys must be strings, got {k!r}")
    return k if _BARE_KEY.match(k) else _string(k)


def _string(s: str) -> str:
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _is_table(v: Any) -> bool:
    return isinstance(v, Mapping)


def _is_table_array(v: Any) -> bool:
    return (
        isinstance(v, Sequence)
        and not isinstance(v, str)
        and len(v) > 0
        and all(isinstance(x, Mapping) for x in v)
    )


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, Mapping):
        inner = ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None)
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(v, Sequence):
        items = [_value(x) for x in v]
        inline = "[" + ", ".join(items) + "]"
        if len(inline) <= _INLINE_ARRAY_WIDTH:
            return inline
        return "[\n" + "".join(f"    {x},\n" for x in items) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML: {v!r}")


def _write_table(data: Mapping[str, Any], *, prefix: tuple[str, ...], lines: list[str]) -> None:
    scalars = [(k, v) for k, v in data.items() if v is not None and not _is_table(v) and not _is_table_array(v)]
    tables = [(k, v) for k, v in data.items() if _is_table(v)]
    arrays = [(k, v) for k, v in data.items() if _is_table_array(v)]
    for k, v in scalars:
        lines.append(f"{_key(k)} = {_value(v)}")
    for k, v in tables:
        path = (*prefix, k)
        has_scalars = any(not _is_table(x) and not _is_table_array(x) for x in v.values())
        if has_scalars or not v:
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in path) + "]")
        _write_table(v, prefix=path, lines=lines)
    for k, v in arrays:
        path = (*prefix, k)
        for item in v:
            lines.append("")
            lines.append("[[" + ".".join(_key(p) for p in path) + "]]")
            _write_table(item, prefix=path, lines=lines)
