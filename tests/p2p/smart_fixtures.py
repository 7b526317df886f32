"""A byte-for-byte reproducible dataset for the recorded smart-protocol sequences.

Fixed key, fixed times, fixed object bytes: the same blocks (and so the same hashes and
the same metadata batches) on every run. ``fixture`` has a Seed, a SetInfo, a schema and
two AddData blocks (two data slices and one checkpoint).
"""

from __future__ import annotations

from pathlib import Path

from fbs.did import DatasetId
from fbs.keys import KeyPair
from fbs.model import (
    AddData,
    Checkpoint,
    DatasetKind,
    DataSlice,
    MetadataEvent,
    OffsetInterval,
    Seed,
    SetInfo,
)
from fbs.multiformats import Multihash
from storage.dataset import Dataset
from storage.layout import DatasetLayout
from storage.staging import install_staged, open_staging, staging_lock
from storage.workspace import Workspace
from tests.p2p.sync_helpers import SCHEMA, T0

FIXTURE_KEY = bytes(range(1, 33))
#: The object files of the fixture dataset (not Parquet: transfer never reads them).
SLICE_1 = b"fixture data slice 1\n" * 10
SLICE_2 = b"fixture data slice 2\n" * 12
CHECKPOINT_2 = b"fixture checkpoint 2\n" * 3


def fixture_id() -> DatasetId:
    """The DID of the fixture dataset."""
    return KeyPair.from_private_bytes(FIXTURE_KEY).dataset_id


def _slice(data: bytes, start: int, n: int) -> DataSlice:
    return DataSlice(
        logical_hash=Multihash.sha3_256(b"logical " + data),
        physical_hash=Multihash.sha3_256(data),
        offset_interval=OffsetInterval(start=start, end=start + n - 1),
        size=len(data),
    )


def fixture_blocks(scratch: Path) -> list[tuple[Multihash, bytes]]:
    """The fixture chain, oldest first, built in the empty directory ``scratch``."""
    scratch.mkdir(parents=True, exist_ok=True)
    ds = Dataset.create(DatasetLayout(scratch / "ds"))
    f1, f2, c2 = scratch / "s1", scratch / "s2", scratch / "c2"
    f1.write_bytes(SLICE_1)
    f2.write_bytes(SLICE_2)
    c2.write_bytes(CHECKPOINT_2)
    events: list[tuple[MetadataEvent, Path | None, Path | None]] = [
        (Seed(dataset_id=fixture_id(), dataset_kind=DatasetKind.Root), None, None),
        (SetInfo(description="recorded smart-protocol fixture", keywords=("test",)), None, None),
        (SCHEMA, None, None),
        (AddData(new_data=_slice(SLICE_1, 0, 10), new_watermark=T0), f1, None),
    ]
    head: Multihash | None = None
    for event, data, cp in events:
        head = ds.commit(
            event, system_time=T0, expected_head=head, data_file=data, checkpoint_file=cp
        ).new_head
    state = ds.state()
    assert state is not None
    ds.commit(
        AddData(
            prev_offset=state.last_offset,
            new_data=_slice(SLICE_2, 10, 12),
            new_checkpoint=Checkpoint(
                physical_hash=Multihash.sha3_256(CHECKPOINT_2), size=len(CHECKPOINT_2)
            ),
            new_watermark=T0,
        ),
        system_time=T0,
        expected_head=head,
        data_file=f2,
        checkpoint_file=c2,
    )
    out = [(h, raw) for h, raw, _b in ds.iter_blocks()]
    out.reverse()
    return out


def install_fixture(ws: Workspace, scratch: Path, alias: str = "fixture", upto: int = 5) -> Dataset:
    """Install the first ``upto`` fixture blocks in ``ws`` as ``alias`` (a replica: no key)."""
    blocks = fixture_blocks(scratch)[:upto]
    name = "fixture-install"
    with staging_lock(ws, name):
        staged = open_staging(ws, name)
        if upto >= 4:  # only the objects the installed blocks name
            staged.layout.data.put(Multihash.sha3_256(SLICE_1), SLICE_1)
        if upto >= 5:
            staged.layout.data.put(Multihash.sha3_256(SLICE_2), SLICE_2)
            staged.layout.checkpoints.put(Multihash.sha3_256(CHECKPOINT_2), CHECKPOINT_2)
        install_staged(ws, staged, [raw for _h, raw in blocks], alias, fixture_id())
    return ws.get(alias)
