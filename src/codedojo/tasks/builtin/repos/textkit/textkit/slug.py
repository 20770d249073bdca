"""URL slugs."""

import unicodedata

_REPLACEMENTS = {"&": " and ", "@": " at ", "%": " percent "}


def slugify(text: str, *, separator: str = "-", max_length: int = 0) -> str:
    """'Hello, World & Friends!' -> 'hello-world-and-friends'.

    Accents are stripped, runs of other characters become one separator, and a `max_length` cut never
    leaves half a word or a trailing separator.
    """
    for char, words in _REPLACEMENTS.items():
        text = text.replace(char, words)
    normalized = unicodedata.normalize("NFKD", text)
    ascii_text = normalized.encode("ascii", "ignore").decode("ascii").lower()
    words = []
    current = ""
    for char in ascii_text:
        if char.isalnum():
            current += char
        elif current:
            words.append(current)
            current = ""
    if current:
        words.append(current)
    slug = separator.join(words)
    if max_length > 0 and len(slug) > max_length:
        cut = slug[: max_length + 1]
        if separator in cut:
            slug = cut[: cut.rindex(separator)]
        else:
            slug = slug[:max_length]
    return slug


def unique_slug(text: str, taken: set[str]) -> str:
    """A slug not in `taken`, adding -2, -3, ... when needed."""
    base = slugify(text)
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"
