"""The transfer plan of a run of blocks: what both sides of the smart protocol announce."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fbs.multiformats import Multihash
from fbs.rules import new_data
from p2p.receive import ObjectJob, object_jobs
from p2p.smart_transfer.messages import TransferPlan

__all__ = ["transfer_plan"]


def transfer_plan(
    blocks: Sequence[tuple[Multihash, bytes, Any]],
) -> tuple[TransferPlan, list[ObjectJob]]:
    """The plan of ``blocks`` (hash, raw bytes, decoded block) and the objects they name."""
    jobs = object_jobs(b for _h, _r, b in blocks)
    records = 0
    for _h, _r, b in blocks:
        added = new_data(b.event)
        if added is not None:
            records += added.offset_interval.end - added.offset_interval.start + 1
    plan = TransferPlan(
        num_blocks=len(blocks),
        num_objects=len(jobs),
        num_records=records,
        bytes_in_raw_blocks=sum(len(r) for _h, r, _b in blocks),
        bytes_in_raw_objects=sum(j.size for j in jobs),
    )
    return plan, jobs
