"""Sharded head gossip: topics, backbone shards, content-addressed ids, explicit parameters."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st
from libp2p.pubsub.pb import rpc_pb2

from fbs.did import DatasetId
from p2p.libp2p.settings import MAX_TOPIC_LEN, GossipSettings
from p2p.libp2p.shards import (
    SHARD_COUNT,
    backbone_shards,
    gossip_message_id,
    head_message_id,
    is_shard_topic,
    shard_of,
    shard_topic,
    topic_for,
    wanted_topics,
)
from p2p.libp2p.stack import _gossipsub


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


def test_shard_message_ids_are_the_payloads_not_the_senders() -> None:
    t = shard_topic(7)
    a = rpc_pb2.Message(data=b"record", topicIDs=[t], from_id=b"alice", seqno=b"\x01")
    b = rpc_pb2.Message(data=b"record", topicIDs=[t], from_id=b"bob", seqno=b"\x09")
    c = rpc_pb2.Message(data=b"other", topicIDs=[t], from_id=b"alice", seqno=b"\x01")
    elsewhere = rpc_pb2.Message(data=b"record", topicIDs=[shard_topic(8)], from_id=b"alice")
    assert gossip_message_id(a) == gossip_message_id(b) != gossip_message_id(c)
    assert gossip_message_id(a) == head_message_id(a) != head_message_id(elsewhere)
    assert len(gossip_message_id(a)) == 20


def test_other_topics_keep_sender_and_sequence_ids() -> None:
    # As nodes speaking only the single head topic compute them.
    a = rpc_pb2.Message(data=b"r", topicIDs=["/odf/heads/1.0.0"], from_id=b"alice", seqno=b"\x01")
    b = rpc_pb2.Message(data=b"r", topicIDs=["/odf/heads/1.0.0"], from_id=b"bob", seqno=b"\x01")
    assert gossip_message_id(a) == b"alice\x01" != gossip_message_id(b)
    mixed = rpc_pb2.Message(data=b"r", topicIDs=[shard_topic(1), "/x"], from_id=b"a", seqno=b"2")
    assert gossip_message_id(mixed) == b"a2"
    assert is_shard_topic(shard_topic(3)) and not is_shard_topic("/odf/heads/1.0.0")


def test_wanted_topics_are_the_datasets_and_backbone_shards() -> None:
    ds = [did(i) for i in range(3)]
    got = wanted_topics(ds, (5, 9))
    assert got == {topic_for(d) for d in ds} | {shard_topic(5), shard_topic(9)}
    assert len(wanted_topics([], (), every_shard=True)) == SHARD_COUNT


def test_parameters_are_explicit_and_reach_the_router() -> None:
    gs = GossipSettings()
    assert gs.adaptive_gossip is False and gs.heartbeat_interval_s == 1
    assert gs.max_subscriptions_per_peer > SHARD_COUNT
    router = _gossipsub(gs)
    assert router.heartbeat_interval == 1 and router.adaptive_gossip_enabled is False
    assert (router.degree, router.degree_low, router.degree_high) == (6, 4, 12)
    params = router.scorer.params if router.scorer is not None else None
    assert params is not None
    assert params.graylist_threshold < params.publish_threshold < params.gossip_threshold < 0
    assert params.p7_ip_colocation_weight == 0
