"""The ``odf`` commands, one module each.

Each module exposes ``register(sub)`` taking the top-level argparse sub-parsers object;
it adds its command's parsers with ``set_defaults(func=handler)``. A handler takes the
parsed ``argparse.Namespace``, builds the typed options of a use-case
(`node.usecases`), calls it and renders its result, returning an exit code
(``node.cli_util.EXIT_*``); failures are typed errors (`fbs.errors.OdfError`) that
`node.cli.main` reports (`node.error_contract`). Heavy imports belong inside handlers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from node.api import DatasetView

#: The top-level commands in help order; ``node.commands.<name>`` registers each.
#: `node.cli.main` builds only the chosen command's parsers (importing one command
#: module, not all of them); ``odf --help`` and unknown commands get the whole tree.
COMMANDS: tuple[str, ...] = (
    "init",
    "add",
    "list",
    "log",
    "delete",
    "verify",
    "gc",
    "block",
    "hash",
    "ingest",
    "tail",
    "inspect",
    "export",
    "engine",
    "sql",
    "fetch",
    "push",
    "pull",
    "serve",
    "attestations",
    "validate",
    "node",
)


def module_of(command: str) -> str:
    """The module that registers ``command``."""
    return f"node.commands.{command}"


def dataset_view(args: argparse.Namespace) -> DatasetView:
    """The Python API's read view of ``args.dataset`` (``odf tail``, ``inspect``, ``export``)."""
    from node.api import DatasetView
    from node.cli_util import open_workspace

    ws = open_workspace(args)
    return DatasetView(ws.get(args.dataset), name=args.dataset)
