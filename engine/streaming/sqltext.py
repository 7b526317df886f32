"""A small SQL tokenizer: enough structure to rewrite streaming constructs in query text.

Spark parses the rewritten text; this module only has to find function calls, clause
keywords and parenthesis depth without being fooled by strings, quoted identifiers or
comments. Tokens keep their exact text, so ``"".join(t.text for t in tokens)`` is the
input again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["Token", "call_args", "join", "matching_paren", "scan_level", "tokenize", "unquote"]

_TOKEN_RE: Final = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<string>'(?:[^'\\]|\\.|'')*')
  | (?P<quoted>`(?:[^`]|``)*`|"(?:[^"]|"")*")
  | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<word>[A-Za-z_][A-Za-z_0-9$]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical token: its kind (``space``, ``comment``, ``string``, ``quoted``,
    ``number``, ``word``, ``punct``) and its exact text."""

    kind: str
    text: str

    @property
    def trivia(self) -> bool:
        """Whitespace or a comment."""
        return self.kind in ("space", "comment")

    def is_word(self, *words: str) -> bool:
        """True for an unquoted word equal (case-insensitively) to one of ``words``."""
        return self.kind == "word" and self.text.upper() in words

    def is_punct(self, ch: str) -> bool:
        """True for the punctuation character ``ch``."""
        return self.kind == "punct" and self.text == ch


def tokenize(sql: str) -> list[Token]:
    """The tokens of ``sql`` (an unterminated string or comment is one punct per char)."""
    out = []
    for m in _TOKEN_RE.finditer(sql):
        kind = m.lastgroup or "punct"
        out.append(Token(kind, m.group()))
    return out


def join(tokens: list[Token]) -> str:
    """The text of ``tokens``."""
    return "".join(t.text for t in tokens)


def unquote(token: Token) -> str:
    """An identifier's name: backticks/double quotes removed, doubled quotes undone."""
    if token.kind == "quoted":
        q = token.text[0]
        return token.text[1:-1].replace(q + q, q)
    return token.text


def matching_paren(tokens: list[Token], open_index: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``open_index`` (len(tokens) if unclosed)."""
    return scan_level(tokens, open_index + 1, lambda t: False)


def scan_level(tokens: list[Token], start: int, stop: Callable[[Token], bool]) -> int:
    """Index of the first token from ``start`` at the starting parenthesis level for which
    ``stop`` holds, or of the ``)`` closing that level (len(tokens) if none)."""
    depth = 0
    for k in range(start, len(tokens)):
        t = tokens[k]
        if t.is_punct("("):
            depth += 1
        elif t.is_punct(")"):
            depth -= 1
            if depth < 0:
                return k
        elif depth == 0 and stop(t):
            return k
    return len(tokens)


def call_args(tokens: list[Token], open_index: int) -> tuple[list[list[Token]], int]:
    """The comma-separated arguments of the call whose ``(`` is at ``open_index``.

    Returns the argument token lists (trivia trimmed) and the index of the closing ``)``.
    """
    close = matching_paren(tokens, open_index)
    args: list[list[Token]] = [[]]
    depth = 0
    for t in tokens[open_index + 1 : close]:
        if t.is_punct("("):
            depth += 1
        elif t.is_punct(")"):
            depth -= 1
        if depth == 0 and t.is_punct(","):
            args.append([])
            continue
        args[-1].append(t)
    trimmed = [_trim(a) for a in args]
    return ([] if trimmed == [[]] else trimmed), close


def _trim(tokens: list[Token]) -> list[Token]:
    start, end = 0, len(tokens)
    while start < end and tokens[start].trivia:
        start += 1
    while end > start and tokens[end - 1].trivia:
        end -= 1
    return tokens[start:end]
