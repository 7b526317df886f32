"""``odf pull``: bring datasets up to date, whatever kind they are (`node.usecases.pull`).

One command for every source of new data, dispatched per argument:

- a URL (``http://``, ``https://``, ``odf+http(s)://``): a verified fetch from that node or
  dataset base URL (see ``odf fetch``; ``odf+`` URLs use the Smart Transfer Protocol);
- a peer address ``/ip4/H/tcp/P/p2p/PEER/did:odf:...`` (or ``--dataset DID``): a verified
  pull from that libp2p peer over the object exchange protocol;
- a dataset ID ``did:odf:...`` that is not in this workspace: resolved through the peers
  of the running node (``odf node run``) and pulled, verified, from every peer that
  serves its newest signed head;
- a replica (a dataset whose key this workspace does not hold): updated from its pull
  alias and from the peers of the running node, never by polling or transforming here;
  "up to date" only when no newer signed head is known;
- a root dataset: poll its polling source (``--set-watermark`` only commits a watermark);
- a derivative dataset: run its transform on new input data (``-r`` pulls upstream
  derivatives first);
- ``--all``: every dataset of the workspace, roots before the derivatives that read them.

On a terminal each dataset's pull shows one status line on stderr (the transfer, the
engine start and the transform, with the elapsed time), erased when it ends; never when
stderr is piped, nor with ``--no-progress``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_OK, open_workspace, timestamp_arg
from node.commands.fetch import NO_PULL_ALIAS_HELP, progress_lines
from node.render.progress import step

if TYPE_CHECKING:
    from node.usecases.pull import PullOptions, PullOutcome, PullTarget
    from storage.workspace import Workspace

__all__ = ["cmd_pull", "cmd_pull_derivative", "register"]


def cmd_pull(args: argparse.Namespace) -> int:
    """Pull each target in turn; a failed transfer or source is reported and the others
    still pulled (the exit code is the last failure's).

    ``--all`` updates whatever can be updated, as a cron job of ``git fetch --all`` or
    ``kamu pull --all`` would expect: a push-only root is "up-to-date (no polling
    source)", and a replica with no pull alias while no node runs on the workspace (it
    was cloned by DID or peer address, and only the node's peers know its publisher's
    newer heads) gets one ``odf: warning:`` line naming it and what to do (start ``odf
    node run``, or pull it once from a node URL, which becomes its pull alias); neither
    is a failure. A source that is known and fails (a pull alias that does not answer, a
    newer head no reachable peer serves, bad bytes) is one, with its exit code from the
    error contract. Named explicitly (``odf pull DS``), such a replica is an error:
    the user asked for that dataset to be updated and it cannot be.
    """
    from node.usecases.pull import PullOptions, all_targets, check_options

    check_options(tuple(args.dataset), args.all)
    ws = open_workspace(args)
    targets: tuple[str, ...] = tuple(args.dataset)
    recursive = args.recursive
    if args.all:
        found = all_targets(ws)
        for alias in found.push_only:  # as kamu does, instead of failing the whole run
            print(f"{alias}: up-to-date (no polling source)")
        if not found.targets:
            print("Nothing to pull: the workspace has no datasets")
            return EXIT_OK
        targets, recursive = found.targets, True
    options = PullOptions(
        recursive=recursive,
        set_watermark=args.set_watermark,
        as_alias=args.as_alias,
        dataset_id=args.dataset_id,
        require_signed=args.require_signed,
        remember_alias=not args.no_alias,
        quiet=args.no_progress,
        everything=args.all,
    )
    code = EXIT_OK
    for ref in targets:
        code = _pull_target(ws, ref, options) or code
    return code


def _pull_target(ws: Workspace, ref: str, options: PullOptions) -> int:
    """Pull and show one target; a failure of its transfer or source is reported here."""
    from node.error_contract import report_error
    from node.render.ingest import ingest_progress
    from node.usecases.pull import PullKind, classify, per_target_errors, pull_one

    target = classify(ws, ref, options)
    try:
        if target.kind is PullKind.ROOT:
            with ingest_progress(not options.quiet) as bar:
                outcome = pull_one(ws, target, options, ingest_progress=bar)
        else:
            with step(_step_text(target)) as status:
                # Transfer lines show on the status line only: piped stderr stays clean.
                quiet = options.quiet or not status.shown
                outcome = pull_one(ws, target, options, progress_lines(quiet, status))
    except per_target_errors() as e:
        return report_error(e, "pull")
    _show(outcome)
    return EXIT_OK


def _step_text(target: PullTarget) -> str:
    """What the terminal's status line says while ``target`` is pulled."""
    from node.usecases.pull import PullKind

    ref = target.ref
    if target.kind is PullKind.DERIVATIVE:
        return f"transforming {ref} (the Spark engine starts if it is not running)"
    if target.kind is PullKind.REPLICA:
        return f"updating replica {ref}"
    if target.kind is PullKind.URL:
        return f"fetching {ref}"
    name = ref.rsplit("/", 1)[-1] if ref.startswith("/") else ref  # a peer address's DID
    if name.startswith("did:") and len(name) > 24:
        name = f"{name[:13]}...{name[-8:]}"  # the line holds 78 characters
    return f"pulling {name} over libp2p"


def _show(outcome: PullOutcome) -> None:
    from node.render.ingest import ingest_summary
    from node.render.sync import report_sync
    from node.render.transform import print_pull_rows, pull_result_rows

    if outcome.passed_by is not None:
        sys.stderr.write(f"odf: warning: {outcome.passed_by}\n")
    elif outcome.synced is not None:
        report_sync(outcome.synced)
        if outcome.attestations:
            print(
                f"{outcome.synced.alias}: {outcome.attestations} attestation(s) of its "
                "blocks brought from the source"
            )
    elif outcome.transformed is not None:
        print_pull_rows(pull_result_rows(outcome.transformed), "table")
    elif outcome.ingested is not None:
        print(f"{outcome.target.ref}:", end=" ")
        ingest_summary(outcome.ingested, "pulled")
    if outcome.disputed:
        sys.stderr.write(f"odf: warning: {outcome.disputed}\n")


def cmd_pull_derivative(args: argparse.Namespace) -> int:
    """Pull the derivative datasets ``args.dataset`` (``args.recursive``: upstream first)
    and print their rows in ``args.output_format``."""
    from node.render.transform import print_pull_rows, pull_result_rows
    from node.transform import pull_derivative

    ws = open_workspace(args)
    rows: list[dict[str, Any]] = []
    for ref in args.dataset:
        rows += pull_result_rows(pull_derivative(ws, ref, recursive=args.recursive))
    print_pull_rows(rows, args.output_format)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``pull`` to the top-level sub-parsers."""
    p = sub.add_parser(
        "pull",
        help=(
            "bring datasets up to date (roots: poll sources; derivatives: transform; "
            "URLs, peer addresses, remote DIDs: verified pull)"
        ),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=cmd_pull)
    p.add_argument(
        "dataset",
        nargs="*",
        help="dataset aliases or DIDs, node/dataset URLs, or libp2p peer addresses",
    )
    p.add_argument("-a", "--all", action="store_true", help="pull every dataset of the workspace")
    p.add_argument("-r", "--recursive", action="store_true", help="pull upstream derivatives first")
    p.add_argument(
        "--set-watermark",
        type=timestamp_arg,
        metavar="T",
        help="root datasets: only commit this watermark (RFC 3339), fetch nothing",
    )
    p.add_argument(
        "--as", dest="as_alias", metavar="ALIAS", help="remote sources: local alias of a clone"
    )
    p.add_argument(
        "--dataset",
        dest="dataset_id",
        metavar="DID",
        help="peer addresses without /did:odf:...: the dataset to pull",
    )
    p.add_argument(
        "--require-signed",
        action="store_true",
        help="remote sources: refuse unless the head is signed by the dataset key",
    )
    # SUPPRESS: without it, this option's default would hide a global `odf --no-progress`.
    p.add_argument(
        "--no-progress", action="store_true", default=argparse.SUPPRESS, help="no progress display"
    )
    p.add_argument("--no-alias", action="store_true", help=NO_PULL_ALIAS_HELP)
