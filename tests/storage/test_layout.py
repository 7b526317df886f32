"""Tests for the kamu-compatible dataset directory layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from fbs.multiformats import Multihash
from storage.errors import InvalidAlias, ObjectTooLarge, UnsafePath
from storage.layout import MAX_ALIAS_FILE_SIZE, DatasetLayout
from storage.object_store import MAX_BLOCK_SIZE
from storage.refs import HEAD


def test_paths_match_kamu(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path / "ds")
    assert layout.head_path == tmp_path / "ds" / "refs" / "head"
    assert layout.blocks_dir == tmp_path / "ds" / "blocks"
    assert layout.data_dir == tmp_path / "ds" / "data"
    assert layout.checkpoints_dir == tmp_path / "ds" / "checkpoints"
    assert layout.alias_path == tmp_path / "ds" / "info" / "alias"


def test_create_is_idempotent(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path / "workspace" / "datasets" / "fed01")
    assert not layout.exists()
    layout.create()
    layout.create()
    assert layout.exists()
    assert sorted(p.name for p in layout.root.iterdir()) == [
        "blocks",
        "checkpoints",
        "data",
        "info",
        "refs",
    ]


def test_create_refuses_file_in_the_way(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path)
    (tmp_path / "blocks").write_bytes(b"")
    with pytest.raises(UnsafePath):
        layout.create()


def test_stores_write_into_layout(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path)
    layout.create()
    block = b"block"
    h = Multihash.sha3_256(block)
    layout.blocks.put(h, block)
    layout.data.put(Multihash.sha3_256(b"data"), b"data")
    layout.checkpoints.put(Multihash.sha3_256(b"cp"), b"cp")
    layout.refs.set_if_equals(HEAD, None, h)
    assert (layout.blocks_dir / h.to_multibase()).read_bytes() == block
    assert (layout.data_dir / Multihash.sha3_256(b"data").to_multibase()).exists()
    assert (layout.checkpoints_dir / Multihash.sha3_256(b"cp").to_multibase()).exists()
    assert layout.head_path.read_text() == h.to_multibase()
    # A second layout object over the same directory sees the same state.
    again = DatasetLayout(tmp_path)
    assert again.refs.get(HEAD) == h
    assert again.blocks.get(h) == block


def test_block_store_limit(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path, max_data_object_size=10)
    assert layout.blocks.max_object_size == MAX_BLOCK_SIZE
    assert layout.data.max_object_size == 10
    with pytest.raises(ObjectTooLarge):
        layout.checkpoints.put(Multihash.sha3_256(b"x" * 11), b"x" * 11)


def test_alias_read_trims(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path)
    layout.create()
    assert layout.read_alias() is None
    layout.alias_path.write_text("  alice/my-dataset\n")
    assert layout.read_alias() == "alice/my-dataset"


def test_alias_write_roundtrip(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path / "new")
    layout.write_alias("my.dataset")
    assert layout.alias_path.read_bytes() == b"my.dataset"
    assert layout.read_alias() == "my.dataset"


@pytest.mark.parametrize("alias", ["", "   ", "a\nb", "x" * (MAX_ALIAS_FILE_SIZE + 1)])
def test_alias_write_refuses_unusable_text(tmp_path: Path, alias: str) -> None:
    with pytest.raises(InvalidAlias):
        DatasetLayout(tmp_path).write_alias(alias)
    assert not (tmp_path / "info" / "alias").exists()


@pytest.mark.parametrize("content", [b"\xff\xfe", b"a" * (MAX_ALIAS_FILE_SIZE + 1)])
def test_alias_read_refuses_bad_file(tmp_path: Path, content: bytes) -> None:
    layout = DatasetLayout(tmp_path)
    layout.create()
    layout.alias_path.write_bytes(content)
    with pytest.raises(InvalidAlias):
        layout.read_alias()


def test_alias_symlink_refused(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path)
    layout.create()
    (tmp_path / "elsewhere").write_text("x")
    layout.alias_path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InvalidAlias):
        layout.read_alias()


def test_unknown_files_tolerated(tmp_path: Path) -> None:
    layout = DatasetLayout(tmp_path)
    layout.create()
    (layout.info_dir / "summary").write_text("old kamu file")
    (layout.info_dir / "config").write_text("pullAliases: []\n")
    (layout.blocks_dir / "notes.txt").write_text("x")
    assert list(layout.blocks) == []
    assert layout.refs.names() == []
    assert layout.exists()
