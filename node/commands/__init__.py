"""Sub-command modules of the ``odf`` CLI.

Each module exposes ``register(sub)`` taking the top-level argparse sub-parsers object;
it adds its parsers with ``set_defaults(func=handler)``. A handler takes the parsed
``argparse.Namespace`` and returns an exit code (``node.cli_util.EXIT_*``), raising typed
errors (`fbs.errors.OdfError` subclasses) for failures: `node.cli.main` maps those to
exit codes and one-line messages. Imports of heavy modules belong inside handlers.
"""

#: Modules whose ``register`` is called by `node.cli.build_parser`, in help order.
COMMAND_MODULES: tuple[str, ...] = (
    "node.commands.ingest",
    "node.commands.transform",
    "node.commands.remote",
    "node.commands.pull",
    "node.commands.attest",
    "node.commands.node",
)
