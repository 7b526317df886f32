"""``odf list``: the datasets of the workspace, summarized from their chain-state caches."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.cli_util import EXIT_OK, add_command, add_output_format, workspace_root
from node.render.output import OUTPUT_FORMATS, render

if TYPE_CHECKING:
    from storage.catalog import DatasetEntry, DatasetSummary

__all__ = ["cmd_list", "register"]


def cmd_list(args: argparse.Namespace) -> int:
    from storage.catalog import cached_summary, entries

    root = workspace_root(args)
    rows = []
    for entry in entries(root):
        # The chain-state cache at the head answers without decoding a block; a dataset
        # whose cache is behind is summarized from its chain (and its cache refreshed).
        summary = cached_summary(root, entry) or _chain_summary(root, entry)
        rows.append(
            {
                "alias": entry.alias,
                "id": str(entry.id),
                "kind": summary.kind if summary else "",
                "head": str(summary.head) if summary else "",
                "blocks": summary.blocks if summary else 0,
                "records": summary.records if summary else 0,
                "size": summary.size if summary else 0,
            }
        )
    if args.output_format == "table":
        render(rows, "table", columns=["alias", "kind", "blocks", "records", "size", "head"])
    else:
        render(rows, args.output_format)
    return EXIT_OK


def _chain_summary(root: Path, entry: DatasetEntry) -> DatasetSummary | None:
    """`cmd_list`'s row of a dataset whose chain-state cache is not at its head."""
    from storage.catalog import DatasetSummary, open_dataset

    ds = open_dataset(root, entry)
    state = ds.state()
    if state is None:
        return None
    ds.flush_state_cache()  # the next `odf list` reads the cache alone
    return DatasetSummary(
        state.kind.name, state.head, state.num_blocks, state.num_records, state.data_size
    )


def register(sub: Any) -> None:
    """Add ``list`` to the ``odf`` sub-parsers."""
    p = add_command(sub, "list", cmd_list, "list datasets in the workspace")
    add_output_format(p, OUTPUT_FORMATS, "table")
