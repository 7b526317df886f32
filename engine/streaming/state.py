"""The stream state a stateful query keeps in its checkpoint, between two runs.

Layout of the state folder (stored under ``state/`` in the checkpoint archive):

- ``state.json``: `StreamState` as JSON (format, query fingerprint, mode, frontier);
- ``input-<n>/``: Parquet files of the rows of input ``n`` the query still needs (the
  inputs are listed in ``state.json`` by dataset ID), in offset order;
- ``output/``: Parquet files of the *live* output of a changelog query: the rows emitted
  and not retracted so far, each with the offset it was emitted at (`OFFSET_COLUMN`);
- ``accumulators/``: for an accumulator query, ``state.parquet``, one row per group
  (`engine.streaming.accumulators`), and one ``values-<j>.parquet`` per retractable
  ``min``/``max`` (`engine.streaming.multisets`): no input rows at all.

The state is the engine's own business (the spec makes checkpoints opaque); its bytes
need not be deterministic, only the data computed from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from engine.errors import CheckpointError

__all__ = [
    "ACCUMULATORS_DIR",
    "MODE_ACCUMULATE",
    "MODE_CHANGELOG",
    "MODE_WINDOW",
    "OFFSET_COLUMN",
    "STATE_FORMAT",
    "StreamState",
    "load_state",
    "save_state",
]

#: Version of the state layout; another version is refused as unreadable.
STATE_FORMAT: Final = 1
#: Append-only window results; only the rows of open windows are kept.
MODE_WINDOW: Final = "window"
#: Recompute over every retained row and emit the difference to the live output.
MODE_CHANGELOG: Final = "changelog"
#: One accumulator row per group of a decomposable GROUP BY (or one for a global
#: aggregate), merged with each run's partial accumulators.
MODE_ACCUMULATE: Final = "accumulate"
#: Folder of an accumulator query's state (`MODE_ACCUMULATE`).
ACCUMULATORS_DIR: Final = "accumulators"
#: Every mode a state may record.
MODES: Final = (MODE_WINDOW, MODE_CHANGELOG, MODE_ACCUMULATE)
#: Column of the live output holding the offset a row was emitted at.
OFFSET_COLUMN: Final = "__odf_emitted_offset"
#: Largest ``state.json`` read.
MAX_STATE_JSON_BYTES: Final = 1024 * 1024
_STATE_FILE: Final = "state.json"


@dataclass(frozen=True, slots=True)
class StreamState:
    """What a stateful query remembers between runs (the Parquet files live beside it).

    Attributes:
        fingerprint: digest of the rewritten query that produced this state.
        mode: `MODE_WINDOW`, `MODE_CHANGELOG` or `MODE_ACCUMULATE` (kept for the
            state's life: a later run never switches it).
        frontier_us: the watermark (µs since the epoch) up to which results are final:
            windows ending at or before it were emitted. None before the first watermark.
        inputs: input folder name -> dataset ID (multibase) of the retained rows.
        has_output: whether a live output folder exists.
    """

    fingerprint: str
    mode: str
    frontier_us: int | None
    inputs: dict[str, str] = field(default_factory=dict)
    has_output: bool = False

    def input_dir(self, root: Path, did: str) -> Path | None:
        """The folder of the retained rows of input ``did`` under ``root``, if any."""
        for name, owner in self.inputs.items():
            if owner == did:
                return root / name
        return None


def save_state(root: Path, state: StreamState) -> None:
    """Write ``state.json`` into the state folder ``root``."""
    doc = {
        "format": STATE_FORMAT,
        "fingerprint": state.fingerprint,
        "mode": state.mode,
        "frontierUs": state.frontier_us,
        "inputs": state.inputs,
        "hasOutput": state.has_output,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / _STATE_FILE).write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")


def load_state(root: Path) -> StreamState | None:
    """The state in folder ``root`` (None when it has no ``state.json``).

    Raises:
        CheckpointError: for a malformed, oversized or other-format ``state.json``, or
            one naming folders that are missing.
    """
    path = root / _STATE_FILE
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_STATE_JSON_BYTES:
        raise CheckpointError("checkpoint state.json exceeds its limit")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != STATE_FORMAT:
            raise CheckpointError(f"checkpoint state format {doc.get('format')!r} is unknown")
        state = StreamState(
            fingerprint=str(doc["fingerprint"]),
            mode=str(doc["mode"]),
            frontier_us=None if doc["frontierUs"] is None else int(doc["frontierUs"]),
            inputs={str(k): str(v) for k, v in dict(doc["inputs"]).items()},
            has_output=bool(doc["hasOutput"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"checkpoint state.json is malformed: {e}") from None
    if state.mode not in MODES:
        raise CheckpointError(f"checkpoint state mode {state.mode!r} is unknown")
    folders = [*state.inputs, *(["output"] if state.has_output else [])]
    if state.mode == MODE_ACCUMULATE:
        folders.append(ACCUMULATORS_DIR)
    for name in folders:
        if "/" in name or name in (".", "..") or not (root / name).is_dir():
            raise CheckpointError(f"checkpoint state folder {name!r} is missing")
    return state
