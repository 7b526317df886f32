"""Verify: a dataset's integrity, the replay of its transforms, or validators' word.

Integrity checks every block, chain rule and object (size and physical hash; with
``logical_hashes`` also the data slices' logical hashes). A full verify checks integrity
and replays every transform on the engine. ``trust`` accepts a head that N validators
attested ``reproduced`` instead of replaying here. Integrity also compares each replica's
head with the signed head record held for it (`unsigned_heads`): a head its publisher
never signed is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.errors import UsageError

#: What to do with a replica whose chain holds blocks its publisher never made.
COPY_HINT_VERIFY = (
    "delete it and pull it again to follow the publisher, or `odf add` its manifest "
    "under a new name for a dataset of your own"
)

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from node.validation.replay import ReplayReport
    from node.validation.trust import TrustReport
    from p2p.head_record import HeadRecord
    from storage.catalog import DatasetEntry
    from storage.gc import TempFile
    from storage.verify import VerifyReport
    from storage.workspace import Workspace

__all__ = [
    "IntegrityOutcome",
    "UnsignedHead",
    "VerifyOptions",
    "check_options",
    "signed_heads",
    "unsigned_heads",
    "verify_integrity",
    "verify_replay",
    "verify_trust",
]


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    """What to verify and how.

    Attributes:
        datasets: the datasets (empty: every one in the workspace).
        integrity: integrity only, no replay.
        logical_hashes: with ``integrity``, also recompute logical hashes.
        recursive: a full verify of upstream derivatives too.
        trust: accept heads that this many validators attested ``reproduced``.
        validators: with ``trust``, count only these validators (DIDs).
    """

    datasets: tuple[str, ...] = ()
    integrity: bool = False
    logical_hashes: bool = False
    recursive: bool = False
    trust: int | None = None
    validators: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IntegrityOutcome:
    """Each dataset's integrity report, and the temporary files a killed writer left
    (looked for only when every dataset was verified)."""

    reports: tuple[tuple[DatasetEntry, VerifyReport], ...]
    temp_files: tuple[TempFile, ...]
    unsigned: tuple[UnsignedHead, ...] = ()


@dataclass(frozen=True, slots=True)
class UnsignedHead:
    """A replica whose held head is not one its publisher signed.

    Attributes:
        entry: the dataset.
        message: what is wrong, and what to do.
        forked: its chain holds blocks the publisher never signed (a failure); else it is
            only behind the signed head (an interrupted pull: a warning).
    """

    entry: DatasetEntry
    message: str
    forked: bool


def check_options(options: VerifyOptions) -> None:
    """Refuse options that exclude each other.

    Raises:
        UsageError: as said.
    """
    if options.trust is not None:
        if options.integrity:
            raise UsageError("--trust and --integrity exclude each other")
    elif not options.integrity:
        if options.logical_hashes:
            raise UsageError("--logical-hashes applies to --integrity (a full verify always does)")
    elif options.recursive:
        raise UsageError("-r applies to full (replay) verification, not --integrity")


def _entries(ws: Workspace, datasets: tuple[str, ...]) -> list[DatasetEntry]:
    return [ws.resolve(r) for r in datasets] if datasets else ws.list()


def verify_integrity(ws: Workspace, options: VerifyOptions) -> IntegrityOutcome:
    """Check the integrity of ``options.datasets`` (a registered dataset always has a
    head: a missing one is reported, not skipped)."""
    from storage.verify import verify_datasets

    entries = _entries(ws, options.datasets)
    # One pool checks the objects of every dataset (many small datasets use every core).
    datasets = [ws.get(entry.id, require_head=False) for entry in entries]
    # As kamu's integrity check: sizes and physical hashes prove the bytes are the ones the
    # chain names (every disk fault); recomputing logical hashes checks the publisher's
    # claim about those bytes, which a full verify and `odf validate` do: it costs a
    # decode and ~3x the bytes hashed, so here only when asked.
    reports = verify_datasets(
        datasets, require_head=True, check_logical_hashes=options.logical_hashes
    )
    temp = () if options.datasets else tuple(ws.temp_files())
    unsigned = unsigned_heads(ws, entries)
    return IntegrityOutcome(tuple(zip(entries, reports, strict=True)), temp, unsigned)


def signed_heads(ws: Workspace, options: VerifyOptions) -> tuple[UnsignedHead, ...]:
    """`unsigned_heads` of ``options.datasets`` (every dataset when empty)."""
    return unsigned_heads(ws, _entries(ws, options.datasets))


def unsigned_heads(ws: Workspace, entries: list[DatasetEntry]) -> tuple[UnsignedHead, ...]:
    """The replicas among ``entries`` whose head is not the signed head record held for
    them (`node.ownership`: only the publisher's key signs; a block made here is not
    signed). A replica with no record at all (cloned from a server that signs nothing,
    such as kamu) has nothing to compare with and is not reported."""
    from node.ownership import is_owned
    from p2p.errors import P2PError
    from p2p.head_store import HeadStore
    from storage.errors import StorageError

    store = HeadStore.for_workspace(ws.root)
    found: list[UnsignedHead] = []
    for entry in entries:
        if is_owned(ws, entry.id):
            continue
        try:
            record = store.get(entry.id)
            finding = None if record is None else _compare(ws, entry, record)
        except (P2PError, StorageError) as e:
            finding = UnsignedHead(entry, f"its signed head record is unusable: {e}", True)
        if finding is not None:
            found.append(finding)
    return tuple(found)


def _compare(ws: Workspace, entry: DatasetEntry, record: HeadRecord) -> UnsignedHead | None:
    """How the local chain of replica ``entry`` stands to its publisher's signed head."""
    ds = ws.get(entry.id)
    head = ds.head()
    if head is None or head == record.head:
        return None
    seq = -1
    for h, _raw, block in ds.iter_blocks():
        seq = max(seq, block.sequence_number)
        if h == record.head:
            n = seq - block.sequence_number
            return UnsignedHead(
                entry,
                f"head #{seq} ({head}) was never signed by its publisher {entry.id}: "
                f"{n} block(s) after the last signed head #{block.sequence_number} were "
                f"made here (a forked replica; {COPY_HINT_VERIFY})",
                True,
            )
        if block.sequence_number < record.sequence_number:
            break
    if seq < record.sequence_number:
        return UnsignedHead(
            entry,
            f"behind its publisher's signed head #{record.sequence_number} (an "
            f"interrupted pull: `odf pull {entry.alias}`)",
            False,
        )
    return UnsignedHead(
        entry,
        f"head #{seq} ({head}) is not on the history its publisher {entry.id} signed "
        f"(signed head #{record.sequence_number}, {record.head}; {COPY_HINT_VERIFY})",
        True,
    )


def verify_replay(ws: Workspace, options: VerifyOptions) -> list[ReplayReport]:
    """Integrity, then the replay of every transform on the engine, of each dataset."""
    from node.validation.replay import verify_replay as replay

    refs = options.datasets or tuple(e.alias for e in ws.list())
    return [replay(ws, ref, recursive=options.recursive) for ref in refs]


def _validator_id(text: str) -> DatasetId:
    """A validator named by its DID, or a usage error that says what is expected."""
    from fbs.did import DatasetId
    from fbs.errors import InvalidDid

    try:
        return DatasetId.from_did(text)
    except InvalidDid:
        raise UsageError(
            f"--validator {text!r} is not a validator's DID: expected did:key:z6Mk... "
            "as `odf attestations DS --wide` prints it"
        ) from None


def verify_trust(ws: Workspace, options: VerifyOptions) -> list[tuple[DatasetEntry, TrustReport]]:
    """Each dataset's head against the validators' attestations (no replay here)."""
    from node.validation.trust import verify_with_trust

    assert options.trust is not None
    trusted = {_validator_id(v) for v in options.validators} if options.validators else None
    return [
        (entry, verify_with_trust(ws, entry.id, options.trust, trusted=trusted))
        for entry in _entries(ws, options.datasets)
    ]
