"""``odf verify --trust N``: accept a head on the word of N validators, without replaying.

A head's data is the union of the slices of every data block in its chain, so trusting
the head means trusting each of them. `verify_with_trust` accepts the head of a dataset
when:

1. every data block of the chain up to the head (``ExecuteTransform`` for a derivative,
   ``AddData`` for a root) has ``reproduced`` attestations from at least N distinct
   validators;
2. no counted validator attested ``diverged`` for any block of the chain (one such
   attestation disputes the head, whatever the number of ``reproduced``).

Who counts: the dataset's own key never vouches for itself; a validator that signed
both ``reproduced`` and ``diverged`` for a block counts for neither on that block (its
``diverged`` still disputes it); with ``trusted`` given, only those validators count.
Without ``trusted`` any key counts, and keys are free to make: N distinct validators is
then a statement about N keys, not N independent parties (pass ``trusted`` for that).

A chain with no data block yet is accepted (there is nothing to vouch for) and says so
in `TrustReport.notes`. The blocks themselves are read hash-checked from the store; no
data object is read and nothing is replayed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fbs.did import DatasetId
from fbs.model import AddData, ExecuteTransform
from fbs.multiformats import Multihash
from node.errors import UsageError
from p2p.attestation import Attestation, Verdict
from p2p.attestation_store import AttestationStore

if TYPE_CHECKING:
    from storage.workspace import Workspace

__all__ = ["BlockTrust", "TrustReport", "verify_with_trust"]


@dataclass(frozen=True, slots=True)
class BlockTrust:
    """The counted verdicts on one data block.

    Attributes:
        block_hash / sequence_number: the block.
        reproduced_by / diverged_by / could_not_check_by: counted validators per verdict.
        conflicted_by: validators that signed both definitive verdicts.
    """

    block_hash: Multihash
    sequence_number: int
    reproduced_by: tuple[DatasetId, ...] = ()
    diverged_by: tuple[DatasetId, ...] = ()
    could_not_check_by: tuple[DatasetId, ...] = ()
    conflicted_by: tuple[DatasetId, ...] = ()


@dataclass(frozen=True, slots=True)
class TrustReport:
    """Result of `verify_with_trust`.

    Attributes:
        alias / dataset_id / head: the dataset and the head judged.
        required: N.
        blocks: every data block of the chain, oldest first.
        failures: why the head is not accepted (empty: accepted).
        notes: remarks that do not fail the check.
    """

    alias: str
    dataset_id: DatasetId
    head: Multihash | None
    required: int
    blocks: tuple[BlockTrust, ...]
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """The head is accepted on the validators' word."""
        return not self.failures

    @property
    def disputed(self) -> bool:
        """Some counted validator found a block that does not reproduce."""
        return any(b.diverged_by for b in self.blocks)

    @property
    def validators(self) -> tuple[DatasetId, ...]:
        """Distinct validators with a counted ``reproduced`` on some block."""
        return tuple(dict.fromkeys(v for b in self.blocks for v in b.reproduced_by))


def _block_trust(
    h: Multihash,
    seq: int,
    attestations: list[Attestation],
    counted: set[DatasetId] | None,
    publisher: DatasetId,
) -> BlockTrust:
    by_verdict: dict[Verdict, list[DatasetId]] = {v: [] for v in Verdict}
    for a in attestations:
        if a.validator == publisher or (counted is not None and a.validator not in counted):
            continue
        if a.validator not in by_verdict[a.verdict]:
            by_verdict[a.verdict].append(a.validator)
    conflicted = tuple(
        v for v in by_verdict[Verdict.REPRODUCED] if v in by_verdict[Verdict.DIVERGED]
    )
    return BlockTrust(
        h,
        seq,
        tuple(v for v in by_verdict[Verdict.REPRODUCED] if v not in conflicted),
        tuple(by_verdict[Verdict.DIVERGED]),
        tuple(by_verdict[Verdict.COULD_NOT_CHECK]),
        conflicted,
    )


def verify_with_trust(
    ws: Workspace,
    ref: str | DatasetId,
    n: int,
    *,
    store: AttestationStore | None = None,
    trusted: Collection[DatasetId] | None = None,
) -> TrustReport:
    """Judge ``ref``'s head by the attestations held locally (see the module docstring).

    Args:
        ws: the workspace.
        ref: alias or DID.
        n: distinct validators required per data block (at least 1).
        store: the attestations (default: the workspace's store).
        trusted: count only these validators (default: any key but the dataset's).

    Raises:
        UsageError: ``n`` below 1.
        DatasetNotFound / InvalidAlias: no such dataset.
        storage.errors.CorruptChain / ObjectNotFound / CorruptObject: a damaged chain.
    """
    if type(n) is not int or n < 1:
        raise UsageError(f"--trust needs at least 1 validator, got {n!r}")
    store = store or AttestationStore.for_workspace(ws)
    entry = ws.resolve(ref)
    ds = ws.get(entry.id)
    head = ds.head()
    counted = None if trusted is None else set(trusted)
    held: dict[Multihash, list[Attestation]] = {}
    for a in store.attestations(entry.id):
        held.setdefault(a.block_hash, []).append(a)
    blocks: list[BlockTrust] = []
    for h, _raw, block in reversed(list(ds.iter_blocks())):
        if isinstance(block.event, AddData | ExecuteTransform):
            blocks.append(
                _block_trust(h, block.sequence_number, held.get(h, []), counted, entry.id)
            )
    failures: list[str] = []
    notes: list[str] = []
    for b in blocks:
        if b.diverged_by:
            who = ", ".join(v.to_did_key() for v in b.diverged_by)
            failures.append(f"block #{b.sequence_number} ({b.block_hash}) diverged for {who}")
    short = [b for b in blocks if len(b.reproduced_by) < n]
    if short:
        first = short[0]
        failures.append(
            f"{len(short)} of {len(blocks)} data blocks have fewer than {n} reproduced "
            f"attestations (first: #{first.sequence_number} with "
            f"{len(first.reproduced_by)})"
        )
    if not blocks:
        notes.append("the chain has no data block yet: nothing to attest")
    return TrustReport(entry.alias, entry.id, head, n, tuple(blocks), tuple(failures), tuple(notes))
