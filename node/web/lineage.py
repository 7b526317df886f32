"""The lineage graph of a dataset, drawn server-side as inline SVG.

Three columns: the datasets its transform reads (left), the dataset itself (middle),
the datasets of the workspace whose transforms read it (right); an arrow from each
input to it and from it to each output. Every box links to that dataset's page. Only
SVG presentation attributes are used (no ``style``), so the page's CSP holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from node.web.html import dataset_href, esc

__all__ = ["lineage_svg"]

BOX_W: Final = 210
BOX_H: Final = 34
GAP_Y: Final = 14
COL_GAP: Final = 90
MAX_LABEL: Final = 28


def _label(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _box(x: int, y: int, alias: str, *, current: bool, held: bool) -> str:
    cls = "lin-node lin-self" if current else ("lin-node" if held else "lin-node lin-missing")
    rect = f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
    text = (
        f'<text x="{x + BOX_W // 2}" y="{y + BOX_H // 2 + 5}" text-anchor="middle">'
        f"{esc(_label(alias))}</text>"
    )
    inner = f"<title>{esc(alias)}</title>{rect}{text}"
    if current or not held:
        return f'<g class="{cls}">{inner}</g>'
    return f'<a href="{dataset_href(alias)}" class="{cls}">{inner}</a>'


def _edge(x1: int, y1: int, x2: int, y2: int) -> str:
    mid = (x1 + x2) // 2
    return (
        f'<path class="lin-edge" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2 - 6},{y2}" '
        'fill="none" marker-end="url(#arrow)"/>'
    )


def _column_ys(n: int, height: int) -> list[int]:
    total = n * BOX_H + max(0, n - 1) * GAP_Y
    top = (height - total) // 2
    return [top + i * (BOX_H + GAP_Y) for i in range(n)]


def lineage_svg(
    alias: str, inputs: Sequence[tuple[str, bool]], outputs: Sequence[tuple[str, bool]]
) -> str:
    """The graph of ``alias`` with ``inputs`` and ``outputs`` as (alias, held here) pairs."""
    rows = max(1, len(inputs), len(outputs))
    height = rows * BOX_H + (rows - 1) * GAP_Y + 20
    xs = (10, 10 + BOX_W + COL_GAP, 10 + 2 * (BOX_W + COL_GAP))
    width = xs[2] + BOX_W + 10
    mid_y = _column_ys(1, height)[0]
    parts = [
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="lin-head"/>'
        "</marker></defs>"
    ]
    for (name, held), y in zip(inputs, _column_ys(len(inputs), height), strict=True):
        parts.append(_edge(xs[0] + BOX_W, y + BOX_H // 2, xs[1], mid_y + BOX_H // 2))
        parts.append(_box(xs[0], y, name, current=False, held=held))
    for (name, held), y in zip(outputs, _column_ys(len(outputs), height), strict=True):
        parts.append(_edge(xs[1] + BOX_W, mid_y + BOX_H // 2, xs[2], y + BOX_H // 2))
        parts.append(_box(xs[2], y, name, current=False, held=held))
    parts.append(_box(xs[1], mid_y, alias, current=True, held=True))
    return (
        f'<svg class="lineage" role="img" aria-label="lineage of {esc(alias)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>'
    )
