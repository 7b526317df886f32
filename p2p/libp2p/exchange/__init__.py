"""The object exchange protocol ``/odf/exchange/1.0.0``: server and client (trio side).

The parts: `p2p.libp2p.framing` (frames, no I/O), `p2p.libp2p.exchange.wire` (limits and the async
frame adapter), `p2p.libp2p.exchange.server` and `p2p.libp2p.exchange.client`; this module names the
public API and describes the protocol.

One request per libp2p stream. Every message is a frame::

    u32 big-endian payload length | u8 frame type | payload

Frame types and payloads:

============  ======================================================================
REQUEST (1)   JSON object, client -> server (see below)
BLOCK (2)     the raw bytes of one metadata block
OBJECT (3)    JSON ``{"size": n}``: the object's byte count, then CHUNK frames
CHUNK (4)     a slice of the object's bytes
END (5)       empty: the response is complete
ERROR (6)     JSON ``{"code": "not_found"|"bad_request"|"busy"|"internal", "message": s}``
HEAD (7)      JSON ``{"head": multibase|null, "record": head-record JSON text|null}``
============  ======================================================================

Requests (all carry ``"dataset": "did:odf:..."``):

* ``{"op": "head"}`` -> HEAD.
* ``{"op": "blocks", "head": h, "stop_at": h|null, "max_blocks": n}`` -> BLOCK frames
  from ``head`` backwards (newest first), stopping *before* ``stop_at``, at the Seed, or
  at the batch limits (``max_blocks``, `ExchangeLimits.max_blocks_per_request`,
  `ExchangeLimits.max_block_bytes_per_request`), then END. The client continues with
  the parent of the last block it got.
* ``{"op": "object", "kind": "data"|"checkpoint", "hash": h}`` -> OBJECT, CHUNKs, END.

Limits are named in `ExchangeLimits`; a frame over its limit is refused from its
length prefix, before any of its payload is kept (`FrameTooLarge`), and the stream is
reset; JSON payloads are decoded within `ExchangeLimits.json_limits`
(`p2p.peer_json`: nesting, number and string sizes); a peer that sends nothing for
`stall_timeout_s` fails with `TransferTimeout`.

The client verifies every block and object it receives (`p2p.libp2p.exchange.client`); the
server serves only what its workspace holds (`p2p.libp2p.exchange.server`).

Everything here runs in the host's trio thread (see `p2p.libp2p.host`); blocking file work
(chain walks, fsync, file reads) is pushed to worker threads with ``trio.to_thread``.
"""

from __future__ import annotations

from p2p.libp2p.exchange.client import ExchangeClient, RemoteHead
from p2p.libp2p.exchange.server import ExchangeServer, HeadRecordProvider
from p2p.libp2p.exchange.wire import (
    DEFAULT_CHUNK_BYTES,
    EXCHANGE_PROTOCOL,
    STREAM_WRITE_BYTES,
    ExchangeLimits,
    ObjectKind,
    read_frame_header,
    write_frame,
)
from p2p.libp2p.framing import FrameType

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "EXCHANGE_PROTOCOL",
    "STREAM_WRITE_BYTES",
    "ExchangeClient",
    "ExchangeLimits",
    "ExchangeServer",
    "FrameType",
    "HeadRecordProvider",
    "ObjectKind",
    "RemoteHead",
    "read_frame_header",
    "write_frame",
]
