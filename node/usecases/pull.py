"""Pull: bring datasets up to date, whatever kind they are.

Each reference is classified (`classify`) and pulled by its kind (`pull_one`):

- a URL (``http(s)://``, ``odf+http(s)://``): a verified fetch from that node or dataset
  URL (`node.usecases.fetch`), with the attestations the node holds for its blocks;
- a peer address ``/ip4/H/tcp/P/p2p/PEER[/did:odf:...]``, or a dataset ID not in the
  workspace: a verified pull over libp2p (an unknown DID is resolved through the peers
  of the running node), with the attestations those peers hold for its blocks;
- a replica (a dataset whose key this workspace does not hold, or with a pull alias):
  updated from its pull alias and the running node's peers (`node.usecases.replica`),
  never by polling or transforming here (that would fork its history from the
  publisher's: `node.ownership`);
- a root dataset: its polling source is polled (``set_watermark``: only that is committed);
- a derivative dataset: its transform runs on new input (``recursive``: upstream first).

``all_targets`` lists every dataset of the workspace, roots and replicas before the
derivatives that read them; a push-only root has nothing to poll and is passed by.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from node.errors import UsageError
from node.usecases.fetch import FetchOptions, OnProgress, fetch_with_attestations

if TYPE_CHECKING:
    from fbs.timestamp import Timestamp
    from node.ingest.pipeline import IngestResult, Progress
    from node.transform import PullResult as TransformResult
    from p2p.head_record import HeadRecord
    from p2p.sync import PullResult
    from storage.catalog import DatasetEntry
    from storage.workspace import Workspace

__all__ = [
    "REMOTE_SCHEMES",
    "AllTargets",
    "PullKind",
    "PullOptions",
    "PullOutcome",
    "PullTarget",
    "all_targets",
    "check_options",
    "classify",
    "is_peer_address",
    "is_remote",
    "per_target_errors",
    "pull_one",
]

#: URL schemes a pull treats as remote sources.
REMOTE_SCHEMES: tuple[str, ...] = (
    *("http://", "https://", "odf+http://", "odf+https://"),
    *("s3://", "s3+http://", "s3+https://"),
)


def per_target_errors() -> tuple[type[Exception], ...]:
    """Failures of one target's transfer or source: the caller reports them and goes on
    with the other targets; any other error ends the pull."""
    from node.ingest.errors import IngestError
    from p2p.errors import P2PError

    return (P2PError, IngestError)


class PullKind(StrEnum):
    """How a reference is brought up to date."""

    NETWORK = "network"
    URL = "url"
    REPLICA = "replica"
    ROOT = "root"
    DERIVATIVE = "derivative"


@dataclass(frozen=True, slots=True)
class PullOptions:
    """How to pull.

    Attributes:
        recursive: derivatives: pull upstream derivatives first.
        set_watermark: roots: only commit this watermark.
        as_alias: remote sources: the local alias of a new clone.
        dataset_id: peer addresses without ``/did:odf:...``: the dataset to pull.
        require_signed: remote sources: refuse a head not signed by the dataset key.
        remember_alias: URLs: remember the URL as the dataset's pull alias.
        quiet: no progress lines from transfers.
        everything: the pull of the whole workspace (``--all``): a replica with nowhere
            to look for newer heads is passed by (`PullOutcome.passed_by`), not failed.
    """

    recursive: bool = False
    set_watermark: Timestamp | None = None
    as_alias: str | None = None
    dataset_id: str | None = None
    require_signed: bool = False
    remember_alias: bool = True
    quiet: bool = False
    everything: bool = False


@dataclass(frozen=True, slots=True)
class PullTarget:
    """A reference and how it is pulled (``url``: a replica's pull alias)."""

    ref: str
    kind: PullKind
    url: str | None = None


@dataclass(frozen=True, slots=True)
class PullOutcome:
    """What pulling one target did.

    Attributes:
        target: what was pulled.
        synced: a transfer's result (network, URL, replica).
        ingested: a root's result.
        transformed: a derivative's result (upstream derivatives in it).
        disputed: a local dataset whose data validators found does not reproduce.
        attestations: replicas: attestations of their blocks brought from the source.
        passed_by: why nothing was tried (``--all``: a replica with no source to ask).
    """

    target: PullTarget
    synced: PullResult | None = None
    ingested: IngestResult | None = None
    transformed: TransformResult | None = None
    disputed: str | None = None
    attestations: int = 0
    passed_by: str | None = None


@dataclass(frozen=True, slots=True)
class AllTargets:
    """Every dataset a pull of the whole workspace updates, in order, and the push-only
    roots it passes by (nothing to poll)."""

    targets: tuple[str, ...]
    push_only: tuple[str, ...]


def is_remote(ref: str) -> bool:
    """Whether ``ref`` names a remote source rather than a local dataset."""
    return ref.lower().startswith(REMOTE_SCHEMES)


def is_peer_address(ref: str) -> bool:
    """Whether ``ref`` is a libp2p multiaddr (``/ip4/.../p2p/<peer>[/did:odf:...]``)."""
    return ref.startswith("/")


def check_options(targets: tuple[str, ...], everything: bool) -> None:
    """Refuse a pull of nothing, or of named datasets and the whole workspace at once.

    Raises:
        UsageError: as said.
    """
    if everything and targets:
        raise UsageError("give datasets or --all, not both")
    if not everything and not targets:
        raise UsageError("name at least one dataset or URL (or use --all)")


def all_targets(ws: Workspace) -> AllTargets:
    """Every dataset of ``ws``: replicas and roots (to poll) before derivatives."""
    from fbs.model import DatasetKind
    from node.ownership import is_owned

    roots: list[str] = []
    derivs: list[str] = []
    push_only: list[str] = []
    for entry in ws.list():
        ds = ws.get(entry.id)
        state = ds.state()
        if state is None:
            continue
        if ds.layout.read_config().pull_aliases or not is_owned(ws, entry.id):
            roots.append(entry.alias)  # a replica: updated from its publisher, before its readers
        elif state.kind == DatasetKind.Root and state.polling_source is None:
            push_only.append(entry.alias)  # data arrives by ingest: nothing to poll
        else:
            (roots if state.kind == DatasetKind.Root else derivs).append(entry.alias)
    return AllTargets(tuple(roots + derivs), tuple(push_only))


def classify(ws: Workspace, ref: str, options: PullOptions) -> PullTarget:
    """How ``ref`` is pulled.

    Raises:
        UsageError: ``set_watermark`` on a derivative or a dataset with a pull alias.
        ReplicaReadOnly: ``set_watermark`` on a replica (`node.ownership`).
        DatasetNotFound: a local reference that names no dataset (with the DIDs the
            running node heard published under that name, if any).
    """
    from fbs.model import DatasetKind
    from node.ownership import is_owned, require_owned
    from node.remote.aliases import remembered_remote

    if is_peer_address(ref) or (ref.startswith("did:") and not _is_local(ws, ref)):
        return PullTarget(ref, PullKind.NETWORK)
    if is_remote(ref):
        return PullTarget(ref, PullKind.URL, ref)
    entry = _resolve_or_hint(ws, ref)
    url = remembered_remote(ws, ref, "pull")
    if not is_owned(ws, entry.id) or url is not None:
        if options.set_watermark is not None:
            require_owned(ws, entry.id, action="set its watermark (it would fork its history)")
            raise UsageError(
                f"{ref} is pulled from {url}: a watermark set here would fork its "
                "history from the source's"
            )
        return PullTarget(ref, PullKind.REPLICA, url)
    state = ws.get(ref).state()
    if state is not None and state.kind == DatasetKind.Derivative:
        if options.set_watermark is not None:
            raise UsageError(f"{ref}: --set-watermark applies to root datasets only")
        return PullTarget(ref, PullKind.DERIVATIVE)
    return PullTarget(ref, PullKind.ROOT)


def _resolve_or_hint(ws: Workspace, ref: str) -> DatasetEntry:
    """The local dataset ``ref``; if there is none, the error names the DIDs the running
    node heard published under that name.

    Raises:
        DatasetNotFound: as said.
    """
    from storage.errors import DatasetNotFound

    try:
        return ws.resolve(ref)
    except DatasetNotFound as e:
        hint = _heard_hint(ws, ref)
        if hint is None:
            raise
        raise DatasetNotFound(f"{e}; {hint}") from None


def _heard_hint(ws: Workspace, name: str) -> str | None:
    """Where a dataset its publisher calls ``name`` can be pulled from, as the running
    node heard it; ``None`` when it heard of none (or no node runs)."""
    from node.remote.network import heard_under_name
    from p2p.errors import P2PError

    try:
        records = asyncio.run(heard_under_name(ws, name))
    except P2PError:
        return None
    if not records:
        return None
    dids = [r.dataset_id.to_did_odf() for r in records]
    if len(dids) == 1:
        return f"the network has {name!r} as {dids[0]}: `odf pull {dids[0]}`"
    return f"the network has several datasets published as {name!r}: " + ", ".join(
        f"`odf pull {d}`" for d in dids
    )


def _is_local(ws: Workspace, ref: str) -> bool:
    from storage.errors import DatasetNotFound

    try:
        ws.resolve(ref)
    except DatasetNotFound:
        return False
    return True


def pull_one(
    ws: Workspace,
    target: PullTarget,
    options: PullOptions,
    on_progress: OnProgress = None,
    ingest_progress: Progress | None = None,
) -> PullOutcome:
    """Pull one classified target.

    Raises:
        P2PError / IngestError (`per_target_errors`), TransformError, StorageError.
    """
    kind = target.kind
    if kind is PullKind.NETWORK:
        synced, brought = _pull_network(ws, target.ref, options, on_progress)
        return PullOutcome(target, synced=synced, attestations=brought)
    if kind is PullKind.REPLICA:
        from node.usecases.replica import update_replica

        if options.everything and target.url is None:
            reason = _nowhere_to_look(ws, target.ref)
            if reason is not None:
                return PullOutcome(target, passed_by=reason)

        update = update_replica(
            ws,
            target.ref,
            target.url,
            require_signed=options.require_signed,
            on_progress=on_progress,
        )
        return PullOutcome(target, synced=update.synced, attestations=update.attestations)
    if kind is PullKind.URL:
        synced, brought = fetch_with_attestations(ws, _fetch_options(target, options), on_progress)
        return PullOutcome(target, synced=synced, attestations=brought)
    from node.validation.disputes import disputed_warning

    if kind is PullKind.DERIVATIVE:
        from node.transform import pull_derivative

        result = pull_derivative(ws, target.ref, recursive=options.recursive)
        return PullOutcome(target, transformed=result, disputed=disputed_warning(ws, target.ref))
    from node.usecases.ingest import pull_root

    ingested = pull_root(ws, target.ref, options.set_watermark, ingest_progress)
    return PullOutcome(target, ingested=ingested, disputed=disputed_warning(ws, target.ref))


def _nowhere_to_look(ws: Workspace, ref: str) -> str | None:
    """Why replica ``ref`` (no pull alias) cannot be updated now, or ``None``: a node
    runs on the workspace, whose peers and heard heads are where to look."""
    from node.runfile import read_run_info

    if read_run_info(ws) is not None:
        return None
    did = ws.resolve(ref).id.to_did_odf()
    return (
        f"{ref}: not updated: a replica of {did} with no pull alias, and no node is "
        "running to find its publisher's newer heads; start `odf node run` here, or pull "
        f"it once from a node URL (`odf pull http://NODE:8080/{ref}`) to give it one"
    )


def _fetch_options(target: PullTarget, options: PullOptions) -> FetchOptions:
    assert target.url is not None
    return FetchOptions(
        target.url, options.as_alias, (), options.require_signed, options.remember_alias
    )


def _pull_network(
    ws: Workspace, ref: str, options: PullOptions, on_progress: OnProgress
) -> tuple[PullResult, int]:
    """Pull ``ref`` (a peer address or a DID not in ``ws``) over libp2p, verified, with
    the attestations its peers hold for it (the number accepted).

    Raises:
        UsageError: an unparsable reference.
        PeerUnavailable: nobody reachable serves it, or no node runs to resolve a DID.
        StaleHead: the peers hold nothing newer than the workspace.
        P2PError: see `p2p.sync.pull_dataset`.
    """
    from node.runfile import NodeNotRunning
    from p2p.errors import PeerUnavailable, StaleHead

    try:
        return asyncio.run(_network(ws, ref, options, on_progress))
    except StaleHead as e:
        raise StaleHead(f"nothing newer to fetch: {e}") from e
    except NodeNotRunning:
        raise PeerUnavailable(
            f"{ref} is not in this workspace and no node is running to resolve "
            "it (start `odf node run`, or give a node URL or peer address)"
        ) from None


async def _network(
    ws: Workspace, ref: str, options: PullOptions, on_progress: OnProgress
) -> tuple[PullResult, int]:
    from node.remote.attestations import import_from_peers
    from node.remote.resolve import resolve_remote
    from p2p.sync import pull_dataset

    async with resolve_remote(ref, ws, dataset=options.dataset_id) as remote:
        alias = options.as_alias or remote.alias or _signed_name(ws, remote.head_record)
        result = await pull_dataset(
            ws,
            remote.sources,
            dataset_id=remote.dataset_id,
            alias=alias,
            head_record=remote.head_record,
            require_signed=options.require_signed,
            on_progress=on_progress,
        )
        return result, await import_from_peers(ws, remote.sources)


def _signed_name(ws: Workspace, record: HeadRecord | None) -> str | None:
    """The publisher's signed name for a new clone, if the record has one and it is free."""
    if record is None:
        return None
    from node.remote.replica_names import replica_alias

    return replica_alias(ws, record.dataset_id, record.name)
