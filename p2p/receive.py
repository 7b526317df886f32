"""The one receive path: how anything that arrives from outside enters a workspace.

A libp2p pull, an HTTP pull and an HTTP push all receive the same things, blocks, the
objects those blocks name and maybe a signed head record, and all of them go through
these steps, in this order:

1. **Blocks** (`receive_block`): each raw block is size-capped and hashed *before* it
   is parsed; a block that is not what its successor (or the record) names, or does
   not decode, is refused.
2. **Chain** (`validate_chain`): the new blocks, oldest first, must extend the local
   chain state by the chain rules (`storage.chain.validate_append`); a signed record
   must name the chain's last block (`check_record`).
3. **Objects** (`accept_object`): every object is streamed by the transport into a
   quarantine file of its store; it gets its name (`ObjectStore.adopt`) only after its
   size and SHA3-256 matched what the block declares (`check_object`). A pull names
   its many objects together (`CheckedObjects`: one flush per store, not two each).
4. **Commit** (`commit_received`): the head record (if any) is accepted into the
   `HeadStore`, then the raw blocks are appended and the head moves once, by
   compare-and-swap; a dataset the workspace did not have is assembled in
   ``staging/`` and installed whole (`storage.staging`). A pull may write the checked
   blocks' files ahead, in quarantine, while its objects download (`PendingBlocks`):
   the commit then only names them (one flush) before the head moves.

Nothing unverified is ever visible under an object name, and the head never points
at a block whose objects are missing. The callers (`p2p.sync.pull_dataset`,
`p2p.http.server`) decide only where the bytes come from and how a refusal is reported.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from fbs.codec import block_hash, decode_block
from fbs.did import DatasetId
from fbs.errors import MalformedBlock
from fbs.model import MetadataBlock
from fbs.multiformats import Multihash
from fbs.rules import referenced_objects
from p2p.errors import InvalidHeadRecord, PeerMisbehaved
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from storage.chain import ChainState, validate_append
from storage.dataset import Dataset
from storage.errors import InvalidAppend, ObjectNotFound, StorageError
from storage.fsutil import OBJECT_MODE, pending_name, write_all
from storage.layout import DatasetLayout
from storage.object_store import MAX_BLOCK_SIZE, DiskObjectStore
from storage.staging import install_staged
from storage.workspace import Workspace

__all__ = [
    "ADOPT_BATCH_BYTES",
    "ChainRuleBroken",
    "CheckedObjects",
    "ObjectJob",
    "ObjectKind",
    "PendingBlocks",
    "ReceivedBlock",
    "accept_head_record",
    "accept_object",
    "check_object",
    "check_record",
    "commit_received",
    "hash_file",
    "object_jobs",
    "object_store",
    "receive_block",
    "stored_size",
    "validate_chain",
]

ObjectKind = Literal["data", "checkpoint"]

_HASH_CHUNK: Final = 1 << 20
#: Bytes of checked objects a pull holds in quarantine before naming them together
#: (`CheckedObjects`): bounds what an interrupted pull downloads again.
ADOPT_BATCH_BYTES: Final = 64 << 20


@dataclass(frozen=True, slots=True)
class ReceivedBlock:
    """A block from outside whose bytes hash to `hash` and decode to `block`."""

    hash: Multihash
    raw: bytes
    block: MetadataBlock


@dataclass(frozen=True, slots=True)
class ObjectJob:
    """An object a block names: its kind, physical hash and declared size."""

    kind: ObjectKind
    hash: Multihash
    size: int


class ChainRuleBroken(PeerMisbehaved):
    """Received blocks that do not extend the local chain by the chain rules.

    Attributes:
        block: the first block that breaks a rule.
        error: the rule's refusal (`InvalidAppend`; its ``rule`` names the rule).
    """

    def __init__(self, block: Multihash, error: InvalidAppend) -> None:
        super().__init__(f"the remote chain breaks a rule at {block}: {error}")
        self.block = block
        self.error = error

    @property
    def head_moved(self) -> bool:
        """Whether the refusal is of sequence or parent (rules 2, 3): a stale sender."""
        return getattr(self.error, "rule", None) in (2, 3)


# -- 1. blocks --------------------------------------------------------------------------------


def receive_block(raw: bytes, expected: Multihash | None = None) -> ReceivedBlock:
    """Hash a block from outside (before parsing it), then decode it.

    Args:
        raw: the bytes as received.
        expected: the hash the block must have (its successor's parent, the head),
            or ``None`` when anything is welcome (a push names its blocks by content).

    Raises:
        PeerMisbehaved: larger than `MAX_BLOCK_SIZE`, another hash than ``expected``,
            or bytes that do not decode.
    """
    if not isinstance(raw, bytes) or len(raw) > MAX_BLOCK_SIZE:
        raise PeerMisbehaved("a block larger than MAX_BLOCK_SIZE")
    h = block_hash(raw)
    if expected is not None and h != expected:
        raise PeerMisbehaved(f"served block {h} when {expected} was asked for")
    try:
        block = decode_block(raw)
    except MalformedBlock as e:
        raise PeerMisbehaved(f"block {h} does not decode: {e}") from None
    return ReceivedBlock(h, raw, block)


# -- 2. chain ---------------------------------------------------------------------------------


def validate_chain(blocks: Sequence[ReceivedBlock], local: ChainState | None) -> ChainState:
    """The chain state after ``blocks`` (oldest first) on top of ``local``.

    Raises:
        ChainRuleBroken: a block that breaks a chain rule.
        ValueError: no blocks.
    """
    state = local
    for b in blocks:
        try:
            state = validate_append(state, b.block, b.hash)
        except InvalidAppend as e:
            raise ChainRuleBroken(b.hash, e) from None
    if state is None:
        raise ValueError("no blocks to validate")
    return state


def check_record(record: HeadRecord, state: ChainState) -> None:
    """Check that a signed head record names the chain's last block.

    Raises:
        InvalidHeadRecord: another dataset, block or sequence number.
    """
    if record.dataset_id != state.dataset_id:
        raise InvalidHeadRecord("head record is not signed by this dataset's key")
    if record.head != state.head or record.sequence_number != state.sequence_number:
        raise InvalidHeadRecord(
            f"head record names {record.head} at sequence {record.sequence_number}, "
            f"the chain ends at {state.head} (sequence {state.sequence_number})"
        )


# -- 3. objects -------------------------------------------------------------------------------


def object_jobs(blocks: Iterable[MetadataBlock]) -> list[ObjectJob]:
    """The objects ``blocks`` name, each once, in the order they are first named."""
    jobs: dict[tuple[str, Multihash], ObjectJob] = {}
    for block in blocks:
        for o in referenced_objects(block.event):
            jobs.setdefault((o.kind, o.physical_hash), ObjectJob(o.kind, o.physical_hash, o.size))
    return list(jobs.values())


def object_store(layout: DatasetLayout, kind: ObjectKind) -> DiskObjectStore:
    """The store of ``kind`` objects in a dataset."""
    return layout.data if kind == "data" else layout.checkpoints


def stored_size(layout: DatasetLayout, job: ObjectJob) -> int | None:
    """Size of the stored copy of ``job``'s object, ``None`` if there is none."""
    try:
        return object_store(layout, job.kind).size(job.hash)
    except (ObjectNotFound, StorageError):
        return None


def hash_file(path: Path) -> bytes:
    """SHA3-256 of a file (for a transport that did not hash while it received)."""
    hasher = hashlib.sha3_256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            hasher.update(chunk)
    return hasher.digest()


def check_object(job: ObjectJob, quarantine: Path, digest: bytes | None) -> bytes:
    """Check a received quarantine file against ``job``; its SHA3-256.

    Args:
        job: what the block declares.
        quarantine: the received bytes.
        digest: their SHA3-256 if the receiver hashed them while writing, else ``None``
            (they are hashed here).

    Raises:
        PeerMisbehaved: another size or content than declared (the file stays; the
            caller removes it).
        OSError: the file cannot be read.
    """
    size = os.stat(quarantine).st_size
    if size != job.size:
        raise PeerMisbehaved(
            f"{job.kind} object {job.hash}: got {size} bytes, the block declares {job.size}"
        )
    if digest is None:
        digest = hash_file(quarantine)
    if digest != job.hash.digest:
        raise PeerMisbehaved(f"{job.kind} object {job.hash}: content hash mismatch")
    return digest


def accept_object(
    store: DiskObjectStore, job: ObjectJob, quarantine: Path, digest: bytes | None
) -> None:
    """Check a received quarantine file against ``job``, then give it its name.

    Args:
        store: the store the file was written in (``quarantine`` is its
            `DiskObjectStore.quarantine_path`).
        job, quarantine, digest: see `check_object`.

    Raises:
        PeerMisbehaved: another size or content than declared (the file stays; the
            caller removes it).
        OSError: the file cannot be read or renamed.
    """
    digest = check_object(job, quarantine, digest)
    store.adopt(job.hash, quarantine, digest=digest)


class CheckedObjects:
    """Objects checked in quarantine (`check_object`), named together by `adopt`.

    Many objects get their names with one data flush and one directory fsync per
    store (`DiskObjectStore.adopt_many`) instead of two fsyncs each. Nothing here is
    visible before `adopt` returns, and then all of it is durable: the head may move.
    """

    def __init__(self, max_bytes: int = ADOPT_BATCH_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: dict[Path, tuple[DiskObjectStore, list[tuple[Multihash, Path, bytes]]]] = {}
        self._bytes = 0
        # `add` runs on the event loop while `adopt` may run on a worker thread.
        self._lock = threading.Lock()

    @property
    def full(self) -> bool:
        """Whether the files held reach ``max_bytes`` (time to `adopt` them)."""
        return self._bytes >= self.max_bytes

    def add(self, store: DiskObjectStore, job: ObjectJob, quarantine: Path, digest: bytes) -> None:
        """Hold a quarantine file of ``store`` that `check_object` accepted."""
        with self._lock:
            _store, items = self._items.setdefault(store.root, (store, []))
            items.append((job.hash, quarantine, digest))
            self._bytes += job.size

    def _take(self) -> list[tuple[DiskObjectStore, list[tuple[Multihash, Path, bytes]]]]:
        with self._lock:
            batches, self._items, self._bytes = list(self._items.values()), {}, 0
        return batches

    def adopt(self) -> None:
        """Give every file held its name, durably; on a failure the files are removed.

        Raises:
            OSError / StorageError: see `DiskObjectStore.adopt_many`.
        """
        batches = self._take()
        try:
            for store, items in batches:
                store.adopt_many(items)
        except BaseException:
            _discard(q for _store, items in batches for _h, q, _d in items)
            raise

    def discard(self) -> None:
        """Remove every file held (a failed pull)."""
        batches = self._take()
        _discard(q for _store, items in batches for _h, q, _d in items)


def _discard(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# -- 4. commit --------------------------------------------------------------------------------


class PendingBlocks:
    """Checked blocks written to quarantine files of a block store before the commit.

    Creating a file is the costliest step of committing a long chain (thousands of
    them), and it needs nothing the object downloads bring: a pull writes the blocks'
    files (`write`, on a worker thread) while its objects download, and
    `commit_received` names them all with one flush (`DiskObjectStore.adopt_many`)
    before the head moves; the append then finds every block stored. Until then they
    are ``.pending-*`` files no reader sees. Only blocks that `receive_block` hashed
    and decoded and `validate_chain` accepted belong here.
    """

    def __init__(self, store: DiskObjectStore, blocks: Sequence[ReceivedBlock]) -> None:
        self.store = store
        self._blocks = list(blocks)
        self._written: list[tuple[Multihash, Path, bytes]] = []
        self._lock = threading.Lock()

    def write(self) -> None:
        """Write every block's bytes to a new quarantine file (no flush: the commit's).

        Raises:
            OSError: a file cannot be written (what was written stays listed for
                `discard`).
        """
        self.store.quarantine_path()  # creates the store's directory
        # Never through anything planted at the path: O_EXCL refuses any existing entry,
        # a symlink included (EEXIST), and O_NOFOLLOW would refuse a symlink without it.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        for b in self._blocks:
            path = self.store.root / pending_name()
            # Created read-only (the descriptor still writes): naming it needs no chmod.
            fd = os.open(path, flags, OBJECT_MODE)
            with self._lock:
                self._written.append((b.hash, path, b.hash.digest))
            try:
                write_all(fd, b.raw)
            finally:
                os.close(fd)

    def adopt(self) -> None:
        """Name every block written, durably; on a failure the files are removed.

        Raises:
            OSError / StorageError: see `DiskObjectStore.adopt_many`.
        """
        with self._lock:
            items, self._written = self._written, []
        try:
            self.store.adopt_many(items)
        except BaseException:
            _discard(path for _h, path, _d in items)
            raise

    def discard(self) -> None:
        """Remove every file written and not named (a failed pull)."""
        with self._lock:
            items, self._written = self._written, []
        _discard(path for _h, path, _d in items)


def accept_head_record(
    head_store: HeadStore,
    record: HeadRecord,
    state: ChainState,
    local: Dataset | None,
    blocks: Sequence[ReceivedBlock],
) -> None:
    """Move the high-water mark to ``record`` (before the blocks land, so it never lags).

    ``state`` is what `validate_chain` returned for ``blocks``: the record must be
    signed for the DID of that chain's Seed, not merely for the DID it names itself.
    The held record may be replaced only by one whose chain contains it: the new
    blocks or the local chain.

    Raises:
        InvalidHeadRecord: the record is signed for another dataset than the chain's.
        StaleHead / Equivocation / NotDescendant: see `HeadStore.accept`.
    """
    new_hashes = {b.hash for b in blocks}

    def is_descendant(old: Multihash, _new: Multihash) -> bool:
        if old in new_hashes:
            return True
        return local is not None and any(h == old for h, _raw, _b in local.iter_blocks())

    head_store.accept(record, expected_dataset_id=state.dataset_id, is_descendant=is_descendant)


def commit_received(
    ws: Workspace,
    blocks: Sequence[ReceivedBlock],
    *,
    local: Dataset | None,
    staged: Dataset | None = None,
    alias: str = "",
    dataset_id: DatasetId | None = None,
    pending: PendingBlocks | None = None,
) -> None:
    """Append verified blocks to ``local``, or install the staging dataset ``staged``.

    Exactly one of ``local`` and ``staged`` is given; a staged dataset is installed
    under ``alias`` as ``dataset_id``. Every object the blocks name is stored already.
    ``pending``: these blocks, written ahead into the target's block store; they are
    named first (the append checks, hashes and validates every block all the same).

    Raises:
        RefCASFailed: the local head moved meanwhile (nothing was appended).
        DatasetExists / InvalidAlias: see `storage.staging.install_staged`.
        ValueError: ``pending`` is not the block store of the target.
    """
    raws = [b.raw for b in blocks]
    decoded = [b.block for b in blocks]  # decoded once, by `receive_block`
    if pending is not None:
        target = local if local is not None else staged
        if target is None or pending.store.root != target.layout.blocks.root:
            raise ValueError("pending blocks must be written to the target's block store")
        pending.adopt()
    if local is not None:
        local.append_blocks_bytes(raws, decoded=decoded)
        return
    if staged is None or dataset_id is None:
        raise ValueError("a new dataset needs its staging dataset and its id")
    install_staged(ws, staged, raws, alias, dataset_id, decoded=decoded)
