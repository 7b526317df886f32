"""The ``odf`` parser built for one command parses exactly as the whole tree does.

`node.cli.main` builds only the chosen command's parsers (so a start neither imports every
command module nor builds ~35 parsers). These tests hold the lazy tree to
the whole one: same commands, same help texts, same parse results, same errors.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from node.cli import build_parser, command_word
from node.commands import COMMANDS


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser, path: str = "odf") -> dict[str, str]:
    """Every parser's help text in the tree under ``parser``, by command path."""
    out = {path: parser.format_help()}
    for name, child in _subparsers(parser).items():
        out.update(_helps(child, f"{path} {name}"))
    return out


def test_the_command_table_names_every_command_in_help_order() -> None:
    assert list(_subparsers(build_parser())) == list(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_lazy_tree_of_a_command_equals_the_whole_trees_branch(command: str) -> None:
    full = _helps(build_parser())
    lazy = build_parser(command)
    assert list(_subparsers(lazy)) == [command]
    branch = _helps(_subparsers(lazy)[command], f"odf {command}")
    assert branch == {k: v for k, v in full.items() if k.split(" ")[:2] == ["odf", command]}


ARGVS = [
    ["list"],
    ["-w", "/tmp/x", "list", "--output-format", "json"],
    ["--workspace=/tmp/x", "log", "a.b", "-n", "3"],
    ["-w/tmp/x", "sql", "SELECT 1", "--output-format", "csv"],
    ["--workspace", "list", "log", "x"],
    ["verify", "--integrity", "a", "b"],
    ["block", "encode", "m.yaml", "--block-version", "3"],
    ["hash", "logical", "f.parquet"],
    ["ingest", "ds", "f.csv"],
    ["tail", "ds", "-n", "5"],
    ["pull", "--all"],
    ["push", "ds"],
    ["node", "status"],
    ["engine", "status"],
    ["attestations", "ds"],
]


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_lazy_parse_equals_full_parse(argv: list[str]) -> None:
    lazy = _parsed(build_parser(command_word(argv)).parse_args(argv))
    assert lazy == _parsed(build_parser().parse_args(argv))


def _parsed(args: argparse.Namespace) -> dict[str, object]:
    """``args`` as a dict, a handler wrapped per registration (`functools.wraps`) unwrapped."""
    out = vars(args)
    out["func"] = getattr(out["func"], "__wrapped__", out["func"])
    return out


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        ([], None),
        (["list"], "list"),
        (["-w", "d", "log"], "log"),
        (["-wd", "log"], "log"),
        (["--workspace", "d", "sql", "-w", "x"], "sql"),
        (["--workspace=d", "node", "status"], "node"),
        (["--workspace", "list", "log"], "log"),  # `list` is the workspace's name
        (["--help", "list"], None),
        (["-h"], None),
        (["--work", "d", "list"], None),  # an abbreviation: argparse decides, whole tree
        (["-w"], None),
        (["--", "list"], None),
        (["nosuch"], "nosuch"),
    ],
)
def test_command_word(argv: list[str], word: str | None) -> None:
    assert command_word(argv) == word


def _odf(*argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from node.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60
    )


def test_unknown_command_lists_every_command() -> None:
    r = _odf("nosuch")
    assert r.returncode == 2
    assert "invalid choice: 'nosuch'" in r.stderr
    for name in COMMANDS:
        assert f"'{name}'" in r.stderr


def test_usage_error_of_a_command_names_it() -> None:
    r = _odf("log")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        "odf log: error: the following arguments are required: dataset"
    )


@pytest.mark.parametrize("command", ["list", "log", "pull"])
def test_a_command_imports_only_its_own_command_module(command: str) -> None:
    code = (
        f"import sys; from node.cli import build_parser; build_parser({command!r}); "
        "print(sorted(m for m in sys.modules if m.startswith(('node.commands.', "
        "'node.usecases')) or m == 'node.remote.resolve'))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    own = {"pull": ["node.commands.fetch", "node.commands.pull"]}
    assert r.stdout.strip() == str(own.get(command, [f"node.commands.{command}"])), r.stderr
