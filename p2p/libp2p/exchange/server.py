"""`ExchangeServer`: answers ``/odf/exchange/1.0.0`` requests from a workspace (trio side).

The server serves only datasets of its workspace, by DID, and only objects present in
that dataset's own ``data/`` or ``checkpoints/`` store (hashes are parsed, never used as
paths). It does not re-hash what it serves: receivers verify. A request that breaks
the protocol (a malformed or oversized frame, JSON over `p2p.peer_json` limits) resets
the stream and charges the peer in `PeerScores` (repeated, it bans the peer); a request
the server cannot answer gets an ERROR frame.

Peers are admitted fairly (`p2p.libp2p.admission`): streams and requests per peer, a
deadline for a new stream's request, object downloads per peer and globally, and a
per-peer upload budget (object rate refused with ``busy`` and a ``retry_after_ms`` hint;
bytes slowed down). A download the client aborts ends quietly and is counted.

Runs in the host's trio thread (see `p2p.libp2p.host`); chain walks and file reads are pushed
to worker threads with ``trio.to_thread``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import trio

from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.multiformats import Multihash
from p2p.errors import (
    FrameTooLarge,
    NotFoundOnPeer,
    PeerMisbehaved,
    TransferError,
    first_error,
)
from p2p.libp2p.admission import Admission, AdmissionLimits, Busy
from p2p.libp2p.exchange.wire import (
    EXCHANGE_PROTOCOL,
    OBJECT_KINDS,
    BadRequest,
    ExchangeLimits,
    FrameReader,
    Misbehaved,
    ObjectKind,
    parse_hash,
    write_frame,
    write_json,
)
from p2p.libp2p.fair_queue import FairAdmission
from p2p.libp2p.framing import FrameType
from p2p.libp2p.host import P2PHost
from p2p.peer_json import PeerJsonError
from p2p.peers import Offence, PeerScores
from storage.errors import DatasetNotFound, ObjectNotFound, StorageError
from storage.verified import verified_object_path
from storage.workspace import Workspace

__all__ = ["ExchangeServer", "HeadRecordProvider"]

log = logging.getLogger(__name__)

HeadRecordProvider = Callable[[DatasetId], bytes | None]
"""Returns the signed head record JSON the server hands out with a dataset's head."""


class ExchangeServer:
    """Serves the exchange protocol from a workspace.

    Args:
        workspace: where datasets are looked up by DID.
        limits: protocol limits.
        head_records: optional provider of signed head records sent with HEAD.
        scores: where a peer that breaks the protocol is charged (default: the
            registering host's `P2PHost.scores`).
        admission: per-peer admission (default: `p2p.libp2p.admission` defaults, with
            ``limits.max_concurrent_requests`` as the global request cap).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        limits: ExchangeLimits | None = None,
        head_records: HeadRecordProvider | None = None,
        scores: PeerScores | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.workspace = workspace
        self.limits = limits or ExchangeLimits()
        self.scores = scores
        self._head_records = head_records
        self.admission = admission or Admission(_admission_limits(self.limits))
        #: Requests refused only for shared capacity wait in per-peer queues served in turn.
        self.fair = FairAdmission(self.admission)
        self.served_requests = 0

    def register(self, host: P2PHost) -> None:
        """Serve `EXCHANGE_PROTOCOL` on ``host`` (charging offences to ``host.scores``)."""
        if self.scores is None:
            self.scores = host.scores
        host.set_stream_handler(EXCHANGE_PROTOCOL, self.handle)

    async def handle(self, stream: Any) -> None:
        """Answer one request on ``stream`` (trio; errors become ERROR frames)."""
        peer = _peer_of(stream)
        if not self.admission.open_stream(peer):
            # Over this peer's stream limit: nothing is read from it.
            with contextlib.suppress(Exception):
                await stream.reset()
            return
        try:
            await self._handle(stream, peer)
        except (TransferError, PeerMisbehaved) as e:
            # A malformed or oversized frame, a stall, a download the client gave up
            # on: the stream is reset (not closed as if the answer were complete);
            # unread bytes of the peer are dropped. One debug line, no traceback.
            log.debug("exchange request aborted: %s", e)
            if not isinstance(e, PeerMisbehaved | FrameTooLarge):
                self.admission.stats.aborted_downloads += 1
            self._charge(stream, e)
            with contextlib.suppress(Exception):
                await stream.reset()
        finally:
            self.admission.close_stream(peer)

    def _charge(self, stream: Any, e: Exception) -> None:
        """Penalise the peer for a request that broke the protocol (not for stalls or
        resets: an honest client may give up on a download)."""
        if isinstance(e, Misbehaved | PeerJsonError):
            offence = e.offence
        elif isinstance(e, FrameTooLarge):
            offence = Offence.LIMIT_EXCEEDED
        elif isinstance(e, PeerMisbehaved):
            offence = Offence.PROTOCOL_ERROR
        else:
            return
        try:
            peer = str(stream.muxed_conn.peer_id)
        except AttributeError:  # not a libp2p stream (tools)
            return
        if self.scores is not None:
            self.scores.penalise(peer, offence, f"exchange request: {e}")

    async def _handle(self, stream: Any, peer: str) -> None:
        limits = self.limits
        reader = FrameReader(stream, limits)
        with trio.move_on_after(self.admission.limits.request_timeout_s) as deadline:
            frame = await reader.frame()
        if deadline.cancelled_caught:
            # Silent past the request deadline: a parked stream, not an offence.
            self.admission.stats.idle_closed += 1
            with contextlib.suppress(Exception):
                await stream.reset()
            return
        if frame.type != FrameType.REQUEST:
            raise Misbehaved("expected a REQUEST frame", Offence.PROTOCOL_ERROR)
        request = reader.json(frame)
        op = request.get("op")
        ticket = await self.fair.admit(peer, op if op in ("head", "blocks", "object") else "head")
        if isinstance(ticket, Busy):
            await self._busy(stream, ticket)
            return
        try:
            await self._dispatch(stream, request, peer)
        except BadRequest as e:
            await self._error(stream, "bad_request", str(e))
        except (DatasetNotFound, ObjectNotFound, NotFoundOnPeer) as e:
            await self._error(stream, "not_found", str(e))
        except (StorageError, FbsError) as e:
            log.warning("exchange: cannot serve %s: %s", request.get("op"), e)
            await self._error(stream, "internal", "stored data unavailable")
        else:
            self.served_requests += 1
        finally:
            self.fair.release(ticket)

    async def _busy(self, stream: Any, busy: Busy) -> None:
        answer = {
            "code": "busy",
            "message": busy.reason,
            "retry_after_ms": int(busy.retry_after_s * 1000),
        }
        with contextlib.suppress(TransferError):
            await write_json(stream, FrameType.ERROR, answer, self.limits)

    async def _error(self, stream: Any, code: str, message: str) -> None:
        await write_json(
            stream, FrameType.ERROR, {"code": code, "message": message[:500]}, self.limits
        )

    async def _dispatch(self, stream: Any, request: dict[str, Any], peer: str) -> None:
        op = request.get("op")
        did_text = request.get("dataset")
        if not isinstance(did_text, str) or not did_text.startswith("did:"):
            raise BadRequest("dataset must be a did:odf string")
        try:
            did = DatasetId.from_did(did_text)
        except FbsError:
            raise BadRequest("invalid dataset id") from None
        if op == "head":
            await self._serve_head(stream, did)
        elif op == "blocks":
            head = parse_hash(request.get("head"), "head")
            stop = request.get("stop_at")
            stop_at = None if stop is None else parse_hash(stop, "stop_at")
            max_blocks = request.get("max_blocks", self.limits.max_blocks_per_request)
            if type(max_blocks) is not int or max_blocks < 1:
                raise BadRequest("max_blocks must be a positive integer")
            await self._serve_blocks(stream, did, head, stop_at, max_blocks)
        elif op == "object":
            kind = request.get("kind")
            if kind not in OBJECT_KINDS:
                raise BadRequest("kind must be 'data' or 'checkpoint'")
            h = parse_hash(request.get("hash"), "hash")
            await self._serve_object(stream, did, kind, h, peer)
        else:
            raise BadRequest("unknown op")

    async def _serve_head(self, stream: Any, did: DatasetId) -> None:
        def read() -> tuple[Multihash | None, bytes | None]:
            ds = self.workspace.get(did)
            record = self._head_records(did) if self._head_records is not None else None
            return ds.head(), record

        head, record = await trio.to_thread.run_sync(read)
        obj = {
            "head": None if head is None else head.to_multibase(),
            "record": None if record is None else record.decode("utf-8", "replace"),
        }
        await write_json(stream, FrameType.HEAD, obj, self.limits)

    async def _serve_blocks(
        self,
        stream: Any,
        did: DatasetId,
        head: Multihash,
        stop_at: Multihash | None,
        max_blocks: int,
    ) -> None:
        limits = self.limits
        count = min(max_blocks, limits.max_blocks_per_request)
        budget = min(limits.max_block_bytes_per_request, limits.max_frame_bytes * count)

        def collect() -> list[bytes]:
            ds = self.workspace.get(did)
            out: list[bytes] = []
            size = 0
            for h, raw, _block in ds.iter_blocks(head):
                if h == stop_at or len(out) >= count:
                    break
                if out and size + len(raw) > budget:
                    break
                if len(raw) > limits.max_frame_bytes:
                    raise StorageError(f"block {h} is larger than a frame")
                out.append(raw)
                size += len(raw)
            return out

        for raw in await trio.to_thread.run_sync(collect):
            await write_frame(stream, FrameType.BLOCK, raw, limits.stall_timeout_s)
        await write_frame(stream, FrameType.END, b"", limits.stall_timeout_s)

    async def _serve_object(
        self, stream: Any, did: DatasetId, kind: ObjectKind, h: Multihash, peer: str
    ) -> None:
        limits = self.limits

        def open_object() -> tuple[Any, int]:
            layout = self.workspace.get(did).layout
            store = layout.data if kind == "data" else layout.checkpoints
            verified_object_path(store.root, kind, h, None)  # never serve damaged bytes
            f = store.open(h)
            return f, os.fstat(f.fileno()).st_size

        f, size = await trio.to_thread.run_sync(open_object)
        with f:
            await write_json(stream, FrameType.OBJECT, {"size": size}, limits)
            chunk = min(limits.chunk_bytes, limits.max_frame_bytes)
            sent = 0
            data = await trio.to_thread.run_sync(f.read, min(chunk, size))
            # The next chunk is read from the file (worker thread) while this one is
            # written to the stream.
            while data:
                delay = self.admission.upload_delay(peer, len(data))
                if delay > 0:
                    await trio.sleep(delay)  # over the peer's upload budget: slow down
                sent += len(data)
                next_n = min(chunk, size - sent)
                data = await _write_reading_ahead(stream, data, f, next_n, limits.stall_timeout_s)
                # An empty read: the file shrank under us; the client sees a short object.
        await write_frame(stream, FrameType.END, b"", limits.stall_timeout_s)


def _peer_of(stream: Any) -> str:
    try:
        return str(stream.muxed_conn.peer_id)
    except AttributeError:  # not a libp2p stream (tools, in-memory tests)
        return "?"


def _admission_limits(limits: ExchangeLimits) -> AdmissionLimits:
    cap = limits.max_concurrent_requests
    return AdmissionLimits(max_requests=cap, reserved_requests=min(8, cap // 8))


async def _write_reading_ahead(
    stream: Any, data: bytes, f: Any, next_n: int, timeout_s: float
) -> bytes:
    """Write ``data`` as a CHUNK while the next ``next_n`` bytes are read from ``f``.

    A failure comes out as itself (a client that aborts its download makes the write
    raise `TransferError`), not wrapped in trio's exception group, so the server's
    handler ends the request quietly instead of the host logging a handler failure.
    """
    ahead: list[bytes] = []
    try:
        async with trio.open_nursery() as nursery:
            if next_n > 0:
                nursery.start_soon(_read_into, f, next_n, ahead)
            await write_frame(stream, FrameType.CHUNK, data, timeout_s)
    except BaseExceptionGroup as group:
        raise first_error(group) from None
    return ahead[0] if ahead else b""


async def _read_into(f: Any, n: int, out: list[bytes]) -> None:
    out.append(await trio.to_thread.run_sync(f.read, n))
