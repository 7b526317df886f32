"""`pull_dataset` against hostile and broken peers, without sockets (`MemorySource`).

Each fault is refused and nothing unverified becomes visible: a failed clone leaves no
dataset, a failed update leaves the local head where it was, every stored object hashes
to its name, no quarantine file is left behind. With an honest source beside the
faulty one, the pull completes from it. Real end-to-end pulls over libp2p and HTTP are
in ``test_exchange.py``, ``test_sync_http.py`` and ``test_network_e2e.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fbs.multiformats import Multihash
from p2p.errors import NotDescendant, PeerMisbehaved, PeerUnavailable
from p2p.memory_source import NO_FAULTS, Faults, MemorySource
from p2p.sync import PullResult, pull_dataset
from storage.dataset import Dataset
from storage.errors import DatasetNotFound
from storage.verify import verify_integrity
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60))


@dataclass
class Pair:
    src: Dataset
    dst: Workspace
    tmp: Path

    def source(self, faults: Faults = NO_FAULTS, label: str = "peer") -> MemorySource:
        return MemorySource.of_dataset(self.src, faults, label=label)

    def pull(self, *sources: MemorySource) -> PullResult:
        state = self.src.state()
        assert state is not None
        return run(
            pull_dataset(self.dst, list(sources), dataset_id=state.dataset_id, alias="prices")
        )

    def new_objects(self) -> list[Multihash]:
        """Data slices of the source not held by the destination's copy (if any)."""
        held: set[Multihash] = set()
        with contextlib.suppress(DatasetNotFound):
            held = set(self.dst.get("prices").layout.data.iter_hashes())
        return [h for h in self.src.layout.data.iter_hashes() if h not in held]


@pytest.fixture
def pair(tmp_path: Path) -> Pair:
    src_ws = new_workspace(tmp_path / "src")
    ds = make_dataset(src_ws, "prices", tmp_path / "files", 3, checkpoints=True)
    return Pair(ds, new_workspace(tmp_path / "dst"), tmp_path)


def pending(ws: Workspace) -> list[str]:
    return [
        os.path.join(root, f)
        for root, _dirs, files in os.walk(ws.root)
        for f in files
        if f.startswith(".pending")
    ]


def assert_nothing_visible(p: Pair, head_before: Multihash | None) -> None:
    """The destination shows no unverified byte (see the module docstring)."""
    assert pending(p.dst) == []
    if head_before is None:
        assert p.dst.list() == []
        with pytest.raises(DatasetNotFound):
            p.dst.get("prices")
        return
    copy = p.dst.get("prices")
    assert copy.head() == head_before
    # No block of the refused chain was named (they are written ahead in quarantine only).
    assert set(copy.layout.blocks.iter_hashes()) == {h for h, _r, _b in copy.iter_blocks()}
    for store in (copy.layout.data, copy.layout.checkpoints):
        for h in store.iter_hashes():
            store.check(h)  # raises if the bytes do not hash to the name
    assert verify_integrity(copy).ok


def clone_then_grow(p: Pair) -> Multihash:
    """Clone ``p.src`` into ``p.dst``, then add two slices at the source; the old head."""
    p.pull(p.source())
    head = p.dst.get("prices").head()
    assert head is not None
    add_slices(p.src, p.tmp / "more", 2, checkpoints=True)
    return head


# -- one faulty source: refused, nothing visible --------------------------------------------


@pytest.mark.parametrize("grow", [False, True], ids=["clone", "update"])
@pytest.mark.parametrize("fault", ["wrong_bytes", "truncated", "tampered_block", "missing"])
def test_a_faulty_only_source_is_refused(pair: Pair, fault: str, grow: bool) -> None:
    before = clone_then_grow(pair) if grow else None
    obj = pair.new_objects()[0]
    head = pair.src.head()
    assert head is not None
    faults = {
        "wrong_bytes": Faults(wrong_bytes=frozenset({obj})),
        "truncated": Faults(truncated=frozenset({obj})),
        "tampered_block": Faults(tampered_blocks=frozenset({head})),
        "missing": Faults(missing=frozenset({obj})),
    }[fault]
    bad = pair.source(faults)
    with pytest.raises(PeerUnavailable):
        pair.pull(bad)
    assert_nothing_visible(pair, before)


def test_a_false_head_naming_no_block_is_refused(pair: Pair) -> None:
    bad = pair.source(Faults(head=Multihash.sha3_256(b"no such block")))
    with pytest.raises(PeerUnavailable):
        pair.pull(bad)
    assert_nothing_visible(pair, None)


def test_a_rolled_back_head_is_refused(pair: Pair) -> None:
    before = clone_then_grow(pair)
    pair.pull(pair.source())  # the copy is at the newest head
    newest = pair.dst.get("prices").head()
    assert newest is not None and newest != before
    # A source claiming the older head: going back is not an update.
    with pytest.raises(NotDescendant):
        pair.pull(pair.source(Faults(head=before)))
    assert_nothing_visible(pair, newest)


def test_a_head_of_another_dataset_is_refused(pair: Pair) -> None:
    other_ws = new_workspace(pair.tmp / "other")
    other = make_dataset(other_ws, "prices", pair.tmp / "other-files", 1)
    state = pair.src.state()
    assert state is not None
    impostor = MemorySource.of_dataset(other)
    with pytest.raises((PeerMisbehaved, PeerUnavailable)):
        run(pull_dataset(pair.dst, impostor, dataset_id=state.dataset_id, alias="prices"))
    assert_nothing_visible(pair, None)


# -- a faulty source beside an honest one: the honest one serves ----------------------------


@pytest.mark.parametrize("grow", [False, True], ids=["clone", "update"])
def test_honest_source_completes_what_the_faulty_one_breaks(pair: Pair, grow: bool) -> None:
    if grow:
        clone_then_grow(pair)
    objects = pair.new_objects()
    head = pair.src.head()
    assert head is not None
    faults = Faults(
        wrong_bytes=frozenset(objects[:1]),
        truncated=frozenset(objects[1:2]),
        tampered_blocks=frozenset({head}),
    )
    bad = pair.source(faults, label="bad")
    honest = pair.source(label="honest")
    result = pair.pull(bad, honest)
    assert result.new_head == head
    assert "memory:bad" in result.dropped and "memory:honest" not in result.dropped
    assert result.penalties["memory:bad"]
    copy = pair.dst.get("prices")
    assert copy.head() == head
    assert verify_integrity(copy).ok
    assert pending(pair.dst) == []


def test_missing_blocks_and_down_sources_are_worked_around(pair: Pair) -> None:
    state = pair.src.state()
    assert state is not None
    chain = [h for h, _raw, _block in pair.src.iter_blocks(pair.src.head())]
    # One source lacks a block in the middle of the chain, another is unreachable:
    # the walk continues from where the first stopped, with the honest source.
    gappy = MemorySource.of_dataset(
        pair.src, Faults(missing=frozenset({chain[2]})), batch_blocks=1, label="gappy"
    )
    down = pair.source(Faults(down=True), label="down")
    honest = MemorySource.of_dataset(pair.src, batch_blocks=1, label="honest")
    result = pair.pull(down, gappy, honest)
    assert result.new_head == chain[0]
    assert gappy.calls["get_blocks"] >= 2 and honest.calls["get_blocks"] >= 1
    assert "memory:down" in result.penalties
    assert verify_integrity(pair.dst.get("prices")).ok
