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
* `gossip_message_id`: on shard topics a message's id is a hash of its topic and payload
  (a signed head record), so one record re-announced by several replicas is one message,
  deduplicated before it reaches the application; on every other topic (the single head
  topic, attestations) it stays py-libp2p's ``from + seqno``, as nodes that speak only
  the single topic compute it. Providers are learned from the DHT and the single topic,
  not from re-gossip on the shards.
* `wanted_topics`: the shard topics a node subscribes to for the datasets it publishes
  or follows, plus its backbone shards.

The gossipsub parameters of every topic are in `p2p.libp2p.settings.GossipSettings`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from fbs.did import DatasetId

__all__ = [
    "BACKBONE_EPOCH_S",
    "BACKBONE_SHARDS_PER_NODE",
    "SHARD_COUNT",
    "backbone_shards",
    "current_epoch",
    "gossip_message_id",
    "head_message_id",
    "is_shard_topic",
    "shard_of",
    "shard_topic",
    "topic_for",
    "wanted_topics",
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


class _Message(Protocol):
    @property
    def data(self) -> bytes: ...
    @property
    def topicIDs(self) -> Sequence[str]: ...  # the protobuf field
    @property
    def from_id(self) -> bytes: ...
    @property
    def seqno(self) -> bytes: ...


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


def is_shard_topic(topic: str) -> bool:
    """Whether ``topic`` names a head shard (of any count)."""
    return topic.startswith(_TOPIC_PREFIX + "/")


def current_epoch(unix_time: float) -> int:
    """The backbone epoch of ``unix_time``."""
    return int(unix_time // BACKBONE_EPOCH_S)


def wanted_topics(
    datasets: Iterable[DatasetId],
    backbone: Iterable[int],
    *,
    every_shard: bool = False,
    count: int = SHARD_COUNT,
) -> frozenset[str]:
    """The shard topics of ``datasets`` and of the ``backbone`` shards; all with ``every_shard``."""
    if every_shard:
        return frozenset(shard_topic(i, count) for i in range(count))
    topics = {topic_for(d, count) for d in datasets}
    topics.update(shard_topic(i, count) for i in backbone)
    return frozenset(topics)


def head_message_id(msg: _Message) -> bytes:
    """A shard message's id: 20 bytes of sha2-256 over a domain, its topics and payload.

    The topics are part of it: a record sent on a shard it does not belong to is refused
    by the validator (and py-libp2p caches that verdict by message id), which must not
    condemn the same record on its own shard.
    """
    h = hashlib.sha256(_MESSAGE_DOMAIN)
    for topic in msg.topicIDs:
        h.update(topic.encode() + b"\x00")
    h.update(bytes(msg.data))
    return h.digest()[:MESSAGE_ID_BYTES]


def gossip_message_id(msg: _Message) -> bytes:
    """The id of any gossip message: `head_message_id` on shard topics, else ``from + seqno``."""
    topics = list(msg.topicIDs)
    if topics and all(is_shard_topic(t) for t in topics):
        return head_message_id(msg)
    return bytes(msg.from_id) + bytes(msg.seqno)
