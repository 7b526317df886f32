"""Errors raised by the `p2p` package (signed heads, verified sync, transports).

Tree::

    OdfError (fbs.errors)
    └── P2PError
        ├── InvalidHeadRecord     a head record with a bad signature, format or size
        ├── InvalidGossip         a gossip message failing its check (penalises the forwarder)
        ├── StaleHead             sequence number not higher than the one held (replay, rollback)
        ├── Equivocation          two different heads signed for one sequence number
        ├── NotDescendant         a new head whose chain does not contain the held head
        ├── PeerMisbehaved        a peer served wrong bytes or broke a limit
        ├── TransferError         a transfer that could not complete
        │   ├── FrameTooLarge     a frame/body larger than its named limit
        │   ├── TransferTimeout   a peer stalled beyond a timeout
        │   └── RemoteError       the peer answered with an error frame (code attribute)
        │       └── NotFoundOnPeer    the peer does not have the dataset/object
        ├── PeerUnavailable       no (remaining) peer can serve what is needed
        ├── HostError             the libp2p host failed to start/stop or is not running
        │   └── HostNotRunning    a call on a host that is not started (or already stopped)
        ├── IdentityError         a missing, malformed or unsafe libp2p identity key file
        ├── InvalidAttestation    a validator attestation with a bad signature, format or size
        └── AttestationRejected   a well-formed attestation refused by the store's rules
            ├── UnknownAttestedDataset  of a dataset not held here (yet)
            └── DuplicateAttestation  already held (a replay, or the same verdict re-signed)
"""

from __future__ import annotations

from typing import Protocol

from fbs.did import DatasetId
from fbs.errors import ExitCategory, OdfError
from fbs.multiformats import Multihash


class SignedHead(Protocol):
    """What an `Equivocation` holds of a head record (`p2p.head_record.HeadRecord` is one).

    Declared here so that this module depends on nothing else in `p2p`.
    """

    @property
    def dataset_id(self) -> DatasetId: ...

    @property
    def head(self) -> Multihash: ...

    @property
    def sequence_number(self) -> int: ...


class P2PError(OdfError):
    """Base class of the p2p errors."""

    exit_category = ExitCategory.INVALID


class InvalidHeadRecord(P2PError, ValueError):
    """A head record that is malformed, too large, or whose signature does not verify."""


class InvalidGossip(P2PError):
    """A gossip message that fails its content check; its forwarder is penalised.

    Raised by a gossip validator (see `p2p.libp2p.host.P2PHost.subscribe`) to tell a *bad*
    message (the forwarder must have skipped validation: penalise it) from one that is
    only not worth forwarding (a stale but valid record: the validator returns ``False``).
    """


class StaleHead(P2PError):
    """A head record whose sequence number is not higher than the one already held."""

    exit_category = ExitCategory.CONFLICT


class Equivocation(P2PError):
    """Two different heads signed by the dataset key for the same sequence number.

    Attributes:
        held: the record held before.
        offered: the conflicting record just received.
    """

    exit_category = ExitCategory.CONFLICT

    def __init__(self, message: str, held: SignedHead, offered: SignedHead) -> None:
        super().__init__(message)
        self.held = held
        self.offered = offered


class NotDescendant(P2PError):
    """A new head whose chain does not descend from the head held locally."""

    exit_category = ExitCategory.CONFLICT


class NameConflict(P2PError):
    """A push the node refused because a name or dataset there collides with it (the
    dataset held under another name, the name taken by another dataset)."""

    exit_category = ExitCategory.CONFLICT


class PeerMisbehaved(P2PError):
    """A peer served bytes that do not match their hash, or broke a protocol limit."""


class TransferError(P2PError):
    """A transfer that could not complete (connection lost, bad status, ...)."""

    exit_category = ExitCategory.NOT_FOUND


class FrameTooLarge(TransferError):
    """A frame or body larger than its named limit."""


class TransferTimeout(TransferError):
    """A peer did not send data within the timeout."""


class SourceUnreachable(TransferError):
    """No connection to a source could be made (refused, no route, unknown host): a later
    retry may succeed, unlike a source that answers that it has no such dataset."""

    exit_category = ExitCategory.UNAVAILABLE


class PeerUnavailable(P2PError):
    """No peer (left) that can serve the requested object or dataset."""

    exit_category = ExitCategory.NOT_FOUND


class RemoteError(TransferError):
    """The peer answered a request with an error frame.

    Attributes:
        code: the peer's error code (``"not_found"``, ``"bad_request"``, ``"busy"``...).
        retry_after_s: with ``busy``, when the peer says to try again (``None``: no hint).
    """

    def __init__(
        self, message: str, code: str = "error", *, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s


class NotFoundOnPeer(RemoteError):
    """The peer does not hold the requested dataset, block or object."""


class HostError(P2PError):
    """The libp2p host could not start or stop cleanly."""


class HostNotRunning(HostError):
    """A call on a libp2p host that is not started, or already stopped."""


class IdentityError(P2PError):
    """A libp2p identity key file that is missing, malformed or has unsafe permissions."""


class InvalidAttestation(P2PError, ValueError):
    """A validator attestation that is malformed, too large, or whose signature fails."""


class AttestationRejected(P2PError):
    """A valid attestation refused by the store (unknown dataset, block not in the chain...)."""

    exit_category = ExitCategory.REFUSED


class UnknownAttestedDataset(AttestationRejected):
    """An attestation of a dataset not held here (yet: a replica may be on its way)."""


class DuplicateAttestation(AttestationRejected):
    """An attestation already held: a replay, or the same verdict on the same block re-signed."""

    exit_category = ExitCategory.CONFLICT


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf exception of a task group's failure (callers expect one typed error)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
