"""Durable store of validator attestations, per dataset, with the dispute status they imply.

::

    <workspace>/.odf/p2p/attestations/<dataset did multibase>/
      accepted/<block multibase>/<validator multibase>.<verdict>.json   canonical JSON
      pending/<digest>.json          attestations of blocks this node does not hold yet
    <workspace>/.odf/p2p/.attestations.lock                             cross-process flock

File names are rendered from parsed values only, never from received text.

Rules of `AttestationStore.accept`:

1. the attestation parses and its signature verifies against the validator's DID
   (`InvalidAttestation`); its time is at most `MAX_CLOCK_SKEW_NS` in the future;
2. the dataset is known locally (``chains(dataset_id)`` is not ``None``), else
   `AttestationRejected`;
3. the block is in the dataset's local chain, with that sequence number, and carries
   data (``AddData`` / ``ExecuteTransform``). A block above the local head is *queued*
   (`AcceptStatus.QUEUED`, at most `MAX_PENDING_PER_DATASET`) and re-examined by
   `retry_pending` after the chain grows; a block at or below the local head that is not
   in the chain is rejected (another history);
4. one verdict per (block, validator, verdict): the same verdict again, re-signed or
   replayed byte for byte, is a `DuplicateAttestation`;
5. a validator that signs ``reproduced`` *and* ``diverged`` for one block is recorded
   with both (``AcceptResult.conflict``; `validator_conflicts` lists them): either it is
   faulty or the engine is non-deterministic, and both facts matter. A
   ``could-not-check`` followed by a definitive verdict is a re-check, not a conflict.

Dispute: a dataset is *disputed* (`AttestationStore.status`) while any accepted
``diverged`` attestation names a block of its current chain. The ``diverged``
attestations are the publisher-divergence evidence (`divergence_evidence`): each is
signed by its validator and names the block and the field, so it can be forwarded and
checked by anyone, and a node can refuse the publisher by policy.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.model import AddData, ExecuteTransform
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from fbs.timestamp import Timestamp
from p2p.attestation import MAX_ATTESTATION_BYTES, Attestation, Verdict
from p2p.errors import (
    AttestationRejected,
    DuplicateAttestation,
    InvalidAttestation,
    UnknownAttestedDataset,
)
from p2p.head_store import P2P_DIR
from storage.errors import StorageError
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import atomic_write_bytes, ensure_dir, locked_dir, read_bytes_limited

if TYPE_CHECKING:
    from storage.workspace import Workspace

__all__ = [
    "ATTESTATIONS_DIR",
    "MAX_ATTESTATIONS_PER_DATASET",
    "MAX_CLOCK_SKEW_NS",
    "MAX_PENDING_PER_DATASET",
    "AcceptResult",
    "AcceptStatus",
    "AttestationStatus",
    "AttestationStore",
    "BlockInfo",
    "ChainLookup",
    "ChainView",
    "DivergenceEvidence",
    "WorkspaceChains",
]

#: Directory of the attestations inside ``.odf/p2p``.
ATTESTATIONS_DIR: Final = "attestations"
LOCK_FILE: Final = ".attestations.lock"
#: Most attestations kept per dataset (beyond: `AttestationRejected`, nothing evicted).
MAX_ATTESTATIONS_PER_DATASET: Final = 100_000
#: Most queued attestations (blocks not held yet) per dataset.
MAX_PENDING_PER_DATASET: Final = 1_000
#: How far in the future an attestation's time may be (clock skew between nodes).
MAX_CLOCK_SKEW_NS: Final = 10 * 60 * 1_000_000_000

_VERDICT_SUFFIX: Final = {v: f".{v.value}.json" for v in Verdict}


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """What the store needs to know about a local block.

    Attributes:
        sequence_number: the block's sequence number.
        checkable: the block carries data (``AddData`` / ``ExecuteTransform``).
    """

    sequence_number: int
    checkable: bool


@dataclass(frozen=True, slots=True)
class ChainView:
    """A dataset's local chain as the store sees it.

    Attributes:
        head: the head (``None``: empty dataset).
        head_sequence: the head's sequence number (-1 when empty).
        blocks: every block of the chain.
    """

    head: Multihash | None
    head_sequence: int
    blocks: Mapping[Multihash, BlockInfo]


ChainLookup = Callable[[DatasetId], ChainView | None]
"""``chains(dataset_id)``: the local chain, or ``None`` for a dataset this node does not know."""


class WorkspaceChains:
    """`ChainLookup` over a workspace, cached per head (a new head reads only new blocks).

    Args:
        ws: the workspace.
    """

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._cache: dict[DatasetId, ChainView] = {}
        self._lock = threading.Lock()

    def __call__(self, dataset_id: DatasetId) -> ChainView | None:
        """The chain of ``dataset_id`` (``None``: not in the workspace or unreadable)."""
        from storage.errors import DatasetNotFound, InvalidAlias

        try:
            ds = self.ws.get(self.ws.resolve(dataset_id).id)
            head = ds.head()
        except (DatasetNotFound, InvalidAlias, FbsError):
            return None
        with self._lock:
            cached = self._cache.get(dataset_id)
        if cached is not None and cached.head == head:
            return cached
        if head is None:
            return ChainView(None, -1, {})
        known: Mapping[Multihash, BlockInfo] = {} if cached is None else cached.blocks
        stop = None if cached is None else cached.head
        fresh: dict[Multihash, BlockInfo] = {}
        head_seq = -1
        try:
            for h, _raw, block in ds.iter_blocks():
                if head_seq < 0:
                    head_seq = block.sequence_number
                if h == stop:
                    break  # the rest is the cached chain
                checkable = isinstance(block.event, AddData | ExecuteTransform)
                fresh[h] = BlockInfo(block.sequence_number, checkable)
            else:
                known = {}  # not a continuation of the cached chain
        except FbsError:
            return None
        view = ChainView(head, head_seq, {**known, **fresh})
        with self._lock:
            self._cache[dataset_id] = view
        return view


class AcceptStatus(StrEnum):
    """Outcome of a successful `AttestationStore.accept`."""

    ACCEPTED = "accepted"
    QUEUED = "queued"


@dataclass(frozen=True, slots=True)
class AcceptResult:
    """An attestation taken in.

    Attributes:
        attestation: the attestation.
        status: accepted (stored with the dataset) or queued (block not held yet).
        conflict: the validator signed the opposite definitive verdict for this block.
    """

    attestation: Attestation
    status: AcceptStatus
    conflict: bool = False


@dataclass(frozen=True, slots=True)
class DivergenceEvidence:
    """Signed ``diverged`` verdicts on one block: evidence against the dataset's publisher.

    Attributes:
        dataset_id: the dataset (its key is the publisher's).
        block_hash / sequence_number: the block that does not follow from its inputs.
        attestations: the ``diverged`` attestations, one per validator.
    """

    dataset_id: DatasetId
    block_hash: Multihash
    sequence_number: int
    attestations: tuple[Attestation, ...]

    @property
    def validators(self) -> tuple[DatasetId, ...]:
        """The distinct validators that found the divergence."""
        return tuple(dict.fromkeys(a.validator for a in self.attestations))

    @property
    def fields(self) -> tuple[str, ...]:
        """The differing fields named (validators may name different first fields)."""
        return tuple(dict.fromkeys(a.detail for a in self.attestations))


@dataclass(frozen=True, slots=True)
class AttestationStatus:
    """Attestations of a dataset summarised against its current chain.

    Attributes:
        dataset_id: the dataset.
        head: its local head.
        attestations: accepted attestations of blocks in the current chain.
        pending: queued attestations.
        disputed_blocks: blocks of the current chain with a ``diverged`` attestation.
        conflicts: ``(validator, block)`` pairs with both definitive verdicts.
    """

    dataset_id: DatasetId
    head: Multihash | None
    attestations: tuple[Attestation, ...] = ()
    pending: int = 0
    disputed_blocks: tuple[Multihash, ...] = ()
    conflicts: tuple[tuple[DatasetId, Multihash], ...] = field(default=())

    @property
    def disputed(self) -> bool:
        """Some validator found a block of the current chain that does not reproduce."""
        return bool(self.disputed_blocks)


def _sort_key(a: Attestation) -> tuple[int, bytes, bytes, int, str]:
    return (
        a.sequence_number,
        a.block_hash.to_bytes(),
        a.validator.public_key,
        a.system_time.nanos,
        a.verdict.value,
    )


class AttestationStore:
    """Attestations per dataset (see the module docstring). Thread- and process-safe.

    Args:
        root: the p2p state directory (``.odf/p2p``; see `for_workspace`).
        chains: the local chains (`WorkspaceChains` for a workspace).
        ops: the file-operations seam.
        now: clock for the future-time check (tests pass a fixed one).
    """

    def __init__(
        self,
        root: Path,
        chains: ChainLookup,
        *,
        ops: FsOps = DEFAULT_OPS,
        now: Callable[[], Timestamp] = Timestamp.now,
    ) -> None:
        self.root = Path(root)
        self.chains = chains
        self._ops = ops
        self._now = now
        self._lock = threading.RLock()

    @classmethod
    def for_workspace(cls, ws: Workspace, *, ops: FsOps = DEFAULT_OPS) -> AttestationStore:
        """The store of a workspace (``<ws>/.odf/p2p``), reading chains from it."""
        return cls(Path(ws.root) / P2P_DIR, WorkspaceChains(ws), ops=ops)

    def __repr__(self) -> str:
        return f"AttestationStore({str(self.root)!r})"

    # -- paths ----------------------------------------------------------------------

    def _dataset_dir(self, dataset_id: DatasetId) -> Path:
        return self.root / ATTESTATIONS_DIR / dataset_id.as_multibase()

    def _block_dir(self, dataset_id: DatasetId, block: Multihash) -> Path:
        return self._dataset_dir(dataset_id) / "accepted" / block.to_multibase()

    def _pending_dir(self, dataset_id: DatasetId) -> Path:
        return self._dataset_dir(dataset_id) / "pending"

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked_dir(self.root, LOCK_FILE, self._lock, ops=self._ops)

    # -- reads ----------------------------------------------------------------------

    def _read_dir(self, directory: Path, limit: int) -> list[Attestation]:
        out: list[Attestation] = []
        try:
            names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return out
        for name in names:
            if len(out) >= limit:
                break
            if not name.endswith(".json"):
                continue
            try:
                data = read_bytes_limited(directory / name, MAX_ATTESTATION_BYTES)
                if data is None:
                    continue
                out.append(Attestation.from_json(data))
            except (OSError, StorageError, InvalidAttestation):
                continue  # damaged files are skipped, never trusted
        return out

    def _block_attestations(self, dataset_id: DatasetId, block: Multihash) -> list[Attestation]:
        found = self._read_dir(self._block_dir(dataset_id, block), MAX_ATTESTATIONS_PER_DATASET)
        # A file moved between directories must not count for another block or dataset.
        return [a for a in found if a.dataset_id == dataset_id and a.block_hash == block]

    def attestations(
        self, dataset_id: DatasetId, *, block: Multihash | None = None
    ) -> list[Attestation]:
        """Accepted attestations of a dataset (or of one block), oldest block first."""
        if block is not None:
            return sorted(self._block_attestations(dataset_id, block), key=_sort_key)
        out: list[Attestation] = []
        base = self._dataset_dir(dataset_id) / "accepted"
        try:
            names = sorted(os.listdir(base))
        except (FileNotFoundError, NotADirectoryError):
            return out
        for name in names:
            try:
                h = parse_hash(name, code=SHA3_256)
            except FbsError:
                continue
            out.extend(self._block_attestations(dataset_id, h))
            if len(out) >= MAX_ATTESTATIONS_PER_DATASET:
                break
        return sorted(out, key=_sort_key)

    def pending(self, dataset_id: DatasetId) -> list[Attestation]:
        """Queued attestations of a dataset (blocks not held locally yet)."""
        found = self._read_dir(self._pending_dir(dataset_id), MAX_PENDING_PER_DATASET)
        return sorted((a for a in found if a.dataset_id == dataset_id), key=_sort_key)

    def datasets(self) -> list[DatasetId]:
        """Datasets with a directory in the store."""
        out: list[DatasetId] = []
        try:
            names = sorted(os.listdir(self.root / ATTESTATIONS_DIR))
        except FileNotFoundError:
            return out
        for name in names:
            with contextlib.suppress(FbsError):
                out.append(DatasetId.from_multibase(name))
        return out

    def status(self, dataset_id: DatasetId) -> AttestationStatus:
        """Attestations of ``dataset_id`` summarised against its current local chain."""
        view = self.chains(dataset_id)
        blocks: Mapping[Multihash, BlockInfo] = {} if view is None else view.blocks
        current = [a for a in self.attestations(dataset_id) if a.block_hash in blocks]
        disputed = tuple(
            dict.fromkeys(a.block_hash for a in current if a.verdict is Verdict.DIVERGED)
        )
        return AttestationStatus(
            dataset_id,
            None if view is None else view.head,
            tuple(current),
            len(self.pending(dataset_id)),
            disputed,
            _conflicts(current),
        )

    def is_disputed(self, dataset_id: DatasetId) -> bool:
        """Whether the dataset's current head is disputed (see `status`)."""
        return self.status(dataset_id).disputed

    def divergence_evidence(self, dataset_id: DatasetId | None = None) -> list[DivergenceEvidence]:
        """``diverged`` attestations grouped by block (all datasets, or one)."""
        out: list[DivergenceEvidence] = []
        for did in [dataset_id] if dataset_id is not None else self.datasets():
            by_block: dict[Multihash, list[Attestation]] = {}
            for a in self.attestations(did):
                if a.verdict is Verdict.DIVERGED:
                    by_block.setdefault(a.block_hash, []).append(a)
            for h, items in by_block.items():
                out.append(DivergenceEvidence(did, h, items[0].sequence_number, tuple(items)))
        return out

    def validator_conflicts(self, dataset_id: DatasetId) -> list[tuple[DatasetId, Multihash]]:
        """``(validator, block)`` pairs where one validator signed both definitive verdicts."""
        return list(_conflicts(self.attestations(dataset_id)))

    # -- decisions ------------------------------------------------------------------

    def accept(self, attestation: Attestation) -> AcceptResult:
        """Check ``attestation`` against the rules and store it durably.

        Returns:
            The outcome: accepted (stored with the dataset) or queued (block not held).

        Raises:
            InvalidAttestation: not an attestation, or a bad signature.
            DuplicateAttestation: this validator's verdict on this block is held already.
            UnknownAttestedDataset: the dataset is not held here.
            AttestationRejected: time in the future, a block not in the
                local chain (or with another sequence number, or without data), or a
                full store.
        """
        if not isinstance(attestation, Attestation):
            raise InvalidAttestation(f"expected an Attestation, got {type(attestation).__name__}")
        attestation.verify()
        if attestation.system_time.nanos > self._now().nanos + MAX_CLOCK_SKEW_NS:
            raise AttestationRejected("attestation is dated in the future")
        with self._locked():
            return self._accept_locked(attestation)

    def _accept_locked(self, att: Attestation) -> AcceptResult:
        did = att.dataset_id
        view = self.chains(did)
        if view is None:
            raise UnknownAttestedDataset(f"unknown dataset {did}")
        info = view.blocks.get(att.block_hash)
        if info is None:
            if att.sequence_number <= view.head_sequence:
                raise AttestationRejected(
                    f"block {att.block_hash} (#{att.sequence_number}) is not in the local "
                    f"chain of {did}"
                )
            return self._queue(att)
        if info.sequence_number != att.sequence_number:
            raise AttestationRejected(
                f"block {att.block_hash} has sequence number {info.sequence_number}, "
                f"the attestation says {att.sequence_number}"
            )
        if not info.checkable:
            raise AttestationRejected(f"block {att.block_hash} carries no data to attest")
        held = self._block_attestations(did, att.block_hash)
        mine = [a for a in held if a.validator == att.validator]
        if any(a.verdict is att.verdict for a in mine):
            what = "a replay" if att in mine else "a re-signed verdict"
            raise DuplicateAttestation(
                f"{att.validator.to_did_key()} already attested {att.verdict} for block "
                f"{att.block_hash} ({what})"
            )
        if self._count(did) >= MAX_ATTESTATIONS_PER_DATASET:
            raise AttestationRejected(f"attestation store of {did} is full")
        definitive = {Verdict.REPRODUCED, Verdict.DIVERGED}
        conflict = att.verdict in definitive and any(
            a.verdict in definitive and a.verdict is not att.verdict for a in mine
        )
        block_dir = self._block_dir(did, att.block_hash)
        ensure_dir(block_dir, ops=self._ops)
        name = att.validator.as_multibase() + _VERDICT_SUFFIX[att.verdict]
        atomic_write_bytes(block_dir / name, att.to_json(), ops=self._ops)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._pending_dir(did) / f"{att.digest}.json")
        return AcceptResult(att, AcceptStatus.ACCEPTED, conflict)

    def _count(self, dataset_id: DatasetId) -> int:
        base = self._dataset_dir(dataset_id) / "accepted"
        total = 0
        try:
            with os.scandir(base) as blocks:
                for entry in blocks:
                    with contextlib.suppress(OSError):
                        total += len(os.listdir(entry.path))
        except FileNotFoundError:
            return 0
        return total

    def _queue(self, att: Attestation) -> AcceptResult:
        directory = self._pending_dir(att.dataset_id)
        path = directory / f"{att.digest}.json"
        if path.exists():
            raise DuplicateAttestation(f"attestation {att.digest[:16]} is queued already")
        try:
            queued = len(os.listdir(directory))
        except FileNotFoundError:
            queued = 0
        if queued >= MAX_PENDING_PER_DATASET:
            raise AttestationRejected(f"too many queued attestations for {att.dataset_id}")
        ensure_dir(directory, ops=self._ops)
        atomic_write_bytes(path, att.to_json(), ops=self._ops)
        return AcceptResult(att, AcceptStatus.QUEUED)

    def retry_pending(self, dataset_id: DatasetId) -> list[AcceptResult]:
        """Re-examine queued attestations of a dataset (call after its chain grew).

        Accepted ones move to the dataset; ones that can never be accepted now (another
        history, duplicates) are dropped; the rest stay queued.

        Returns:
            The attestations accepted by this call.
        """
        accepted: list[AcceptResult] = []
        with self._locked():
            for att in self.pending(dataset_id):
                path = self._pending_dir(dataset_id) / f"{att.digest}.json"
                view = self.chains(dataset_id)
                if (
                    view is not None
                    and att.block_hash not in view.blocks
                    and att.sequence_number > view.head_sequence
                ):
                    continue  # still ahead of us
                try:
                    result = self._accept_locked(att)
                except AttestationRejected:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    continue
                accepted.append(result)
        return accepted


def _conflicts(attestations: list[Attestation]) -> tuple[tuple[DatasetId, Multihash], ...]:
    seen: dict[tuple[DatasetId, Multihash], set[Verdict]] = {}
    for a in attestations:
        seen.setdefault((a.validator, a.block_hash), set()).add(a.verdict)
    both = {Verdict.REPRODUCED, Verdict.DIVERGED}
    return tuple(k for k, v in seen.items() if both <= v)
