"""The pages' markup, from the values of `node.web.views` (pure: no I/O)."""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlencode

import pyarrow as pa

from node.web.graph import lineage_graph
from node.web.html import ago, dataset_href, esc, human_size, short_hash, table
from node.web.lineage import lineage_svg
from node.web.rows import DatasetRow
from node.web.views import PAGE_ROWS, DatasetDetail
from p2p.attestation import Attestation

__all__ = [
    "LIST_LIMIT",
    "dataset_body",
    "list_body",
    "list_row",
    "list_section",
    "network_body",
    "preview_section",
    "result_table",
]

#: Rows of the list page before "show all" or a search (a node may hold thousands of
#: datasets; a hundred fill several screens and keep the first render short).
LIST_LIMIT: Final = 100
LIST_HEADERS = ("Dataset", "Kind", "Head", "Blocks", "Records", "Size", "Watermark", "Updated")


def _when(value: _dt.datetime | None, now: _dt.datetime) -> str:
    if value is None:
        return "—"
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return f'<time datetime="{esc(value.isoformat())}" title="{esc(ago(value, now))}">{text}</time>'


def _stamp(value: _dt.datetime | None) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


@functools.lru_cache(maxsize=8192)
def list_row(row: DatasetRow) -> str:
    """One ``<tr>`` of the dataset list (also sent over server-sent events).

    Kept small and free of the current time, so a row is rendered once per head (the
    cache) and a list of thousands parses quickly in the browser.
    """
    name = f'<a href="{dataset_href(row.alias)}">{esc(row.alias)}</a>'
    if row.owned:
        name += ' <span class="tag">owned</span>'
    attrs = f'data-id="{esc(row.did)}" data-alias="{esc(row.alias)}"'
    if row.error:
        error = f'<td colspan="7" class="error">{esc(row.error)}</td>'
        return f"<tr {attrs}><td>{name}</td>{error}</tr>"
    cells = (
        esc(row.kind or "—"),
        f'<code title="{esc(row.head)}">{esc(short_hash(row.head))}</code>',
        str(row.blocks),
        f"{row.records:,}",
        human_size(row.size),
        _stamp(row.watermark),
        _stamp(row.updated),
    )
    return f"<tr {attrs}><td>{name}</td><td>" + "</td><td>".join(cells) + "</td></tr>"


def list_body(rows: Sequence[DatasetRow], query: str, total: int) -> str:
    """The dataset list page: a search box, then the rows (the first `LIST_LIMIT` of
    ``total`` matching unless all were asked for) in ``#list``, which searching swaps."""
    form = (
        '<form class="search" method="get" action="/ui/" data-swap="#list">'
        f'<input id="search" type="search" name="q" value="{esc(query)}" '
        'placeholder="search datasets" autocomplete="off" aria-label="search datasets">'
        "</form>"
    )
    return f"<h1>Datasets</h1>{form}{list_section(rows, query, total)}"


def list_section(rows: Sequence[DatasetRow], query: str, total: int) -> str:
    """The count and the table of the list page."""
    complete = len(rows) >= total
    count = f'<span id="count">{total}</span> dataset(s)'
    if not complete:
        href = esc("/ui/?" + urlencode({"q": query, "all": "1"}))
        count += f', first {len(rows)} shown: <a href="{href}" data-swap="#list">show all</a>'
    body = table(LIST_HEADERS, (list_row(r) for r in rows), tid="datasets")
    flag = "1" if complete else "0"
    return f'<section id="list" data-complete="{flag}"><p class="muted">{count}</p>{body}</section>'


def _facts(row: DatasetRow, now: _dt.datetime) -> str:
    items = (
        ("DID", f"<code>{esc(row.did)}</code>"),
        ("Kind", esc(row.kind or "—")),
        ("Head", f'<code id="head">{esc(row.head or "—")}</code>'),
        ("Blocks / records / size", f"{row.blocks} / {row.records:,} / {human_size(row.size)}"),
        ("Watermark", _when(row.watermark, now)),
        ("Last update", _when(row.updated, now)),
    )
    return "<dl class=facts>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _attestation_row(a: Attestation) -> str:
    """One attestation: validator and block shortened, whole in their ``title``."""
    validator, block = a.validator.to_did_key(), a.block_hash.to_multibase()
    return (
        f'<tr class="verdict-{esc(a.verdict.value)}">'
        f'<td><code title="{esc(validator)}">{esc(short_hash(validator, 16))}</code></td>'
        f"<td>{a.sequence_number}</td>"
        f'<td><code title="{esc(block)}">{esc(short_hash(block))}</code></td>'
        f"<td>{esc(a.verdict.value)}</td><td>{esc(a.detail)}</td>"
        f"<td>{esc(a.system_time.to_rfc3339())}</td></tr>"
    )


def _trust(detail: DatasetDetail) -> str:
    signed = detail.signed_head
    head = detail.row.head
    if signed is None:
        sig = "<p>No signed head record held for this dataset.</p>"
    else:
        match = "matches the local head" if signed.head.to_multibase() == head else "differs"
        sig = (
            f"<p>Signed head: block {signed.sequence_number} "
            f"<code>{esc(short_hash(signed.head.to_multibase()))}</code>, "
            f"signed {esc(signed.system_time.to_rfc3339())} ({match}).</p>"
        )
    status = detail.attestations
    if status is None or not status.attestations:
        atts = "<p>No attestations: no validator has reported on this chain.</p>"
    else:
        rows = (_attestation_row(a) for a in status.attestations)
        headers = ("Validator", "Block", "Hash", "Verdict", "Detail", "Checked")
        atts = table(headers, rows)
        if status.disputed:
            atts = (
                '<p class="error">Disputed: a validator found a block that does not '
                "reproduce from its inputs.</p>" + atts
            )
    return f'<section id="trust"><h2>Signed head and attestations</h2>{sig}{atts}</section>'


def _events(detail: DatasetDetail, now: _dt.datetime) -> str:
    rows = (
        f"<tr><td>{e.sequence_number}</td><td><strong>{esc(e.kind)}</strong></td>"
        f"<td>{esc(e.summary)}</td><td>{_when(e.system_time, now)}</td>"
        f'<td><code title="{esc(e.block_hash)}">{esc(short_hash(e.block_hash))}</code></td></tr>'
        for e in detail.events
    )
    return "<h2>Metadata chain</h2>" + table(("#", "Event", "What it says", "Time", "Block"), rows)


def _schema(detail: DatasetDetail) -> str:
    if not detail.schema:
        return "<h2>Schema</h2><p>No schema declared yet.</p>"
    rows = (f"<tr><td>{esc(n)}</td><td><code>{esc(t)}</code></td></tr>" for n, t in detail.schema)
    return "<h2>Schema</h2>" + table(("Column", "Type"), rows)


def dataset_body(detail: DatasetDetail, preview_html: str, now: _dt.datetime) -> str:
    """The dataset page: facts, lineage, schema, preview, chain, trust."""
    row = detail.row
    graph = lineage_svg(lineage_graph(row.did, detail.others), row.alias)
    return (
        f'<h1 data-id="{esc(row.did)}">{esc(row.alias)}</h1>{_facts(row, now)}'
        f"<h2>Lineage</h2>{graph}{_schema(detail)}{preview_html}"
        f"{_events(detail, now)}{_trust(detail)}"
    )


def _cell(value: Any) -> str:
    if value is None:
        return '<span class="null">null</span>'
    if isinstance(value, _dt.datetime):
        return esc(value.isoformat())
    return esc(value)


def result_table(result: pa.Table, *, tid: str = "") -> str:
    """An Arrow table as an HTML table."""
    columns = [result.column(i).to_pylist() for i in range(result.num_columns)]
    rows = (
        "<tr>" + "".join(f"<td>{_cell(col[r])}</td>" for col in columns) + "</tr>"
        for r in range(result.num_rows)
    )
    return table(result.column_names, rows, cls="data", tid=tid)


def preview_section(alias: str, rows: pa.Table, page: int, more: bool) -> str:
    """The data preview (newest first) with its pager; swapped in place by the script."""
    nav = []
    if page > 0:
        href = dataset_href(alias, page=page - 1)
        nav.append(f'<a href="{href}" data-swap="#preview" rel="prev">newer</a>')
    nav.append(f"<span>page {page + 1}</span>")
    if more:
        href = dataset_href(alias, page=page + 1)
        nav.append(f'<a href="{href}" data-swap="#preview" rel="next">older</a>')
    body = result_table(rows) if rows.num_columns else "<p>No records yet.</p>"
    return (
        f'<section id="preview"><h2>Data (newest first, {PAGE_ROWS} per page)</h2>'
        f'<nav class="pager">{"".join(nav)}</nav>{body}</section>'
    )


#: Changing what the node follows: a write, so it needs the node's token, which the
#: person types (the page never holds it); the script sends it as the API's bearer token
#: (``POST``/``DELETE /api/follow``). Without the script the form posts without it and
#: the API refuses (401): the token is never sent as a form field or in a URL.
FOLLOW_FORM: Final = (
    '<form id="follow-form" class="write" method="post" action="/api/follow">'
    '<input name="dataset" required placeholder="alias, did:odf:… or all" '
    'aria-label="dataset to follow">'
    '<input name="token" type="password" required autocomplete="off" '
    'placeholder="node token (.odf/p2p/http-token)" aria-label="node token">'
    '<button type="submit" value="POST">Follow</button> '
    '<button type="submit" value="DELETE">Unfollow</button>'
    '<p id="write-result" role="status"></p></form>'
)


def _followed(entry: str, aliases: Mapping[str, str]) -> str:
    """A follow entry (a DID, an alias, ``all``), linked to the dataset held under it."""
    alias = aliases.get(entry)
    if alias is None:
        return f"<code>{esc(entry)}</code>"
    link = f'<a href="{dataset_href(alias)}">{esc(alias)}</a>'
    return link if alias == entry else f"{link} <code>{esc(entry)}</code>"


def network_body(
    peers: Sequence[Mapping[str, Any]],
    status: Mapping[str, Any],
    aliases: Mapping[str, str] | None = None,
) -> str:
    """The network page: this node, its peers (bans with reasons), followed datasets
    (named by their alias here, from ``aliases``: DID or alias -> alias)."""
    aliases = aliases or {}
    peer_rows = (
        f'<tr class="{"banned" if p.get("banned") else ""}"><td><code>{esc(p.get("peerId"))}'
        f"</code></td><td>{'yes' if p.get('connected') else 'no'}</td>"
        f"<td>{esc(p.get('score', 0))}</td><td>{'banned' if p.get('banned') else '—'}</td>"
        f"<td>{esc(p.get('offences', 0))}</td><td>{esc(p.get('lastReason') or '')}</td></tr>"
        for p in peers
    )
    peers_html = (
        table(("Peer", "Connected", "Score", "Ban", "Offences", "Last reason"), peer_rows)
        if peers
        else "<p>No peers known.</p>"
    )
    follow = list(status.get("follow") or [])
    follow_html = (
        "<ul>" + "".join(f"<li>{_followed(f, aliases)}</li>" for f in follow) + "</ul>"
        if follow
        else "<p>No dataset followed.</p>"
    )
    follow_html = f'<section id="follows">{follow_html}</section>'
    if "follow" in status:  # a daemon, which serves /api/follow
        follow_html += FOLLOW_FORM
    me = (
        f"<dl class=facts><dt>Peer id</dt><dd><code>{esc(status.get('peerId') or '—')}</code></dd>"
        f"<dt>Listening on</dt><dd>{esc(', '.join(status.get('addrs') or []) or '—')}</dd>"
        f"<dt>HTTP</dt><dd>{esc(status.get('httpUrl') or '—')}</dd></dl>"
    )
    return (
        f"<h1>Network</h1>{me}<h2>Peers</h2>{peers_html}"
        f"<h2>Followed datasets</h2>{follow_html}{_disputes(status)}"
    )


def _disputes(status: Mapping[str, Any]) -> str:
    """Publishers with evidence against them (``/api/status`` → ``disputes``, ``refused``)."""
    disputes = [d for d in status.get("disputes") or [] if isinstance(d, Mapping)]
    refused = status.get("refused") or {}
    if not disputes:
        return "<h2>Disputes</h2><p>No dispute known.</p>"
    rows = []
    for d in disputes:
        name = d.get("alias") or d.get("dataset") or ""
        blocks = len(d.get("disputedBlocks") or [])
        validators = sorted(
            {v for ev in d.get("divergence") or [] for v in ev.get("validators", [])}
        )
        rows.append(
            f"<tr><td>{esc(name)}</td><td>{blocks}</td><td>{len(validators)}</td>"
            f"<td>{len(d.get('equivocation') or [])}</td>"
            f"<td>{esc(refused.get(d.get('dataset'), '') or '—')}</td></tr>"
        )
    headers = ("Dataset", "Disputed blocks", "Validators", "Equivocations", "Refused because")
    return "<h2>Disputes</h2>" + table(headers, rows)
