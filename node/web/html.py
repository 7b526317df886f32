"""HTML building blocks of the web UI: escaping, the page layout, tables, numbers.

Every value that comes from a dataset, a peer or a request goes through `esc` before it
reaches the page; functions whose parameters end in ``_html`` take markup already built
by this package. Pages load one script and one stylesheet from ``/ui/static/`` and hold
no inline script or style, so the Content-Security-Policy (`SECURITY_HEADERS`) can
forbid both.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from html import escape
from typing import Final
from urllib.parse import urlencode

__all__ = [
    "SECURITY_HEADERS",
    "ago",
    "dataset_href",
    "esc",
    "human_size",
    "page",
    "short_hash",
    "table",
]

#: Headers of every UI response: nothing from another origin, no inline code, no framing.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_NAV: Final = (
    ("datasets", "/ui/", "Datasets"),
    ("sql", "/ui/sql", "SQL"),
    ("network", "/ui/network", "Network"),
)


def esc(value: object) -> str:
    """``value`` as text safe inside HTML content and quoted attributes."""
    return escape(str(value), quote=True)


def page(title: str, body_html: str, *, active: str, live: bool = False) -> str:
    """A whole document: header navigation, then ``body_html`` in ``<main>``.

    ``live`` marks pages the script refreshes when a new head arrives (server-sent events).
    """
    nav = "".join(
        f'<a href="{href}"{" aria-current=page" if key == active else ""}>{label}</a>'
        for key, href, label in _NAV
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · odf-node</title>"
        '<link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/static/app.css">'
        '<script src="/ui/static/app.js" defer></script></head>'
        f'<body data-page="{esc(active)}" data-live="{"1" if live else "0"}">'
        f'<header><span class="brand">odf-node</span><nav>{nav}</nav>'
        '<span id="live" class="live" title="live updates">offline</span></header>'
        f'<main id="main">{body_html}</main></body></html>'
    )


def table(headers: Sequence[str], rows_html: Iterable[str], *, cls: str = "", tid: str = "") -> str:
    """A table with ``headers`` (escaped here) and rows already rendered as ``<tr>``."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    attrs = (f' class="{esc(cls)}"' if cls else "") + (f' id="{esc(tid)}"' if tid else "")
    return (
        f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{''.join(rows_html)}</tbody></table>"
    )


def dataset_href(alias: str, **params: object) -> str:
    """The dataset page of ``alias`` (query parameters escaped for an attribute)."""
    query = urlencode({"ds": alias, **{k: str(v) for k, v in params.items()}})
    return esc(f"/ui/dataset?{query}")


def short_hash(text: str | None, n: int = 12) -> str:
    """The last ``n`` characters of a multibase hash or DID (the distinctive part)."""
    if not text:
        return "—"
    return "…" + text[-n:] if len(text) > n else text


def human_size(n: int) -> str:
    """Bytes as B, KiB, MiB, GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def ago(when: _dt.datetime, now: _dt.datetime) -> str:
    """How long before ``now`` ``when`` was, in the largest whole unit."""
    seconds = int((now - when).total_seconds())
    if seconds < 0:
        return "in the future"
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            return f"{seconds // span} {unit} ago"
    return f"{seconds} s ago"
