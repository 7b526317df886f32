"""`odf sql` without a query: statements from a script or stdin, and the terminal shell."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from node.cli_util import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from node.sql.shell import Splitter, split_statements
from tests.node.test_error_contract import odf_exe


@pytest.mark.parametrize(
    ("text", "statements"),
    [
        ("SELECT 1; SELECT 2;", ["SELECT 1", "SELECT 2"]),
        ("SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),  # the last `;` may be left out
        ("SELECT 'a;b'; SELECT 2", ["SELECT 'a;b'", "SELECT 2"]),
        ("SELECT 'it''s;'; SELECT 2", ["SELECT 'it''s;'", "SELECT 2"]),
        ('SELECT "x;y" FROM t;', ['SELECT "x;y" FROM t']),
        ("SELECT * FROM `a;b`;", ["SELECT * FROM `a;b`"]),
        ("SELECT 1 -- no; split\n; SELECT 2", ["SELECT 1 -- no; split", "SELECT 2"]),
        ("SELECT /* a; b */ 1; SELECT 2", ["SELECT /* a; b */ 1", "SELECT 2"]),
        (";; SELECT 1;;", ["SELECT 1"]),
        ("", []),
    ],
)
def test_statements_end_at_a_semicolon_outside_quotes_and_comments(
    text: str, statements: list[str]
) -> None:
    assert split_statements(text) == statements


def test_a_statement_is_pending_until_its_semicolon_across_lines() -> None:
    s = Splitter()
    assert s.feed("SELECT 'a\n") == [] and s.pending
    assert s.feed("b;' AS x\n") == [] and s.pending  # the `;` is inside the quote
    assert s.feed("FROM t; SELECT\n") == ["SELECT 'a\nb;' AS x\nFROM t"]
    assert s.pending and s.rest() == "SELECT"
    assert s.feed("2;\n") == ["SELECT\n2"] and not s.pending


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sql-shell")
    r = subprocess.run([odf_exe(), "init"], cwd=path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return path


def _env(ws: Path) -> dict[str, str]:
    return {**os.environ, "ODF_WORKSPACE": str(ws)}


def _sql(ws: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [odf_exe(), "sql", *argv], input=stdin, env=_env(ws),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_statements_from_stdin_run_in_order(ws: Path) -> None:
    r = _sql(ws, "--output-format", "csv", stdin="SELECT 1 AS a;\nSELECT 'x;y' AS b;")
    assert r.returncode == EXIT_OK, r.stderr
    assert r.stdout == '"a"\n1\n"b"\n"x;y"\n'


def test_a_failing_statement_stops_the_script_with_its_exit_code(ws: Path, tmp_path: Path) -> None:
    script = tmp_path / "q.sql"
    script.write_text("SELECT 1 AS a; SELECT nope FROM nothing; SELECT 3 AS c;")
    r = _sql(ws, "--output-format", "csv", "--script", str(script))
    assert r.returncode == EXIT_INVALID
    assert r.stdout == '"a"\n1\n'  # the first ran, the third did not
    (line,) = r.stderr.splitlines()
    assert line.startswith("odf: error: ") and "nothing" in line


@pytest.mark.parametrize(
    "argv",
    [["SELECT 1", "--script", "q.sql"], ["--output-format", "parquet", "--output-path", "x"]],
)
def test_a_script_takes_no_query_and_writes_to_stdout(ws: Path, argv: list[str]) -> None:
    r = _sql(ws, *argv, stdin="SELECT 1;")
    assert r.returncode == EXIT_USAGE
    assert r.stderr.startswith("odf: error: ") and len(r.stderr.splitlines()) == 1


def _read_until(fd: int, marker: bytes, timeout: float = 60.0) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while marker not in out:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} in {out!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            out += os.read(fd, 65536)
    return out


def test_the_shell_on_a_terminal(ws: Path) -> None:
    """Prompts, a statement over two lines, an error that leaves the shell running, \\q."""
    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [odf_exe(), "sql", "--output-format", "csv"],
        stdin=sub, stdout=sub, stderr=sub, env=_env(ws), close_fds=True,
    )  # fmt: skip
    os.close(sub)
    try:
        _read_until(main, b"odf> ")
        os.write(main, b"SELECT 40 + 2\n")
        _read_until(main, b"  -> ")  # the statement is not complete yet
        os.write(main, b"AS answer;\n")
        out = _read_until(main, b"odf> ")
        assert b'"answer"\r\n42\r\n' in out
        os.write(main, b"SELECT nope FROM nothing;\n")
        out = _read_until(main, b"odf> ")
        assert b"odf: error: " in out and b"nothing" in out
        os.write(main, b"\\q\n")
        assert proc.wait(timeout=60) == EXIT_OK
    finally:
        proc.kill()
        proc.wait()
        os.close(main)
