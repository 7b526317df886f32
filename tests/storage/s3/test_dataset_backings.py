"""A dataset behaves the same on both backings: a directory and an S3 prefix (SeaweedFS).

`storage.dataset.ChainDataset` over `DatasetLayout` (local disk, what every workspace
uses) and over `S3DatasetLayout`: commits with data and checkpoint files, reads
hashed before parsed, a stale head refused by compare-and-swap, a file that is not
its declared object refused with the head unmoved and nothing named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fbs.model import AddData, DatasetKind, Seed
from fbs.multiformats import Multihash
from storage.dataset import ChainDataset
from storage.errors import DatasetNotFound, HashMismatch, RefCASFailed
from storage.layout import DatasetLayout
from storage.s3.client import S3Client
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import S3Location
from tests.p2p.sync_helpers import SCHEMA, T0, add_slices, write_slice
from tests.storage.s3.race import RACE_DID


@pytest.fixture(params=["disk", "s3"])
def backing(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "disk":
        return DatasetLayout(tmp_path / "ds")
    location: S3Location = request.getfixturevalue("s3_location")
    client: S3Client = request.getfixturevalue("s3_client")
    return S3DatasetLayout(client, location.child("ds"))


def test_a_dataset_commits_and_reads_back_on_both_backings(backing: Any, tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFound):
        ChainDataset.open(backing)
    ds: ChainDataset[Any] = ChainDataset.create(backing)
    assert ds.head() is None
    ds.commit(Seed(dataset_id=RACE_DID, dataset_kind=DatasetKind.Root), expected_head=None)
    assert ChainDataset.open(backing).head() == ds.head()
    add_slices(ds, tmp_path / "files", 3, checkpoints=True)  # type: ignore[arg-type]
    state = ds.state()
    assert state is not None and state.sequence_number == 4 and state.num_records == 15
    blocks = list(ds.iter_blocks())
    assert [b.sequence_number for _h, _r, b in blocks] == [4, 3, 2, 1, 0]
    assert all(ds.get_block(h) == (raw, b) for h, raw, b in blocks)
    assert len(list(backing.data.iter_hashes())) == 3
    assert len(list(backing.checkpoints.iter_hashes())) == 3
    other: ChainDataset[Any] = ChainDataset.open(backing)  # another writer's view
    with pytest.raises(RefCASFailed):
        other.commit(SCHEMA, expected_head=blocks[1][0])
    assert other.head() == ds.head()


def test_a_file_that_is_not_its_object_is_refused_on_both_backings(
    backing: Any, tmp_path: Path
) -> None:
    ds: ChainDataset[Any] = ChainDataset.create(backing)
    ds.commit(Seed(dataset_id=RACE_DID, dataset_kind=DatasetKind.Root), expected_head=None)
    ds.commit(SCHEMA, expected_head=ds.head())
    head = ds.head()
    path = tmp_path / "slice.parquet"
    slice_ = write_slice(path, 0, 5)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes
    path.write_bytes(bytes(data))
    event = AddData(new_data=slice_, new_watermark=T0)
    with pytest.raises(HashMismatch):
        ds.commit(event, expected_head=head, data_file=path)
    assert ds.head() == head
    assert list(backing.data.iter_hashes()) == []
    assert not backing.data.has(Multihash.sha3_256(bytes(data)))
