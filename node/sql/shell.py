"""``odf sql`` without a query: an interactive SQL shell, or a script of statements.

On a terminal, statements are read line by line (with line editing when ``readline`` is
there) until a ``;`` ends one outside quotes and comments; each runs as soon as it is
complete, an error is printed and the shell goes on; ``\\q``, ``quit``, ``exit`` or
end of input leave it. No history file is written: queries may name data a user would
not want kept in their home directory.

From a pipe or ``--script FILE`` the text is split the same way and the statements run in
order; the first error stops the script with that error's exit code, so a failing
statement fails the job that ran it (as ``psql -v ON_ERROR_STOP=1`` or ``sqlite3 -bail``).

`split_statements` is pure; the loop takes its input and output streams as arguments.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TextIO

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EXIT_WORDS", "Splitter", "run_script", "run_shell", "split_statements"]

PROMPT: Final = "odf> "
CONTINUATION: Final = "  -> "
#: Lines that leave the shell (alone on a line, with or without a trailing ``;``).
EXIT_WORDS: Final = frozenset({"\\q", "quit", "exit"})

RunOne = Callable[[str], "pa.Table"]
Emit = Callable[["pa.Table"], None]


@dataclass(slots=True)
class Splitter:
    """Cuts SQL text into statements at ``;`` outside quotes (``'``, ``"``, `````) and
    comments (``--`` to the end of the line, ``/* */``), across as many `feed` calls as
    the text takes. Quotes are closed by the same character; a doubled one inside is that
    character, which the scan handles as a close then an open."""

    _buffer: str = ""
    _quote: str = ""  # the open quote character, or "" outside quotes
    _comment: str = ""  # "--" or "/*" while inside a comment

    def feed(self, text: str) -> list[str]:
        """The statements ``text`` completes (trimmed, without their ``;``)."""
        done: list[str] = []
        i = 0
        while i < len(text):
            c = text[i]
            two = text[i : i + 2]
            if self._comment == "--":
                if c == "\n":
                    self._comment = ""
            elif self._comment == "/*":
                if two == "*/":
                    self._comment = ""
                    self._buffer += two
                    i += 2
                    continue
            elif self._quote:
                if c == self._quote:
                    self._quote = ""
            elif c in "'\"`":
                self._quote = c
            elif two in ("--", "/*"):
                self._comment = two
                self._buffer += two
                i += 2
                continue
            elif c == ";":
                statement = self._buffer.strip()
                self._buffer = ""
                if statement:
                    done.append(statement)
                i += 1
                continue
            self._buffer += c
            i += 1
        return done

    def rest(self) -> str:
        """What was fed after the last ``;`` (a last statement without one), trimmed."""
        return self._buffer.strip()

    @property
    def pending(self) -> bool:
        """Whether a statement has begun and is not complete."""
        return bool(self._buffer.strip()) or bool(self._quote)


def split_statements(text: str) -> list[str]:
    """The statements of ``text``; the last one may omit its ``;``. Comment-only pieces
    are kept (the engine treats them as empty and says so)."""
    splitter = Splitter()
    statements = splitter.feed(text)
    if splitter.rest():
        statements.append(splitter.rest())
    return statements


def run_script(text: str, run_one: RunOne, emit: Emit) -> int:
    """Run every statement of ``text`` in order; the first error propagates. The number of
    statements run."""
    statements = split_statements(text)
    for statement in statements:
        emit(run_one(statement))
    return len(statements)


def _lines(stdin: TextIO, stdout: TextIO, interactive: bool, splitter: Splitter) -> Iterator[str]:
    """Lines of input, prompting on a terminal (with readline's editing there)."""
    while True:
        prompt = CONTINUATION if splitter.pending else PROMPT
        try:
            if interactive and stdin is sys.stdin:
                line = input(prompt)  # readline, when imported, edits this line
            else:
                if interactive:
                    stdout.write(prompt)
                    stdout.flush()
                line = stdin.readline()
                if not line:
                    return
                line = line.rstrip("\n")
        except EOFError:
            return
        yield line


def run_shell(
    run_one: RunOne,
    emit: Emit,
    report: Callable[[BaseException], bool],
    *,
    stdin: TextIO,
    stdout: TextIO,
    interactive: bool,
) -> None:
    """Read statements from ``stdin`` and run each as it completes. An error ``report``
    handles (writes its one line) leaves the shell running; one it does not (a bug) is
    re-raised. Ctrl-C drops the statement being typed or stops the one running."""
    if interactive and stdin is sys.stdin:
        with contextlib.suppress(ImportError):  # a Python without readline: plain input()
            import readline  # noqa: F401  (line editing for input())
    splitter = Splitter()
    lines = _lines(stdin, stdout, interactive, splitter)
    while True:
        try:
            line = next(lines, None)
        except KeyboardInterrupt:
            stdout.write("\n")
            splitter = Splitter()
            lines = _lines(stdin, stdout, interactive, splitter)
            continue
        if line is None:
            break
        if not splitter.pending and line.strip().rstrip(";").strip().lower() in EXIT_WORDS:
            break
        for statement in splitter.feed(line + "\n"):
            try:
                emit(run_one(statement))
            except KeyboardInterrupt:
                stdout.write("\n")
            except Exception as e:  # a query's error: said in one line, the shell goes on
                if not report(e):
                    raise
    if interactive:
        stdout.write("\n")
