"""Sharded head gossip: topics, backbone shards, content-addressed ids, explicit parameters."""

from __future__ import annotations

import collections
import inspect

import pytest
from hypothesis import given
from hypothesis import strategies as st
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub

from fbs.did import DatasetId
from p2p.libp2p.settings import MAX_TOPIC_LEN
from p2p.libp2p.shards import (
    SHARD_COUNT,
    ShardGossipParams,
    backbone_shards,
    head_message_id,
    shard_of,
    shard_topic,
    topic_for,
)


def did(i: int) -> DatasetId:
    return DatasetId.new_seeded(i.to_bytes(8, "big"))


def test_a_dataset_has_one_topic_whatever_its_did_spelling() -> None:
    d = did(1)
    again = DatasetId.from_did(d.to_did_odf())
    assert topic_for(again) == topic_for(d) == f"/odf/heads/shard/256/{shard_of(d)}"
    assert len(shard_topic(SHARD_COUNT - 1)) <= MAX_TOPIC_LEN


def test_datasets_spread_over_every_shard() -> None:
    counts = collections.Counter(shard_of(did(i)) for i in range(25_600))
    assert len(counts) == SHARD_COUNT
    # 100 per shard expected; a binomial spread stays well inside 50..160.
    assert min(counts.values()) >= 50 and max(counts.values()) <= 160


@given(st.integers(0, 2**32))
def test_a_smaller_power_of_two_nests(seed: int) -> None:
    d = did(seed)
    assert shard_of(d, 16) == shard_of(d, 256) % 16
    assert shard_of(d, 1) == 0


@pytest.mark.parametrize("count", [0, 3, 100, 1 << 17])
def test_counts_that_are_not_powers_of_two_are_refused(count: int) -> None:
    with pytest.raises(ValueError):
        shard_of(did(1), count)
    with pytest.raises(ValueError):
        shard_topic(0, count)


def test_shard_index_is_checked() -> None:
    with pytest.raises(ValueError):
        shard_topic(SHARD_COUNT)
    with pytest.raises(ValueError):
        shard_topic(-1)


@given(st.binary(min_size=1, max_size=40), st.integers(0, 10_000), st.integers(0, 8))
def test_backbone_shards_are_distinct_stable_and_in_range(peer: bytes, epoch: int, n: int) -> None:
    got = backbone_shards(peer, epoch, per_node=n)
    assert got == backbone_shards(peer, epoch, per_node=n)
    assert len(set(got)) == n and all(0 <= s < SHARD_COUNT for s in got)


def test_backbone_shards_move_with_the_epoch_and_differ_per_node() -> None:
    peer = b"peer-a"
    moved = {backbone_shards(peer, e) for e in range(20)}
    assert len(moved) > 10
    nodes = {backbone_shards(f"peer-{i}".encode(), 0) for i in range(50)}
    assert len(nodes) > 40
    assert backbone_shards(peer, 0, count=2, per_node=2) == (0, 1)
    with pytest.raises(ValueError):
        backbone_shards(peer, 0, count=2, per_node=3)


def test_message_ids_are_the_payloads_not_the_senders() -> None:
    a = rpc_pb2.Message(data=b"record", from_id=b"alice", seqno=b"\x01")
    b = rpc_pb2.Message(data=b"record", from_id=b"bob", seqno=b"\x09")
    c = rpc_pb2.Message(data=b"other", from_id=b"alice", seqno=b"\x01")
    assert head_message_id(a) == head_message_id(b) != head_message_id(c)
    assert len(head_message_id(a)) == 20


def test_parameters_are_explicit_and_name_real_py_libp2p_arguments() -> None:
    p = ShardGossipParams()
    gs = p.gossipsub_kwargs()
    assert gs["adaptive_gossip_enabled"] is False and gs["heartbeat_interval"] == 1
    assert set(gs) <= set(inspect.signature(GossipSub.__init__).parameters)
    ps = p.pubsub_kwargs()
    assert set(ps) <= set(inspect.signature(Pubsub.__init__).parameters)
    assert ps["max_subscriptions_per_peer"] > SHARD_COUNT
    assert ps["msg_id_constructor"] is head_message_id
    router = GossipSub(protocols=[], **gs)
    assert router.heartbeat_interval == 1
