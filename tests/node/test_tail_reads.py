"""Reads that do not grow with history: ``tail -n N`` reads the newest slices
that hold N records (verified), ``log -n N`` walks N blocks, ``list`` reads caches."""

from __future__ import annotations

from pathlib import Path

import pytest

import storage.verified as verified
from fbs.model import DatasetKind, DatasetSnapshot
from node.api import DatasetView
from node.cli import main
from storage.dataset import Dataset
from storage.errors import DamagedObject
from storage.reads import verified_slice_paths
from storage.workspace import Workspace
from tests.node.conftest import RootWriter

SLICES = [[("a", 1), ("b", 2)], [("c", 3)], [("d", 4), ("e", 5), ("f", 6)], [("g", 7)]]


@pytest.fixture(autouse=True)
def _cold() -> None:
    verified.forget_all()


@pytest.fixture
def root(tmp_path: Path) -> RootWriter:
    ws = Workspace.init(tmp_path / "project")
    ws.add_snapshot(DatasetSnapshot(name="cities", kind=DatasetKind.Root, metadata=()))
    slices = tmp_path / "slices"
    slices.mkdir()
    w = RootWriter(ws, "cities", slices)
    for rows in SLICES:
        w.append(rows)
    return w


def _slice_files(ds: Dataset) -> list[Path]:
    """The slice files, oldest first, then forgotten (in memory and on disk): the next
    read hashes whatever it uses."""
    files = verified_slice_paths(ds)
    verified.forget_all()
    record = verified.record_path_for(ds.state_cache)
    assert record is not None
    record.unlink()
    return files


def _hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = verified.VerifiedObjects._hash

    def spy(self: verified.VerifiedObjects, path: Path, *args: object, **kw: object) -> object:
        calls.append(path)
        return real(self, path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(verified.VerifiedObjects, "_hash", spy)
    return calls


def _blocks_read(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    real = Dataset.get_block

    def spy(self: Dataset, h: object) -> object:
        calls.append(h)
        return real(self, h)  # type: ignore[arg-type]

    monkeypatch.setattr(Dataset, "get_block", spy)
    return calls


@pytest.mark.parametrize("n", [0, 1, 2, 4, 5, 6, 7, 100])
def test_tail_equals_the_end_of_the_whole_table(root: RootWriter, n: int) -> None:
    view = DatasetView(root.ds)
    full = view.to_arrow()
    assert view.tail(n).to_pylist() == full.slice(max(0, full.num_rows - n)).to_pylist()
    assert view.tail(n).schema == full.schema


@pytest.mark.parametrize(("n", "newest"), [(0, 1), (1, 1), (2, 2), (4, 2), (5, 3), (7, 4)])
def test_tail_hashes_and_opens_only_the_newest_slices(
    root: RootWriter, monkeypatch: pytest.MonkeyPatch, n: int, newest: int
) -> None:
    files = _slice_files(root.ds)
    hashed = _hashed(monkeypatch)
    view = DatasetView(root.ds)
    view.tail(n)
    assert hashed == files[len(files) - newest :]
    # Older slices are never opened: a missing one does not matter to tail.
    for path in files[: len(files) - newest]:
        path.unlink()
    assert view.tail(n).num_rows == min(n, 7)


def test_tail_walks_only_the_newest_blocks(
    root: RootWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _blocks_read(monkeypatch)
    DatasetView(root.ds).tail(1)
    assert len(blocks) == 1  # the head is the newest AddData


def test_tail_still_verifies_what_it_reads(root: RootWriter) -> None:
    newest = _slice_files(root.ds)[-1]
    newest.chmod(0o644)
    newest.write_bytes(newest.read_bytes()[:-1] + b"\0")
    with pytest.raises(DamagedObject):
        DatasetView(root.ds).tail(1)


def test_tail_of_a_dataset_without_slices(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path)
    ws.add_snapshot(DatasetSnapshot(name="empty", kind=DatasetKind.Root, metadata=()))
    assert DatasetView(ws.get("empty")).tail(3).num_rows == 0


def test_log_n_stops_after_n_blocks(
    root: RootWriter, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = _blocks_read(monkeypatch)
    workspace = str(root.ws.root.parent)
    assert main(["-w", workspace, "log", "-n", "2", "cities", "--output-format", "json"]) == 0
    assert len(blocks) == 2
    assert capsys.readouterr().out.count('"blockHash"') == 2


def test_list_reads_no_block_once_the_cache_is_current(
    root: RootWriter, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = str(root.ws.root.parent)
    assert main(["-w", workspace, "list", "--output-format", "json"]) == 0  # refreshes
    first = capsys.readouterr().out
    blocks = _blocks_read(monkeypatch)
    assert main(["-w", workspace, "list", "--output-format", "json"]) == 0
    assert capsys.readouterr().out == first
    assert blocks == []
    assert '"records": 7' in first


def test_tail_cells_match_pyarrows_conversion() -> None:
    """`odf tail` builds UTC/naive timestamps itself (pyarrow's conversion imports pandas);
    the cells are the ones ``to_pylist`` gives."""
    import pyarrow as pa

    from node.render.rows import plain_cell as _cell
    from node.render.rows import plain_rows as _rows

    values = [0, 1_700_000_000_123, None, -86_400_000, 4_102_444_800_001]
    table = pa.table(
        {
            "ms_utc": pa.array(values, pa.timestamp("ms", tz="UTC")),
            "us_naive": pa.array(values, pa.timestamp("us")),
            "s_utc": pa.array([v // 1000 if v else v for v in values], pa.timestamp("s", "UTC")),
            "ns_utc": pa.array(values, pa.timestamp("ns", tz="UTC")),
            "other_tz": pa.array(values, pa.timestamp("ms", tz="Europe/Paris")),
            "x": pa.array([1, None, 3, 4, 5], pa.int64()),
            "s": pa.array(["a", "b", None, "d", "e"]),
        }
    )
    expected = [{k: _cell(v) for k, v in r.items()} for r in table.to_pylist()]
    assert _rows(table) == expected
    assert _rows(table.slice(0, 0)) == []
