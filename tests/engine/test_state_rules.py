"""The stream state's rules (engine.streaming.state): what a checkpoint's ``state.json`` must
be to be read, and what it reads back as. Each test names the rule it pins (mutation testing,
docs/mutation-testing.md). Pure: no Spark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import CheckpointError
from engine.streaming.state import (
    MODE_CHANGELOG,
    MODE_WINDOW,
    StreamState,
    load_state,
    save_state,
)


def _doc(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "format": 1,
        "fingerprint": "fp",
        "mode": "window",
        "frontierUs": 7,
        "inputs": {},
        "hasOutput": False,
    }
    doc.update(changes)
    return doc


def _write(root: Path, doc: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "state.json").write_text(json.dumps(doc), encoding="utf-8")
    return root


@pytest.mark.parametrize("mode", [MODE_WINDOW, MODE_CHANGELOG])
@pytest.mark.parametrize("frontier", [None, 0, -5, 1_700_000_000_000_000])
@pytest.mark.parametrize("has_output", [False, True])
def test_a_saved_state_reads_back_equal(
    tmp_path: Path, mode: str, frontier: int | None, has_output: bool
) -> None:
    """Every field survives save then load: fingerprint, both modes, a frontier or none
    (zero and negative instants too), the inputs by folder, whether there is a live output."""
    state = StreamState(
        fingerprint="abc",
        mode=mode,
        frontier_us=frontier,
        inputs={"input-0": "f01ed", "input-1": "f01ff"},
        has_output=has_output,
    )
    root = tmp_path / "state"
    for name in ("input-0", "input-1", "output"):
        (root / name).mkdir(parents=True)
    save_state(root, state)
    assert load_state(root) == state


def test_state_json_format_names_each_field(tmp_path: Path) -> None:
    """``state.json`` holds format 1 and the fields under their camelCase names, which is
    what an engine of another version reads (the format is the compatibility contract)."""
    root = tmp_path / "state"
    (root / "input-0").mkdir(parents=True)
    save_state(root, StreamState("fp", MODE_CHANGELOG, 42, {"input-0": "f01ed"}, False))
    assert json.loads((root / "state.json").read_text(encoding="utf-8")) == {
        "format": 1,
        "fingerprint": "fp",
        "mode": "changelog",
        "frontierUs": 42,
        "inputs": {"input-0": "f01ed"},
        "hasOutput": False,
    }


def test_save_creates_the_state_folder_and_overwrites(tmp_path: Path) -> None:
    """The state folder is created (with its parents) when missing, and a second save into
    it replaces the first."""
    root = tmp_path / "a" / "b"
    save_state(root, StreamState("one", MODE_WINDOW, None))
    save_state(root, StreamState("two", MODE_WINDOW, 3))
    assert load_state(root) == StreamState("two", MODE_WINDOW, 3)


def test_a_folder_without_state_json_has_no_state(tmp_path: Path) -> None:
    """No ``state.json``: no state (a checkpoint of a plain query), not an error; a folder
    of that name is not a state file."""
    assert load_state(tmp_path) is None
    (tmp_path / "state.json").mkdir()
    assert load_state(tmp_path) is None


def test_state_json_is_read_up_to_1_mib(tmp_path: Path) -> None:
    """A ``state.json`` of exactly 1 MiB (1,048,576 bytes) is read; one byte more is refused
    before it is parsed."""
    text = json.dumps(_doc())
    limit = 1_048_576
    (tmp_path / "state.json").write_text(text + " " * (limit - len(text)), encoding="utf-8")
    assert (tmp_path / "state.json").stat().st_size == limit
    assert load_state(tmp_path) == StreamState("fp", MODE_WINDOW, 7)
    (tmp_path / "state.json").write_text(text + " " * (limit + 1 - len(text)), encoding="utf-8")
    with pytest.raises(CheckpointError, match="exceeds"):
        load_state(tmp_path)


@pytest.mark.parametrize("fmt", [0, 2, "1", None])
def test_only_state_format_1_is_read(tmp_path: Path, fmt: object) -> None:
    """Another format (or none, or the right number as text) is refused as unknown."""
    doc = _doc(format=fmt)
    if fmt is None:
        del doc["format"]
    with pytest.raises(CheckpointError, match="format"):
        load_state(_write(tmp_path, doc))


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("not json", id="not-json"),
        pytest.param(_doc(frontierUs="soon"), id="frontier-not-a-number"),
        pytest.param({k: v for k, v in _doc().items() if k != "mode"}, id="missing-key"),
        pytest.param(_doc(frontierUs=[1]), id="frontier-a-list"),
        pytest.param(_doc(inputs=[1]), id="inputs-not-pairs"),
        pytest.param([1, 2], id="not-an-object"),
    ],
)
def test_a_malformed_state_json_is_a_checkpoint_error(tmp_path: Path, doc: object) -> None:
    """Every malformed document is a `CheckpointError` (ValueError, KeyError, TypeError and
    AttributeError inside are all caught), never another exception."""
    root = tmp_path / "s"
    root.mkdir()
    text = doc if isinstance(doc, str) else json.dumps(doc)
    (root / "state.json").write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError, match="malformed"):
        load_state(root)


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    """Only the two modes are read; a mode name is compared exactly (case too)."""
    for mode in ("stream", "WINDOW", ""):
        with pytest.raises(CheckpointError, match="mode"):
            load_state(_write(tmp_path, _doc(mode=mode)))


@pytest.mark.parametrize("name", ["input-0", "../x", "a/b", ".", ".."])
def test_every_folder_the_state_names_must_be_its_own_existing_child(
    tmp_path: Path, name: str
) -> None:
    """An input folder must exist and be a plain child of the state folder: a path with
    ``/``, ``.`` or ``..`` is refused even when it resolves to an existing folder."""
    root = tmp_path / "s" / "state"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "s" / "x").mkdir()
    with pytest.raises(CheckpointError, match="missing"):
        load_state(_write(root, _doc(inputs={name: "f01ed"})))


def test_the_live_output_folder_is_required_only_when_the_state_has_one(tmp_path: Path) -> None:
    """``hasOutput`` requires the ``output`` folder; without it the folder is not looked for."""
    root = _write(tmp_path, _doc(hasOutput=True))
    with pytest.raises(CheckpointError, match="'output'"):
        load_state(root)
    (root / "output").mkdir()
    assert load_state(root) == StreamState("fp", MODE_WINDOW, 7, {}, True)
    (root / "output").rmdir()
    assert load_state(_write(root, _doc(hasOutput=False))) == StreamState("fp", MODE_WINDOW, 7)


def test_input_dir_finds_an_input_by_its_dataset_id(tmp_path: Path) -> None:
    """The retained rows of an input are found by dataset ID, under the folder name the
    state gave it; an ID the state does not list has none."""
    state = StreamState("fp", MODE_WINDOW, None, {"input-0": "f01aa", "input-1": "f01bb"})
    assert state.input_dir(tmp_path, "f01bb") == tmp_path / "input-1"
    assert state.input_dir(tmp_path, "f01aa") == tmp_path / "input-0"
    assert state.input_dir(tmp_path, "f01cc") is None
