"""Persistent high-water marks of signed heads, and equivocation evidence.

::

    <workspace>/.odf/p2p/
      heads/<did multibase>.json                     the highest accepted record (canonical JSON)
      evidence/<did multibase>-<seq>-<digest>.json   two conflicting records for one sequence number
      .lock                                          flock serializing writers across processes

Rules enforced by `HeadStore.accept` for a dataset whose held record is ``H``:

1. the record's signature verifies against its own DID, and that DID is the dataset's
   (the DID in its Seed, passed as ``expected_dataset_id`` when the caller knows it);
2. the sequence number is strictly higher than ``H``'s (otherwise `StaleHead`: a
   replay of ``H`` itself, an older record, or a re-signature of the same head);
3. same sequence number with a different head: the key signed two histories. Both
   records are written to ``evidence/`` (`list_evidence`) and `Equivocation` is raised;
4. the new head's chain contains ``H.head`` (``is_descendant(H.head, new.head)``),
   otherwise `NotDescendant`.

The record is durably written (temp + fsync + rename + fsync dir) before `accept`
returns, so a restarted node never accepts anything below what it accepted before.
A held-record file that no longer verifies is an error, never silently ignored:
ignoring it would let a peer roll the dataset back.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.multiformats import Multihash
from p2p.errors import Equivocation, InvalidHeadRecord, NotDescendant, StaleHead
from p2p.head_record import MAX_HEAD_RECORD_BYTES, HeadRecord
from p2p.peer_json import PeerJsonError, load_peer_json
from storage.errors import StorageError
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import atomic_write_bytes, ensure_dir, locked_dir, read_bytes_limited

__all__ = [
    "EVIDENCE_DIR",
    "HEADS_DIR",
    "MAX_EVIDENCE_FILE_BYTES",
    "P2P_DIR",
    "Decision",
    "EquivocationEvidence",
    "HeadStore",
]

#: Directory of the p2p state inside a workspace root (``.odf/``).
P2P_DIR: Final = "p2p"
HEADS_DIR: Final = "heads"
EVIDENCE_DIR: Final = "evidence"
LOCK_FILE: Final = ".lock"
#: Largest evidence file read back (two records plus a little JSON).
MAX_EVIDENCE_FILE_BYTES: Final = 4 * MAX_HEAD_RECORD_BYTES
#: Most evidence files `HeadStore.list_evidence` returns (a flood cannot exhaust memory).
MAX_EVIDENCE_LISTED: Final = 10_000

IsDescendant = Callable[[Multihash, Multihash], bool]


@dataclass(frozen=True, slots=True)
class Decision:
    """An accepted head record.

    Attributes:
        record: the record now held (the new high-water mark).
        previous: the record held before (``None``: first record for this dataset).
    """

    record: HeadRecord
    previous: HeadRecord | None


@dataclass(frozen=True, slots=True)
class EquivocationEvidence:
    """Two valid records signed by one dataset key for one sequence number, different heads.

    Attributes:
        first / second: the two records, ordered by head hash.
        path: the evidence file.
    """

    first: HeadRecord
    second: HeadRecord
    path: Path

    @property
    def dataset_id(self) -> DatasetId:
        """The dataset whose key equivocated."""
        return self.first.dataset_id

    @property
    def sequence_number(self) -> int:
        """The sequence number signed twice."""
        return self.first.sequence_number

    def to_json(self) -> bytes:
        """Canonical JSON of the evidence (forwardable: anyone can check both signatures)."""
        return _evidence_json(self.first, self.second)

    @classmethod
    def from_json(cls, data: bytes, path: Path) -> EquivocationEvidence:
        """Parse and check evidence bytes: two valid, conflicting records.

        Raises:
            InvalidHeadRecord: malformed JSON, bad signatures, or records that do not conflict.
        """
        if not data.isascii():
            raise InvalidHeadRecord("evidence is not ASCII JSON")
        try:
            obj = load_peer_json(data, what="evidence")
        except PeerJsonError:
            raise InvalidHeadRecord("evidence is not ASCII JSON") from None
        if not isinstance(obj, dict) or set(obj) != {"records"}:
            raise InvalidHeadRecord('evidence must be {"records": [a, b]}')
        items = obj["records"]
        if not isinstance(items, list) or len(items) != 2:
            raise InvalidHeadRecord("evidence must hold exactly two records")
        a, b = (HeadRecord.from_dict(item) for item in items)
        if not _conflict(a, b):
            raise InvalidHeadRecord("evidence records do not conflict")
        first, second = sorted((a, b), key=lambda r: r.head)
        return cls(first, second, path)


def _conflict(a: HeadRecord, b: HeadRecord) -> bool:
    return (
        a.dataset_id == b.dataset_id and a.sequence_number == b.sequence_number and a.head != b.head
    )


def _evidence_json(a: HeadRecord, b: HeadRecord) -> bytes:
    first, second = sorted((a, b), key=lambda r: r.head)
    doc = {"records": [first.to_dict(), second.to_dict()]}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("ascii")


class HeadStore:
    """High-water marks of signed heads, one file per dataset (see the module docstring).

    Thread-safe; writers in several processes are serialized by a file lock.

    Args:
        root: the p2p state directory (``.odf/p2p``; see `for_workspace`).
        ops: the file-operations seam.
    """

    def __init__(self, root: Path, *, ops: FsOps = DEFAULT_OPS) -> None:
        self.root = Path(root)
        self._ops = ops
        self._lock = threading.Lock()

    @classmethod
    def for_workspace(cls, workspace_root: Path, *, ops: FsOps = DEFAULT_OPS) -> HeadStore:
        """The store of a workspace, given its ``.odf`` directory (``Workspace.root``)."""
        return cls(Path(workspace_root) / P2P_DIR, ops=ops)

    def __repr__(self) -> str:
        return f"HeadStore({str(self.root)!r})"

    @property
    def heads_dir(self) -> Path:
        """``heads/``."""
        return self.root / HEADS_DIR

    @property
    def evidence_dir(self) -> Path:
        """``evidence/``."""
        return self.root / EVIDENCE_DIR

    def _head_path(self, dataset_id: DatasetId) -> Path:
        # The name is rendered from a parsed DatasetId, never from caller text.
        return self.heads_dir / f"{dataset_id.as_multibase()}.json"

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked_dir(self.root, LOCK_FILE, self._lock, ops=self._ops)

    # -- reads ----------------------------------------------------------------------

    def get(self, dataset_id: DatasetId) -> HeadRecord | None:
        """The record held for ``dataset_id`` (``None``: none accepted yet).

        Raises:
            InvalidHeadRecord: the held file is damaged or does not verify.
        """
        path = self._head_path(dataset_id)
        try:
            data = read_bytes_limited(path, MAX_HEAD_RECORD_BYTES)
        except FileNotFoundError:
            return None
        except StorageError as e:
            raise InvalidHeadRecord(f"held head record {path} is unusable: {e}") from None
        if data is None:
            raise InvalidHeadRecord(f"held head record {path} is too large")
        try:
            record = HeadRecord.from_json(data)
        except InvalidHeadRecord as e:
            raise InvalidHeadRecord(f"held head record {path} is damaged: {e}") from None
        if record.dataset_id != dataset_id:
            raise InvalidHeadRecord(f"held head record {path} names another dataset")
        return record

    def list(self) -> list[HeadRecord]:
        """Every held record (damaged files are skipped), sorted by DID."""
        out: list[HeadRecord] = []
        try:
            names = sorted(os.listdir(self.heads_dir))
        except FileNotFoundError:
            return out
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                did = DatasetId.from_multibase(name[: -len(".json")])
                record = self.get(did)
            except (FbsError, InvalidHeadRecord):
                continue
            if record is not None:
                out.append(record)
        return out

    def list_evidence(
        self, dataset_id: DatasetId | None = None
    ) -> builtins.list[EquivocationEvidence]:
        """Stored equivocation evidence (all datasets, or one), damaged files skipped.

        At most `MAX_EVIDENCE_LISTED` items are returned.
        """
        out: builtins.list[EquivocationEvidence] = []
        prefix = "" if dataset_id is None else dataset_id.as_multibase() + "-"
        try:
            names = sorted(os.listdir(self.evidence_dir))
        except FileNotFoundError:
            return out
        for name in names:
            if len(out) >= MAX_EVIDENCE_LISTED:
                break
            if not name.endswith(".json") or not name.startswith(prefix):
                continue
            path = self.evidence_dir / name
            try:
                data = read_bytes_limited(path, MAX_EVIDENCE_FILE_BYTES)
                if data is None:
                    continue
                out.append(EquivocationEvidence.from_json(data, path))
            except (OSError, StorageError, InvalidHeadRecord):
                continue
        return out

    # -- decisions ------------------------------------------------------------------

    def check(
        self,
        record: HeadRecord,
        *,
        expected_dataset_id: DatasetId | None = None,
        is_descendant: IsDescendant | None = None,
    ) -> HeadRecord | None:
        """Everything `accept` checks, without moving the high-water mark.

        Used before a pull to refuse stale records without downloading anything.
        Equivocation evidence is still recorded. ``is_descendant=None`` skips rule 4.

        Returns:
            The record currently held (``None``: none).

        Raises:
            InvalidHeadRecord / StaleHead / Equivocation / NotDescendant: see `accept`.
        """
        with self._locked():
            return self._evaluate(record, expected_dataset_id, is_descendant)

    def accept(
        self,
        record: HeadRecord,
        *,
        is_descendant: IsDescendant,
        expected_dataset_id: DatasetId | None = None,
    ) -> Decision:
        """Accept ``record`` as the new high-water mark of its dataset (durably).

        Args:
            record: the offered record.
            is_descendant: ``is_descendant(old_head, new_head)`` tells whether the chain
                ending at ``new_head`` contains ``old_head``; only called when a
                record is held already.
            expected_dataset_id: the DID from the dataset's Seed, if known.

        Raises:
            InvalidHeadRecord: bad signature, or the record names another dataset.
            StaleHead: sequence number not above the held one (includes replays).
            Equivocation: same sequence number, different head (evidence stored first).
            NotDescendant: the new chain does not contain the held head.
        """
        with self._locked():
            previous = self._evaluate(record, expected_dataset_id, is_descendant)
            ensure_dir(self.heads_dir, ops=self._ops)
            atomic_write_bytes(self._head_path(record.dataset_id), record.to_json(), ops=self._ops)
            return Decision(record, previous)

    def _evaluate(
        self,
        record: HeadRecord,
        expected_dataset_id: DatasetId | None,
        is_descendant: IsDescendant | None,
    ) -> HeadRecord | None:
        if not isinstance(record, HeadRecord):
            raise InvalidHeadRecord(f"expected a HeadRecord, got {type(record).__name__}")
        record.verify()
        if expected_dataset_id is not None and record.dataset_id != expected_dataset_id:
            raise InvalidHeadRecord(
                f"record is signed for {record.dataset_id}, the dataset is {expected_dataset_id}"
            )
        held = self.get(record.dataset_id)
        if held is None:
            return None
        if record.sequence_number == held.sequence_number and record.head != held.head:
            path = self._store_evidence(held, record)
            raise Equivocation(
                f"{record.dataset_id} signed two heads for sequence number "
                f"{record.sequence_number} (evidence: {path})",
                held,
                record,
            )
        if record.sequence_number <= held.sequence_number:
            what = "a replay of the held record" if record == held else "older than the held one"
            raise StaleHead(
                f"head record for {record.dataset_id} at sequence {record.sequence_number} is "
                f"{what} (held: {held.sequence_number})"
            )
        if is_descendant is not None and not is_descendant(held.head, record.head):
            raise NotDescendant(
                f"new head {record.head} of {record.dataset_id} does not descend from "
                f"the held head {held.head}"
            )
        return held

    def _store_evidence(self, a: HeadRecord, b: HeadRecord) -> Path:
        data = _evidence_json(a, b)
        digest = hashlib.sha3_256(data).hexdigest()[:16]
        name = f"{a.dataset_id.as_multibase()}-{a.sequence_number}-{digest}.json"
        path = self.evidence_dir / name
        ensure_dir(self.evidence_dir, ops=self._ops)
        if not path.exists():
            atomic_write_bytes(path, data, ops=self._ops)
        return path
