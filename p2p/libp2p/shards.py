"""Sharded head gossip: which topic a dataset's head announcements use (pure).

One global head topic makes every node check every announcement of the network, and
py-libp2p drops what one forwarder relays above 10 messages a second per topic, which
caps the whole network near that rate. Sharding spreads datasets over `SHARD_COUNT`
topics by a hash of the dataset ID, as Ethereum spreads attestations over 64 subnets:

* `shard_of` / `shard_topic`: ``/odf/heads/shard/<count>/<index>``. The shard count is
  in the name, so a network that grows the count (a power of two: more bits of the same
  hash) uses new topics instead of mixing two layouts on one.
* `backbone_shards`: every node also joins `BACKBONE_SHARDS_PER_NODE` shards derived
  from its peer id and an epoch (rotated daily), so each shard has a live mesh even
  when few of its members follow a dataset in it (Ethereum's two attnets per node).
* `head_message_id`: message ids are a hash of the payload (a signed head record), so
  one record re-announced by several replicas is one message, deduplicated before it
  reaches the application; providers are learned from the DHT, not from re-gossip.
* `ShardGossipParams`: the gossipsub parameters of the shard topics, each set
  explicitly (py-libp2p's defaults include a 120 s heartbeat and an "adaptive" one that
  slows to 30-60 s on a struggling network).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final, Protocol

from fbs.did import DatasetId

__all__ = [
    "BACKBONE_EPOCH_S",
    "BACKBONE_SHARDS_PER_NODE",
    "SHARD_COUNT",
    "ShardGossipParams",
    "backbone_shards",
    "head_message_id",
    "shard_of",
    "shard_topic",
    "topic_for",
]

#: Shards of the head topic: 10^6 datasets updating hourly give about 1.1 msg/s per
#: shard, under the 10 msg/s per-forwarder limit with room to spare. A power of two.
SHARD_COUNT: Final = 256
#: Shards every node relays whether or not it follows a dataset in them.
BACKBONE_SHARDS_PER_NODE: Final = 2
#: How long a node keeps its backbone shards before the next epoch moves them.
BACKBONE_EPOCH_S: Final = 24 * 3600
#: Longest message id: 20 bytes of SHA-256, as Ethereum's content-addressed ids.
MESSAGE_ID_BYTES: Final = 20
_TOPIC_PREFIX: Final = "/odf/heads/shard"
_MESSAGE_DOMAIN: Final = b"odf-head-gossip\x00"
_MAX_SHARDS: Final = 1 << 16


class _HasData(Protocol):
    @property
    def data(self) -> bytes: ...


def _check_count(count: int) -> None:
    if not (1 <= count <= _MAX_SHARDS and count & (count - 1) == 0):
        raise ValueError(f"shard count must be a power of two up to {_MAX_SHARDS}: {count}")


def shard_of(dataset_id: DatasetId, count: int = SHARD_COUNT) -> int:
    """The shard of a dataset: the first 16 bits of sha2-256 of its canonical DID, mod count.

    Raises:
        ValueError: ``count`` is not a power of two in [1, 65536].
    """
    _check_count(count)
    digest = hashlib.sha256(dataset_id.to_did_odf().encode("ascii")).digest()
    return int.from_bytes(digest[:2], "big") % count


def shard_topic(shard: int, count: int = SHARD_COUNT) -> str:
    """The topic of shard ``shard`` among ``count``.

    Raises:
        ValueError: a bad count, or ``shard`` outside [0, count).
    """
    _check_count(count)
    if not 0 <= shard < count:
        raise ValueError(f"shard {shard} outside 0..{count - 1}")
    return f"{_TOPIC_PREFIX}/{count}/{shard}"


def topic_for(dataset_id: DatasetId, count: int = SHARD_COUNT) -> str:
    """The head topic of a dataset."""
    return shard_topic(shard_of(dataset_id, count), count)


def backbone_shards(
    peer_id: bytes,
    epoch: int,
    count: int = SHARD_COUNT,
    per_node: int = BACKBONE_SHARDS_PER_NODE,
) -> tuple[int, ...]:
    """The distinct backbone shards of a node in ``epoch`` (sorted).

    ``epoch`` is ``unix_time // BACKBONE_EPOCH_S``: every node computes every other
    node's shards from its peer id, and they move once a day.

    Raises:
        ValueError: a bad count, or ``per_node`` outside [0, count].
    """
    _check_count(count)
    if not 0 <= per_node <= count:
        raise ValueError(f"backbone shards per node outside 0..{count}: {per_node}")
    chosen: list[int] = []
    counter = 0
    while len(chosen) < per_node:
        seed = peer_id + epoch.to_bytes(8, "big", signed=True) + counter.to_bytes(4, "big")
        shard = int.from_bytes(hashlib.sha256(seed).digest()[:2], "big") % count
        if shard not in chosen:
            chosen.append(shard)
        counter += 1
    return tuple(sorted(chosen))


def head_message_id(msg: _HasData) -> bytes:
    """A gossip message's id: 20 bytes of sha2-256 over a domain and the payload."""
    return hashlib.sha256(_MESSAGE_DOMAIN + bytes(msg.data)).digest()[:MESSAGE_ID_BYTES]


@dataclass(frozen=True, slots=True)
class ShardGossipParams:
    """The gossipsub parameters of the shard topics, all explicit.

    Attributes:
        degree / degree_low / degree_high: mesh size D / D_lo / D_hi (the spec's 6/4/12).
        heartbeat_interval_s: mesh maintenance every second (the spec's value).
        adaptive_gossip: off: py-libp2p's adaptive mode would stretch the heartbeat to
            30-60 s when it judges the network unhealthy, slowing mesh repair.
        fanout_ttl_s / gossip_window / gossip_history: the spec's 60 s, 3 and 5.
        seen_ttl_s: a message id is remembered 2 min (the spec's value).
        max_messages_per_topic_per_second: py-libp2p's per-forwarder limit, per shard.
        max_subscriptions_per_peer: a remote peer may announce every shard plus a few
            other topics (py-libp2p's default of 100 is below `SHARD_COUNT`).
    """

    degree: int = 6
    degree_low: int = 4
    degree_high: int = 12
    heartbeat_interval_s: int = 1
    adaptive_gossip: bool = False
    fanout_ttl_s: int = 60
    gossip_window: int = 3
    gossip_history: int = 5
    seen_ttl_s: int = 120
    max_messages_per_topic_per_second: float = 10.0
    max_subscriptions_per_peer: int = SHARD_COUNT + 64

    def gossipsub_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of py-libp2p's ``GossipSub`` for these parameters."""
        return {
            "degree": self.degree,
            "degree_low": self.degree_low,
            "degree_high": self.degree_high,
            "heartbeat_interval": self.heartbeat_interval_s,
            "adaptive_gossip_enabled": self.adaptive_gossip,
            "time_to_live": self.fanout_ttl_s,
            "gossip_window": self.gossip_window,
            "gossip_history": self.gossip_history,
            "max_messages_per_topic_per_second": self.max_messages_per_topic_per_second,
        }

    def pubsub_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of py-libp2p's ``Pubsub`` for these parameters."""
        return {
            "msg_id_constructor": head_message_id,
            "seen_ttl": self.seen_ttl_s,
            "max_subscriptions_per_peer": self.max_subscriptions_per_peer,
        }
