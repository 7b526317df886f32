"""Verified pull of a dataset from untrusted sources, independent of the transport.

`pull_dataset` replicates a dataset from one or more `ObjectSource` s (HTTP in
`p2p.http.source`, libp2p in `p2p.libp2p.source`) into a workspace. What it receives
goes through `p2p.receive`, the receive path an HTTP push takes too; this module
decides where the bytes come from:

1. **Target head.** From a signed `HeadRecord` when one is given (checked against the
   workspace's `HeadStore` first, so a stale or replayed record costs no download),
   otherwise from the first source that answers ``get_head``. A dataset for which a
   signed record is held never moves on an unsigned head.
2. **Blocks.** Walk back from the target head to the local head (or the Seed) with
   ``get_blocks``; every block is hashed and compared with the hash its successor (or
   the record) names *before* it is parsed. A source that serves a wrong block is
   penalised and the walk continues from the same point with the next source.
3. **Chain rules.** The new blocks are validated, oldest first, on top of the local
   chain state: a chain that does not extend the local head is refused
   (`NotDescendant`).
4. **Objects.** Data slices and checkpoints named by the new blocks are downloaded
   in parallel, spread over every live source. Each one is streamed into a
   quarantine file (``.pending-*``) in the dataset's own store directory; it gets its
   final name only after its size and SHA3-256 matched the block, together with the
   other checked objects (`p2p.receive.CheckedObjects`: one flush per batch). A source that
   serves wrong bytes is dropped, one that fails or stalls gets strikes
   (`MAX_SOURCE_STRIKES`), and the object is fetched from another.
5. **Commit.** The head record (if any) is accepted into the `HeadStore`, then the
   raw block bytes are appended and the head moves once, by compare-and-swap. The
   blocks' files are written (in quarantine, `p2p.receive.PendingBlocks`) while the
   objects download, so the commit only names them; a clone names them meanwhile too
   (its staging dataset is seen by no one), so its commit finds them stored.

A new dataset is assembled in ``.odf/staging/pull-<did>/`` and installed into
``datasets/`` when complete (`storage.staging`). Interrupted pulls resume: objects
already stored (in the dataset or its staging directory) are not downloaded again.

Nothing unverified is ever visible under an object name, and the head never points
at a block whose objects are missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from fbs.did import DatasetId
from fbs.multiformats import Multihash
from p2p.errors import (
    InvalidHeadRecord,
    NotDescendant,
    P2PError,
    PeerMisbehaved,
    PeerUnavailable,
    TransferError,
    first_error,
)
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from p2p.receive import (
    ADOPT_BATCH_BYTES,
    CheckedObjects,
    ObjectJob,
    ObjectKind,
    PendingBlocks,
    ReceivedBlock,
    accept_head_record,
    check_object,
    check_record,
    commit_received,
    object_jobs,
    object_store,
    receive_block,
    stored_size,
    validate_chain,
)
from storage.chain import ChainState
from storage.dataset import Dataset
from storage.errors import DatasetExists, DatasetNotFound, StorageError
from storage.fsutil import pending_name
from storage.layout import DatasetLayout
from storage.object_store import DiskObjectStore
from storage.staging import open_staging, staging_lock
from storage.workspace import Workspace

__all__ = [
    "DEFAULT_OBJECTS_PER_SOURCE",
    "MAX_PULL_BLOCKS",
    "MAX_PULL_BLOCK_BYTES",
    "MAX_SOURCE_STRIKES",
    "ObjectKind",
    "ObjectSource",
    "PullResult",
    "first_error",
    "pull_dataset",
]

#: Most new blocks one pull accepts (they are held in memory until validated).
MAX_PULL_BLOCKS: Final = 1_000_000
#: Most bytes of new blocks one pull accepts.
MAX_PULL_BLOCK_BYTES: Final = 1 << 30
#: Parallel object downloads per live source (a source may ask for fewer). Each is one
#: HTTP request for the HTTP protocols (kamu's simple-protocol client runs 10): with 4,
#: a 5 ms round trip alone kept a pull of 500 small slices at >= 0.6 s.
DEFAULT_OBJECTS_PER_SOURCE: Final = 8
#: Failures (errors, timeouts) after which a source is dropped; wrong bytes drop it at once.
MAX_SOURCE_STRIKES: Final = 3
#: Staging directory name prefix for datasets being cloned (``staging/pull-<did>``).
STAGING_PREFIX: Final = "pull-"
#: How long a pull waits for another pull of the same new dataset to finish.
STAGING_LOCK_TIMEOUT_S: Final = 600.0


class ObjectSource(Protocol):
    """Where a dataset can be pulled from (one peer, one URL).

    Implementations report transport problems as `TransferError` (or
    `PeerUnavailable` when the peer does not have the item); they need not verify
    anything: `pull_dataset` checks every byte.

    A source may also have an ``int`` attribute ``parallel_objects``: how many objects
    it should download at once (default: ``pull_dataset``'s ``objects_per_source``).
    Transports whose receive path is CPU-bound in one thread (libp2p) set it low, so
    that objects are split across peers instead of contending on one connection.

    And a method ``expect_objects(jobs: Sequence[ObjectJob]) -> None`` (not awaited;
    it may start a request in a task): the objects ``get_object`` may be asked for
    next, all of them, so that a transport that looks objects up in batches (the smart
    protocol's download URLs) asks once, and early: it is called as soon as the new
    chain is validated, and again with the objects not stored yet.
    """

    @property
    def name(self) -> str:
        """A short label for logs and penalties (URL, peer id)."""
        ...

    async def get_head(self) -> Multihash | None:
        """The source's current head (``None``: it has no such dataset / no head)."""
        ...

    async def get_blocks(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        """Raw blocks **newest first**, starting with block ``head``.

        Walks back along ``prev_block_hash`` and stops before ``stop_at`` (exclusive)
        or after the Seed. May return any non-empty prefix of that walk (batch
        limits); the caller asks again from the oldest block's parent.
        """
        ...

    async def get_object(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, *, expected_size: int | None = None
    ) -> bytes | None:
        """Stream object ``h`` into the new file ``dest_path`` (the quarantine file).

        Args:
            kind: ``"data"`` or ``"checkpoint"``.
            h: the object's physical hash.
            dest_path: file to create and write (it does not exist yet).
            expected_size: the size the block declares; an implementation should
                stop (raise `PeerMisbehaved`) once more bytes arrive.

        Returns:
            The SHA3-256 digest of the bytes written if the implementation hashed
            them while streaming (saves a second pass), else ``None``. The remote peer
            is not trusted, but this code is: the digest must be of what was written.
        """
        ...


@dataclass(slots=True)
class PullResult:
    """Outcome of `pull_dataset`.

    Attributes:
        dataset_id: the dataset.
        alias: its local alias.
        old_head: local head before (``None``: cloned).
        new_head: local head after.
        blocks_fetched: new blocks appended.
        objects_fetched / bytes_fetched: objects downloaded and their total size.
        objects_present: objects already stored (resume, shared slices).
        head_record: the signed record accepted, if any.
        penalties: source name -> reasons it was penalised.
        dropped: sources dropped during the pull.
    """

    dataset_id: DatasetId
    alias: str
    old_head: Multihash | None
    new_head: Multihash
    blocks_fetched: int = 0
    objects_fetched: int = 0
    bytes_fetched: int = 0
    objects_present: int = 0
    head_record: HeadRecord | None = None
    penalties: dict[str, list[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    @property
    def created(self) -> bool:
        """Whether the dataset was new in this workspace."""
        return self.old_head is None

    @property
    def up_to_date(self) -> bool:
        """Whether nothing had to be pulled."""
        return self.old_head == self.new_head


class _Sources:
    """Live sources with strikes; spreads work and drops misbehaving peers."""

    def __init__(
        self,
        sources: Sequence[ObjectSource],
        result_penalties: dict[str, list[str]],
        per_source: int = DEFAULT_OBJECTS_PER_SOURCE,
    ):
        self.all = list(sources)
        self.capacity = [_parallel_objects(s, per_source) for s in self.all]
        self.strikes = [0] * len(self.all)
        self.alive = [True] * len(self.all)
        self.in_flight = [0] * len(self.all)
        self.penalties = result_penalties
        self.dropped: list[str] = []

    def penalise(self, i: int, reason: str, *, fatal: bool) -> None:
        self.penalties.setdefault(self.all[i].name, []).append(reason)
        self.strikes[i] += 1
        if (fatal or self.strikes[i] >= MAX_SOURCE_STRIKES) and self.alive[i]:
            self.alive[i] = False
            self.dropped.append(self.all[i].name)

    def pick(self, exclude: set[int]) -> int | None:
        candidates = [i for i in range(len(self.all)) if self.alive[i] and i not in exclude]
        if not candidates:
            return None
        # The least loaded relative to its capacity: objects spread over all sources.
        return min(
            candidates,
            key=lambda i: (self.in_flight[i] / self.capacity[i], self.strikes[i], i),
        )

    def total_capacity(self) -> int:
        return sum(self.capacity)


def _parallel_objects(source: ObjectSource, default: int) -> int:
    value = getattr(source, "parallel_objects", None)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return min(value, max(1, default))
    return max(1, default)


def _source_list(source: ObjectSource | Sequence[ObjectSource]) -> list[ObjectSource]:
    srcs: list[ObjectSource] = list(source) if isinstance(source, Sequence) else [source]
    if not srcs:
        raise PeerUnavailable("no sources given")
    return srcs


# -- the local side ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Local:
    """What the workspace holds of the dataset being pulled."""

    dataset_id: DatasetId | None
    alias: str | None
    ds: Dataset | None
    state: ChainState | None
    #: The held head record is offered again: an interrupted pull resumes.
    resuming: bool = False

    @property
    def head(self) -> Multihash | None:
        return self.state.head if self.state is not None else None


def _resolve_local(
    ws: Workspace, dataset_id: DatasetId | None, alias: str | None
) -> tuple[Dataset | None, str | None]:
    ref: DatasetId | str | None = dataset_id if dataset_id is not None else alias
    if ref is None:
        return None, None
    try:
        entry = ws.resolve(ref)
        return ws.get(entry.id), entry.alias
    except DatasetNotFound:
        return None, alias


def _local_side(
    ws: Workspace,
    dataset_id: DatasetId | None,
    alias: str | None,
    record: HeadRecord | None,
    store: HeadStore,
    require_signed: bool,
) -> _Local:
    """The local copy (if any), after checking ``record`` against it and the store.

    Raises:
        InvalidHeadRecord / StaleHead / Equivocation: see `pull_dataset`.
        DatasetExists: the local dataset is another one.
    """
    if record is not None:
        record.verify()
        if dataset_id is not None and record.dataset_id != dataset_id:
            raise InvalidHeadRecord(f"head record is for {record.dataset_id}, not {dataset_id}")
        dataset_id = record.dataset_id
    ds, local_alias = _resolve_local(ws, dataset_id, alias)
    state = ds.state() if ds is not None else None
    if state is not None:
        if dataset_id is not None and state.dataset_id != dataset_id:
            raise DatasetExists(f"local dataset {local_alias} is {state.dataset_id}")
        dataset_id = state.dataset_id
    local = _Local(dataset_id, local_alias, ds, state)
    if record is None:
        if require_signed or (dataset_id is not None and store.get(dataset_id) is not None):
            raise InvalidHeadRecord("refusing an unsigned head: a signed head record is required")
    elif local.head != record.head:
        # The held record itself is offered again after an interrupted pull: that is a
        # resume (the high-water mark was already moved), not a replay.
        local.resuming = store.get(record.dataset_id) == record
        if not local.resuming:
            store.check(record, expected_dataset_id=dataset_id)
    return local


def _check_new_chain(
    local: _Local, state: ChainState, record: HeadRecord | None, store: HeadStore
) -> None:
    """The validated remote chain is the dataset asked for, at the head signed for it.

    Raises:
        PeerMisbehaved: the chain is of another dataset.
        InvalidHeadRecord: the record names another block, or the chain is unsigned
            where signed heads are held.
    """
    did = state.dataset_id
    if local.dataset_id is not None and did != local.dataset_id:
        raise PeerMisbehaved(f"the remote chain belongs to {did}, not {local.dataset_id}")
    if record is not None:
        check_record(record, state)
    elif store.get(did) is not None:
        raise InvalidHeadRecord(f"{did} has signed heads; refusing an unsigned head")


def _clone_alias(ws: Workspace, did: DatasetId, alias: str | None) -> str:
    """The alias a clone gets, once neither the dataset nor the alias exists locally.

    Raises:
        DatasetExists: the dataset exists under another alias, or the alias is taken.
    """
    with contextlib.suppress(DatasetNotFound):
        entry = ws.resolve(did)
        raise DatasetExists(f"dataset {did} exists locally as {entry.alias}; pull it by that alias")
    alias = alias or did.as_multibase()
    with contextlib.suppress(DatasetNotFound):
        other = ws.resolve(alias)
        raise DatasetExists(f"alias {alias} is taken by {other.id}")
    return alias


# -- blocks -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _ChainWalk:
    """Progress of the walk from the target head back to the local head."""

    local: ChainState | None
    expected: Multihash | None
    blocks: list[ReceivedBlock] = field(default_factory=list)
    total_bytes: int = 0

    @property
    def done(self) -> bool:
        return self.expected is None or self.expected == self.local_head

    @property
    def local_head(self) -> Multihash | None:
        return self.local.head if self.local is not None else None

    def take(self, raws: list[bytes]) -> bool:
        """Check and keep the blocks of one answer; whether any was new.

        Raises:
            PeerMisbehaved: a wrong, undecodable or misnumbered block, or the limits.
            NotDescendant: the remote chain passes the local head's height without it.
        """
        progressed = False
        for raw in raws:
            if self.done:
                break  # the source sent more than asked; ignore the rest
            self._take_one(receive_block(raw, self.expected))
            progressed = True
        return progressed

    def _take_one(self, b: ReceivedBlock) -> None:
        seq = b.block.sequence_number
        if self.blocks and seq != self.blocks[-1].block.sequence_number - 1:
            raise PeerMisbehaved(f"block {b.hash} breaks the sequence numbering")
        if self.local is not None and seq <= self.local.sequence_number:
            raise NotDescendant(
                f"the remote chain does not contain the local head {self.local_head} "
                f"(reached sequence number {seq})"
            )
        self.blocks.append(b)
        self.total_bytes += len(b.raw)
        if len(self.blocks) > MAX_PULL_BLOCKS or self.total_bytes > MAX_PULL_BLOCK_BYTES:
            raise PeerMisbehaved("the new chain exceeds the pull limits")
        self.expected = b.block.prev_block_hash
        if self.expected is None and self.local is not None:
            raise NotDescendant(f"the remote chain does not contain {self.local_head}")


async def _fetch_chain(
    sources: _Sources, target: Multihash, local: ChainState | None
) -> list[ReceivedBlock]:
    """New blocks from ``target`` back to the local head, verified by hash, newest first."""
    walk = _ChainWalk(local, target)
    tried_here: set[int] = set()
    while not walk.done:
        i = sources.pick(tried_here)
        if i is None:
            raise PeerUnavailable(f"no source left that serves block {walk.expected}")
        assert walk.expected is not None
        try:
            raws = await sources.all[i].get_blocks(walk.expected, walk.local_head)
            if not raws:
                raise PeerMisbehaved(f"returned no blocks for {walk.expected}")
            progressed = walk.take(raws)
        except PeerMisbehaved as e:
            sources.penalise(i, str(e), fatal=True)
            tried_here.add(i)
            continue
        except (TransferError, PeerUnavailable) as e:
            sources.penalise(i, f"{type(e).__name__}: {e}", fatal=False)
            tried_here.add(i)
            continue
        if progressed:
            tried_here = set()  # a new position: every live source may serve it
    return walk.blocks


async def _first_head(sources: _Sources) -> Multihash:
    """The head of the first source that has one.

    Raises:
        PeerUnavailable: some source answered and none has the dataset (named).
        TransferError / PeerUnavailable / PeerMisbehaved: no source answered: the first
            source's error (e.g. `SourceUnreachable`), so the cause is not lost.
    """
    tried: set[int] = set()
    errors: list[P2PError] = []
    while (i := sources.pick(tried)) is not None:
        tried.add(i)
        try:
            head = await sources.all[i].get_head()
        except (TransferError, PeerUnavailable, PeerMisbehaved) as e:
            sources.penalise(i, f"{type(e).__name__}: {e}", fatal=False)
            errors.append(e)
            continue
        if head is not None:
            return head
    if errors and len(errors) == len(tried):
        raise errors[0]
    names = ", ".join(sources.all[i].name for i in sorted(tried))
    raise PeerUnavailable(f"{names or 'no source'}: no such dataset there (no head)")


# -- objects ----------------------------------------------------------------------------------


async def _fetch_object(
    job: ObjectJob,
    sources: _Sources,
    store: DiskObjectStore,
    result: PullResult,
    checked: CheckedObjects,
) -> None:
    """Download ``job`` into quarantine and check it; ``checked`` names it later."""
    tried: set[int] = set()
    while True:
        i = sources.pick(tried)
        if i is None:
            raise PeerUnavailable(f"no source left that serves {job.kind} object {job.hash}")
        tried.add(i)
        # No await between pick and in_flight: the next pick must see this one.
        # The store's directory exists (`_fetch_objects`): a fresh name, no lstat.
        quarantine = store.root / pending_name()
        sources.in_flight[i] += 1
        kept = False
        try:
            digest = await sources.all[i].get_object(
                job.kind, job.hash, quarantine, expected_size=job.size
            )
            # Off the event loop, even when only a stat is left: on a busy disk a stat
            # takes a millisecond, and the loop serves every other download.
            digest = await asyncio.to_thread(check_object, job, quarantine, digest)
            checked.add(store, job, quarantine, digest)
            kept = True
        except PeerMisbehaved as e:
            sources.penalise(i, str(e), fatal=True)
            continue
        except (TransferError, PeerUnavailable, OSError) as e:
            sources.penalise(i, f"{type(e).__name__}: {e}", fatal=False)
            continue
        finally:
            sources.in_flight[i] -= 1
            if not kept:
                with contextlib.suppress(FileNotFoundError):
                    quarantine.unlink()
        result.objects_fetched += 1
        result.bytes_fetched += job.size
        return


def _expect_objects(sources: _Sources, jobs: Sequence[ObjectJob]) -> None:
    """Tell every source that has ``expect_objects`` which objects may be asked for."""
    for src in sources.all:
        expect = getattr(src, "expect_objects", None)
        if callable(expect):
            expect(jobs)


def _not_stored(layout: DatasetLayout, jobs: Sequence[ObjectJob]) -> list[ObjectJob]:
    """The jobs whose object ``layout`` does not hold with the declared size."""
    return [job for job in jobs if stored_size(layout, job) != job.size]


async def _fetch_objects(
    layout: DatasetLayout,
    blocks: Sequence[ReceivedBlock],
    sources: _Sources,
    result: PullResult,
    say: Callable[[str], None],
) -> None:
    """Store every object the new blocks name that ``layout`` does not hold yet."""
    jobs = object_jobs(b.block for b in blocks)
    todo = await asyncio.to_thread(_not_stored, layout, jobs)  # a stat each: off the loop
    result.objects_present += len(jobs) - len(todo)
    say(f"fetching {len(todo)} object(s) ({sum(j.size for j in todo)} bytes)")
    if not todo:
        return
    limit = asyncio.Semaphore(sources.total_capacity())
    # Largest first: the long transfers start early and small ones fill the gaps.
    todo.sort(key=lambda j: j.size, reverse=True)
    _expect_objects(sources, todo)
    stores = {kind: object_store(layout, kind) for kind in ("data", "checkpoint")}
    for kind in {job.kind for job in todo}:
        await asyncio.to_thread(stores[kind].quarantine_path)  # creates its directory
    # Checked objects are named in batches (one flush each), not one by one.
    checked = CheckedObjects(ADOPT_BATCH_BYTES)
    naming = asyncio.Lock()

    async def run(job: ObjectJob) -> None:
        async with limit:
            await _fetch_object(job, sources, stores[job.kind], result, checked)
        if checked.full:
            async with naming:
                if checked.full:
                    await asyncio.to_thread(checked.adopt)

    try:
        async with asyncio.TaskGroup() as tg:
            for job in todo:
                tg.create_task(run(job))
        async with naming:
            await asyncio.to_thread(checked.adopt)
    except BaseExceptionGroup as group:
        # What was checked keeps its name: a pull run again does not download it again.
        with contextlib.suppress(Exception):
            await asyncio.to_thread(checked.adopt)
        raise first_error(group) from None
    finally:
        checked.discard()  # what a failed pull downloaded but did not name


# -- the pull ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Received:
    """A verified new chain and where it goes."""

    local: _Local
    blocks: list[ReceivedBlock]
    state: ChainState
    record: HeadRecord | None


async def _receive_update(
    ws: Workspace,
    new: _Received,
    sources: _Sources,
    store: HeadStore,
    result: PullResult,
    say: Callable[[str], None],
) -> None:
    """Objects into the local dataset, then the record, then the blocks."""
    ds = new.local.ds
    assert ds is not None
    async with _blocks_written_meanwhile(ds.layout, new.blocks) as pending:
        await _fetch_objects(ds.layout, new.blocks, sources, result, say)
        await pending.written
        _accept(new, store, result)
        await asyncio.to_thread(commit_received, ws, new.blocks, local=ds, pending=pending.blocks)


async def _receive_clone(
    ws: Workspace,
    new: _Received,
    sources: _Sources,
    store: HeadStore,
    result: PullResult,
    say: Callable[[str], None],
) -> None:
    """A new dataset: assembled in its staging directory and installed whole."""
    did = new.state.dataset_id
    name = f"{STAGING_PREFIX}{did.as_multibase()}"
    lock = await asyncio.to_thread(staging_lock, ws, name)
    if not await lock.acquire_async(STAGING_LOCK_TIMEOUT_S):
        raise TransferError(
            f"another pull of this dataset has held {lock.path.name} for "
            f"{STAGING_LOCK_TIMEOUT_S:.0f} s"
        )
    try:
        if await asyncio.to_thread(_has_head, ws, did, new.state.head):
            # Another pull of the same dataset (e.g. the node resuming a half-pulled
            # clone) installed it while we waited for the lock: nothing left to do.
            return
        staged = await asyncio.to_thread(open_staging, ws, name)
        async with _blocks_written_meanwhile(staged.layout, new.blocks, name_now=True) as pending:
            await _fetch_objects(staged.layout, new.blocks, sources, result, say)
            await pending.written
            _accept(new, store, result)
            try:
                await asyncio.to_thread(
                    commit_received,
                    ws,
                    new.blocks,
                    local=None,
                    staged=staged,
                    alias=result.alias,
                    dataset_id=did,
                    pending=pending.blocks,
                )
            except DatasetExists:
                # Another pull of the same dataset (e.g. the node's resume of a half-pulled
                # clone) finished first; fine if it reached the same verified head.
                if not await asyncio.to_thread(_has_head, ws, did, new.state.head):
                    raise
    finally:
        lock.release()


@dataclass(frozen=True, slots=True)
class _Ahead:
    """Blocks being written ahead (`PendingBlocks`) and the task writing them."""

    blocks: PendingBlocks
    written: asyncio.Future[None]


@contextlib.asynccontextmanager
async def _blocks_written_meanwhile(
    layout: DatasetLayout, blocks: Sequence[ReceivedBlock], *, name_now: bool = False
) -> AsyncIterator[_Ahead]:
    """Write the checked ``blocks``' files (in quarantine) while the body downloads the
    objects, so the commit only names them; whatever it did not name is removed.

    ``name_now``: name them as soon as they are written, for a staging dataset (a
    clone): nothing there is seen before it is installed whole, each block was hashed
    and the chain checked, and the naming (a flush and a rename per block) leaves the
    pull's critical path. A live dataset's blocks are named by the commit only: a
    refused pull leaves its block store as it was."""
    pending = PendingBlocks(layout.blocks, blocks)
    work = functools.partial(_write_and_name, pending) if name_now else pending.write
    ahead = _Ahead(pending, asyncio.ensure_future(asyncio.to_thread(work)))
    try:
        yield ahead
    finally:
        # The thread cannot be interrupted: let it finish before its files are removed.
        with contextlib.suppress(BaseException):
            await asyncio.shield(ahead.written)
        await asyncio.to_thread(pending.discard)


def _write_and_name(pending: PendingBlocks) -> None:
    pending.write()
    pending.adopt()


def _accept(new: _Received, store: HeadStore, result: PullResult) -> None:
    if new.record is not None and not new.local.resuming:
        accept_head_record(store, new.record, new.state, new.local.ds, new.blocks)
    result.head_record = new.record


async def pull_dataset(
    ws: Workspace,
    source: ObjectSource | Sequence[ObjectSource],
    *,
    dataset_id: DatasetId | None = None,
    alias: str | None = None,
    head_record: HeadRecord | None = None,
    head_store: HeadStore | None = None,
    require_signed: bool = False,
    objects_per_source: int = DEFAULT_OBJECTS_PER_SOURCE,
    on_progress: Callable[[str], None] | None = None,
) -> PullResult:
    """Pull (clone or update) a dataset into ``ws`` from untrusted sources.

    Args:
        ws: the local workspace.
        source: one source or several (objects are spread over all of them).
        dataset_id: the dataset, if known (a local copy is looked up by it).
        alias: local alias: of an existing copy, or to create the clone under
            (default: the DID's multibase form).
        head_record: a signed head to pull to (else the sources' ``get_head``).
        head_store: the high-water marks (default: the workspace's).
        require_signed: refuse to pull without a valid head record.
        objects_per_source: parallel object downloads per live source (at most; a
            source's own ``parallel_objects`` may ask for fewer).
        on_progress: called with short human-readable progress lines.

    Raises:
        InvalidHeadRecord: a record that does not verify or names another dataset,
            or an unsigned pull where a signed head is required.
        StaleHead / Equivocation / NotDescendant: see `HeadStore.accept`.
        PeerUnavailable: no source could provide the head, a block or an object.
        PeerMisbehaved: the only chain offered breaks the chain rules.
        DatasetExists: ``alias`` names another local dataset.
        RefCASFailed: the local head moved during the pull (nothing was lost: run again).
    """
    srcs = _source_list(source)
    store = head_store if head_store is not None else HeadStore.for_workspace(ws.root)
    say = on_progress or (lambda _msg: None)
    local = _local_side(ws, dataset_id, alias, head_record, store, require_signed)
    sources = _Sources(srcs, {}, objects_per_source)
    target = head_record.head if head_record is not None else await _first_head(sources)
    if target == local.head:
        assert local.dataset_id is not None and local.alias is not None
        return PullResult(
            local.dataset_id, local.alias, target, target, penalties=sources.penalties
        )

    say(f"fetching blocks {target.short()} back to {local.head.short() if local.head else 'Seed'}")
    blocks = await _fetch_chain(sources, target, local.state)
    blocks.reverse()
    state = validate_chain(blocks, local.state)
    _check_new_chain(local, state, head_record, store)
    # Before the staging and the stat of every object: a source that looks objects up
    # in batches asks now, and its round trip overlaps them.
    _expect_objects(sources, object_jobs(b.block for b in blocks))
    did = state.dataset_id
    new_alias = local.alias if local.ds is not None else _clone_alias(ws, did, local.alias)
    assert new_alias is not None
    result = PullResult(did, new_alias, local.head, state.head, penalties=sources.penalties)
    result.blocks_fetched = len(blocks)
    new = _Received(local, blocks, state, head_record)
    receive = _receive_update if local.ds is not None else _receive_clone
    await receive(ws, new, sources, store, result, say)
    result.dropped = list(sources.dropped)
    say(f"{new_alias}: head {state.head} ({result.blocks_fetched} new blocks)")
    return result


def _has_head(ws: Workspace, did: DatasetId, head: Multihash) -> bool:
    try:
        return ws.get(did).head() == head
    except StorageError:
        return False
