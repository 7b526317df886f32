"""A bar chart of a query result, drawn server-side as inline SVG.

The first numeric column gives the bar heights; the first other column (or the row
number) labels them. Up to `MAX_BARS` rows are drawn; a result with no numeric column
gets no chart. Presentation attributes only (no ``style``), for the page's CSP.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from node.web.html import esc

__all__ = ["MAX_BARS", "bar_chart"]

MAX_BARS: Final = 60
WIDTH: Final = 720
HEIGHT: Final = 260
PAD_LEFT: Final = 60
PAD_BOTTOM: Final = 50


def _columns(result: pa.Table) -> tuple[int, int | None] | None:
    """(value column, label column or None), or None without a numeric column."""
    numeric = [
        i
        for i, f in enumerate(result.schema)
        if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
    ]
    if not numeric:
        return None
    labels = [i for i in range(result.num_columns) if i != numeric[0]]
    return numeric[0], (labels[0] if labels else None)


def _bars(values: list[float], labels: list[str]) -> str:
    top = max([*values, 0.0])
    bottom = min([*values, 0.0])
    span = (top - bottom) or 1.0
    plot_h = HEIGHT - PAD_BOTTOM - 10
    step = (WIDTH - PAD_LEFT) / max(1, len(values))
    zero = 10 + plot_h * top / span
    parts = [f'<line class="axis" x1="{PAD_LEFT}" y1="{zero:.1f}" x2="{WIDTH}" y2="{zero:.1f}"/>']
    for i, (v, label) in enumerate(zip(values, labels, strict=True)):
        h = plot_h * abs(v) / span
        y = zero - h if v >= 0 else zero
        x = PAD_LEFT + i * step + step * 0.1
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{step * 0.8:.1f}" '
            f'height="{h:.1f}"><title>{esc(label)}: {esc(v)}</title></rect>'
        )
        if len(values) <= 20:
            lx, ly = x + step * 0.4, HEIGHT - PAD_BOTTOM + 16
            parts.append(
                f'<text class="label" x="{lx:.1f}" y="{ly}" text-anchor="middle">'
                f"{esc(label[:12])}</text>"
            )
    for value, y in ((top, 10), (bottom, 10 + plot_h)):
        parts.append(
            f'<text class="label" x="{PAD_LEFT - 6}" y="{y + 4}" text-anchor="end">'
            f"{esc(f'{value:.6g}')}</text>"
        )
    return "".join(parts)


def bar_chart(result: pa.Table) -> str:
    """The chart of ``result`` as an ``<svg>`` element, or ``""`` when nothing is numeric."""
    cols = _columns(result)
    if cols is None or result.num_rows == 0:
        return ""
    value_col, label_col = cols
    rows = min(result.num_rows, MAX_BARS)
    raw = result.column(value_col).to_pylist()[:rows]
    values = [float(v) if v is not None else 0.0 for v in raw]
    if label_col is None:
        labels = [str(i + 1) for i in range(rows)]
    else:
        labels = [str(v) for v in result.column(label_col).to_pylist()[:rows]]
    title = f"{result.column_names[value_col]} by " + (
        "row" if label_col is None else result.column_names[label_col]
    )
    return (
        f'<figure class="chart"><figcaption>{esc(title)}</figcaption>'
        f'<svg id="chart" role="img" aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">'
        f"{_bars(values, labels)}</svg></figure>"
    )
