"""Typed, frozen records built from plain data (TOML, JSON, keyword arguments).

Every config and on-disk format in codedojo is a frozen dataclass. This module turns nested dicts into
those dataclasses and back, with one rule that matters more than any other: an unknown key is an error
that names the key, where it was found, and the closest known key. Silently ignored configuration hides
typos (a misspelt `timeout_sec` would quietly fall back to its default).

Supported field types: str, int, float (ints accepted), bool, None unions, Literal, tuple[T, ...],
dict[str, T], nested dataclasses, unions of those, and Any. Field metadata may carry `aliases` (legacy
names read but never written) and a `parse` function applied to the raw value before type checking.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

T = TypeVar("T")


class RecordError(ValueError):
    """A value does not fit its record type; the message names the place and the fix."""


def load_record(cls: type[T], data: Mapping[str, Any], *, where: str, unknown: list[str] | None = None) -> T:
    """Build `cls` from `data`, checking every key and type.

    `where` names the source for error messages, e.g. "tasks/x/task.toml". With `unknown` (a list), an
    unknown key is not an error: its message is appended there and the key is skipped (for formats owned by
    another project whose own loader ignores unknown keys, such as Harbor's task.toml).
    """
    return _convert(cls, data, where=where, path="", unknown=unknown)


def record_to_dict(record: Any, *, skip_defaults: bool = True) -> dict[str, Any]:
    """The plain-data form of a record: nested dicts, lists and scalars.

    With `skip_defaults`, fields equal to their default are left out (None values always are), so
    what is written stays short and a round trip is byte-stable.
    """
    out: dict[str, Any] = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if value is None:
            continue
        if skip_defaults and _is_default(field, value):
            continue
        plain = _to_plain(value, skip_defaults=skip_defaults)
        if skip_defaults and isinstance(plain, dict) and not plain and dataclasses.is_dataclass(value):
            continue
        out[field.name] = plain
    return out


def _to_plain(value: Any, *, skip_defaults: bool) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return record_to_dict(value, skip_defaults=skip_defaults)
    if isinstance(value, tuple | list):
        return [_to_plain(v, skip_defaults=skip_defaults) for v in value]
    if isinstance(value, Mapping):
        return {k: _to_plain(v, skip_defaults=skip_defaults) for k, v in value.items()}
    return value


def _is_default(field: dataclasses.Field[Any], value: Any) -> bool:
    if field.default is not dataclasses.MISSING:
        return bool(value == field.default)
    if field.default_factory is not dataclasses.MISSING:
        return bool(value == field.default_factory())
    return False


def _fmt(path: str) -> str:
    return path or "the top level"


def _convert(tp: Any, value: Any, *, where: str, path: str, unknown: list[str] | None = None) -> Any:
    if tp is Any:
        return value
    if isinstance(tp, str):
        raise TypeError(f"unresolved annotation {tp!r}; use typing.get_type_hints")
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, where=where, path=path, unknown=unknown)
    if origin in (typing.Union, types.UnionType):
        return _convert_union(tp, value, where=where, path=path, unknown=unknown)
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            raise RecordError(f"{where}: {_fmt(path)} is {value!r}; expected one of {choices}")
        return value
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, list | tuple):
            raise RecordError(f"{where}: {_fmt(path)} must be a list, got {type(value).__name__}")
        item_tp = args[0] if args else Any
        return tuple(
            _convert(item_tp, v, where=where, path=f"{path}[{i}]", unknown=unknown) for i, v in enumerate(value)
        )
    if origin in (dict, Mapping) or tp is dict:
        args = get_args(tp)
        if not isinstance(value, Mapping):
            raise RecordError(f"{where}: {_fmt(path)} must be a table, got {type(value).__name__}")
        val_tp = args[1] if len(args) == 2 else Any
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise RecordError(f"{where}: {_fmt(path)} has a non-string key {k!r}")
            out[k] = _convert(val_tp, v, where=where, path=f"{path}.{k}" if path else k, unknown=unknown)
        return out
    if tp is bool:
        if not isinstance(value, bool):
            raise RecordError(f"{where}: {_fmt(path)} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(f"{where}: {_fmt(path)} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecordError(f"{where}: {_fmt(path)} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise RecordError(f"{where}: {_fmt(path)} must be finite, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise RecordError(f"{where}: {_fmt(path)} must be a string, got {value!r}")
        return value
    raise TypeError(f"records: unsupported field type {tp!r} at {path}")


def _convert_union(tp: Any, value: Any, *, where: str, path: str, unknown: list[str] | None) -> Any:
    args = get_args(tp)
    if value is None:
        if type(None) in args:
            return None
        raise RecordError(f"{where}: {_fmt(path)} must not be empty")
    members = [a for a in args if a is not type(None)]
    shaped = [a for a in members if _accepts_shape(a, value)]
    if len(shaped) == 1:  # only one member fits the value's shape: its error is the useful one
        return _convert(shaped[0], value, where=where, path=path, unknown=unknown)
    errors = []
    # Try the strictest members first so 3 stays an int in `int | float` and "x" a str in `str | int`.
    for arg in sorted(members, key=_union_rank):
        try:
            return _convert(arg, value, where=where, path=path, unknown=unknown)
        except RecordError as e:
            errors.append(str(e))
    names = " or ".join(_type_name(a) for a in args if a is not type(None))
    raise RecordError(f"{where}: {_fmt(path)} must be {names}, got {value!r}")


def _accepts_shape(tp: Any, value: Any) -> bool:
    """Whether `tp` is a table, list or scalar type matching the kind of `value`."""
    is_table = dataclasses.is_dataclass(tp) or get_origin(tp) in (dict, Mapping) or tp is dict
    if isinstance(value, Mapping):
        return is_table or tp is Any
    if isinstance(value, list | tuple):
        return get_origin(tp) is tuple or tp is Any
    return not is_table and get_origin(tp) is not tuple


def _union_rank(tp: Any) -> int:
    return {bool: 0, int: 1, float: 2, str: 3}.get(tp, 4)


def _type_name(tp: Any) -> str:
    if dataclasses.is_dataclass(tp):
        return "a table"
    if get_origin(tp) is tuple:
        return "a list"
    if get_origin(tp) in (dict, Mapping):
        return "a table"
    return getattr(tp, "__name__", str(tp))


def _convert_dataclass(cls: Any, value: Any, *, where: str, path: str, unknown: list[str] | None) -> Any:
    if dataclasses.is_dataclass(value) and isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise RecordError(f"{where}: {_fmt(path)} must be a table, got {type(value).__name__}")
    kwargs = _field_values(cls, value, where=where, path=path, unknown=unknown)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise RecordError(f"{where}: {_fmt(path)}: {e}") from None


def record_fields(cls: Any, data: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """The converted, checked field values for `cls` from `data` (no object is built)."""
    return _field_values(cls, data, where=where, path="")


def _field_values(cls: Any, value: Mapping[str, Any], *, where: str, path: str,
                 unknown: list[str] | None = None) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    aliases = {
        alias: f.name for f in fields.values() for alias in f.metadata.get("aliases", ())
    }
    kwargs: dict[str, Any] = {}
    for key, raw in value.items():
        name = aliases.get(key, key)
        if name not in fields:
            known = sorted(fields)
            close = difflib.get_close_matches(str(key), known + sorted(aliases), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
            section = f"[{path}]" if path else "the top level"
            message = f"{where}: unknown key {key!r} in {section}{hint}"
            if unknown is None:
                raise RecordError(message)
            if message not in unknown:
                unknown.append(message)
            continue
        if name in kwargs:
            raise RecordError(f"{where}: {key!r} and its alias both set in [{path}]")
        field = fields[name]
        sub = f"{path}.{name}" if path else name
        parse = field.metadata.get("parse")
        if parse is not None:
            try:
                raw = parse(key, raw)
            except (TypeError, ValueError) as e:
                raise RecordError(f"{where}: {sub}: {e}") from None
        kwargs[name] = _convert(hints[name], raw, where=where, path=sub, unknown=unknown)
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        section = f"[{path}]" if path else "the top level"
        raise RecordError(f"{where}: missing required key {missing[0]!r} in {section}")
    return kwargs
