"""The ``odf`` command line: builds the chosen command's parser (`node.commands`), runs
its handler and turns a typed error into one ``odf: error: ...`` line and its exit code
(`node.error_contract`). Heavy modules (pyarrow, the codec) are imported inside handlers
so that ``odf --help`` and simple commands start fast.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from fbs.errors import OdfError
from node.cli_util import EXIT_OK, WORKSPACE_ENV
from node.error_contract import report_error

_python_show_warning = warnings.showwarning


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argparse tree of the ``odf`` command.

    ``command``: a top-level command name (see `command_word`); only the parsers of the
    module that registers it are built (`node.commands.module_of`). Parsing that
    command's arguments gives the same result as with the whole tree, without importing
    every command module and building ~35 parsers at each start (~25 ms). ``None`` or an
    unknown name: the whole tree (top-level help, "invalid choice" listing every command).
    """
    import importlib

    from node.commands import COMMANDS, module_of

    parser = argparse.ArgumentParser(
        prog="odf", description="odf-node: an Open Data Fabric repository node"
    )
    parser.add_argument(
        "--workspace",
        "-w",
        metavar="DIR",
        help=f"workspace directory (default: ${WORKSPACE_ENV} or search upwards from cwd)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no status line on a terminal while long steps run",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in (command,) if command is not None and command in COMMANDS else COMMANDS:
        importlib.import_module(module_of(name)).register(sub)
    return parser


def command_word(argv: Sequence[str]) -> str | None:
    """The top-level command named in ``argv``, or ``None`` when the whole tree is needed.

    Skips only the global options' exact spellings (``-w DIR``, ``-wDIR``, ``--workspace
    DIR``, ``--workspace=DIR``, ``--no-progress``): any other option before the command
    (``--help``, an abbreviation such as ``--work``, a typo) gives ``None``, so argparse
    sees the whole tree and answers as it always did.
    """
    args = iter(argv)
    for arg in args:
        if arg in ("-w", "--workspace"):
            next(args, None)
        elif (
            arg == "--no-progress"
            or arg.startswith("--workspace=")
            or (arg.startswith("-w") and arg != "-w")
        ):
            continue
        elif arg.startswith("-"):
            return None
        else:
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``odf`` console script; returns the exit code."""
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(command_word(words)).parse_args(words)
    if args.no_progress:
        from node.render.progress import disable

        disable()
    warnings.showwarning = _show_warning
    try:
        code: int = args.func(args)
        return code
    except BrokenPipeError:
        return EXIT_OK
    except (OdfError, OSError) as e:
        return report_error(e, getattr(args, "command", None))
    except KeyboardInterrupt:
        # One line, then 128 + SIGINT. Nothing is left half-done: a commit moves the
        # head by compare-and-swap only after every object is durable.
        # On a terminal the line starts after the echoed ^C.
        sys.stderr.write(("\n" if sys.stderr.isatty() else "") + "odf: interrupted\n")
        return 130


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Warnings meant for the user (``odf_warning`` on their class) as one
    ``odf: warning:`` line; any other warning as Python shows it."""
    if getattr(category, "odf_warning", False):
        (file or sys.stderr).write(f"odf: warning: {message}\n")
        return
    _python_show_warning(message, category, filename, lineno, file, line)


def run() -> None:
    """Console-script wrapper: exits with `main`'s code, skipping native teardown.

    Python's own exit work runs (atexit handlers, logging shutdown, flushed stdio), then
    the process ends with ``os._exit``. This is a second guard against an abort at exit
    (SIGABRT, "terminate called without an active exception") that an Arrow worker thread
    releasing a Python file object while the interpreter finalizes causes; the first is
    `storage.hashing.arrow_input` (Arrow reads native files).
    Set ``ODF_NORMAL_EXIT=1`` to exit through a normal interpreter teardown instead: the
    CLI process test does, so that such a bug coming back is still caught.
    """
    import os

    try:
        code = main()
    except SystemExit as e:  # argparse (usage errors, --help)
        code = _exit_code(e.code)
    except BaseException:
        import traceback  # only a bug pays for it

        traceback.print_exc()
        code = 1
    if os.environ.get("ODF_NORMAL_EXIT") == "1":
        sys.exit(code)
    _exit_now(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _exit_now(code: int) -> None:
    import atexit
    import os

    # Only a process that imported logging has handlers to flush (importing it costs).
    logging = sys.modules.get("logging")
    try:
        atexit._run_exitfuncs()
        if logging is not None:
            logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a closed pipe must not turn success into an abort
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
