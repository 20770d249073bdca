"""Recursive-descent parser producing a small tree of tuples.

Grammar (lowest precedence first):
    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/' | '%') unary)*
    unary  := '-' unary | power
    power  := atom ('^' unary)?          right-associative, binds tighter than unary minus on its left
    atom   := number | name | name '(' args ')' | '(' expr ')'

Nodes: ("num", value) ("var", name) ("neg", node) ("bin", op, left, right) ("call", name, [args])
"""

from exprcalc.tokens import ExprSyntaxError, Token, tokenize


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0

    def peek(self) -> Token:
        return self.tokens[self.index]

    def take(self, kind: str, text: str | None = None) -> Token:
        token = self.peek()
        if token.kind != kind or (text is not None and token.text != text):
            wanted = text or kind
            raise ExprSyntaxError(f"expected {wanted} at position {token.pos}, found {token.text or 'end'!r}")
        self.index += 1
        return token

    def at(self, kind: str, *texts: str) -> bool:
        token = self.peek()
        return token.kind == kind and (not texts or token.text in texts)

    def expr(self) -> tuple:
        node = self.term()
        while self.at("op", "+", "-"):
            op = self.take("op").text
            node = ("bin", op, node, self.term())
        return node

    def term(self) -> tuple:
        node = self.unary()
        while self.at("op", "*", "/", "%"):
            op = self.take("op").text
            node = ("bin", op, node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.at("op", "-"):
            self.take("op")
            return ("neg", self.unary())
        return self.power()

    def power(self) -> tuple:
        base = self.atom()
        if self.at("op", "^"):
            self.take("op")
            return ("bin", "^", base, self.unary())
        return base

    def atom(self) -> tuple:
        token = self.peek()
        if token.kind == "num":
            self.take("num")
            value = float(token.text) if "." in token.text else int(token.text)
            return ("num", value)
        if token.kind == "name":
            self.take("name")
            if self.at("lparen"):
                self.take("lparen")
                args = []
                if not self.at("rparen"):
                    args.append(self.expr())
                    while self.at("comma"):
                        self.take("comma")
                        args.append(self.expr())
                self.take("rparen")
                return ("call", token.text, args)
            return ("var", token.text)
        if token.kind == "lparen":
            self.take("lparen")
            node = self.expr()
            self.take("rparen")
            return node
        raise ExprSyntaxError(f"unexpected {token.text or 'end'!r} at position {token.pos}")


def parse(text: str) -> tuple:
    parser = Parser(tokenize(text))
    node = parser.expr()
    if not parser.at("end"):
        token = parser.peek()
        raise ExprSyntaxError(f"unexpected {token.text!r} at position {token.pos}")
    return node


def to_text(node: tuple) -> str:
    """Fully parenthesised text of a tree, for debugging and tests."""
    kind = node[0]
    if kind == "num":
        return str(node[1])
    if kind == "var":
        return node[1]
    if kind == "neg":
        return f"(-{to_text(node[1])})"
    if kind == "bin":
        return f"({to_text(node[2])} {node[1]} {to_text(node[3])})"
    return f"{node[1]}({', '.join(to_text(a) for a in node[2])})"
