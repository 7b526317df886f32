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

#: Stands for `node.cli` itself in `COMMAND_OWNERS` (its built-in commands).
BUILTIN = "node.cli"

#: The module whose ``register`` adds each top-level command: `node.cli.main` builds
#: only the chosen command's parsers (importing one command module, not all of them);
#: ``odf --help`` and unknown commands get the whole tree. A test keeps this table equal
#: to what the modules register.
COMMAND_OWNERS: dict[str, str] = {
    **dict.fromkeys(
        ("init", "add", "list", "log", "delete", "verify", "gc", "block", "hash"), BUILTIN
    ),
    **dict.fromkeys(("ingest", "tail", "inspect", "export"), "node.commands.ingest"),
    **dict.fromkeys(("engine", "sql"), "node.commands.transform"),
    **dict.fromkeys(("fetch", "push"), "node.commands.remote"),
    "pull": "node.commands.pull",
    **dict.fromkeys(("attestations", "validate"), "node.commands.attest"),
    "node": "node.commands.node",
}
