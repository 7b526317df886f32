"""The attestation exchange ``/odf/exchange/attestations/1.0.0``: a peer's attestations.

A node that replicates a dataset from a peer over libp2p asks that peer, on the same
connection, for the validators' attestations it holds for the dataset, so that the
replica is judged (``odf verify --trust N``) on the same evidence as its source. Frames
are those of `p2p.libp2p.exchange` (``u32 length | u8 type | payload``); one request per
stream:

============  ======================================================================
REQUEST (1)   client -> server: JSON ``{"dataset": "did:odf:..."}``
CHUNK (4)     server -> client: one attestation's canonical JSON (at most
              `p2p.attestation.MAX_ATTESTATION_BYTES`), one frame each
END (5)       the answer is complete (at most `MAX_ATTESTATIONS_PER_ANSWER` CHUNKs)
ERROR (6)     JSON ``{"code": "bad_request"|"busy", "message": s}``
============  ======================================================================

The server lists the attestations its store accepted for blocks of its current chain
(`AttestationServer`); a dataset it does not hold gives an empty answer. Nothing the
client receives is trusted: `fetch_attestations` parses each frame and checks its
signature against the validator's DID, drops one that fails or names another dataset
and, once the answer is read, charges the peer for them (`Offence.BAD_BYTES`: only a
faulty or hostile node serves an attestation its own store could not have accepted);
the caller then puts each through
its own store's rules (`p2p.attestation_store.AttestationStore.accept`: a block of the
local chain, one verdict per validator and block).

Runs in the host's trio thread (see `p2p.libp2p.host`); store reads are pushed to worker
threads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

import trio

from fbs.did import DatasetId
from fbs.errors import FbsError
from p2p.attestation import MAX_ATTESTATION_BYTES, Attestation
from p2p.attestation_store import AttestationStore
from p2p.errors import InvalidAttestation, P2PError, PeerMisbehaved, RemoteError
from p2p.libp2p.exchange.wire import (
    ExchangeLimits,
    FrameReader,
    Misbehaved,
    write_frame,
    write_json,
)
from p2p.libp2p.framing import FrameType
from p2p.libp2p.host import P2PHost
from p2p.peer_json import PeerJsonError
from p2p.peers import Offence

__all__ = [
    "ATTESTATION_LIMITS",
    "ATTESTATION_PROTOCOL",
    "MAX_ATTESTATIONS_PER_ANSWER",
    "AttestationProvider",
    "AttestationServer",
    "fetch_attestations",
    "peer_attestations",
]

log = logging.getLogger(__name__)

#: The libp2p stream protocol id (the gossip topic of attestations is another thing:
#: `p2p.libp2p.attestation_gossip.ATTESTATIONS_TOPIC`).
ATTESTATION_PROTOCOL: Final = "/odf/exchange/attestations/1.0.0"
#: Most attestations in one answer (the rest are left out; gossip brings new ones).
MAX_ATTESTATIONS_PER_ANSWER: Final = 4096
#: Requests answered at once (more wait their turn).
MAX_CONCURRENT_ANSWERS: Final = 4
#: Frame limits of both sides: a CHUNK holds one attestation.
ATTESTATION_LIMITS: Final = ExchangeLimits(
    max_frame_bytes=MAX_ATTESTATION_BYTES, stall_timeout_s=15.0
)

#: py-libp2p's logger of failed stream opens (an ERROR record of eight lines each).
_STREAM_LOGGER: Final = "libp2p.host.basic_host"


class _OlderPeerFilter(logging.Filter):
    """A peer without this protocol (an older node) is no error: py-libp2p's record of
    the refused stream becomes one DEBUG line."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if ATTESTATION_PROTOCOL in text and text.startswith("Failed to open stream"):
            record.msg, record.args = text.split("\n", 1)[0] + " " + ATTESTATION_PROTOCOL, ()
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(_STREAM_LOGGER).isEnabledFor(logging.DEBUG)
        return True


_FILTER: Final = _OlderPeerFilter()

AttestationProvider = Callable[[DatasetId], list[Attestation]]
"""The attestations a server hands out for a dataset (called in a worker thread)."""


def _current_chain(store: AttestationStore) -> AttestationProvider:
    def provide(did: DatasetId) -> list[Attestation]:
        return list(store.status(did).attestations)

    return provide


class AttestationServer:
    """Answers `ATTESTATION_PROTOCOL` requests from an attestation store.

    Args:
        store: the node's store; its attestations of blocks of the current chain are
            served.
        provider: serves these instead (tests, tools).
    """

    def __init__(
        self, store: AttestationStore | None = None, *, provider: AttestationProvider | None = None
    ) -> None:
        if provider is None:
            if store is None:
                raise ValueError("an attestation store or a provider is needed")
            provider = _current_chain(store)
        self._provide = provider
        self._slots = trio.CapacityLimiter(MAX_CONCURRENT_ANSWERS)
        self._answering: set[str] = set()
        self.served_requests = 0

    def register(self, host: P2PHost) -> None:
        """Serve `ATTESTATION_PROTOCOL` on ``host``."""
        host.set_stream_handler(ATTESTATION_PROTOCOL, self.handle)

    async def handle(self, stream: Any) -> None:
        """Answer one request on ``stream`` (trio); a malformed one resets the stream.

        One answer per peer at a time (another request of that peer meanwhile is told
        ``busy``), at most `MAX_CONCURRENT_ANSWERS` in all: the request is read before
        a slot is taken, so a peer that sends nothing holds none.
        """
        peer = _peer_of(stream)
        try:
            did = await self._request(stream)
            if did is None:
                return
            if peer in self._answering:
                busy = {"code": "busy", "message": "one request at a time"}
                await write_json(stream, FrameType.ERROR, busy, ATTESTATION_LIMITS)
                return
            self._answering.add(peer)
            try:
                async with self._slots:
                    await self._answer(stream, did)
            finally:
                self._answering.discard(peer)
        except (P2PError, PeerJsonError) as e:
            log.debug("attestation request aborted: %s", e)
            with contextlib.suppress(Exception):
                await stream.reset()
            return
        with contextlib.suppress(Exception):
            await stream.close()

    async def _request(self, stream: Any) -> DatasetId | None:
        """The dataset asked for; ``None`` when the request was answered with ERROR."""
        limits = ATTESTATION_LIMITS
        reader = FrameReader(stream, limits)
        frame = await reader.frame()
        if frame.type != FrameType.REQUEST:
            raise Misbehaved("expected a REQUEST frame", Offence.PROTOCOL_ERROR)
        did_text = reader.json(frame).get("dataset")
        try:
            if not isinstance(did_text, str):
                raise FbsError("not a string")
            return DatasetId.from_did(did_text)
        except FbsError:
            message = {"code": "bad_request", "message": "dataset must be a did:odf string"}
            await write_json(stream, FrameType.ERROR, message, limits)
            return None

    async def _answer(self, stream: Any, did: DatasetId) -> None:
        held = await trio.to_thread.run_sync(self._provide, did)
        for att in held[:MAX_ATTESTATIONS_PER_ANSWER]:
            await _write(stream, FrameType.CHUNK, att.to_json())
        await _write(stream, FrameType.END, b"")
        self.served_requests += 1


def _peer_of(stream: Any) -> str:
    try:
        return str(stream.muxed_conn.peer_id)
    except AttributeError:  # not a libp2p stream (tools)
        return "?"


async def _write(stream: Any, ftype: int, payload: bytes) -> None:
    await write_frame(stream, ftype, payload, ATTESTATION_LIMITS.stall_timeout_s)


async def fetch_attestations(host: P2PHost, peer: str, did: DatasetId) -> list[Attestation]:
    """The attestations ``peer`` holds for ``did``, each signature checked (trio).

    One that does not parse, does not verify or names another dataset is dropped, and
    the peer charged once for them (`Offence.BAD_BYTES`) after its answer ends.

    Raises:
        PeerUnavailable: no stream (the peer does not speak the protocol, or is gone;
            py-libp2p's error record of it is turned into a DEBUG line).
        PeerMisbehaved / FrameTooLarge / TransferError: a broken answer (the peer is
            charged, nothing of the answer is kept).
        RemoteError: the peer answered ERROR.
    """
    stream_log = logging.getLogger(_STREAM_LOGGER)
    if _FILTER not in stream_log.filters:
        stream_log.addFilter(_FILTER)
    stream = await host.new_stream_trio(peer, ATTESTATION_PROTOCOL)
    try:
        request = {"dataset": did.to_did_odf()}
        await write_json(stream, FrameType.REQUEST, request, ATTESTATION_LIMITS)
        with contextlib.suppress(Exception):
            await stream.close_write()
        return await _read_answer(host, peer, did, FrameReader(stream, ATTESTATION_LIMITS))
    except (PeerMisbehaved, PeerJsonError) as e:
        host.scores.penalise(peer, Offence.PROTOCOL_ERROR, f"attestation answer: {e}")
        with contextlib.suppress(Exception):
            await stream.reset()
        raise
    finally:
        with contextlib.suppress(Exception):
            await stream.close()


async def _read_answer(
    host: P2PHost, peer: str, did: DatasetId, reader: FrameReader
) -> list[Attestation]:
    out: list[Attestation] = []
    received = 0
    dropped: list[str] = []
    while True:
        frame = await reader.frame()
        if frame.type == FrameType.END:
            if dropped:  # charged once, after the answer: the good ones are kept
                why = f"{len(dropped)} bad attestation(s): {dropped[0]}"
                host.scores.penalise(peer, Offence.BAD_BYTES, why)
            return out
        if frame.type == FrameType.ERROR:
            answer = reader.json(frame)
            raise RemoteError(f"peer error: {str(answer.get('message'))[:200]}", "error")
        if frame.type != FrameType.CHUNK:
            raise Misbehaved(f"unexpected frame {frame.type}", Offence.PROTOCOL_ERROR)
        received += 1
        if received > MAX_ATTESTATIONS_PER_ANSWER:
            raise Misbehaved("too many attestations in an answer", Offence.LIMIT_EXCEEDED)
        try:
            att = Attestation.from_json(frame.payload)  # signature checked here
        except InvalidAttestation as e:
            dropped.append(str(e))
            continue
        if att.dataset_id != did:
            dropped.append("an attestation of another dataset")
            continue
        out.append(att)


async def peer_attestations(host: P2PHost, peer: str, did: DatasetId) -> list[Attestation]:
    """`fetch_attestations` from asyncio (through `P2PHost.run_trio`)."""
    result: list[Attestation] = await host.run_trio(fetch_attestations, host, peer, did)
    return result
