"""Disputed data and publishers with evidence against them, and the policy to refuse them.

A dataset's key is its publisher's identity, so evidence against a dataset is evidence
against its publisher. Two kinds are kept, both signed and forwardable:

- **divergence**: ``diverged`` attestations (`p2p.attestation_store.DivergenceEvidence`),
  held by the attestation store. The dataset's head is *disputed* while one names a block
  of its current chain. The divergence is *confirmed* when at least
  `DisputePolicy.confirmations` distinct validators signed it, or this node's own
  validator did (keys are free to make: one foreign ``diverged`` marks the head disputed
  and warns, but should not by itself make a node refuse a publisher);
- **equivocation**: two head records signed for one sequence number
  (`p2p.head_store.EquivocationEvidence`), held by the head store.

`publisher_record` gathers both for a dataset, `publisher_records` for every dataset
with some evidence; `refusal_reason` applies the policy (``refuse_disputed`` in the node
config: stop replicating new heads of a publisher with confirmed divergence or
equivocation); `disputed_warning` is the one-line warning ``odf pull``, ``odf node
follow`` and ``odf sql`` print.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from p2p.attestation_store import AttestationStore, DivergenceEvidence
from p2p.errors import P2PError
from p2p.head_store import EquivocationEvidence, HeadStore
from storage.errors import DatasetNotFound, InvalidAlias, StorageError

if TYPE_CHECKING:
    from storage.workspace import Workspace

__all__ = [
    "DEFAULT_CONFIRMATIONS",
    "DisputePolicy",
    "PublisherRecord",
    "disputed_warning",
    "publisher_record",
    "publisher_records",
    "refusal_reason",
]

#: Distinct validators whose ``diverged`` confirm a divergence (by default).
DEFAULT_CONFIRMATIONS: Final = 1
#: Most publisher records `publisher_records` returns.
MAX_RECORDS: Final = 1_000


@dataclass(frozen=True, slots=True)
class DisputePolicy:
    """What a node does about publishers with evidence against them.

    Attributes:
        refuse_disputed: refuse new heads of publishers with confirmed divergence or
            equivocation.
        confirmations: distinct validators needed to confirm a divergence.
        own_validator: this node's validator identity (its ``diverged`` confirms alone).
    """

    refuse_disputed: bool = False
    confirmations: int = DEFAULT_CONFIRMATIONS
    own_validator: DatasetId | None = None


@dataclass(frozen=True, slots=True)
class PublisherRecord:
    """The evidence held against one dataset's publisher.

    Attributes:
        dataset_id: the dataset (its key is the publisher's).
        alias: its local alias (``None``: not held here).
        disputed_blocks: blocks of the current chain with a ``diverged`` attestation.
        divergence: ``diverged`` attestations grouped by block (any block ever held).
        equivocation: pairs of conflicting head records.
    """

    dataset_id: DatasetId
    alias: str | None
    disputed_blocks: tuple[str, ...] = ()
    divergence: tuple[DivergenceEvidence, ...] = ()
    equivocation: tuple[EquivocationEvidence, ...] = ()

    @property
    def disputed(self) -> bool:
        """The current head is disputed (a block of its chain diverged for someone)."""
        return bool(self.disputed_blocks)

    @property
    def has_evidence(self) -> bool:
        """Any evidence at all."""
        return bool(self.divergence or self.equivocation)

    def confirmed_divergence(self, policy: DisputePolicy) -> DivergenceEvidence | None:
        """The first divergence confirmed under ``policy`` (see the module docstring)."""
        for ev in self.divergence:
            validators = ev.validators
            if len(validators) >= policy.confirmations or (
                policy.own_validator is not None and policy.own_validator in validators
            ):
                return ev
        return None

    def to_dict(self, policy: DisputePolicy | None = None) -> dict[str, Any]:
        """JSON form (with ``policy``: whether the divergence is confirmed, the refusal)."""
        doc: dict[str, Any] = {
            "dataset": self.dataset_id.to_did_odf(),
            "alias": self.alias,
            "disputed": self.disputed,
            "disputedBlocks": list(self.disputed_blocks),
            "divergence": [
                {
                    "block": ev.block_hash.to_multibase(),
                    "sequenceNumber": ev.sequence_number,
                    "fields": list(ev.fields),
                    "validators": [v.to_did_key() for v in ev.validators],
                    "attestations": [a.to_dict() for a in ev.attestations],
                }
                for ev in self.divergence
            ],
            "equivocation": [
                {
                    "sequenceNumber": ev.sequence_number,
                    "heads": [str(ev.first.head), str(ev.second.head)],
                    "evidence": str(ev.path),
                }
                for ev in self.equivocation
            ],
        }
        if policy is not None:
            doc["confirmed"] = self.confirmed_divergence(policy) is not None
            doc["refused"] = refusal_reason(self, policy)
        return doc


def _alias(ws: Workspace, did: DatasetId) -> str | None:
    try:
        return ws.resolve(did).alias
    except (DatasetNotFound, InvalidAlias, FbsError):
        return None


def publisher_record(
    ws: Workspace,
    dataset_id: DatasetId,
    *,
    store: AttestationStore | None = None,
    head_store: HeadStore | None = None,
) -> PublisherRecord:
    """The evidence held here against ``dataset_id``'s publisher (maybe none)."""
    store = store or AttestationStore.for_workspace(ws)
    head_store = head_store or HeadStore.for_workspace(ws.root)
    alias = _alias(ws, dataset_id)
    disputed: tuple[str, ...] = ()
    divergence: tuple[DivergenceEvidence, ...] = ()
    if alias is not None:
        try:
            status = store.status(dataset_id)
            disputed = tuple(h.to_multibase() for h in status.disputed_blocks)
            divergence = tuple(store.divergence_evidence(dataset_id))
        except (StorageError, FbsError, OSError):
            pass  # an unreadable chain: no claim either way
    try:
        equivocation = tuple(head_store.list_evidence(dataset_id))
    except (P2PError, OSError):
        equivocation = ()
    return PublisherRecord(dataset_id, alias, disputed, divergence, equivocation)


def publisher_records(
    ws: Workspace,
    *,
    store: AttestationStore | None = None,
    head_store: HeadStore | None = None,
) -> list[PublisherRecord]:
    """Records of every dataset with evidence against its publisher (at most `MAX_RECORDS`)."""
    store = store or AttestationStore.for_workspace(ws)
    head_store = head_store or HeadStore.for_workspace(ws.root)
    dids: dict[DatasetId, None] = dict.fromkeys(store.datasets())
    try:
        for ev in head_store.list_evidence():
            dids[ev.dataset_id] = None
    except (P2PError, OSError):
        pass
    out: list[PublisherRecord] = []
    for did in dids:
        rec = publisher_record(ws, did, store=store, head_store=head_store)
        if rec.has_evidence:
            out.append(rec)
            if len(out) >= MAX_RECORDS:
                break
    return out


def refusal_reason(record: PublisherRecord, policy: DisputePolicy) -> str | None:
    """Why ``policy`` refuses new heads of ``record``'s dataset (``None``: it does not)."""
    if not policy.refuse_disputed:
        return None
    if record.equivocation:
        ev = record.equivocation[0]
        return f"its publisher signed two heads for sequence number {ev.sequence_number}"
    confirmed = record.confirmed_divergence(policy)
    if confirmed is not None:
        return (
            f"block #{confirmed.sequence_number} diverged for "
            f"{len(confirmed.validators)} validator(s) ({', '.join(confirmed.fields)})"
        )
    return None


def disputed_warning(
    ws: Workspace,
    ref: str | DatasetId,
    *,
    store: AttestationStore | None = None,
    head_store: HeadStore | None = None,
) -> str | None:
    """A one-line warning when ``ref``'s data is disputed or its publisher equivocated.

    ``ref`` is an alias or DID (text or `DatasetId`); a dataset not held here can still
    have equivocation evidence. Never raises for an unknown or unparsable reference
    (``None``): callers print the warning next to their own result.
    """
    did: DatasetId | None = None
    if isinstance(ref, DatasetId):
        did = ref
    else:
        try:
            did = ws.resolve(ref).id
        except (DatasetNotFound, InvalidAlias, FbsError, StorageError):
            if ref.startswith("did:"):
                try:
                    did = DatasetId.from_did(ref)
                except FbsError:
                    return None
    if did is None:
        return None
    rec = publisher_record(ws, did, store=store, head_store=head_store)
    name = rec.alias or did.to_did_odf()
    parts: list[str] = []
    if rec.disputed:
        current = [
            ev for ev in rec.divergence if ev.block_hash.to_multibase() in rec.disputed_blocks
        ]
        if current:
            ev = current[0]
            parts.append(
                f"block #{ev.sequence_number} does not reproduce for "
                f"{len(ev.validators)} validator(s) (first differing field: "
                f"{', '.join(ev.fields)})"
            )
        else:
            parts.append(f"{len(rec.disputed_blocks)} block(s) diverged for some validator")
    if rec.equivocation:
        ev2 = rec.equivocation[0]
        parts.append(f"its publisher signed two heads for sequence number {ev2.sequence_number}")
    if not parts:
        return None
    return (
        f"dataset {name} is DISPUTED: {'; '.join(parts)} "
        f"(see: odf attestations {name}; confirm with: odf verify {name})"
    )
