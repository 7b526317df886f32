"""Dataset: commits with objects, hash-before-parse reads, raw appends, retries, state cache."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fbs.codec import block_hash, encode_block
from fbs.did import DatasetId
from fbs.errors import InvalidHash, MalformedBlock
from fbs.logical_hash import logical_hash
from fbs.model import (
    AddData,
    Checkpoint,
    DataField,
    DataSchema,
    DatasetKind,
    DataSlice,
    DataTypeInt64,
    DataTypeString,
    MetadataBlock,
    OffsetInterval,
    Seed,
    SetDataSchema,
    SetInfo,
)
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from storage.chain import ChainState
from storage.dataset import CommitResult, Dataset, PendingEvent, PreparedCommit
from storage.errors import (
    ChainRuleViolation,
    CorruptChain,
    CorruptObject,
    HashMismatch,
    InvalidCommit,
    ObjectNotFound,
    ObjectTooLarge,
    RefCASFailed,
)
from storage.layout import DatasetLayout
from storage.object_store import MAX_BLOCK_SIZE

DID = DatasetId.new_seeded(b"dataset")
T0 = Timestamp.parse_rfc3339("2020-01-01T00:00:00Z")
SCHEMA = SetDataSchema(
    schema=DataSchema(
        fields=(
            DataField(name="offset", type=DataTypeInt64()),
            DataField(name="city", type=DataTypeString()),
        )
    )
)


def open_dataset(root: Path, *, cache: bool = True) -> Dataset:
    """A `Dataset` over ``root/ds`` with its state cache in ``root/cache``."""
    layout = DatasetLayout(root / "ds")
    return Dataset(layout, state_cache=root / "cache" / "state.json" if cache else None)


def seeded_dataset(
    root: Path, *, cache: bool = True, did: DatasetId = DID, system_time: Timestamp | None = None
) -> Dataset:
    """A new dataset holding only its Seed block."""
    layout = DatasetLayout(root / "ds")
    ds = Dataset.create(layout, state_cache=root / "cache" / "state.json" if cache else None)
    seed = Seed(dataset_id=did, dataset_kind=DatasetKind.Root)
    ds.commit(seed, system_time=system_time, expected_head=None)
    return ds


def write_parquet(path: Path, start: int, n: int) -> tuple[DataSlice, Path]:
    """Write ``n`` records with offsets ``start..`` and return the matching `DataSlice`."""
    ts = pa.array([T0.nanos // 10**6] * n, pa.timestamp("ms", tz="UTC"))
    table = pa.table(
        {
            "offset": pa.array(range(start, start + n), pa.int64()),
            "op": pa.array([0] * n, pa.int32()),
            "system_time": ts,
            "event_time": ts,
            "city": pa.array([f"c{i}" for i in range(start, start + n)], pa.string()),
        }
    )
    pq.write_table(table, path)
    data = path.read_bytes()
    slice_ = DataSlice(
        logical_hash=logical_hash(table.schema, table),
        physical_hash=Multihash.sha3_256(data),
        offset_interval=OffsetInterval(start=start, end=start + n - 1),
        size=len(data),
    )
    return slice_, path


def write_checkpoint(path: Path, content: bytes) -> Checkpoint:
    path.write_bytes(content)
    return Checkpoint(physical_hash=Multihash.sha3_256(content), size=len(content))


def add_info(ds: Dataset, text: str) -> CommitResult:
    return ds.commit(SetInfo(description=text), expected_head=ds.head())


# -- basics -----------------------------------------------------------------------------------


def test_empty_dataset(tmp_path: Path) -> None:
    ds = Dataset.create(DatasetLayout(tmp_path / "ds"))
    assert ds.head() is None
    assert ds.state() is None
    assert list(ds.iter_blocks()) == []


def test_seed_and_appends(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    r1 = add_info(ds, "a")
    r2 = add_info(ds, "b")
    assert r2.old_head == r1.new_head
    assert ds.head() == r2.new_head
    assert ds.layout.head_path.read_bytes() == r2.new_head.to_multibase().encode()
    blocks = list(ds.iter_blocks())
    assert [b.sequence_number for _, _, b in blocks] == [2, 1, 0]
    for h, raw, _ in blocks:
        assert block_hash(raw) == h
    assert ds.id == DID.to_did_odf()


def test_stored_bytes_are_canonical_v2_and_v3(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    r = ds.commit(SetInfo(description="v3"), expected_head=ds.head(), block_version=3)
    raw, block = ds.get_block(r.new_head)
    assert raw == encode_block(block, 3)
    assert block == r.block


def test_system_time_default_never_goes_back(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    future = Timestamp(Timestamp.now().nanos + 3600 * 10**9)
    ds.commit(SetInfo(description="a"), system_time=future, expected_head=ds.head())
    r = add_info(ds, "b")
    assert r.block.system_time == future


def test_cas_mismatch_writes_nothing(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    head = ds.head()
    add_info(ds, "a")
    before = sorted(os.listdir(ds.layout.blocks_dir))
    with pytest.raises(RefCASFailed):
        ds.commit(SetInfo(description="b"), expected_head=head)
    with pytest.raises(RefCASFailed):
        ds.commit(SetInfo(description="b"), expected_head=None)
    assert sorted(os.listdir(ds.layout.blocks_dir)) == before


def test_invalid_event_writes_nothing(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    data_dir_before = sorted(os.listdir(ds.layout.data_dir))
    slice_, path = write_parquet(tmp_path / "part.parquet", 0, 3)
    head = ds.head()
    with pytest.raises(ChainRuleViolation, match="rule 8"):  # no schema yet
        ds.commit(AddData(new_data=slice_), expected_head=head, data_file=path)
    assert ds.head() == head
    assert sorted(os.listdir(ds.layout.data_dir)) == data_dir_before
    assert len(os.listdir(ds.layout.blocks_dir)) == 1


def test_commit_events_lands_all_or_nothing(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    head = ds.head()
    blocks_before = sorted(os.listdir(ds.layout.blocks_dir))
    slice_, path = write_parquet(tmp_path / "part.parquet", 0, 3)
    # The schema block is valid, the AddData after it is not (prev_offset for no data).
    bad = AddData(prev_offset=7, new_data=slice_)
    with pytest.raises(ChainRuleViolation):
        ds.commit_events(
            [PendingEvent(SCHEMA), PendingEvent(bad, data_file=path)], expected_head=head
        )
    assert ds.head() == head
    assert sorted(os.listdir(ds.layout.blocks_dir)) == blocks_before
    assert ds.state() is not None and ds.state().data_schema is None  # type: ignore[union-attr]
    with pytest.raises(InvalidCommit):
        ds.commit_events([], expected_head=head)

    results = ds.commit_events(
        [PendingEvent(SCHEMA), PendingEvent(AddData(new_data=slice_), data_file=path)],
        expected_head=head,
    )
    assert [r.old_head for r in results] == [head, results[0].new_head]
    assert ds.head() == results[1].new_head
    assert [type(b.event).__name__ for _, _, b in ds.iter_blocks()][:2] == [
        "AddData",
        "SetDataSchema",
    ]
    assert results[1].state.last_offset == 2
    assert ds.layout.data.get(slice_.physical_hash) == path.read_bytes()


# -- data and checkpoints ----------------------------------------------------------------------


def test_commit_with_data_and_checkpoint(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    ds.commit(SCHEMA, expected_head=ds.head())
    slice_, path = write_parquet(tmp_path / "p0", 0, 5)
    cp = write_checkpoint(tmp_path / "cp0", b"checkpoint-0")
    r = ds.commit(
        AddData(new_data=slice_, new_checkpoint=cp, new_watermark=T0),
        expected_head=ds.head(),
        data_file=path,
        checkpoint_file=tmp_path / "cp0",
    )
    assert ds.layout.data.get(slice_.physical_hash) == path.read_bytes()
    assert ds.layout.checkpoints.size(cp.physical_hash) == cp.size
    assert r.state.last_offset == 4 and r.state.last_checkpoint == cp.physical_hash
    slice2, path2 = write_parquet(tmp_path / "p1", 5, 2)
    r2 = ds.commit(
        AddData(prev_checkpoint=cp.physical_hash, prev_offset=4, new_data=slice2, new_watermark=T0),
        expected_head=r.new_head,
        data_file=path2,
    )
    assert r2.state.num_records == 7


def test_data_file_mismatches(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    ds.commit(SCHEMA, expected_head=ds.head())
    slice_, path = write_parquet(tmp_path / "p0", 0, 5)
    head = ds.head()
    with pytest.raises(InvalidCommit, match="bytes"):
        ds.commit(
            AddData(new_data=slice_.replace(size=slice_.size + 1)),
            expected_head=head,
            data_file=path,
        )
    with pytest.raises(HashMismatch):
        ds.commit(
            AddData(new_data=slice_.replace(physical_hash=Multihash.sha3_256(b"other"))),
            expected_head=head,
            data_file=path,
        )
    with pytest.raises(ObjectNotFound):
        ds.commit(AddData(new_data=slice_), expected_head=head)  # neither passed nor stored
    with pytest.raises(InvalidCommit):
        ds.commit(SetInfo(description="x"), expected_head=head, data_file=path)
    with pytest.raises(InvalidCommit):
        ds.commit(AddData(new_data=slice_), expected_head=head, data_file=tmp_path / "missing")
    assert ds.head() == head


def test_pre_staged_data_object(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    ds.commit(SCHEMA, expected_head=ds.head())
    slice_, path = write_parquet(tmp_path / "p0", 0, 5)
    ds.layout.data.put_file(slice_.physical_hash, path)
    r = ds.commit(AddData(new_data=slice_), expected_head=ds.head())
    assert r.state.last_offset == 4


# -- reading ---------------------------------------------------------------------------------


def test_get_block_hash_before_parse(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    r = add_info(ds, "a")
    path = ds.layout.blocks.path_of(r.new_head)
    os.chmod(path, 0o644)
    raw = bytearray(path.read_bytes())
    raw[-2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptObject):
        ds.get_block(r.new_head)


def test_stored_garbage_under_its_own_hash(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    junk = b"not a flatbuffer at all"
    h = Multihash.sha3_256(junk)
    ds.layout.blocks.put(h, junk)
    with pytest.raises(CorruptChain):
        ds.get_block(h)


@pytest.mark.parametrize(
    "hostile",
    [
        "../../etc/passwd",
        "f1620" + "0" * 63,
        "f1220" + "0" * 64,
        "",
        "f1620" + "0" * 64 + "/x",
        Multihash(0x12, b"\0" * 32),
        b"f1620",
        None,
        42,
    ],
)
def test_hostile_hashes(tmp_path: Path, hostile: object) -> None:
    ds = seeded_dataset(tmp_path)
    with pytest.raises(InvalidHash):
        ds.get_block(hostile)  # type: ignore[arg-type]
    if hostile is not None:  # None means "from the head" / "empty dataset"
        with pytest.raises(InvalidHash):
            list(ds.iter_blocks(hostile))  # type: ignore[arg-type]
        with pytest.raises(InvalidHash):
            ds.commit(SetInfo(description="x"), expected_head=hostile)  # type: ignore[arg-type]


def test_missing_block(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    with pytest.raises(ObjectNotFound):
        ds.get_block(Multihash.sha3_256(b"nothing"))


# -- raw appends ------------------------------------------------------------------------------


def _raw_block(prev: ChainState, event: object, seq_delta: int = 1) -> bytes:
    block = MetadataBlock(
        system_time=prev.system_time,
        prev_block_hash=prev.head,
        sequence_number=prev.sequence_number + seq_delta,
        event=event,  # type: ignore[arg-type]
    )
    return encode_block(block, 3)


def test_append_block_bytes_keeps_original_bytes(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    state = ds.state()
    assert state is not None
    raw = _raw_block(state, SetInfo(description="from a peer"))
    r = ds.append_block_bytes(raw)
    assert r.new_head == block_hash(raw)
    assert ds.layout.blocks.get(r.new_head) == raw


def test_append_blocks_bytes_batch_and_validation(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    other = seeded_dataset(tmp_path / "other")
    for i in range(3):
        add_info(other, str(i))
    raws = [raw for _, raw, _ in reversed(list(other.iter_blocks()))]
    head = ds.head()
    with pytest.raises(ChainRuleViolation, match="rule 1"):
        ds.append_blocks_bytes(raws)  # a second Seed
    assert ds.head() == head
    fresh = Dataset.create(DatasetLayout(tmp_path / "fresh"))
    r = fresh.append_blocks_bytes(raws)
    assert r.new_head == other.head()
    assert r.state == other.state()


def test_append_block_bytes_rejects(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    state = ds.state()
    assert state is not None
    with pytest.raises(ChainRuleViolation, match="rule 2"):
        ds.append_block_bytes(_raw_block(state, SetInfo(description="x"), seq_delta=2))
    with pytest.raises(MalformedBlock):
        ds.append_block_bytes(b"\x00" * 64)
    with pytest.raises(ObjectTooLarge):
        ds.append_block_bytes(b"\x00" * (MAX_BLOCK_SIZE + 1))
    with pytest.raises(InvalidCommit):
        ds.append_blocks_bytes([])
    with pytest.raises(InvalidCommit):
        ds.append_blocks_bytes(["text"])  # type: ignore[list-item]
    ds.commit(SCHEMA, expected_head=ds.head())
    slice_, _ = write_parquet(tmp_path / "p0", 0, 2)
    state = ds.state()
    assert state is not None
    with pytest.raises(ObjectNotFound):  # data must be downloaded first
        ds.append_block_bytes(_raw_block(state, AddData(new_data=slice_)))
    assert len(list(ds.iter_blocks())) == 2


# -- retry and state cache ---------------------------------------------------------------------


def test_commit_with_retry_rebuilds_on_moved_head(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    other = open_dataset(tmp_path)
    calls: list[int] = []

    def build(state: ChainState | None) -> SetInfo:
        assert state is not None
        calls.append(state.sequence_number)
        if len(calls) == 1:
            add_info(other, "sneaky")  # another writer moves the head meanwhile
        return SetInfo(description=f"after {state.sequence_number}")

    r = ds.commit_with_retry(build)
    assert calls == [0, 1]
    assert r.sequence_number == 2


def test_commit_with_retry_gives_up(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    other = open_dataset(tmp_path)

    def build(state: ChainState | None) -> PreparedCommit:
        add_info(other, "always first")
        return PreparedCommit(SetInfo(description="never"))

    with pytest.raises(RefCASFailed):
        ds.commit_with_retry(build, max_attempts=3)


def test_state_cache_catches_up_and_survives_damage(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    for i in range(5):
        add_info(ds, str(i))
    cache = tmp_path / "cache" / "state.json"
    assert cache.exists()
    stale = cache.read_bytes()
    add_info(ds, "newer")
    expected = ds.state()
    cache.write_bytes(stale)  # a cache behind the head
    assert open_dataset(tmp_path).state() == expected
    cache.write_bytes(b"garbage")
    assert open_dataset(tmp_path).state() == expected
    cache.unlink()
    assert open_dataset(tmp_path).state() == expected
    # A cache of an unrelated chain is not an ancestor: full replay.
    other = seeded_dataset(tmp_path / "o", did=DatasetId.new_seeded(b"other"))
    for i in range(10):
        add_info(other, str(i))
    cache.write_bytes((tmp_path / "o" / "cache" / "state.json").read_bytes())
    assert open_dataset(tmp_path).state() == expected


def test_invalid_stored_chain_is_corrupt(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path, cache=False)
    state = ds.state()
    assert state is not None
    # A block that breaks rule 4 stored behind the validator's back.
    bad = MetadataBlock(
        system_time=Timestamp(state.system_time.nanos - 10**9),
        prev_block_hash=state.head,
        sequence_number=1,
        event=SetInfo(description="time travel"),
    )
    raw = encode_block(bad)
    h = block_hash(raw)
    ds.layout.blocks.put(h, raw)
    ds.layout.refs.set_if_equals("head", state.head, h)
    with pytest.raises(CorruptChain, match="rule 4"):
        open_dataset(tmp_path, cache=False).state()


def test_open_missing(tmp_path: Path) -> None:
    from storage.errors import DatasetNotFound

    with pytest.raises(DatasetNotFound):
        Dataset.open(DatasetLayout(tmp_path / "nope"))
    with pytest.raises(DatasetNotFound):
        _ = Dataset.create(DatasetLayout(tmp_path / "empty")).id
