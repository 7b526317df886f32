"""A hostile gossip peer for tests and ``scripts/bench/gossip_flood.py``.

It writes pubsub RPC frames straight onto a ``/meshsub`` stream (no router, no sender
side rate limit, no outbound queue that drops): what an attacker's own implementation
would do. Messages carry a valid libp2p signature by the hostile host's key unless
``sign=False``, so the receiver's *content* checks are what is exercised.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_uvarint

from p2p.errors import HostNotRunning, TransferError
from p2p.libp2p.host import GOSSIPSUB_PROTOCOLS, P2PHost

#: Messages batched into one RPC frame (a flooder packs frames to cut per-frame cost).
BATCH = 10

_seq = itertools.count(1)


def signed_message(host: P2PHost, topic: str, data: bytes, *, sign: bool = True) -> bytes:
    """One pubsub message from ``host`` (serialized), signed as StrictSign wants."""
    msg = rpc_pb2.Message(
        data=data,
        topicIDs=[topic],
        from_id=host.libp2p_host.get_id().to_bytes(),
        seqno=next(_seq).to_bytes(8, "big"),
    )
    key = host.libp2p_host.get_private_key()
    if sign:
        msg.signature = key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
    else:
        msg.signature = b"\x00" * 64
    msg.key = host.libp2p_host.get_public_key().serialize()
    return msg.SerializeToString()


def frame(messages: list[bytes]) -> bytes:
    """A length-prefixed RPC frame publishing ``messages`` (already serialized)."""
    rpc = rpc_pb2.RPC(publish=[rpc_pb2.Message.FromString(m) for m in messages])
    body = rpc.SerializeToString()
    return encode_uvarint(len(body)) + body


@dataclass(frozen=True)
class FloodResult:
    """What a `flood` did: messages written, and whether the target cut it off."""

    sent: int
    cut_off: bool
    seconds: float


async def flood(
    hostile: P2PHost,
    target: str,
    topic: str,
    payload: Callable[[int], bytes],
    *,
    seconds: float,
    rate: float | None = None,
    sign: bool = True,
) -> FloodResult:
    """Publish ``payload(n)`` from ``hostile`` to peer ``target`` for ``seconds``.

    ``rate`` caps messages per second (``None``: as fast as the stream takes them). Ends
    early, quietly, when the target resets the stream (it banned us).
    """
    stream = await hostile.open_stream(target, GOSSIPSUB_PROTOCOLS[0])
    sent, start, cut_off = 0, time.monotonic(), False
    try:
        while (now := time.monotonic()) - start < seconds:
            if rate is not None and sent >= rate * (now - start):
                await asyncio.sleep(BATCH / rate)
                continue
            batch = [
                signed_message(hostile, topic, payload(sent + i), sign=sign) for i in range(BATCH)
            ]
            try:
                await stream.write(frame(batch))
            except (TransferError, HostNotRunning):
                cut_off = True  # reset by the target
                break
            sent += BATCH
    finally:
        with contextlib.suppress(Exception):
            await stream.close()
    return FloodResult(sent, cut_off, time.monotonic() - start)
