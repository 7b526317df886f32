"""verify_integrity: a sound dataset is clean; each kind of damage is named precisely."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fbs.codec import block_hash, encode_block
from fbs.logical_hash import logical_hash
from fbs.model import AddData, DataSlice, MetadataBlock, OffsetInterval, SetInfo
from fbs.multiformats import Multihash
from storage.dataset import Dataset
from storage.verify import ProblemKind, verify_integrity
from tests.storage.test_dataset import (
    SCHEMA,
    seeded_dataset,
    write_checkpoint,
    write_parquet,
)


def sound(tmp_path: Path) -> tuple[Dataset, list[Multihash]]:
    """Seed, schema, two AddData (data + checkpoint), one SetInfo."""
    ds = seeded_dataset(tmp_path)
    ds.commit(SCHEMA, expected_head=ds.head())
    s0, p0 = write_parquet(tmp_path / "p0", 0, 3)
    cp = write_checkpoint(tmp_path / "c0", b"cp0")
    ds.commit(
        AddData(new_data=s0, new_checkpoint=cp),
        expected_head=ds.head(),
        data_file=p0,
        checkpoint_file=tmp_path / "c0",
    )
    s1, p1 = write_parquet(tmp_path / "p1", 3, 2)
    ds.commit(
        AddData(prev_checkpoint=cp.physical_hash, prev_offset=2, new_data=s1),
        expected_head=ds.head(),
        data_file=p1,
    )
    ds.commit(SetInfo(description="x"), expected_head=ds.head())
    return ds, [h for h, _, _ in reversed(list(ds.iter_blocks()))]


def _writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


def test_sound_dataset(tmp_path: Path) -> None:
    ds, hashes = sound(tmp_path)
    report = verify_integrity(ds)
    assert report.ok and report.first_bad_block is None
    assert report.blocks_checked == 5 and report.objects_checked == 3
    assert report.head == hashes[-1]
    assert report.state is not None and report.state.num_records == 5


def test_empty_dataset(tmp_path: Path) -> None:
    from storage.layout import DatasetLayout

    report = verify_integrity(Dataset.create(DatasetLayout(tmp_path / "e")))
    assert report.ok and report.head is None


def test_corrupt_block_is_named(tmp_path: Path) -> None:
    ds, hashes = sound(tmp_path)
    path = _writable(ds.layout.blocks.path_of(hashes[2]))
    path.write_bytes(path.read_bytes()[:-1] + b"\x01")
    report = verify_integrity(ds)
    assert not report.ok
    bad = report.first_bad_block
    assert bad is not None and bad.kind == ProblemKind.BLOCK_CORRUPT
    assert bad.block_hash == hashes[2] and bad.sequence_number == 2


def test_missing_block(tmp_path: Path) -> None:
    ds, hashes = sound(tmp_path)
    ds.layout.blocks.delete(hashes[1])
    report = verify_integrity(ds)
    assert [p.kind for p in report.problems] == [ProblemKind.BLOCK_MISSING]
    assert report.problems[0].sequence_number == 1


def test_garbage_block(tmp_path: Path) -> None:
    ds, hashes = sound(tmp_path)
    junk = b"junk junk junk"
    h = Multihash.sha3_256(junk)
    ds.layout.blocks.put(h, junk)
    ds.layout.refs.set_if_equals("head", hashes[-1], h)
    report = verify_integrity(ds)
    assert report.problems[0].kind == ProblemKind.BLOCK_MALFORMED


def test_chain_rule_violation_names_rule_and_block(tmp_path: Path) -> None:
    ds, hashes = sound(tmp_path)
    _, head_block = ds.get_block(hashes[-1])
    bad = MetadataBlock(
        system_time=head_block.system_time,
        prev_block_hash=hashes[-1],
        sequence_number=head_block.sequence_number + 1,
        event=AddData(prev_offset=7, new_watermark=head_block.system_time),
    )
    raw = encode_block(bad)
    h = block_hash(raw)
    ds.layout.blocks.put(h, raw)
    ds.layout.refs.set_if_equals("head", hashes[-1], h)
    report = verify_integrity(ds)
    (problem,) = report.problems
    assert problem.kind == ProblemKind.CHAIN_RULE and problem.rule == 7
    assert problem.block_hash == h and problem.sequence_number == 5
    assert report.state is None


def test_data_problems(tmp_path: Path) -> None:
    ds, hashes = sound(tmp_path)
    _, b2 = ds.get_block(hashes[2])
    _, b3 = ds.get_block(hashes[3])
    assert isinstance(b2.event, AddData) and isinstance(b3.event, AddData)
    d2, d3, cp = b2.event.new_data, b3.event.new_data, b2.event.new_checkpoint
    assert d2 is not None and d3 is not None and cp is not None
    path = _writable(ds.layout.data.path_of(d2.physical_hash))
    path.write_bytes(b"X" + path.read_bytes()[1:])  # same size, other bytes
    ds.layout.data.delete(d3.physical_hash)
    ds.layout.checkpoints.delete(cp.physical_hash)
    report = verify_integrity(ds)
    kinds = {(p.kind, p.sequence_number) for p in report.problems}
    assert kinds == {
        (ProblemKind.DATA_CORRUPT, 2),
        (ProblemKind.CHECKPOINT_MISSING, 2),
        (ProblemKind.DATA_MISSING, 3),
    }
    assert report.first_bad_block is not None and report.first_bad_block.sequence_number == 2
    assert verify_integrity(ds, check_objects=False).ok


def test_wrong_size_and_logical_hash(tmp_path: Path) -> None:
    ds = seeded_dataset(tmp_path)
    ds.commit(SCHEMA, expected_head=ds.head())
    s0, p0 = write_parquet(tmp_path / "p0", 0, 3)
    wrong_logical = s0.replace(logical_hash=s0.logical_hash.replace(digest=b"\x00" * 32))
    ds.commit(AddData(new_data=wrong_logical), expected_head=ds.head(), data_file=p0)
    report = verify_integrity(ds)
    assert [p.kind for p in report.problems] == [ProblemKind.LOGICAL_HASH]
    assert verify_integrity(ds, check_logical_hashes=False).ok
    # A data file that is not Parquet at all.
    ds2 = seeded_dataset(tmp_path / "two")
    ds2.commit(SCHEMA, expected_head=ds2.head())
    (tmp_path / "np").write_bytes(b"not parquet")
    fake = s0.replace(physical_hash=Multihash.sha3_256(b"not parquet"), size=11)
    ds2.commit(AddData(new_data=fake), expected_head=ds2.head(), data_file=tmp_path / "np")
    assert [p.kind for p in verify_integrity(ds2).problems] == [ProblemKind.LOGICAL_HASH]


def test_invalid_head_ref(tmp_path: Path) -> None:
    ds, _ = sound(tmp_path)
    ds.layout.head_path.write_bytes(b"not a hash\n")
    report = verify_integrity(ds)
    assert [p.kind for p in report.problems] == [ProblemKind.HEAD_INVALID]


def _slice_from(table: pa.Table, path: Path, start: int, end: int) -> DataSlice:
    pq.write_table(table, path)
    data = path.read_bytes()
    return DataSlice(
        logical_hash=logical_hash(table.schema, table),
        physical_hash=Multihash.sha3_256(data),
        offset_interval=OffsetInterval(start=start, end=end),
        size=len(data),
    )


def test_slice_rows_out_of_offset_order_are_reported(tmp_path: Path) -> None:
    # Hashes are self-consistent, but the rows are not stored in offset order (or skip
    # an offset): an ODF invariant the engine relies on when it reads inputs unsorted.
    s0, p0 = write_parquet(tmp_path / "p0", 0, 4)
    table = pq.read_table(p0)
    cases = {
        "shuffled": table.take([1, 0, 2, 3]),
        "gap": table.set_column(0, "offset", pa.array([0, 1, 2, 4], pa.int64())),
        "short": table.slice(0, 3),
    }
    for name, bad in cases.items():
        ds = seeded_dataset(tmp_path / name)
        ds.commit(SCHEMA, expected_head=ds.head())
        fake = _slice_from(bad, tmp_path / f"{name}.parquet", 0, 3)
        ds.commit(
            AddData(new_data=fake), expected_head=ds.head(), data_file=tmp_path / f"{name}.parquet"
        )
        kinds = [p.kind for p in verify_integrity(ds).problems]
        assert kinds == [ProblemKind.DATA_OFFSETS], (name, kinds)
    ds = seeded_dataset(tmp_path / "good")
    ds.commit(SCHEMA, expected_head=ds.head())
    ds.commit(AddData(new_data=s0), expected_head=ds.head(), data_file=p0)
    assert verify_integrity(ds).ok
