"""How a verified pull from peers or nodes is reported (`odf pull URL|peer`, `odf fetch`)."""

from __future__ import annotations

import sys

from p2p.sync import PullResult

__all__ = ["report_sync"]


def report_sync(result: PullResult) -> None:
    """Print the outcome of a pull from peers/nodes (`odf pull`, `odf fetch`)."""
    if result.up_to_date:
        print(f"{result.alias}: up to date at {result.new_head}")
    else:
        verb = "Cloned" if result.created else "Updated"
        signed = " (signed head)" if result.head_record is not None else " (unsigned head)"
        print(
            f"{verb} {result.alias} ({result.dataset_id}): {result.blocks_fetched} block(s), "
            f"{result.objects_fetched} object(s), {result.bytes_fetched} bytes; "
            f"head {result.new_head}{signed}"
        )
    for name in result.dropped:
        sys.stderr.write(f"odf: warning: dropped source {name}: {result.penalties.get(name)}\n")
