"""Wrapping, truncating and aligning text."""


def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap; a word longer than `width` gets a line of its own."""
    if width < 1:
        raise ValueError(f"width must be positive, got {width}")
    lines: list[str] = []
    line = ""
    for word in text.split():
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line += " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def truncate(text: str, limit: int, *, ellipsis: str = "...") -> str:
    """At most `limit` characters, ending in `ellipsis` when cut."""
    if len(text) <= limit:
        return text
    if limit <= len(ellipsis):
        return ellipsis[:limit]
    return text[: limit - len(ellipsis)].rstrip() + ellipsis


def center(text: str, width: int, fill: str = " ") -> str:
    """Centre `text`; an odd leftover goes to the right."""
    gap = width - len(text)
    if gap <= 0:
        return text
    left = gap // 2
    return fill * left + text + fill * (gap - left)


def columns(rows: list[list[str]], *, gap: int = 2) -> list[str]:
    """Left-aligned table rows, each column as wide as its widest cell."""
    if not rows:
        return []
    widths = [0] * max(len(r) for r in rows)
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    out = []
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        out.append((" " * gap).join(cells).rstrip())
    return out
