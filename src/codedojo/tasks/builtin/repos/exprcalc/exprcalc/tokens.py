"""Splitting expression text into tokens."""

from dataclasses import dataclass


class ExprSyntaxError(ValueError):
    """The text is not a valid expression."""


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "name", "op", "lparen", "rparen", "comma", "end"
    text: str
    pos: int


OPERATORS = "+-*/%^"


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit() or (ch == "." and i + 1 < len(text) and text[i + 1].isdigit()):
            start = i
            seen_dot = False
            while i < len(text) and (text[i].isdigit() or (text[i] == "." and not seen_dot)):
                seen_dot = seen_dot or text[i] == "."
                i += 1
            tokens.append(Token("num", text[start:i], start))
        elif ch.isalpha() or ch == "_":
            start = i
            while i < len(text) and (text[i].isalnum() or text[i] == "_"):
                i += 1
            tokens.append(Token("name", text[start:i], start))
        elif ch in OPERATORS:
            tokens.append(Token("op", ch, i))
            i += 1
        elif ch == "(":
            tokens.append(Token("lparen", ch, i))
            i += 1
        elif ch == ")":
            tokens.append(Token("rparen", ch, i))
            i += 1
        elif ch == ",":
            tokens.append(Token("comma", ch, i))
            i += 1
        else:
            raise ExprSyntaxError(f"unexpected character {ch!r} at position {i}")
    tokens.append(Token("end", "", len(text)))
    return tokens
