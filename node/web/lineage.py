"""The lineage graph of a dataset (`node.web.graph`), drawn server-side as inline SVG.

One column per step upstream (left) and downstream (right) of the dataset shown (in the
middle, highlighted); a curve with an arrow from each input to each reader. Every other
dataset's box links to its page; an input this node does not hold is dashed. Only SVG
presentation attributes are used (no ``style``), so the page's CSP holds.
"""

from __future__ import annotations

from typing import Final

from node.web.graph import LineageGraph, LineageNode
from node.web.html import dataset_href, esc

__all__ = ["lineage_svg"]

BOX_W: Final = 210
BOX_H: Final = 34
GAP_Y: Final = 14
COL_GAP: Final = 70
MARGIN: Final = 10
MAX_LABEL: Final = 28


def _label(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _box(x: int, y: int, node: LineageNode) -> str:
    current = node.column == 0
    cls = "lin-node lin-self" if current else ("lin-node" if node.held else "lin-node lin-missing")
    rect = f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
    text = (
        f'<text x="{x + BOX_W // 2}" y="{y + BOX_H // 2 + 5}" text-anchor="middle">'
        f"{esc(_label(node.label))}</text>"
    )
    inner = f"<title>{esc(node.label)}</title>{rect}{text}"
    if current or not node.held:
        return f'<g class="{cls}">{inner}</g>'
    return f'<a href="{dataset_href(node.label)}" class="{cls}">{inner}</a>'


def _edge(x1: int, y1: int, x2: int, y2: int) -> str:
    mid = (x1 + x2) // 2
    return (
        f'<path class="lin-edge" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2 - 6},{y2}" '
        'fill="none" marker-end="url(#arrow)"/>'
    )


def _positions(graph: LineageGraph) -> tuple[dict[str, tuple[int, int]], int, int]:
    """Top-left corner of every box, and the drawing's width and height."""
    columns: dict[int, list[LineageNode]] = {}
    for node in graph.nodes:
        columns.setdefault(node.column, []).append(node)
    first = min(columns)
    tallest = max(len(c) for c in columns.values())
    height = 2 * MARGIN + tallest * BOX_H + (tallest - 1) * GAP_Y
    where = {}
    for col, nodes in columns.items():
        x = MARGIN + (col - first) * (BOX_W + COL_GAP)
        total = len(nodes) * BOX_H + (len(nodes) - 1) * GAP_Y
        top = (height - total) // 2
        for i, node in enumerate(nodes):
            where[node.key] = (x, top + i * (BOX_H + GAP_Y))
    width = 2 * MARGIN + len(columns) * BOX_W + (len(columns) - 1) * COL_GAP
    return where, width, height


def lineage_svg(graph: LineageGraph, alias: str) -> str:
    """``graph`` (around ``alias``) as an ``<svg>`` element."""
    where, width, height = _positions(graph)
    parts = [
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="lin-head"/>'
        "</marker></defs>"
    ]
    for src, dst in graph.edges:
        (x1, y1), (x2, y2) = where[src], where[dst]
        parts.append(_edge(x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2))
    parts.extend(_box(*where[n.key], n) for n in graph.nodes)
    return (
        f'<svg class="lineage" role="img" aria-label="lineage of {esc(alias)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>'
    )
