"""Verify: a dataset's integrity, the replay of its transforms, or validators' word.

Integrity checks every block, chain rule and object (size and physical hash; with
``logical_hashes`` also the data slices' logical hashes). A full verify checks integrity
and replays every transform on the engine. ``trust`` accepts a head that N validators
attested ``reproduced`` instead of replaying here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.errors import UsageError

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from node.validation.replay import ReplayReport
    from node.validation.trust import TrustReport
    from storage.catalog import DatasetEntry
    from storage.gc import TempFile
    from storage.verify import VerifyReport
    from storage.workspace import Workspace

__all__ = [
    "IntegrityOutcome",
    "VerifyOptions",
    "check_options",
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
    return IntegrityOutcome(tuple(zip(entries, reports, strict=True)), temp)


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
