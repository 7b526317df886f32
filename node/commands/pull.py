"""``odf pull``: bring datasets up to date, whatever kind they are.

One command for every source of new data, dispatched per argument:

- a URL (``http://``, ``https://``, ``odf+http(s)://``): a verified fetch from that node or
  dataset base URL (see ``odf fetch``; ``odf+`` URLs use the Smart Transfer Protocol);
- a peer address ``/ip4/H/tcp/P/p2p/PEER/did:odf:...`` (or ``--dataset DID``): a verified
  pull from that libp2p peer over the object exchange protocol;
- a dataset ID ``did:odf:...`` that is not in this workspace: resolved through the peers
  of the running node (``odf node run``) and pulled, verified, from every peer that
  serves its newest signed head;
- a root dataset: poll its polling source (``--set-watermark`` only commits a watermark);
- a derivative dataset: run its transform on new input data (``-r`` pulls upstream
  derivatives first);
- ``--all``: every dataset of the workspace, roots before the derivatives that read them.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_OK, EXIT_USAGE, open_workspace

if TYPE_CHECKING:
    from p2p.head_record import HeadRecord
    from p2p.sync import PullResult
    from storage.workspace import Workspace

#: URL schemes `odf pull` treats as remote sources.
REMOTE_SCHEMES: tuple[str, ...] = (
    *("http://", "https://", "odf+http://", "odf+https://"),
    *("s3://", "s3+http://", "s3+https://"),
)


def is_remote(ref: str) -> bool:
    """Whether ``ref`` names a remote source rather than a local dataset."""
    return ref.lower().startswith(REMOTE_SCHEMES)


def is_peer_address(ref: str) -> bool:
    """Whether ``ref`` is a libp2p multiaddr (``/ip4/.../p2p/<peer>[/did:odf:...]``)."""
    return ref.startswith("/")


def _is_local(ws: Workspace, ref: str) -> bool:
    from storage.errors import DatasetNotFound

    try:
        ws.resolve(ref)
    except DatasetNotFound:
        return False
    return True


def _remote_url(ref: str) -> str:
    # ``odf+http(s)://`` stays: it selects the Smart Transfer Protocol (`node.commands.remote`).
    return ref


def cmd_pull(args: argparse.Namespace) -> int:
    """Dispatch each target to fetch, root pull or derivative pull."""
    from fbs.model import DatasetKind
    from node.commands import ingest, remote, transform

    targets: list[str] = list(args.dataset)
    if args.all:
        if targets:
            sys.stderr.write("odf: error: give datasets or --all, not both\n")
            return EXIT_USAGE
        all_ws = open_workspace(args)
        roots: list[str] = []
        derivs: list[str] = []
        for entry in all_ws.list():
            ds = all_ws.get(entry.id)
            state = ds.state()
            if state is None:
                continue
            if ds.layout.read_config().pull_aliases:
                # A replica: updated from where it was pulled, before what reads it.
                roots.append(entry.alias)
                continue
            if state.kind == DatasetKind.Root and state.polling_source is None:
                # A push-only root (data arrives by `odf ingest`) has nothing to poll: --all
                # passes it by, as kamu does, instead of failing the whole run on it.
                print(f"{entry.alias}: up-to-date (no polling source)")
                continue
            (roots if state.kind == DatasetKind.Root else derivs).append(entry.alias)
        targets = roots + derivs
        if not targets:
            print("Nothing to pull: the workspace has no datasets")
            return EXIT_OK
        args.recursive = True
    elif not targets:
        sys.stderr.write("odf: error: name at least one dataset or URL (or use --all)\n")
        return EXIT_USAGE

    code = EXIT_OK
    ws: Workspace | None = None
    for ref in targets:
        if is_peer_address(ref) or ref.startswith("did:"):
            if ws is None:
                ws = open_workspace(args)
            if is_peer_address(ref) or not _is_local(ws, ref):
                network_pull = functools.partial(_pull_network, ws=ws, ref=ref)
                rc_remote: int = remote._guard(network_pull)(args)
                if rc_remote != EXIT_OK:
                    code = rc_remote
                continue
        if is_remote(ref):
            ns = _ns(
                args,
                url=_remote_url(ref),
                as_alias=args.as_alias,
                sources=[],
                require_signed=args.require_signed,
                quiet=args.no_progress,
                no_alias=args.no_alias,
            )
            rc: int = remote._guard(remote.cmd_fetch)(ns)
        else:
            if ws is None:
                ws = open_workspace(args)
            replica = _pull_replica(args, ws, ref)
            if replica is not None:
                if replica != EXIT_OK:
                    code = replica
                continue
            state = ws.get(ref).state()
            if state is not None and state.kind == DatasetKind.Derivative:
                if args.set_watermark is not None:
                    sys.stderr.write(
                        f"odf: error: {ref}: --set-watermark applies to root datasets only\n"
                    )
                    return EXIT_USAGE
                ns = _ns(args, dataset=[ref], recursive=args.recursive, output_format="table")
                rc = transform.cmd_pull_derivative(ns)
            else:
                ns = _ns(
                    args,
                    dataset=[ref],
                    set_watermark=args.set_watermark,
                    no_progress=args.no_progress,
                )
                rc = ingest.cmd_pull(ns)
            _warn_if_disputed(ws, ref)
        if rc != EXIT_OK:
            code = rc
    return code


def _pull_replica(args: argparse.Namespace, ws: Workspace, ref: str) -> int | None:
    """Update ``ref`` from its pull alias, as kamu does; ``None`` if it has none.

    A replica's data comes from where it was pulled: polling its source or running its
    transform here would fork its history from the publisher's.
    """
    from node.commands import remote
    from node.remote.aliases import remembered_remote

    url = remembered_remote(ws, ref, "pull")
    if url is None:
        return None
    if args.set_watermark is not None:
        sys.stderr.write(
            f"odf: error: {ref} is pulled from {url}: a watermark set here would fork its "
            "history from the source's\n"
        )
        return EXIT_USAGE
    ns = _ns(
        args,
        url=url,
        as_alias=ws.resolve(ref).alias,
        sources=[],
        require_signed=args.require_signed,
        quiet=args.no_progress,
        no_alias=True,
    )
    rc: int = remote._guard(remote.cmd_fetch)(ns)
    return rc


def _warn_if_disputed(ws: Workspace, ref: str) -> None:
    """Warn (never fail) when validators found the dataset's data does not reproduce."""
    from node.validation.disputes import disputed_warning

    warning = disputed_warning(ws, ref)
    if warning:
        sys.stderr.write(f"odf: warning: {warning}\n")


def _pull_network(args: argparse.Namespace, ws: Workspace, ref: str) -> int:
    """Pull ``ref`` (peer address or unknown DID) over libp2p; prints a summary line.

    Raises:
        UsageError: an unparsable reference.
        PeerUnavailable / TransferError / P2PError: see `p2p.sync.pull_dataset`
            (mapped to exit codes by ``remote._guard``).
    """
    import asyncio

    from node.cli_util import EXIT_NOT_FOUND
    from node.remote.resolve import resolve_remote
    from node.runfile import NodeNotRunning
    from p2p.sync import pull_dataset

    def progress(message: str) -> None:
        if not args.no_progress:
            sys.stderr.write(message + "\n")

    async def run() -> PullResult:
        async with resolve_remote(ref, ws, dataset=args.dataset_id) as remote_:
            return await pull_dataset(
                ws,
                remote_.sources,
                dataset_id=remote_.dataset_id,
                alias=args.as_alias or remote_.alias or _signed_name(ws, remote_.head_record),
                head_record=remote_.head_record,
                require_signed=args.require_signed,
                on_progress=progress,
            )

    try:
        result = asyncio.run(run())
    except NodeNotRunning:
        sys.stderr.write(
            f"odf: error: {ref} is not in this workspace and no node is running to resolve "
            "it (start `odf node run`, or give a node URL or peer address)\n"
        )
        return EXIT_NOT_FOUND
    from node.commands.sync_report import report_sync

    report_sync(result)
    return EXIT_OK


def _signed_name(ws: Workspace, record: HeadRecord | None) -> str | None:
    """The publisher's signed name for a new clone, if the record has one and it is free."""
    if record is None:
        return None
    from node.remote.replica_names import replica_alias

    return replica_alias(ws, record.dataset_id, record.name)


def _ns(args: argparse.Namespace, **values: Any) -> argparse.Namespace:
    return argparse.Namespace(workspace=getattr(args, "workspace", None), **values)


def register(sub: Any) -> None:
    """Add ``pull`` to the top-level sub-parsers."""
    from node.commands import remote
    from node.commands.ingest import _timestamp

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
        type=_timestamp,
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
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.add_argument("--no-alias", action="store_true", help=remote.NO_PULL_ALIAS_HELP)
