"""Verified pull of a dataset from untrusted sources, independent of the transport.

`pull_dataset` replicates a dataset from one or more `ObjectSource` s (HTTP in
`p2p.http_source`, libp2p in `p2p.libp2p_source`) into a workspace:

1. **Target head.** From a signed `HeadRecord` when one is given (checked against the
   workspace's `HeadStore` first, so a stale or replayed record costs no download),
   otherwise from the first source that answers ``get_head``. A dataset for which a
   signed record is held never moves on an unsigned head.
2. **Blocks.** Walk back from the target head to the local head (or the Seed) with
   ``get_blocks``; every block is hashed and compared with the hash its successor (or
   the record) names *before* it is parsed. A source that serves a wrong block is
   penalised and the walk continues from the same point with the next source.
3. **Chain rules.** The new blocks are validated, oldest first, on top of the local
   chain state (`storage.chain.validate_append`): a chain that does not extend the
   local head is refused (`NotDescendant`).
4. **Objects.** Data slices and checkpoints named by the new blocks are downloaded
   in parallel, spread over every live source. Each one is streamed into a
   quarantine file (``.pending-*``) in the dataset's own store directory; it gets its
   final name only after its size and SHA3-256 matched the block. A source that
   serves wrong bytes is dropped, one that fails or stalls gets strikes
   (`MAX_SOURCE_STRIKES`), and the object is fetched from another.
5. **Commit.** The head record (if any) is accepted into the `HeadStore`, then the
   raw block bytes are appended and the head moves once, by compare-and-swap.

A new dataset is assembled in ``.odf/staging/pull-<did>/`` and renamed into
``datasets/`` when complete. Interrupted pulls resume: objects already stored (in
the dataset or its staging directory) are not downloaded again.

Nothing unverified is ever visible under an object name, and the head never points
at a block whose objects are missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, Protocol

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, MalformedBlock
from fbs.model import MetadataBlock
from fbs.multiformats import Multihash
from fbs.rules import referenced_objects
from p2p.errors import (
    InvalidHeadRecord,
    NotDescendant,
    PeerMisbehaved,
    PeerUnavailable,
    TransferError,
)
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from storage.chain import ChainState, validate_append
from storage.dataset import Dataset
from storage.errors import (
    DatasetExists,
    DatasetNotFound,
    InvalidAlias,
    InvalidAppend,
    ObjectNotFound,
    StorageError,
)
from storage.fsutil import OBJECT_MODE, ensure_dir, pending_name
from storage.layout import DatasetLayout
from storage.object_store import MAX_BLOCK_SIZE, DiskObjectStore
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
    "install_dataset",
    "open_staging",
    "pull_dataset",
]

ObjectKind = Literal["data", "checkpoint"]

#: Most new blocks one pull accepts (they are held in memory until validated).
MAX_PULL_BLOCKS: Final = 1_000_000
#: Most bytes of new blocks one pull accepts.
MAX_PULL_BLOCK_BYTES: Final = 1 << 30
#: Parallel object downloads per live source.
DEFAULT_OBJECTS_PER_SOURCE: Final = 4
#: Failures (errors, timeouts) after which a source is dropped; wrong bytes drop it at once.
MAX_SOURCE_STRIKES: Final = 3
#: Staging directory name prefix for datasets being cloned (``staging/pull-<did>``).
STAGING_PREFIX: Final = "pull-"
_HASH_CHUNK: Final = 1 << 20


class ObjectSource(Protocol):
    """Where a dataset can be pulled from (one peer, one URL).

    Implementations report transport problems as `TransferError` (or
    `PeerUnavailable` when the peer does not have the item); they need not verify
    anything: `pull_dataset` checks every byte.

    A source may also have an ``int`` attribute ``parallel_objects``: how many objects
    it should download at once (default: ``pull_dataset``'s ``objects_per_source``).
    Transports whose receive path is CPU-bound in one thread (libp2p) set it low, so
    that objects are split across peers instead of contending on one connection.
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


@dataclass(frozen=True, slots=True)
class _ObjectJob:
    kind: ObjectKind
    hash: Multihash
    size: int


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


def _new_objects(block: MetadataBlock) -> list[_ObjectJob]:
    return [_ObjectJob(o.kind, o.physical_hash, o.size) for o in referenced_objects(block.event)]


def _store(layout: DatasetLayout, kind: ObjectKind) -> DiskObjectStore:
    return layout.data if kind == "data" else layout.checkpoints


def _present(store: DiskObjectStore, job: _ObjectJob) -> bool:
    try:
        return store.size(job.hash) == job.size
    except (ObjectNotFound, StorageError):
        return False


def _hash_file(path: Path) -> bytes:
    hasher = hashlib.sha3_256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            hasher.update(chunk)
    return hasher.digest()


def _publish(quarantine: Path, final: Path) -> None:
    """Make a verified quarantine file durable and give it its name."""
    fd = os.open(quarantine, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(quarantine, OBJECT_MODE)
    os.replace(quarantine, final)
    dfd = os.open(final.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


async def _fetch_object(
    job: _ObjectJob, sources: _Sources, store: DiskObjectStore, result: PullResult
) -> None:
    tried: set[int] = set()
    final = store.path_of(job.hash)
    while True:
        i = sources.pick(tried)
        if i is None:
            raise PeerUnavailable(f"no source left that serves {job.kind} object {job.hash}")
        tried.add(i)
        src = sources.all[i]
        quarantine = store.root / pending_name()
        sources.in_flight[i] += 1
        try:
            digest = await src.get_object(job.kind, job.hash, quarantine, expected_size=job.size)
            size = os.stat(quarantine).st_size
            if size != job.size:
                raise PeerMisbehaved(
                    f"{job.kind} object {job.hash}: got {size} bytes, the block declares {job.size}"
                )
            if digest is None:
                digest = await asyncio.to_thread(_hash_file, quarantine)
            if digest != job.hash.digest:
                raise PeerMisbehaved(f"{job.kind} object {job.hash}: content hash mismatch")
            await asyncio.to_thread(_publish, quarantine, final)
        except PeerMisbehaved as e:
            sources.penalise(i, str(e), fatal=True)
            continue
        except (TransferError, PeerUnavailable, OSError) as e:
            sources.penalise(i, f"{type(e).__name__}: {e}", fatal=False)
            continue
        finally:
            sources.in_flight[i] -= 1
            with contextlib.suppress(FileNotFoundError):
                quarantine.unlink()
        result.objects_fetched += 1
        result.bytes_fetched += job.size
        return


async def _fetch_chain(
    sources: _Sources,
    target: Multihash,
    local: ChainState | None,
) -> list[tuple[Multihash, bytes, MetadataBlock]]:
    """New blocks from ``target`` back to the local head, verified by hash, newest first."""
    local_head = local.head if local is not None else None
    out: list[tuple[Multihash, bytes, MetadataBlock]] = []
    total_bytes = 0
    expected: Multihash | None = target
    prev_seq: int | None = None
    tried_here: set[int] = set()
    while expected is not None and expected != local_head:
        i = sources.pick(tried_here)
        if i is None:
            raise PeerUnavailable(f"no source left that serves block {expected}")
        try:
            raws = await sources.all[i].get_blocks(expected, local_head)
            if not raws:
                raise PeerMisbehaved(f"returned no blocks for {expected}")
        except PeerMisbehaved as e:
            sources.penalise(i, str(e), fatal=True)
            tried_here.add(i)
            continue
        except (TransferError, PeerUnavailable) as e:
            sources.penalise(i, f"{type(e).__name__}: {e}", fatal=False)
            tried_here.add(i)
            continue
        progressed = False
        try:
            for raw in raws:
                if expected is None or expected == local_head:
                    break  # the source sent more than asked; ignore the rest
                if not isinstance(raw, bytes) or len(raw) > MAX_BLOCK_SIZE:
                    raise PeerMisbehaved("a block larger than MAX_BLOCK_SIZE")
                h = block_hash(raw)  # hash before parse
                if h != expected:
                    raise PeerMisbehaved(f"served block {h} when {expected} was asked for")
                try:
                    block = decode_block(raw)
                except MalformedBlock as e:
                    raise PeerMisbehaved(f"block {h} does not decode: {e}") from None
                if prev_seq is not None and block.sequence_number != prev_seq - 1:
                    raise PeerMisbehaved(f"block {h} breaks the sequence numbering")
                if local is not None and block.sequence_number <= local.sequence_number:
                    raise NotDescendant(
                        f"the remote chain does not contain the local head {local_head} "
                        f"(reached sequence number {block.sequence_number})"
                    )
                out.append((h, raw, block))
                progressed = True
                total_bytes += len(raw)
                if len(out) > MAX_PULL_BLOCKS or total_bytes > MAX_PULL_BLOCK_BYTES:
                    raise PeerMisbehaved("the new chain exceeds the pull limits")
                prev_seq = block.sequence_number
                expected = block.prev_block_hash
                if expected is None and local is not None:
                    raise NotDescendant(f"the remote chain does not contain {local_head}")
        except PeerMisbehaved as e:
            sources.penalise(i, str(e), fatal=True)
            tried_here.add(i)
            continue
        if progressed:
            tried_here = set()  # a new position: every live source may serve it
    return out


def _validate(
    new_blocks: list[tuple[Multihash, bytes, MetadataBlock]], local: ChainState | None
) -> ChainState:
    state = local
    for h, _raw, block in new_blocks:
        try:
            state = validate_append(state, block, h)
        except InvalidAppend as e:
            raise PeerMisbehaved(f"the remote chain breaks a rule at {h}: {e}") from None
    assert state is not None
    return state


def _chain_contains(ds: Dataset | None, new_hashes: set[Multihash], h: Multihash) -> bool:
    if h in new_hashes:
        return True
    if ds is None:
        return False
    return any(bh == h for bh, _raw, _block in ds.iter_blocks())


def _resolve_local(
    ws: Workspace, dataset_id: DatasetId | None, alias: str | None
) -> tuple[Dataset | None, str | None]:
    if dataset_id is not None:
        try:
            entry = ws.resolve(dataset_id)
            return ws.get(entry.id), entry.alias
        except DatasetNotFound:
            return None, alias
    if alias is not None:
        try:
            entry = ws.resolve(alias)
            return ws.get(entry.id), entry.alias
        except DatasetNotFound:
            return None, alias
    return None, None


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
    srcs: list[ObjectSource] = list(source) if isinstance(source, Sequence) else [source]
    if not srcs:
        raise PeerUnavailable("no sources given")
    store = head_store if head_store is not None else HeadStore.for_workspace(ws.root)
    say = on_progress or (lambda _msg: None)
    if head_record is not None:
        head_record.verify()
        if dataset_id is not None and head_record.dataset_id != dataset_id:
            raise InvalidHeadRecord(
                f"head record is for {head_record.dataset_id}, not {dataset_id}"
            )
        dataset_id = head_record.dataset_id
    local_ds, local_alias = _resolve_local(ws, dataset_id, alias)
    local_state = local_ds.state() if local_ds is not None else None
    if local_state is not None:
        if dataset_id is not None and local_state.dataset_id != dataset_id:
            raise DatasetExists(f"local dataset {local_alias} is {local_state.dataset_id}")
        dataset_id = local_state.dataset_id

    penalties: dict[str, list[str]] = {}
    sources = _Sources(srcs, penalties, objects_per_source)
    resuming = False
    if head_record is not None and local_state is not None and local_state.head == head_record.head:
        pass  # already there: nothing to check or fetch
    elif head_record is not None:
        held = store.get(head_record.dataset_id)
        # The held record itself is offered again after an interrupted pull: that is a
        # resume (the high-water mark was already moved), not a replay.
        resuming = held == head_record and (
            local_state is None or local_state.head != head_record.head
        )
        if not resuming:
            store.check(head_record, expected_dataset_id=dataset_id)
    else:
        if require_signed or (dataset_id is not None and store.get(dataset_id) is not None):
            raise InvalidHeadRecord("refusing an unsigned head: a signed head record is required")
    target = head_record.head if head_record is not None else await _first_head(sources)

    old_head = local_state.head if local_state is not None else None
    if target == old_head:
        assert dataset_id is not None and local_alias is not None
        return PullResult(dataset_id, local_alias, old_head, target, penalties=penalties)

    say(f"fetching blocks {target.short()} back to {old_head.short() if old_head else 'Seed'}")
    new_blocks = await _fetch_chain(sources, target, local_state)
    new_blocks.reverse()
    final_state = _validate(new_blocks, local_state)
    did = final_state.dataset_id
    if dataset_id is not None and did != dataset_id:
        raise PeerMisbehaved(f"the remote chain belongs to {did}, not {dataset_id}")
    if head_record is not None and head_record.sequence_number != final_state.sequence_number:
        raise InvalidHeadRecord(
            f"head record says sequence {head_record.sequence_number}, "
            f"the chain has {final_state.sequence_number}"
        )
    if head_record is None and store.get(did) is not None:
        raise InvalidHeadRecord(f"{did} has signed heads; refusing an unsigned head")

    if local_ds is None:
        # A clone: maybe the dataset exists under another alias (found by DID now).
        with contextlib.suppress(DatasetNotFound):
            entry = ws.resolve(did)
            raise DatasetExists(
                f"dataset {did} exists locally as {entry.alias}; pull it by that alias"
            )
        local_alias = local_alias or did.as_multibase()
        with contextlib.suppress(DatasetNotFound):
            other = ws.resolve(local_alias)
            raise DatasetExists(f"alias {local_alias} is taken by {other.id}")
    assert local_alias is not None
    result = PullResult(did, local_alias, old_head, final_state.head, penalties=penalties)
    result.blocks_fetched = len(new_blocks)

    lock_path = ws.root / "staging" / f"{STAGING_PREFIX}{did.as_multibase()}.lock"
    async with _staging_lock(lock_path) if local_ds is None else contextlib.nullcontext():
        if local_ds is None and await asyncio.to_thread(_has_head, ws, did, final_state.head):
            # Another pull of the same dataset (e.g. the node resuming a half-pulled
            # clone) installed it while we waited for the lock: nothing left to do.
            result.dropped = list(sources.dropped)
            return result
        staging: Path | None = None
        if local_ds is None:
            staging = ws.root / "staging" / f"{STAGING_PREFIX}{did.as_multibase()}"
            target_ds = await asyncio.to_thread(open_staging, staging)
        else:
            target_ds = local_ds
        layout = target_ds.layout

        jobs: dict[tuple[str, Multihash], _ObjectJob] = {}
        for _h, _raw, block in new_blocks:
            for job in _new_objects(block):
                jobs.setdefault((job.kind, job.hash), job)
        todo = []
        for job in jobs.values():
            if _present(_store(layout, job.kind), job):
                result.objects_present += 1
            else:
                todo.append(job)
        say(f"fetching {len(todo)} object(s) ({sum(j.size for j in todo)} bytes)")
        if todo:
            for kind in ("data", "checkpoint"):
                ensure_dir(_store(layout, kind).root)
            limit = asyncio.Semaphore(sources.total_capacity())
            # Largest first: the long transfers start early and small ones fill the gaps.
            todo.sort(key=lambda j: j.size, reverse=True)

            async def run(job: _ObjectJob) -> None:
                async with limit:
                    await _fetch_object(job, sources, _store(layout, job.kind), result)

            try:
                async with asyncio.TaskGroup() as tg:
                    for job in todo:
                        tg.create_task(run(job))
            except BaseExceptionGroup as group:
                raise first_error(group) from None

        if head_record is not None and not resuming:
            new_hashes = {h for h, _raw, _b in new_blocks}
            store.accept(
                head_record,
                expected_dataset_id=did,
                is_descendant=lambda old, _new: _chain_contains(local_ds, new_hashes, old),
            )
        result.head_record = head_record
        raws = [raw for _h, raw, _b in new_blocks]
        if staging is None:
            await asyncio.to_thread(target_ds.append_blocks_bytes, raws)
        else:
            try:
                await asyncio.to_thread(
                    install_dataset, ws, target_ds, staging, raws, local_alias, did
                )
            except DatasetExists:
                # Another pull of the same dataset (e.g. the node's resume of a half-pulled
                # clone) finished first; fine if it reached the same verified head.
                if not await asyncio.to_thread(_has_head, ws, did, final_state.head):
                    raise
    result.dropped = list(sources.dropped)
    say(f"{local_alias}: head {final_state.head} ({result.blocks_fetched} new blocks)")
    return result


#: How long a pull waits for another pull of the same new dataset to finish.
STAGING_LOCK_TIMEOUT_S: Final = 600.0
_STAGING_LOCK_POLL_S: Final = 0.05


@contextlib.asynccontextmanager
async def _staging_lock(path: Path) -> AsyncIterator[None]:
    """Exclusive lock of one dataset's staging area across processes (daemon and CLI).

    Two pulls cloning the same dataset would otherwise reset each other's staging
    directory. `flock` is released by the kernel if the holder dies, so no lock goes stale.
    """
    ensure_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + STAGING_LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TransferError(
                        f"another pull of this dataset has held {path.name} for "
                        f"{STAGING_LOCK_TIMEOUT_S:.0f} s"
                    ) from None
                await asyncio.sleep(_STAGING_LOCK_POLL_S)
        yield
    finally:
        os.close(fd)


def _has_head(ws: Workspace, did: DatasetId, head: Multihash) -> bool:
    try:
        return ws.get(did).head() == head
    except StorageError:
        return False


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf exception of a task group's failure (callers expect one typed error)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def _first_head(sources: _Sources) -> Multihash:
    tried: set[int] = set()
    while (i := sources.pick(tried)) is not None:
        tried.add(i)
        try:
            head = await sources.all[i].get_head()
        except (TransferError, PeerUnavailable, PeerMisbehaved) as e:
            sources.penalise(i, f"{type(e).__name__}: {e}", fatal=False)
            continue
        if head is not None:
            return head
    raise PeerUnavailable("no source has a head for this dataset")


def open_staging(staging: Path) -> Dataset:
    """The staging dataset of a new dataset, reset if an earlier attempt left blocks in it.

    Objects already staged are kept (resume).
    """
    layout = DatasetLayout(staging)
    if layout.exists() and layout.refs.get_or_none("head") is not None:
        # A crash after appending but before the rename: objects stay, blocks go.
        shutil.rmtree(layout.refs_dir, ignore_errors=True)
        shutil.rmtree(layout.blocks_dir, ignore_errors=True)
    ensure_dir(staging.parent)
    return Dataset.create(layout)


def install_dataset(
    ws: Workspace,
    ds: Dataset,
    staging: Path,
    raws: list[bytes],
    alias: str,
    did: DatasetId,
) -> None:
    """Append verified blocks to a staging dataset and rename it into ``datasets/``.

    Raises:
        InvalidAlias: unusable ``alias``.
        DatasetExists: the dataset appeared meanwhile.
        InvalidAppend / ObjectNotFound: blocks that do not apply (see
            `Dataset.append_blocks_bytes`).
    """
    try:
        DatasetAlias.parse(alias)
    except FbsError as e:
        raise InvalidAlias(f"unusable alias {alias!r}: {e}") from None
    ds.append_blocks_bytes(raws)
    ds.layout.write_alias(alias)
    final = ws.datasets_dir / did.as_multibase()
    if final.exists():
        raise DatasetExists(f"dataset {did} appeared locally during the pull")
    ensure_dir(ws.datasets_dir)
    os.replace(staging, final)
    dfd = os.open(ws.datasets_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    ws.rebuild_index()
