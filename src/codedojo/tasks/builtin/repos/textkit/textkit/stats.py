"""Word statistics and a tiny template renderer."""

import re

_WORD = re.compile(r"[A-Za-z']+")
_FIELD = re.compile(r"\{\{\s*(\w+)(?:\s*\|\s*(\w+))?\s*\}\}")


def words(text: str) -> list[str]:
    return [w.lower().strip("'") for w in _WORD.findall(text) if w.strip("'")]


def word_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in words(text):
        counts[w] = counts.get(w, 0) + 1
    return counts


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    """The `n` most frequent words, ties broken alphabetically."""
    ranked = sorted(word_counts(text).items(), key=lambda item: (-item[1], item[0]))
    return ranked[:n]


def reading_time(text: str, *, words_per_minute: int = 200) -> int:
    """Whole minutes to read `text`, rounded up, at least 1 for non-empty text."""
    count = len(words(text))
    if count == 0:
        return 0
    return max(1, -(-count // words_per_minute))


def render(template: str, values: dict[str, object]) -> str:
    """Replace {{ name }} and {{ name | upper }} / {{ name | lower }}; unknown names are an error."""

    def substitute(match: re.Match[str]) -> str:
        name, flt = match.group(1), match.group(2)
        if name not in values:
            raise KeyError(f"no value for {name!r}")
        text = str(values[name])
        if flt == "upper":
            return text.upper()
        if flt == "lower":
            return text.lower()
        if flt is not None:
            raise ValueError(f"unknown filter {flt!r}")
        return text

    return _FIELD.sub(substitute, template)
