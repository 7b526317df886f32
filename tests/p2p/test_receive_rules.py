"""`p2p.receive`, rule by rule: each test names the rule of the receive path it pins.

Written for mutation testing (docs/mutation-testing.md): each rule here could be
deleted or inverted with `tests/p2p/test_receive.py` and the crash tests still passing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.model import MetadataBlock
from fbs.multiformats import Multihash
from p2p.errors import InvalidHeadRecord, NotDescendant, PeerMisbehaved
from p2p.head_record import HeadRecord, sign_head
from p2p.head_store import HeadStore
from p2p.receive import (
    ADOPT_BATCH_BYTES,
    ChainRuleBroken,
    CheckedObjects,
    ObjectJob,
    PendingBlocks,
    ReceivedBlock,
    accept_head_record,
    accept_object,
    check_object,
    check_record,
    commit_received,
    hash_file,
    object_jobs,
    object_store,
    receive_block,
    stored_size,
    validate_chain,
)
from storage.chain import ChainState
from storage.dataset import Dataset
from storage.errors import ChainRuleViolation, HashMismatch, InvalidAlias, InvalidAppend
from storage.layout import DatasetLayout
from storage.object_store import MAX_BLOCK_SIZE, DiskObjectStore
from storage.staging import open_staging, staging_lock
from storage.workspace import Workspace
from tests.p2p.sync_helpers import add_slices, make_dataset, new_workspace

MIB = 1 << 20


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    w = new_workspace(tmp_path / "ws")
    make_dataset(w, "prices", tmp_path / "files", 2, checkpoints=True)
    return w


def _chain(ds: Dataset) -> list[ReceivedBlock]:
    """The dataset's blocks as received, oldest first."""
    return [receive_block(raw, h) for h, raw, _b in reversed(list(ds.iter_blocks()))]


def _record(ws: Workspace, b: ReceivedBlock) -> HeadRecord:
    """The record the dataset's owner signs for block ``b``."""
    key = ws.keys.load(ws.resolve("prices").id)
    return sign_head(key, b.hash, b.block.sequence_number, b.block.system_time)


def _state(ws: Workspace) -> ChainState:
    """The validated state of the "prices" chain (its DID is the Seed's)."""
    state = ws.get("prices").state()
    assert state is not None
    return state


def _did(ds: Dataset) -> DatasetId:
    """The dataset's DID, as its Seed names it."""
    state = ds.state()
    assert state is not None
    return state.dataset_id


# -- 1. blocks --------------------------------------------------------------------------------


def test_block_size_limit_is_16_mib_inclusive() -> None:
    assert MAX_BLOCK_SIZE == 16 * MIB
    # Exactly at the limit the block is hashed and parsed (and refused as garbage), one
    # byte more is refused before hashing.
    with pytest.raises(PeerMisbehaved, match="does not decode"):
        receive_block(b"\x00" * (16 * MIB))
    with pytest.raises(PeerMisbehaved, match="MAX_BLOCK_SIZE"):
        receive_block(b"\x00" * (16 * MIB + 1))


def test_only_bytes_are_received_as_a_block(ws: Workspace) -> None:
    h, raw, _b = next(iter(ws.get("prices").iter_blocks()))
    for other in (bytearray(raw), memoryview(raw)):
        with pytest.raises(PeerMisbehaved):
            receive_block(other, h)  # type: ignore[arg-type]


def test_a_received_block_keeps_its_hash_bytes_and_decoded_block(ws: Workspace) -> None:
    for h, raw, block in ws.get("prices").iter_blocks():
        got = receive_block(raw, h)
        assert got == ReceivedBlock(h, raw, block)
        assert got.raw is raw


def test_a_block_hashed_otherwise_than_expected_is_refused_even_if_it_decodes(
    ws: Workspace,
) -> None:
    blocks = list(ws.get("prices").iter_blocks())
    (h0, raw0, _), (h1, _raw1, _) = blocks[0], blocks[1]
    with pytest.raises(PeerMisbehaved, match="asked for"):
        receive_block(raw0, h1)
    assert receive_block(raw0, None).hash == h0


# -- 2. chain ---------------------------------------------------------------------------------


def test_chain_rule_broken_names_the_first_breaking_block_and_the_rule(ws: Workspace) -> None:
    blocks = _chain(ws.get("prices"))
    with pytest.raises(ChainRuleBroken) as gap:
        validate_chain([blocks[0], blocks[1], blocks[3]], None)
    assert gap.value.block == blocks[3].hash
    assert isinstance(gap.value.error, ChainRuleViolation)
    assert gap.value.error.rule == 2
    assert str(blocks[3].hash) in str(gap.value) and "rule 2" in str(gap.value)
    assert gap.value.head_moved


def test_a_chain_must_start_at_a_seed_and_that_is_not_a_stale_sender(ws: Workspace) -> None:
    blocks = _chain(ws.get("prices"))
    with pytest.raises(ChainRuleBroken) as no_seed:
        validate_chain(blocks[1:], None)
    assert no_seed.value.block == blocks[1].hash
    assert getattr(no_seed.value.error, "rule", None) == 1
    assert not no_seed.value.head_moved


def test_a_fork_breaks_the_parent_rule_and_means_the_head_moved(
    ws: Workspace, tmp_path: Path
) -> None:
    mine = _chain(ws.get("prices"))
    theirs = _chain(make_dataset(ws, "other", tmp_path / "other", 1))
    state = validate_chain(mine[:1], None)
    with pytest.raises(ChainRuleBroken) as fork:
        validate_chain(theirs[1:2], state)  # sequence 1, parent: another Seed
    assert fork.value.error.rule == 3  # type: ignore[attr-defined]
    assert fork.value.head_moved


def test_head_moved_only_for_the_sequence_and_parent_rules() -> None:
    h = Multihash.sha3_256(b"x")
    moved = {
        rule: ChainRuleBroken(h, ChainRuleViolation(rule, "t", "d")).head_moved
        for rule in range(1, 14)
    }
    assert moved == {rule: rule in (2, 3) for rule in range(1, 14)}
    assert not ChainRuleBroken(h, InvalidAppend("no rule number")).head_moved


def test_validate_chain_returns_the_state_after_the_last_block(ws: Workspace) -> None:
    ds = ws.get("prices")
    blocks = _chain(ds)
    first = validate_chain(blocks[:2], None)
    assert first.head == blocks[1].hash and first.sequence_number == 1
    rest = validate_chain(blocks[2:], first)
    assert rest == ds.state()
    assert validate_chain([], rest) is rest  # nothing received: the local state
    with pytest.raises(ValueError, match="no blocks"):
        validate_chain([], None)


def test_a_record_must_name_the_last_block_and_its_sequence_both(ws: Workspace) -> None:
    blocks = _chain(ws.get("prices"))
    state = validate_chain(blocks, None)
    key = ws.keys.load(state.dataset_id)
    check_record(_record(ws, blocks[-1]), state)  # accepted
    # The right sequence number with another block, and the right block with another
    # sequence number: each alone is refused.
    other_head = sign_head(key, blocks[-2].hash, state.sequence_number, state.system_time)
    with pytest.raises(InvalidHeadRecord, match="the chain ends at"):
        check_record(other_head, state)
    other_seq = sign_head(key, state.head, state.sequence_number + 1, state.system_time)
    with pytest.raises(InvalidHeadRecord, match="the chain ends at"):
        check_record(other_seq, state)
    stranger = sign_head(KeyPair.generate(), state.head, state.sequence_number, state.system_time)
    with pytest.raises(InvalidHeadRecord, match="not signed by this dataset"):
        check_record(stranger, state)


# -- 3. objects -------------------------------------------------------------------------------


def test_object_jobs_keep_first_naming_order_kind_and_size(ws: Workspace) -> None:
    blocks = [b.block for b in _chain(ws.get("prices"))]
    jobs = object_jobs(blocks + blocks[::-1])
    declared = []
    for b in blocks:
        e = b.event
        for kind, ref in (
            ("data", getattr(e, "new_data", None)),
            ("checkpoint", getattr(e, "new_checkpoint", None)),
        ):
            if ref is not None:
                declared.append(ObjectJob(kind, ref.physical_hash, ref.size))  # type: ignore[arg-type]
    assert jobs == declared and len(jobs) == 4
    assert object_jobs([]) == []


def test_object_store_is_chosen_by_kind(ws: Workspace) -> None:
    layout = ws.get("prices").layout
    assert object_store(layout, "data").root == layout.data.root
    assert object_store(layout, "checkpoint").root == layout.checkpoints.root
    assert layout.data.root != layout.checkpoints.root


def test_stored_size_is_the_size_of_a_stored_object_else_none(ws: Workspace) -> None:
    ds = ws.get("prices")
    job = object_jobs(b.block for b in _chain(ds))[0]
    assert stored_size(ds.layout, job) == job.size > 0
    absent = ObjectJob("data", Multihash.sha3_256(b"absent"), 6)
    assert stored_size(ds.layout, absent) is None
    # A directory where the object would be is no stored copy (UnsafePath, a StorageError).
    store = object_store(ds.layout, "checkpoint")
    odd = ObjectJob("checkpoint", Multihash.sha3_256(b"odd"), 3)
    store.path_of(odd.hash).mkdir(parents=True)
    assert stored_size(ds.layout, odd) is None


def test_hash_file_hashes_every_byte_of_a_file_larger_than_a_chunk(tmp_path: Path) -> None:
    data = bytes(range(256)) * (5 * 4096 + 3)  # 5 MiB and 768 bytes: several chunks
    path = tmp_path / "f"
    path.write_bytes(data)
    assert hash_file(path) == hashlib.sha3_256(data).digest()
    path.write_bytes(b"")
    assert hash_file(path) == hashlib.sha3_256(b"").digest()


def test_object_checked_by_the_receivers_digest_when_given(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    job = object_jobs(b.block for b in _chain(src))[0]
    data = object_store(src.layout, job.kind).get(job.hash)
    dst = new_workspace(tmp_path / "dst").create_dataset("copy")
    store = object_store(dst.layout, job.kind)
    # Right bytes, but the transport hashed something else: refused, not adopted.
    q = store.quarantine_path()
    q.write_bytes(data)
    with pytest.raises(PeerMisbehaved, match="content hash mismatch"):
        accept_object(store, job, q, hashlib.sha3_256(b"other").digest())
    assert not store.has(job.hash) and q.exists()
    # Right bytes, right digest: adopted under the declared name.
    q.unlink()
    q = store.quarantine_path()
    q.write_bytes(data)
    accept_object(store, job, q, hashlib.sha3_256(data).digest())
    assert store.get(job.hash) == data and not q.exists()


def test_object_size_checked_before_its_content(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    job = object_jobs(b.block for b in _chain(src))[0]
    data = object_store(src.layout, job.kind).get(job.hash)
    store = object_store(new_workspace(tmp_path / "dst").create_dataset("c").layout, job.kind)
    longer = store.quarantine_path()
    longer.write_bytes(data + b"\x00")
    with pytest.raises(PeerMisbehaved, match=f"got {job.size + 1} bytes"):
        accept_object(store, job, longer, hashlib.sha3_256(data).digest())
    assert not store.has(job.hash)


def _quarantined(store: DiskObjectStore, src: Dataset, job: ObjectJob) -> tuple[Path, bytes]:
    """A quarantine file of ``store`` holding ``job``'s object from ``src``, and its digest."""
    data = object_store(src.layout, job.kind).get(job.hash)
    q = store.quarantine_path()
    q.write_bytes(data)
    return q, hashlib.sha3_256(data).digest()


def _full(batch: CheckedObjects) -> bool:
    """`CheckedObjects.full`, read afresh (a property mypy would narrow)."""
    return batch.full


def test_check_object_returns_the_digest_it_checked(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    job = object_jobs(b.block for b in _chain(src))[0]
    store = object_store(new_workspace(tmp_path / "dst").create_dataset("c").layout, job.kind)
    q, digest = _quarantined(store, src, job)
    assert check_object(job, q, None) == digest == job.hash.digest  # hashed here
    assert check_object(job, q, digest) == digest  # the transport's digest
    assert q.exists() and not store.has(job.hash)  # checking names nothing


def test_checked_objects_are_full_at_64_mib_of_declared_size() -> None:
    assert ADOPT_BATCH_BYTES == 64 * MIB
    batch = CheckedObjects()
    assert batch.max_bytes == 64 * MIB and not _full(batch)
    store = DiskObjectStore(Path("/nonexistent-store"))
    h = Multihash.sha3_256(b"x")
    batch.add(store, ObjectJob("data", h, 64 * MIB - 1), Path("/q1"), h.digest)
    assert not _full(batch)
    batch.add(store, ObjectJob("data", h, 1), Path("/q2"), h.digest)
    assert _full(batch)  # exactly at the limit
    small = CheckedObjects(max_bytes=10)
    small.add(store, ObjectJob("data", h, 9), Path("/q3"), h.digest)
    assert not _full(small)
    small.add(store, ObjectJob("data", h, 2), Path("/q4"), h.digest)
    assert _full(small)


def test_checked_objects_are_named_together_in_their_own_stores(
    ws: Workspace, tmp_path: Path
) -> None:
    src = ws.get("prices")
    jobs = object_jobs(b.block for b in _chain(src))
    assert {j.kind for j in jobs} == {"data", "checkpoint"}
    dst = new_workspace(tmp_path / "dst").create_dataset("c")
    batch = CheckedObjects(max_bytes=sum(j.size for j in jobs))
    held = []
    for job in jobs:
        store = object_store(dst.layout, job.kind)
        q, digest = _quarantined(store, src, job)
        batch.add(store, job, q, digest)
        held.append(q)
        assert not any(object_store(dst.layout, j.kind).has(j.hash) for j in jobs)
    assert _full(batch)
    batch.adopt()
    for job in jobs:
        assert object_store(dst.layout, job.kind).get(job.hash) == object_store(
            src.layout, job.kind
        ).get(job.hash)
    assert not any(q.exists() for q in held)
    assert not _full(batch)
    batch.adopt()  # emptied by the first adopt: nothing to do


def test_checked_objects_count_from_zero_again_after_adopt(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    job = object_jobs(b.block for b in _chain(src))[0]
    store = object_store(new_workspace(tmp_path / "dst").create_dataset("c").layout, job.kind)
    batch = CheckedObjects(max_bytes=job.size + 1)
    q, digest = _quarantined(store, src, job)
    batch.add(store, job, q, digest)
    batch.adopt()
    again, digest = _quarantined(store, src, job)
    batch.add(store, job, again, digest)
    assert not _full(batch)  # job.size of job.size + 1: the first file no longer counts
    batch.adopt()
    assert not again.exists() and store.has(job.hash)  # stored already: the copy is removed


def test_a_failed_adopt_removes_every_file_held(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    jobs = object_jobs(b.block for b in _chain(src))
    dst = new_workspace(tmp_path / "dst").create_dataset("c")
    batch = CheckedObjects()
    held = []
    for i, job in enumerate(jobs):
        store = object_store(dst.layout, job.kind)
        q, digest = _quarantined(store, src, job)
        batch.add(store, job, q, digest if i else bytes(32))  # the first: a wrong digest
        held.append(q)
    with pytest.raises(HashMismatch):
        batch.adopt()
    assert not any(q.exists() for q in held)
    assert not _full(batch)


def test_discarded_objects_are_removed_and_never_named(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    jobs = object_jobs(b.block for b in _chain(src))
    dst = new_workspace(tmp_path / "dst").create_dataset("c")
    batch = CheckedObjects(max_bytes=1)
    held = []
    for job in jobs:
        store = object_store(dst.layout, job.kind)
        q, digest = _quarantined(store, src, job)
        batch.add(store, job, q, digest)
        held.append(q)
    held[0].unlink()  # a file gone already is no error
    assert _full(batch)
    batch.discard()
    assert not any(q.exists() for q in held) and not _full(batch)
    batch.adopt()  # nothing left to name
    assert not any(object_store(dst.layout, j.kind).has(j.hash) for j in jobs)


# -- 4. commit --------------------------------------------------------------------------------


def test_first_head_record_is_accepted_as_the_high_water_mark(
    ws: Workspace, tmp_path: Path
) -> None:
    blocks = _chain(ws.get("prices"))
    store = HeadStore(tmp_path / "p2p")
    record = _record(ws, blocks[-1])
    accept_head_record(store, record, _state(ws), None, blocks)
    assert store.get(record.dataset_id) == record


def test_head_record_replaced_when_the_new_blocks_contain_the_held_head(
    ws: Workspace, tmp_path: Path
) -> None:
    blocks = _chain(ws.get("prices"))
    store = HeadStore(tmp_path / "p2p")
    accept_head_record(store, _record(ws, blocks[1]), _state(ws), None, blocks[:2])
    newer = _record(ws, blocks[-1])
    accept_head_record(store, newer, _state(ws), None, blocks[1:])  # a clone: no local chain
    assert store.get(newer.dataset_id) == newer


def test_head_record_replaced_when_the_local_chain_contains_the_held_head(
    ws: Workspace, tmp_path: Path
) -> None:
    ds = ws.get("prices")
    blocks = _chain(ds)
    store = HeadStore(tmp_path / "p2p")
    accept_head_record(store, _record(ws, blocks[1]), _state(ws), None, blocks[:2])
    add_slices(ds, tmp_path / "more", 1)
    new = _chain(ds)[len(blocks) :]
    newer = _record(ws, new[-1])
    # The held head is only in the local chain.
    accept_head_record(store, newer, _state(ws), ds, new)
    assert store.get(newer.dataset_id) == newer


def test_head_record_signed_for_another_dataset_is_refused(ws: Workspace, tmp_path: Path) -> None:
    # A valid signature by another dataset's key over this chain's head: the record
    # names its own DID, so only the DID of the chain's Seed can tell it is foreign.
    blocks = _chain(ws.get("prices"))
    other = ws.create_dataset("other")
    key = ws.keys.load(ws.resolve("other").id)
    head = blocks[-1]
    foreign = sign_head(key, head.hash, head.block.sequence_number, head.block.system_time)
    store = HeadStore(tmp_path / "p2p")
    with pytest.raises(InvalidHeadRecord, match="signed for"):
        accept_head_record(store, foreign, _state(ws), None, blocks)
    assert store.get(foreign.dataset_id) is None
    assert store.get(_state(ws).dataset_id) is None
    assert _did(other) == foreign.dataset_id


@pytest.mark.parametrize("with_local", [False, True], ids=["clone", "update"])
def test_head_record_not_replaced_by_a_chain_without_the_held_head(
    ws: Workspace, tmp_path: Path, with_local: bool
) -> None:
    ds = ws.get("prices")
    blocks = _chain(ds)
    store = HeadStore(tmp_path / "p2p")
    key = ws.keys.load(ws.resolve("prices").id)
    # The held record names a block at sequence 1 that neither chain holds (a fork).
    forked = sign_head(key, Multihash.sha3_256(b"fork"), 1, blocks[1].block.system_time)
    accept_head_record(store, forked, _state(ws), None, [])
    newer = _record(ws, blocks[-1])
    with pytest.raises(NotDescendant):
        accept_head_record(store, newer, _state(ws), ds if with_local else None, blocks[2:])
    assert store.get(newer.dataset_id) == forked


def _store_objects(layout: DatasetLayout, src: Dataset, blocks: list[ReceivedBlock]) -> None:
    """Receive the objects ``blocks`` name from ``src`` into ``layout`` (skip stored ones)."""
    for job in object_jobs(b.block for b in blocks):
        store = object_store(layout, job.kind)
        if stored_size(layout, job) == job.size:
            continue
        q = store.quarantine_path()
        q.write_bytes(object_store(src.layout, job.kind).get(job.hash))
        accept_object(store, job, q, None)


def _clone(dst: Workspace, src: Dataset, blocks: list[ReceivedBlock]) -> Dataset:
    """Install ``blocks`` of ``src`` in ``dst`` as a new dataset ``copy``."""
    name = "test-clone"
    with staging_lock(dst, name):
        staged = open_staging(dst, name)
        _store_objects(staged.layout, src, blocks)
        commit_received(dst, blocks, local=None, staged=staged, alias="copy", dataset_id=_did(src))
    return dst.get("copy")


def test_commit_appends_to_the_local_dataset(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    old = _chain(src)
    local = _clone(new_workspace(tmp_path / "dst"), src, old)
    add_slices(src, tmp_path / "more", 2)
    new = _chain(src)[len(old) :]
    _store_objects(local.layout, src, new)
    commit_received(Workspace(tmp_path / "dst"), new, local=local)
    assert local.head() == src.head() == new[-1].hash
    assert [h for h, _r, _b in local.iter_blocks()] == [h for h, _r, _b in src.iter_blocks()]


def test_commit_of_a_new_dataset_needs_its_staging_dataset_and_id(
    ws: Workspace, tmp_path: Path
) -> None:
    src = ws.get("prices")
    blocks = _chain(src)
    dst = new_workspace(tmp_path / "dst")
    with staging_lock(dst, "test-clone"):
        staged = open_staging(dst, "test-clone")
        with pytest.raises(ValueError, match="staging dataset and its id"):
            commit_received(dst, blocks, local=None, staged=staged, alias="copy")
        with pytest.raises(ValueError, match="staging dataset and its id"):
            commit_received(dst, blocks, local=None, alias="copy", dataset_id=_did(src))


def test_commit_of_a_new_dataset_needs_an_alias(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    blocks = _chain(src)
    dst = new_workspace(tmp_path / "dst")
    with staging_lock(dst, "test-clone"):
        staged = open_staging(dst, "test-clone")
        _store_objects(staged.layout, src, blocks)
        with pytest.raises(InvalidAlias):
            commit_received(dst, blocks, local=None, staged=staged, dataset_id=_did(src))
    assert not dst.datasets_dir.exists() or not any(dst.datasets_dir.iterdir())


def test_commit_of_a_new_dataset_installs_the_staged_one_under_its_alias(
    ws: Workspace, tmp_path: Path
) -> None:
    src = ws.get("prices")
    got = _clone(new_workspace(tmp_path / "dst"), src, _chain(src))
    assert (
        got.id == src.id
        and got.layout.root.name == _did(src).as_multibase()
        and got.head() == src.head()
    )
    assert got.layout.read_alias() == "copy"
    assert [h for h, _r, _b in got.iter_blocks()] == [h for h, _r, _b in src.iter_blocks()]


def test_commit_does_not_decode_the_received_blocks_again(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each block was decoded once, by `receive_block`: the commit reuses those blocks
    # (the local chain's own blocks are read back; the bytes being committed are not decoded).
    import storage.dataset as dataset_module

    committing: set[bytes] = set()
    decoded_again: list[bytes] = []
    real = dataset_module.decode_block  # type: ignore[attr-defined]

    def counting(raw: bytes, *args: Any, **kw: Any) -> MetadataBlock:
        if bytes(raw) in committing:
            decoded_again.append(raw)
        block: MetadataBlock = real(raw, *args, **kw)
        return block

    monkeypatch.setattr(dataset_module, "decode_block", counting)
    src = ws.get("prices")
    old = _chain(src)
    dst = new_workspace(tmp_path / "dst")
    with staging_lock(dst, "test-clone"):
        staged = open_staging(dst, "test-clone")
        _store_objects(staged.layout, src, old)
        did = _did(src)
        committing.update(b.raw for b in old)
        commit_received(dst, old, local=None, staged=staged, alias="copy", dataset_id=did)
        committing.clear()
    assert decoded_again == []
    local = dst.get("copy")
    add_slices(src, tmp_path / "more", 2)
    new = _chain(src)[len(old) :]
    _store_objects(local.layout, src, new)
    committing.update(b.raw for b in new)
    commit_received(dst, new, local=local)
    committing.clear()
    assert decoded_again == []
    assert local.head() == src.head()


# -- 4. commit: blocks written ahead ----------------------------------------------------------


def _pending_files(store: DiskObjectStore) -> list[Path]:
    return sorted(p for p in store.root.iterdir() if p.name.startswith(".pending-"))


def test_blocks_written_ahead_are_quarantine_files_holding_each_blocks_bytes(
    ws: Workspace, tmp_path: Path
) -> None:
    blocks = _chain(ws.get("prices"))
    store = DiskObjectStore(tmp_path / "blocks")
    pending = PendingBlocks(store, blocks)
    pending.write()
    files = _pending_files(store)
    assert len(files) == len(blocks) and sorted(store.iter_hashes()) == []
    assert sorted(f.read_bytes() for f in files) == sorted(b.raw for b in blocks)
    # Read-only from the start, as every stored object is: adoption only renames them.
    assert {f.stat().st_mode & 0o777 for f in files} == {0o444}
    pending.adopt()
    assert _pending_files(store) == []
    assert sorted(store.iter_hashes()) == sorted(b.hash for b in blocks)
    assert all(store.get(b.hash) == b.raw for b in blocks)


def test_blocks_written_ahead_never_write_through_a_planted_symlink(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone who can write into the block store plants a symlink where the next
    # quarantine file goes: the writer must refuse it, not write a block through it.
    blocks = _chain(ws.get("prices"))
    store = DiskObjectStore(tmp_path / "blocks")
    store.quarantine_path()  # creates the store's directory
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    planted = store.root / ".pending-planted"
    planted.symlink_to(victim)
    monkeypatch.setattr("p2p.receive.pending_name", lambda: planted.name)
    pending = PendingBlocks(store, blocks[:1])
    with pytest.raises(OSError):
        pending.write()
    assert victim.read_bytes() == b"keep"
    assert planted.is_symlink()
    pending.discard()  # nothing was opened, so nothing of ours is listed to remove
    assert planted.is_symlink() and victim.read_bytes() == b"keep"


def test_blocks_written_ahead_and_discarded_leave_nothing(ws: Workspace, tmp_path: Path) -> None:
    blocks = _chain(ws.get("prices"))
    store = DiskObjectStore(tmp_path / "blocks")
    pending = PendingBlocks(store, blocks)
    pending.write()
    pending.discard()
    assert list(store.root.iterdir()) == []
    pending.adopt()  # nothing left to name
    assert list(store.root.iterdir()) == []


def test_commit_names_blocks_written_ahead_then_appends_them(ws: Workspace, tmp_path: Path) -> None:
    src = ws.get("prices")
    old = _chain(src)
    dst = new_workspace(tmp_path / "dst")
    with staging_lock(dst, "test-clone"):
        staged = open_staging(dst, "test-clone")
        _store_objects(staged.layout, src, old)
        pending = PendingBlocks(staged.layout.blocks, old)
        pending.write()
        commit_received(
            dst, old, local=None, staged=staged, alias="copy", dataset_id=_did(src), pending=pending
        )
    local = dst.get("copy")
    assert local.head() == src.head() and _pending_files(local.layout.blocks) == []
    add_slices(src, tmp_path / "more", 2)
    new = _chain(src)[len(old) :]
    _store_objects(local.layout, src, new)
    pending = PendingBlocks(local.layout.blocks, new)
    pending.write()
    commit_received(dst, new, local=local, pending=pending)
    assert local.head() == src.head() and _pending_files(local.layout.blocks) == []
    assert [h for h, _r, _b in local.iter_blocks()] == [h for h, _r, _b in src.iter_blocks()]


def test_blocks_written_ahead_must_be_in_the_targets_block_store(
    ws: Workspace, tmp_path: Path
) -> None:
    src = ws.get("prices")
    old = _chain(src)
    local = _clone(new_workspace(tmp_path / "dst"), src, old)
    add_slices(src, tmp_path / "more", 1)
    new = _chain(src)[len(old) :]
    _store_objects(local.layout, src, new)
    elsewhere = PendingBlocks(local.layout.data, new)
    elsewhere.write()
    with pytest.raises(ValueError, match="target's block store"):
        commit_received(Workspace(tmp_path / "dst"), new, local=local, pending=elsewhere)
    assert local.head() == _chain(src)[len(old) - 1].hash
    elsewhere.discard()


def test_commit_still_refuses_a_broken_chain_written_ahead(ws: Workspace, tmp_path: Path) -> None:
    # Writing ahead skips no check: the append validates the chain on top of the head.
    src = ws.get("prices")
    old = _chain(src)
    local = _clone(new_workspace(tmp_path / "dst"), src, old)
    add_slices(src, tmp_path / "more", 2)
    new = _chain(src)[len(old) :]
    _store_objects(local.layout, src, new)
    pending = PendingBlocks(local.layout.blocks, new[1:])
    pending.write()
    with pytest.raises(InvalidAppend):
        commit_received(Workspace(tmp_path / "dst"), new[1:], local=local, pending=pending)
    assert local.head() == old[-1].hash
