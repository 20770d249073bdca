"""Reading configuration text into sections of string values."""

from __future__ import annotations


class ConfigError(ValueError):
    """Malformed configuration text, with the line number."""


def parse(text: str) -> dict[str, dict[str, str]]:
    """Sections -> keys -> raw string values.

    Keys before the first section go to "DEFAULT". Lines starting with '#' or ';' are comments; an
    indented line continues the previous value (joined with a newline). Keys are lower-cased; values
    are stripped. A repeated key replaces the earlier value.
    """
    sections: dict[str, dict[str, str]] = {"DEFAULT": {}}
    current = "DEFAULT"
    last_key: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith(("#", ";")):
            continue
        if raw[0] in " \t" and last_key is not None:
            sections[current][last_key] += "\n" + raw.strip()
            continue
        line = raw.strip()
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise ConfigError(f"line {number}: bad section header {line!r}")
            current = line[1:-1].strip()
            sections.setdefault(current, {})
            last_key = None
            continue
        for separator in ("=", ":"):
            if separator in line:
                key, _, value = line.partition(separator)
                break
        else:
            raise ConfigError(f"line {number}: expected 'key = value', got {line!r}")
        key = key.strip().lower()
        if not key:
            raise ConfigError(f"line {number}: empty key")
        sections[current][key] = value.strip()
        last_key = key
    return sections


def dump(sections: dict[str, dict[str, str]]) -> str:
    """Text that parses back to `sections` (DEFAULT first, then sections in order)."""
    lines: list[str] = []
    for name, values in sections.items():
        if name == "DEFAULT" and not values:
            continue
        if lines:
            lines.append("")
        if name != "DEFAULT":
            lines.append(f"[{name}]")
        for key, value in values.items():
            first, *rest = value.split("\n")
            lines.append(f"{key} = {first}")
            lines.extend("    " + part for part in rest)
    return "\n".join(lines) + "\n" if lines else ""
