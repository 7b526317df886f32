"""`Dataset.append_blocks_bytes` given the blocks the receive path decoded already.

The blocks are then not decoded a second time, but hashed from their bytes and
validated exactly as without them; a list that does not fit, or a dataset with other
decode limits, is decoded as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import storage.dataset
from fbs.codec import decode_block
from fbs.limits import DEFAULT_LIMITS, DecodeLimits
from fbs.model import MetadataBlock
from storage.dataset import Dataset
from storage.errors import ChainRuleViolation
from storage.layout import DatasetLayout
from tests.storage.test_append_blocks_crash import source_raws


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]

    def counting(raw: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> MetadataBlock:
        calls[0] += 1
        return decode_block(raw, limits)

    monkeypatch.setattr(storage.dataset, "decode_block", counting)
    return calls


def test_decoded_blocks_are_not_decoded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = source_raws(tmp_path / "src", 4)
    raws = [raw for _h, raw in chain]
    ds = Dataset.create(DatasetLayout(tmp_path / "ds"))
    calls = _count_decodes(monkeypatch)
    result = ds.append_blocks_bytes(raws, decoded=[decode_block(r) for r in raws])
    assert calls[0] == 0
    assert result.new_head == chain[-1][0] == ds.head()
    assert [h for h, _raw, _b in ds.iter_blocks()] == [h for h, _raw in reversed(chain)]


def test_decoded_blocks_are_still_validated(tmp_path: Path) -> None:
    chain = source_raws(tmp_path / "src", 3)
    raws = [raw for _h, raw in chain]
    blocks = [decode_block(r) for r in raws]
    # Claimed blocks out of sequence: the chain rules refuse them as they would the bytes.
    wrong = [blocks[0], blocks[2], blocks[1], blocks[3]]
    ds = Dataset.create(DatasetLayout(tmp_path / "ds"))
    with pytest.raises(ChainRuleViolation):
        ds.append_blocks_bytes(raws, decoded=wrong)
    assert ds.head() is None


@pytest.mark.parametrize("case", ["short-list", "other-limits"])
def test_decoded_blocks_are_ignored_when_they_do_not_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    chain = source_raws(tmp_path / "src", 2)
    raws = [raw for _h, raw in chain]
    decoded = [decode_block(r) for r in raws]
    limits = DEFAULT_LIMITS
    if case == "short-list":
        decoded = decoded[:-1]
    else:
        limits = DEFAULT_LIMITS.replace(max_block_bytes=DEFAULT_LIMITS.max_block_bytes - 1)
    DatasetLayout(tmp_path / "ds").create()
    ds = Dataset(DatasetLayout(tmp_path / "ds"), limits=limits)
    calls = _count_decodes(monkeypatch)
    ds.append_blocks_bytes(raws, decoded=decoded)
    assert calls[0] == len(raws)
    assert ds.head() == chain[-1][0]
