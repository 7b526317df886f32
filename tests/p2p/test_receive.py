"""`p2p.receive`: the checks every pull and push goes through, one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fbs.keys import KeyPair
from fbs.multiformats import Multihash
from p2p.errors import InvalidHeadRecord, PeerMisbehaved
from p2p.head_record import sign_head
from p2p.receive import (
    ChainRuleBroken,
    ObjectJob,
    ReceivedBlock,
    accept_object,
    check_record,
    object_jobs,
    object_store,
    receive_block,
    validate_chain,
)
from storage.dataset import Dataset
from storage.object_store import MAX_BLOCK_SIZE
from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset, new_workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    w = new_workspace(tmp_path / "ws")
    make_dataset(w, "prices", tmp_path / "files", 2, checkpoints=True)
    return w


def _chain(ds: Dataset) -> list[ReceivedBlock]:
    """The dataset's blocks as received, oldest first."""
    return [receive_block(raw, h) for h, raw, _b in reversed(list(ds.iter_blocks()))]


def test_a_block_is_hashed_before_it_is_parsed(ws: Workspace) -> None:
    h, raw, _block = next(iter(ws.get("prices").iter_blocks()))
    assert receive_block(raw, h).hash == h
    assert receive_block(raw).hash == h  # a push names blocks by their content
    with pytest.raises(PeerMisbehaved, match="asked for"):
        receive_block(raw, Multihash.sha3_256(b"other"))
    garbage = b"\x00" * 64
    with pytest.raises(PeerMisbehaved, match="does not decode"):
        receive_block(garbage, Multihash.sha3_256(garbage))
    with pytest.raises(PeerMisbehaved, match="MAX_BLOCK_SIZE"):
        receive_block(b"\x00" * (MAX_BLOCK_SIZE + 1))


def test_the_chain_must_extend_the_local_state(ws: Workspace) -> None:
    ds = ws.get("prices")
    blocks = _chain(ds)
    state = validate_chain(blocks, None)
    assert state.head == ds.head()
    # The tail again on top of the full chain: a stale sender (sequence/parent rules).
    with pytest.raises(ChainRuleBroken) as stale:
        validate_chain(blocks[-1:], state)
    assert stale.value.head_moved
    # A chain with a gap breaks a rule too, and is a PeerMisbehaved for a pull.
    with pytest.raises(PeerMisbehaved):
        validate_chain([blocks[0], blocks[2]], None)


def test_a_record_must_name_the_chains_last_block(ws: Workspace) -> None:
    ds = ws.get("prices")
    state = validate_chain(_chain(ds), None)
    key = ws.keys.load(state.dataset_id)
    check_record(sign_head(key, state.head, state.sequence_number, state.system_time), state)
    older = sign_head(key, state.head, state.sequence_number - 1, state.system_time)
    with pytest.raises(InvalidHeadRecord):
        check_record(older, state)
    stranger = sign_head(KeyPair.generate(), state.head, state.sequence_number, state.system_time)
    with pytest.raises(InvalidHeadRecord):
        check_record(stranger, state)


def test_objects_are_named_once_and_adopted_only_when_they_match(
    ws: Workspace, tmp_path: Path
) -> None:
    src = ws.get("prices")
    jobs = object_jobs(b.block for b in _chain(src) * 2)
    assert len(jobs) == 4 == len({(j.kind, j.hash) for j in jobs})  # 2 slices + 2 checkpoints
    dst = new_workspace(tmp_path / "dst").create_dataset("copy")
    job = jobs[0]
    store = object_store(dst.layout, job.kind)
    data = object_store(src.layout, job.kind).get(job.hash)

    wrong = store.quarantine_path()
    wrong.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(PeerMisbehaved, match="hash mismatch"):
        accept_object(store, job, wrong, None)
    short = store.quarantine_path()
    short.write_bytes(data[:-1])
    with pytest.raises(PeerMisbehaved, match="declares"):
        accept_object(store, job, short, None)
    assert not store.has(job.hash)

    good = store.quarantine_path()
    good.write_bytes(data)
    accept_object(store, ObjectJob(job.kind, job.hash, job.size), good, None)
    assert store.get(job.hash) == data and not good.exists()
