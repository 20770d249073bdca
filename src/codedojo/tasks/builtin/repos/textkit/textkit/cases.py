"""Converting between naming conventions."""

import re

_BOUNDARY = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def split_words(text: str) -> list[str]:
    """'parseHTTPResponse2' -> ['parse', 'HTTP', 'Response', '2']; separators are dropped."""
    return _BOUNDARY.findall(text)


def snake_case(text: str) -> str:
    return "_".join(word.lower() for word in split_words(text))


def kebab_case(text: str) -> str:
    return "-".join(word.lower() for word in split_words(text))


def camel_case(text: str) -> str:
    words = split_words(text)
    if not words:
        return ""
    head, *rest = words
    return head.lower() + "".join(w[:1].upper() + w[1:].lower() for w in rest)


def title_case(text: str, *, small_words: frozenset[str] = frozenset({"a", "an", "the", "of", "and", "or", "in"})) -> str:
    """Capitalise words except small ones, which stay lower case unless first or last."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        lower = word.lower()
        if 0 < i < len(words) - 1 and lower in small_words:
            out.append(lower)
        else:
            out.append(lower[:1].upper() + lower[1:])
    return " ".join(out)
