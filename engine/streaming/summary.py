"""What a checkpoint's stream state keeps, for a user to see (``odf inspect state``).

A derivative's checkpoint is the engine's business, but its size is the user's: a
follower or a validator replicates every checkpoint. `summarize_checkpoint` names the
state kind and counts what it holds, from the Parquet footers alone (no row is read).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from engine.checkpoint import extract_state
from engine.streaming.state import ACCUMULATORS_DIR, load_state

__all__ = ["KIND_WATERMARKS", "StateSummary", "summarize_checkpoint"]

#: Kind of a checkpoint without stream state: per-input watermarks only (stateless query).
KIND_WATERMARKS: Final = "watermarks"
#: What each kind keeps, in words.
_KEEPS: Final = {
    "window": "the input rows of open windows",
    "accumulate": "one accumulator row per group",
    "accumulate+values": "one accumulator row per group and each group's min/max values "
    "(the input retracts)",
    "changelog": "every input row and the live output",
    KIND_WATERMARKS: "the inputs' watermarks only",
}


@dataclass(frozen=True, slots=True)
class StateSummary:
    """One checkpoint's state.

    Attributes:
        kind: the state mode (``window``, ``accumulate``, ``changelog``) or
            `KIND_WATERMARKS`.
        keeps: what that kind keeps, in words.
        input_rows: input rows kept (window and changelog modes).
        output_rows: live output rows kept (changelog mode).
        groups: accumulator rows (accumulate mode).
        values: rows of the retractable min/max multisets, one per (aggregate, group,
            distinct value) (accumulate mode over an input that retracts).
        size: the checkpoint file's size in bytes.
    """

    kind: str
    keeps: str
    input_rows: int
    output_rows: int
    groups: int
    size: int
    values: int = 0


def summarize_checkpoint(path: str | os.PathLike[str]) -> StateSummary:
    """The state of checkpoint ``path``.

    Raises:
        CheckpointError: an unreadable checkpoint or state.
    """
    size = os.stat(path).st_size
    with tempfile.TemporaryDirectory(prefix="odf-state-") as tmp:
        root = Path(tmp)
        state = load_state(root) if extract_state(path, root) else None
        if state is None:
            return StateSummary(KIND_WATERMARKS, _KEEPS[KIND_WATERMARKS], 0, 0, 0, size)
        inputs = sum(_rows(root / name) for name in state.inputs)
        output = _rows(root / "output") if state.has_output else 0
        groups = _rows(root / ACCUMULATORS_DIR, "state.parquet")
        values = _rows(root / ACCUMULATORS_DIR, "values-*.parquet")
        multisets = any((root / ACCUMULATORS_DIR).glob("values-*.parquet"))
    kind = state.mode + ("+values" if multisets else "")
    keeps = _KEEPS.get(kind, "")
    return StateSummary(state.mode, keeps, inputs, output, groups, size, values)


def _rows(folder: Path, pattern: str = "*.parquet") -> int:
    """Rows of the Parquet files in ``folder`` matching ``pattern``, by their footers."""
    import pyarrow.parquet as pq

    if not folder.is_dir():
        return 0
    return sum(pq.read_metadata(p).num_rows for p in sorted(folder.glob(pattern)))
