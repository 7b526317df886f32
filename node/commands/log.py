"""``odf log DS``: a dataset's metadata chain, newest first."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_OK, add_command, add_output_format, workspace_root
from node.errors import UsageError
from node.render.output import OUTPUT_FORMATS, render

if TYPE_CHECKING:
    from fbs.multiformats import Multihash
    from storage.catalog import DatasetEntry

__all__ = ["LogRow", "cmd_log", "register"]


def cmd_log(args: argparse.Namespace) -> int:
    from storage.catalog import open_dataset, resolve

    if args.limit is not None and args.limit < 0:
        raise UsageError("-n must be >= 0")
    root = workspace_root(args)
    entry = resolve(root, args.dataset)
    if args.output_format == "table":
        rows = _cached_log_rows(root, entry, args.limit)
        if rows is None:
            rows = _decoded_log_rows(root, entry, args.limit)
        table = [
            {
                "seq": seq,
                "system_time": when,
                "event": event,
                "summary": summary,
                "hash": str(h) if args.full_hashes else h.short(),
            }
            for h, (seq, when, event, summary, _prev) in rows
        ]
        render(table, "table", columns=["seq", "system_time", "event", "summary", "hash"])
        return EXIT_OK
    from fbs.manifest import to_plain

    ds = open_dataset(root, entry)
    # iter_blocks reads (and decodes) lazily: islice stops it after the N newest blocks,
    # before the block N+1 is read (`odf log -n N` costs N blocks, not the history).
    walk = itertools.islice(ds.iter_blocks(), args.limit)
    data = [{"blockHash": str(h), "block": to_plain(b)} for h, _raw, b in walk]
    render(data, args.output_format)
    return EXIT_OK


#: What `odf log` shows of a block, and its predecessor: sequence number, system time,
#: event name, event summary, previous block hash (multibase, or None for the Seed).
LogRow = tuple[int, str, str, str, "str | None"]


def _log_row(row: object) -> LogRow | None:
    """``row`` (from the block-rows cache) as a `LogRow`, if it has that shape."""
    if not isinstance(row, list) or len(row) != 5:
        return None
    seq, when, event, summary, prev = row
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return None
    if not all(isinstance(v, str) for v in (when, event, summary)):
        return None
    if not (prev is None or isinstance(prev, str)) or (prev is None) != (seq == 0):
        return None
    return (seq, when, event, summary, prev)


def _cached_log_rows(
    root: Path, entry: DatasetEntry, limit: int | None
) -> list[tuple[Multihash, LogRow]] | None:
    """`odf log`'s rows from the block-rows cache (`storage.catalog.cached_block_rows`),
    walking from the head, each block read and hash-checked but not decoded; None when
    a block has no row, is missing or damaged, or rows do not chain (the caller decodes).
    """
    from fbs.errors import FbsError
    from fbs.multiformats import Multihash
    from storage.catalog import cached_block_rows
    from storage.errors import StorageError
    from storage.layout import DatasetLayout
    from storage.refs import HEAD

    cache = cached_block_rows(root, entry)
    if not cache:
        return None
    layout = DatasetLayout(entry.path)
    h = layout.refs.get_or_none(HEAD)
    out: list[tuple[Multihash, LogRow]] = []
    expected: int | None = None
    while h is not None and (limit is None or len(out) < limit):
        row = _log_row(cache.get(h.to_multibase()))
        if row is None or (expected is not None and row[0] != expected):
            return None
        try:
            layout.blocks.check(h)  # the block is there and hashes to its name
            prev = None if row[4] is None else Multihash.from_multibase(row[4])
        except (StorageError, OSError, FbsError):
            return None
        out.append((h, row))
        h, expected = prev, row[0] - 1
    return out if out or limit == 0 else None


def _decoded_log_rows(
    root: Path, entry: DatasetEntry, limit: int | None
) -> list[tuple[Multihash, LogRow]]:
    """`odf log`'s rows from the decoded chain; they are kept for the next log."""
    from node.render.events import event_summary
    from storage.catalog import cached_block_rows, open_dataset, write_block_rows

    ds = open_dataset(root, entry)
    # iter_blocks reads (and decodes) lazily: islice stops it after the N newest blocks,
    # before the block N+1 is read (`odf log -n N` costs N blocks, not the history).
    out: list[tuple[Multihash, LogRow]] = []
    for h, _raw, b in itertools.islice(ds.iter_blocks(), limit):
        prev = None if b.prev_block_hash is None else b.prev_block_hash.to_multibase()
        when = b.system_time.to_datetime().strftime("%Y-%m-%d %H:%M:%S")
        out.append(
            (h, (b.sequence_number, when, type(b.event).__name__, event_summary(b.event), prev))
        )
    if out:
        cache = cached_block_rows(root, entry)
        cache.update({h.to_multibase(): list(row) for h, row in out})
        write_block_rows(root, entry, cache)
    return out


def register(sub: Any) -> None:
    """Add ``log`` to the ``odf`` sub-parsers."""
    p = add_command(sub, "log", cmd_log, "show a dataset's metadata chain, newest first")
    p.add_argument("dataset", help="dataset alias or DID")
    p.add_argument("-n", "--limit", type=int, default=None, help="show at most N blocks")
    p.add_argument("--full-hashes", action="store_true", help="print full block hashes")
    add_output_format(p, OUTPUT_FORMATS, "table")
