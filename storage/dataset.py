"""A dataset: a kamu-layout directory (blocks, data, checkpoints, ``refs/head``).

Commit protocol (`Dataset.commit`): validate the new block against the chain state
(pure, nothing written yet), stage the data and checkpoint objects (their physical
hash and size must match the event), store the block, and only then move
``refs/head`` by compare-and-swap. Every object is durable (fsync + rename + fsync
dir) before the ref moves, so a crash at any point leaves the head at the old or the
new block, never at a block whose objects are missing. Objects written by a failed
commit are unreferenced garbage that `storage.gc` removes later.

Reads are hash-before-parse: a block's bytes are checked against the hash they are
stored under before the flatbuffer decoder sees them.

Chain state and O(1) appends: the `ChainState` at the head is kept in memory and,
if the dataset is given a ``state_cache`` path (the workspace puts it in
``.odf/cache/``, outside the kamu layout), in a JSON file keyed by the head hash.
On a head that moved (another process appended), the dataset walks back from the
new head only until it reaches the cached head and replays those few blocks; a
missing, damaged or unrelated cache costs one full scan, after which it is current
again. The cache is written without fsync (losing it only costs a rescan) and only
every `STATE_CACHE_EVERY` blocks (or on `Dataset.flush_state_cache`): replacing a
file on every commit costs as much as the commit itself on ext4.

A `Dataset` object is not thread-safe; separate processes (or objects) may append
concurrently, the ref CAS serializes them (`commit_with_retry` rebuilds on a moved
head).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Generic, Self, TypeVar

from fbs.codec import DEFAULT_BLOCK_VERSION, block_hash, decode_block, encode_block
from fbs.errors import InvalidHash, InvalidValue, MalformedBlock
from fbs.limits import DEFAULT_LIMITS, DecodeLimits
from fbs.model import Checkpoint, DataSlice, MetadataBlock, MetadataEvent
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from fbs.rules import new_checkpoint, new_data, referenced_objects
from fbs.timestamp import Timestamp
from storage.backing import DatasetBacking
from storage.chain import ChainState, state_from_json, state_to_json, validate_append
from storage.errors import (
    CorruptChain,
    DatasetNotFound,
    InvalidAppend,
    InvalidCommit,
    InvalidRef,
    MissingObject,
    ObjectNotFound,
    ObjectTooLarge,
    RefCASFailed,
    StorageError,
)
from storage.fsutil import FILE_MODE, ensure_dir, pending_name, read_bytes_limited
from storage.layout import DatasetLayout
from storage.object_store import MAX_BLOCK_SIZE, ObjectStore, require_object_hash
from storage.refs import HEAD
from storage.verified import VerifiedObjects, record_path_for

__all__ = [
    "DEFAULT_MAX_COMMIT_ATTEMPTS",
    "MAX_STATE_CACHE_SIZE",
    "STATE_CACHE_EVERY",
    "ChainDataset",
    "CommitResult",
    "Dataset",
    "PendingEvent",
    "PreparedCommit",
    "as_block_hash",
]

#: Attempts of `Dataset.commit_with_retry` before the last `RefCASFailed` is raised.
DEFAULT_MAX_COMMIT_ATTEMPTS: Final = 64
#: Largest state cache file read (bigger ones are ignored and rebuilt).
MAX_STATE_CACHE_SIZE: Final = 16 * 2**20
#: The state cache is rewritten once the head is this many blocks past the cached one
#: (a reader catches up on at most this many blocks plus other writers' appends).
STATE_CACHE_EVERY: Final = 64
#: Retry backoff: random sleep in ``[0, min(cap, base * 2**attempt)]`` seconds.
RETRY_BACKOFF_BASE_S: Final = 0.001
RETRY_BACKOFF_CAP_S: Final = 0.05


#: The backing of a `ChainDataset`.
B = TypeVar("B", bound=DatasetBacking)


def _check_readable(raw: bytes, limits: DecodeLimits) -> None:
    """Refuse a block that the decoder would not read back (size or a decode limit)."""
    if len(raw) > min(MAX_BLOCK_SIZE, limits.max_block_bytes):
        raise InvalidValue(
            f"block of {len(raw)} bytes exceeds the {min(MAX_BLOCK_SIZE, limits.max_block_bytes)}"
            "-byte block limit"
        )
    try:
        decode_block(raw, limits)
    except MalformedBlock as e:
        raise InvalidValue(f"block would not be readable: {e}") from None


def as_block_hash(value: object) -> Multihash:
    """Accept a SHA3-256 `Multihash` or its multibase text; anything else is refused.

    Raises:
        InvalidHash: for other types, malformed text and other hash functions.
    """
    if isinstance(value, str):
        return parse_hash(value, code=SHA3_256)
    return require_object_hash(value)


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """An event to commit with the files of its new data / checkpoint (if not stored).

    ``data_digest``: the SHA3-256 the caller computed of ``data_file`` as it wrote it,
    which must then be a quarantine file of the data store
    (`DiskObjectStore.quarantine_path`): it is moved in (`DiskObjectStore.adopt`: fsync,
    rename, directory fsync) instead of copied and hashed again.
    """

    event: MetadataEvent
    data_file: Path | None = None
    checkpoint_file: Path | None = None
    data_digest: bytes | None = None


@dataclass(frozen=True, slots=True)
class CommitResult:
    """Outcome of a successful commit or append.

    Attributes:
        old_head: the head before (``None`` for the Seed).
        new_head: the head after.
        block: the newest block appended.
        state: chain state at ``new_head``.
    """

    old_head: Multihash | None
    new_head: Multihash
    block: MetadataBlock
    state: ChainState

    @property
    def sequence_number(self) -> int:
        """Sequence number of the new head."""
        return self.block.sequence_number


@dataclass(frozen=True, slots=True)
class PreparedCommit:
    """What a `Dataset.commit_with_retry` builder returns when files come with the event."""

    event: MetadataEvent
    data_file: Path | None = None
    checkpoint_file: Path | None = None


class ChainDataset(Generic[B]):
    """One dataset in kamu's layout on any `DatasetBacking` (see the module docstring).

    Args:
        layout: where the dataset's stores live.
        state_cache: file where the chain state is cached (``None``: memory only).
        limits: decode limits for stored blocks.
    """

    def __init__(
        self,
        layout: B,
        *,
        state_cache: Path | None = None,
        limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        self.layout = layout
        self.state_cache = state_cache
        self.limits = limits
        self._state: ChainState | None = None
        self._persisted_seq: int | None = None  # sequence number of the cached state
        self._verified: VerifiedObjects | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.layout.where()!r})"

    @classmethod
    def create(cls, layout: B, *, state_cache: Path | None = None) -> Self:
        """Create the (empty, head-less) directory structure and return the dataset.

        Raises:
            UnsafePath: if a path of the layout exists and is not a directory.
        """
        layout.create()
        return cls(layout, state_cache=state_cache)

    @classmethod
    def open(cls, layout: B, *, state_cache: Path | None = None) -> Self:
        """Open an existing dataset directory.

        Raises:
            DatasetNotFound: if the layout has no ``refs/`` and ``blocks/``.
        """
        if not layout.exists():
            raise DatasetNotFound(f"no dataset at {layout.where()}")
        return cls(layout, state_cache=state_cache)

    # -- reads ------------------------------------------------------------------------------

    @property
    def verified_objects(self) -> VerifiedObjects:
        """Checks slices/checkpoints before they are read (`storage.verified`); its
        persistent record lives next to the chain-state cache."""
        if self._verified is None:
            self._verified = VerifiedObjects(record_path_for(self.state_cache))
        return self._verified

    def head(self) -> Multihash | None:
        """The current head, or ``None`` before the Seed is committed.

        Raises:
            InvalidRef: if ``refs/head`` does not hold a canonical block hash.
        """
        head = self.layout.refs.get_or_none(HEAD)
        if head is not None and head.code != SHA3_256:
            # A valid multihash of another function (a flipped code byte) names no block:
            # the ref is damaged, not the caller's input.
            raise InvalidRef(f"refs/head of {self.layout.where()} holds a non-block hash {head}")
        return head

    def get_block(self, h: Multihash | str) -> tuple[bytes, MetadataBlock]:
        """The stored bytes of block ``h`` and the decoded block (hash checked first).

        Raises:
            InvalidHash: ``h`` is not a SHA3-256 hash (or its text).
            ObjectNotFound: no such block.
            CorruptObject: the stored bytes do not hash to ``h``.
            CorruptChain: the bytes do not decode as a block.
        """
        h = as_block_hash(h)
        raw = self.layout.blocks.get(h)  # verifies the hash before we parse
        try:
            return raw, decode_block(raw, self.limits)
        except MalformedBlock as e:
            raise CorruptChain(f"stored block {h} does not decode: {e}") from None

    def iter_blocks(
        self, start: Multihash | str | None = None
    ) -> Iterator[tuple[Multihash, bytes, MetadataBlock]]:
        """Yield ``(hash, bytes, block)`` from ``start`` (default: the head) back to the Seed.

        ``start`` is a block of this chain (the head, a state's head, a block found by
        walking it): to look up a hash from elsewhere, use `get_block`.

        Raises:
            CorruptChain: a block that does not decode, or a sequence number that does
                not decrease by one along ``prev_block_hash``.
            MissingObject: a block of the chain is gone (the workspace is damaged).
            CorruptObject: a damaged block.
        """
        h = self.head() if start is None else as_block_hash(start)
        expected_seq: int | None = None
        while h is not None:
            try:
                raw, block = self.get_block(h)
            except ObjectNotFound:
                raise MissingObject(
                    f"metadata block {h} is missing from {self.layout.where()}/blocks"
                ) from None
            if expected_seq is not None and block.sequence_number != expected_seq:
                raise CorruptChain(
                    f"block {h} has sequence number {block.sequence_number}, "
                    f"expected {expected_seq}"
                )
            yield h, raw, block
            expected_seq = block.sequence_number - 1
            if block.prev_block_hash is None:
                if block.sequence_number != 0:
                    raise CorruptChain(f"block {h} has no parent but sequence number > 0")
                return
            h = block.prev_block_hash

    def state(self) -> ChainState | None:
        """The chain state at the current head (``None`` for an empty dataset).

        Raises:
            CorruptChain: if the stored chain breaks a validation rule.
        """
        return self._state_at(self.head())

    @property
    def id(self) -> str:
        """The dataset DID text (``did:odf:...``).

        Raises:
            DatasetNotFound: if the dataset has no Seed yet.
        """
        state = self.state()
        if state is None:
            raise DatasetNotFound(f"dataset at {self.layout.where()} has no Seed block")
        return state.dataset_id.to_did_odf()

    # -- commits ----------------------------------------------------------------------------

    def commit(
        self,
        event: MetadataEvent,
        *,
        system_time: Timestamp | None = None,
        expected_head: Multihash | None,
        data_file: Path | None = None,
        checkpoint_file: Path | None = None,
        block_version: int = DEFAULT_BLOCK_VERSION,
    ) -> CommitResult:
        """Append a block holding ``event`` if the head is still ``expected_head``.

        Args:
            event: the metadata event.
            system_time: block time; default now, but never before the previous block's.
            expected_head: the head the event was built against (``None``: empty dataset).
            data_file: the file of ``event.new_data`` (else it must already be stored).
            checkpoint_file: the file of ``event.new_checkpoint`` (likewise).
            block_version: block format version (2 is readable by every kamu).

        Raises:
            RefCASFailed: the head is not ``expected_head`` (nothing is written).
            ChainRuleViolation: the block breaks a chain rule (nothing is written).
            InvalidCommit: a file passed for an event without that slice, or a size
                different from the event's.
            HashMismatch: a file whose content does not match the event's physical hash.
            ObjectNotFound: a referenced object that is neither passed nor stored.
            InvalidValue: the event does not fit the block schema.
        """
        (result,) = self.commit_events(
            [PendingEvent(event, data_file, checkpoint_file)],
            system_time=system_time,
            expected_head=expected_head,
            block_version=block_version,
        )
        return result

    def commit_events(
        self,
        events: Sequence[PendingEvent],
        *,
        system_time: Timestamp | None = None,
        expected_head: Multihash | None,
        block_version: int = DEFAULT_BLOCK_VERSION,
    ) -> tuple[CommitResult, ...]:
        """Append one block per event (in order) with a single head move, or nothing.

        Every block is validated against the chain before anything is stored, so e.g. a
        ``SetDataSchema`` + ``ExecuteTransform`` pair either lands whole or not at all.
        Raises what `commit` raises; on any error the head has not moved.

        Returns:
            One result per event; the last one's ``new_head`` is the new head.
        """
        if not events:
            raise InvalidCommit("no events to commit")
        if expected_head is not None:
            expected_head = as_block_hash(expected_head)
        current = self.head()
        if current != expected_head:
            raise RefCASFailed(f"head is {current}, expected {expected_head}")
        state = self._state_at(current)
        if system_time is None:
            system_time = Timestamp.now()
            if state is not None and system_time < state.system_time:
                system_time = state.system_time  # a clock step back must not break rule 4
        staged: list[tuple[Multihash, bytes, PendingEvent]] = []
        results: list[CommitResult] = []
        prev = expected_head
        for pending in events:
            block = MetadataBlock(
                system_time=system_time,
                prev_block_hash=prev,
                sequence_number=0 if state is None else state.sequence_number + 1,
                event=pending.event,
            )
            raw = encode_block(block, block_version)
            _check_readable(raw, self.limits)  # never store a block we could not read back
            h = block_hash(raw)
            state = validate_append(state, block, h)
            staged.append((h, raw, pending))
            results.append(CommitResult(prev, h, block, state))
            prev = h
        for _h, _raw, pending in staged:
            self._stage_objects(
                pending.event, pending.data_file, pending.checkpoint_file, pending.data_digest
            )
        for h, raw, _pending in staged:
            self.layout.blocks.put(h, raw)
        assert state is not None  # events is non-empty
        self.layout.refs.set_if_equals(HEAD, expected_head, state.head)
        self._remember(state)
        return tuple(results)

    def append_block_bytes(self, raw: bytes) -> CommitResult:
        """Append one received block, storing its original bytes (never re-encoded).

        The block's ``prev_block_hash`` must be the current head; the ref moves by
        CAS from that head. See `append_blocks_bytes`.
        """
        return self.append_blocks_bytes([raw])

    def append_blocks_bytes(
        self,
        raws: Sequence[bytes],
        *,
        verify_objects: bool = False,
        decoded: Sequence[MetadataBlock] | None = None,
    ) -> CommitResult:
        """Append received blocks (oldest first) with a single head move.

        Every block is hashed from its bytes, decoded, validated, and its data and
        checkpoint objects must already be stored (sync downloads them first) with the
        declared size (``verify_objects`` also re-hashes them). Then all blocks are
        stored and the head moves once, by CAS.

        ``decoded``: the blocks as the receive path decoded them from these very bytes
        (`p2p.receive.receive_block`, default limits): they are not decoded a second
        time when this dataset's limits are the defaults (otherwise ignored). Hashing
        and validation are the same either way.

        Raises:
            InvalidCommit: no blocks given.
            ObjectTooLarge: a block larger than `MAX_BLOCK_SIZE`.
            MalformedBlock: bytes that are not a block.
            ChainRuleViolation: a block that breaks a chain rule.
            ObjectNotFound / InvalidCommit / CorruptObject: a missing, wrongly sized or
                (with ``verify_objects``) damaged object.
            RefCASFailed: another writer moved the head meanwhile.
        """
        if not raws:
            raise InvalidCommit("no blocks to append")
        old_head = self.head()
        state = self._state_at(old_head)
        staged: list[tuple[Multihash, bytes]] = []
        block: MetadataBlock | None = None
        if decoded is not None and (len(decoded) != len(raws) or self.limits != DEFAULT_LIMITS):
            decoded = None
        for n, item in enumerate(raws):
            if not isinstance(item, bytes | bytearray | memoryview):
                raise InvalidCommit(f"a block must be bytes, got {type(item).__name__}")
            if len(item) > MAX_BLOCK_SIZE:
                raise ObjectTooLarge(f"block of {len(item)} bytes exceeds {MAX_BLOCK_SIZE}")
            data = bytes(item)
            h = block_hash(data)
            block = decode_block(data, self.limits) if decoded is None else decoded[n]
            state = validate_append(state, block, h)
            self._check_stored_objects(block.event, verify_objects)
            staged.append((h, data))
        assert state is not None and block is not None  # raws is non-empty
        # One flush for all blocks (not two per block), still all durable before the CAS.
        self.layout.blocks.put_many(staged)
        self.layout.refs.set_if_equals(HEAD, old_head, state.head)
        self._remember(state)
        return CommitResult(old_head, state.head, block, state)

    def commit_with_retry(
        self,
        build: Callable[[ChainState | None], MetadataEvent | PreparedCommit],
        *,
        max_attempts: int = DEFAULT_MAX_COMMIT_ATTEMPTS,
        system_time: Timestamp | None = None,
        block_version: int = DEFAULT_BLOCK_VERSION,
    ) -> CommitResult:
        """Commit ``build(state)`` and rebuild it on the new state whenever the head moved.

        For local appenders: ``build`` gets the current chain state (``None`` for an
        empty dataset) and returns the event, or a `PreparedCommit` with its files
        (e.g. a data file whose offsets depend on the state).

        Raises:
            RefCASFailed: the head moved on every one of ``max_attempts`` attempts.
            Anything `commit` raises other than `RefCASFailed`.
        """
        last: RefCASFailed | None = None
        for attempt in range(max(1, max_attempts)):
            head = self.head()
            prepared = build(self._state_at(head))
            if not isinstance(prepared, PreparedCommit):
                prepared = PreparedCommit(prepared)
            try:
                return self.commit(
                    prepared.event,
                    system_time=system_time,
                    expected_head=head,
                    data_file=prepared.data_file,
                    checkpoint_file=prepared.checkpoint_file,
                    block_version=block_version,
                )
            except RefCASFailed as e:
                last = e
                # Randomized backoff spreads out writers that keep colliding.
                time.sleep(
                    random.uniform(0, min(RETRY_BACKOFF_CAP_S, RETRY_BACKOFF_BASE_S * 2**attempt))
                )
        assert last is not None
        raise last

    # -- objects ----------------------------------------------------------------------------

    def _stage_objects(
        self,
        event: MetadataEvent,
        data_file: Path | None,
        checkpoint_file: Path | None,
        data_digest: bytes | None = None,
    ) -> None:
        self._stage_one(self.layout.data, "data", data_file, new_data(event), data_digest)
        self._stage_one(
            self.layout.checkpoints, "checkpoint", checkpoint_file, new_checkpoint(event)
        )

    @staticmethod
    def _stage_one(
        store: ObjectStore,
        what: str,
        src: Path | None,
        declared: DataSlice | Checkpoint | None,
        digest: bytes | None = None,
    ) -> None:
        if declared is None:
            if src is not None:
                raise InvalidCommit(f"a {what} file was given but the event declares none")
            return
        h, size = declared.physical_hash, declared.size
        if src is None:
            _check_object(store, what, h, size, verify=False)
            return
        try:
            actual = os.stat(src).st_size
        except OSError as e:
            raise InvalidCommit(f"cannot read {what} file {src}: {e.strerror}") from None
        if actual != size:
            raise InvalidCommit(f"{what} file has {actual} bytes, the event declares {size}")
        if digest is not None:
            try:
                store.adopt(h, Path(src), digest=digest)  # HashMismatch on a wrong digest
            except ValueError as e:
                raise InvalidCommit(f"{what} file: {e}") from None
        else:
            store.put_file(h, Path(src))  # hashes while copying: HashMismatch on a wrong file
        _check_object(store, what, h, size, verify=False)

    def _check_stored_objects(self, event: MetadataEvent, verify: bool) -> None:
        for obj in referenced_objects(event):
            store = self.layout.data if obj.kind == "data" else self.layout.checkpoints
            _check_object(store, obj.kind, obj.physical_hash, obj.size, verify=verify)

    # -- chain state ------------------------------------------------------------------------

    def _state_at(self, head: Multihash | None) -> ChainState | None:
        """The validated chain state at ``head`` (see the module docstring).

        Raises:
            CorruptChain: the stored chain breaks a rule or is unreadable.
        """
        if head is None:
            return None
        if self._state is not None and self._state.head == head:
            return self._state
        bases = [s for s in (self._state, self._read_cache()) if s is not None]
        bases.sort(key=lambda s: s.sequence_number, reverse=True)
        base: ChainState | None = None
        newer: list[tuple[Multihash, MetadataBlock]] = []
        try:
            for h, _raw, block in self.iter_blocks(head):
                match = next((b for b in bases if b.head == h), None)
                if match is not None:
                    base = match
                    if match is not self._state:
                        self._persisted_seq = match.sequence_number
                    break
                newer.append((h, block))
                # Stop hoping once we walked below every candidate: they are not ancestors.
                bases = [b for b in bases if b.sequence_number < block.sequence_number]
            state = base
            for h, block in reversed(newer):
                state = validate_append(state, block, h)
        except InvalidAppend as e:
            raise CorruptChain(f"stored chain is invalid: {e}") from None
        except (ObjectNotFound, InvalidHash) as e:
            raise CorruptChain(f"stored chain is incomplete: {e}") from None
        assert state is not None  # the walk reached a base or the Seed
        self._remember(state, persist=bool(newer))
        return state

    def _remember(self, state: ChainState, *, persist: bool = True) -> None:
        self._state = state
        if not persist or self.state_cache is None:
            return
        if (
            self._persisted_seq is None
            or state.sequence_number - self._persisted_seq >= STATE_CACHE_EVERY
        ):
            self._write_cache(state)

    def flush_state_cache(self) -> None:
        """Write the current chain state to the cache now (e.g. before exiting).

        Raises:
            CorruptChain: if the stored chain breaks a validation rule.
        """
        state = self.state()
        if state is not None and self.state_cache is not None:
            self._write_cache(state)

    def _read_cache(self) -> ChainState | None:
        if self.state_cache is None:
            return None
        try:
            data = read_bytes_limited(self.state_cache, MAX_STATE_CACHE_SIZE)
        except (OSError, StorageError):  # a cache is never worth failing for
            return None
        return None if data is None else state_from_json(data)

    def _write_cache(self, state: ChainState) -> None:
        """Replace the cache file (temp + rename, deliberately without fsync)."""
        assert self.state_cache is not None
        ops = self.layout.ops
        directory = self.state_cache.parent
        tmp = directory / pending_name()
        try:
            ensure_dir(directory, ops=ops)
            fd = ops.create_exclusive(tmp, FILE_MODE)
            try:
                ops.write(fd, state_to_json(state))
            finally:
                ops.close(fd)
            ops.replace(tmp, self.state_cache)
            self._persisted_seq = state.sequence_number
        except (OSError, StorageError):
            # Best effort: the next reader rebuilds a missing or stale cache.
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def _check_object(store: ObjectStore, what: str, h: Multihash, size: int, *, verify: bool) -> None:
    try:
        actual = store.size(h)
    except ObjectNotFound:
        raise ObjectNotFound(f"{what} object {h} is not stored") from None
    if actual != size:
        raise InvalidCommit(f"{what} object {h} has {actual} bytes, the event declares {size}")
    if verify:
        store.check(h)


class Dataset(ChainDataset[DatasetLayout]):
    """A dataset directory on local disk: `ChainDataset` over a `DatasetLayout`."""
