"""Typed access, defaults, interpolation and layering."""

from __future__ import annotations

import re

from iniconf.parser import ConfigError, parse

_REFERENCE = re.compile(r"\$\{(?:([^:}]+):)?([^}]+)\}")
_TRUE = {"1", "yes", "true", "on"}
_FALSE = {"0", "no", "false", "off"}
MAX_DEPTH = 10


class Config:
    def __init__(self, sections: dict[str, dict[str, str]]) -> None:
        self.sections = sections

    @classmethod
    def from_text(cls, text: str) -> Config:
        return cls(parse(text))

    def section_names(self) -> list[str]:
        return [name for name in self.sections if name != "DEFAULT"]

    def raw(self, section: str, key: str) -> str:
        key = key.lower()
        values = self.sections.get(section)
        if values is None:
            raise KeyError(f"no section {section!r}")
        if key in values:
            return values[key]
        defaults = self.sections.get("DEFAULT", {})
        if key in defaults:
            return defaults[key]
        raise KeyError(f"no key {key!r} in section {section!r}")

    def get(self, section: str, key: str, *, depth: int = 0) -> str:
        """The value with ${key} (same section) and ${section:key} references expanded."""
        if depth > MAX_DEPTH:
            raise ConfigError(f"interpolation too deep at {section}.{key} (a reference cycle?)")
        value = self.raw(section, key)

        def expand(match: re.Match[str]) -> str:
            ref_section = match.group(1) or section
            return self.get(ref_section, match.group(2), depth=depth + 1)

        return _REFERENCE.sub(expand, value)

    def get_int(self, section: str, key: str) -> int:
        value = self.get(section, key)
        try:
            return int(value, 0)
        except ValueError:
            raise ConfigError(f"{section}.{key} = {value!r} is not an integer") from None

    def get_float(self, section: str, key: str) -> float:
        value = self.get(section, key)
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{section}.{key} = {value!r} is not a number") from None

    def get_bool(self, section: str, key: str) -> bool:
        value = self.get(section, key).lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ConfigError(f"{section}.{key} = {value!r} is not a boolean")

    def get_list(self, section: str, key: str) -> list[str]:
        """Comma- or newline-separated items, stripped, empty items dropped."""
        value = self.get(section, key)
        items = value.replace("\n", ",").split(",")
        return [item.strip() for item in items if item.strip()]

    def merged(self, override: Config) -> Config:
        """A new Config: `override`'s values win, sections and keys of both are kept."""
        result = {name: dict(values) for name, values in self.sections.items()}
        for name, values in override.sections.items():
            result.setdefault(name, {}).update(values)
        return Config(result)

    def as_dict(self) -> dict[str, dict[str, str]]:
        """Every section with interpolated values, DEFAULT keys filled in."""
        out = {}
        for name in self.section_names():
            keys = set(self.sections.get("DEFAULT", {})) | set(self.sections[name])
            out[name] = {k: self.get(name, k) for k in sorted(keys)}
        return out
