"""The lineage of a dataset as a graph: its inputs, their inputs, ... and the datasets
reading it, theirs, ... up to `MAX_DEPTH` steps each way (pure: built from list rows).

A node is a dataset of the workspace (by alias) or an input this workspace does not hold
(by its reference); its column is its distance upstream (negative) or downstream
(positive) of the dataset shown (column 0). Edges run from an input to its reader, for
every pair of nodes shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from node.web.rows import DatasetRow

__all__ = ["MAX_DEPTH", "MAX_PER_COLUMN", "LineageGraph", "LineageNode", "lineage_graph"]

#: Steps shown upstream and downstream.
MAX_DEPTH: Final = 3
#: Datasets shown in one column (the rest are counted in the column's last box).
MAX_PER_COLUMN: Final = 12


@dataclass(frozen=True, slots=True)
class LineageNode:
    """One box: a dataset (``held``) or an input reference this node does not hold."""

    key: str
    label: str
    column: int
    held: bool


@dataclass(frozen=True, slots=True)
class LineageGraph:
    """Nodes by column, then label; edges as (input key, reader key)."""

    nodes: tuple[LineageNode, ...]
    edges: tuple[tuple[str, str], ...]


def _walk(start: str, step: dict[str, list[str]], sign: int, columns: dict[str, int]) -> None:
    frontier = [start]
    for depth in range(1, MAX_DEPTH + 1):
        found = []
        for key in frontier:
            for nxt in step.get(key, []):
                if nxt not in columns:
                    columns[nxt] = sign * depth
                    found.append(nxt)
        frontier = found


def _capped(columns: dict[str, int]) -> dict[str, int]:
    """At most `MAX_PER_COLUMN` nodes per column (by key), the dataset itself kept."""
    kept: dict[str, int] = {}
    counts: dict[int, int] = {}
    for key, col in sorted(columns.items(), key=lambda kv: (kv[1], kv[0])):
        if counts.get(col, 0) < MAX_PER_COLUMN or col == 0:
            kept[key] = col
            counts[col] = counts.get(col, 0) + 1
    return kept


def lineage_graph(did: str, rows: Sequence[DatasetRow]) -> LineageGraph:
    """The graph around dataset ``did`` (``did:odf:``) from every dataset's list row."""
    by_did = {r.did: r for r in rows}
    upstream = {r.did: list(r.inputs) for r in rows}
    downstream: dict[str, list[str]] = {}
    for r in rows:
        for i in r.inputs:
            downstream.setdefault(i, []).append(r.did)
    columns = {did: 0}
    _walk(did, upstream, -1, columns)
    _walk(did, downstream, 1, columns)
    columns = _capped(columns)
    nodes = tuple(
        LineageNode(key, by_did[key].alias if key in by_did else key, col, key in by_did)
        for key, col in columns.items()
    )
    edges = tuple(
        (i, key) for key in columns if key in by_did for i in by_did[key].inputs if i in columns
    )
    ordered = sorted(nodes, key=lambda n: (n.column, n.label))
    return LineageGraph(tuple(ordered), edges)
