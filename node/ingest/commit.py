"""Committing one attempt: the schema and the data land in one head move.

The data and the new source state land together in a single ``AddData`` moved in by
compare-and-swap on ``refs/head``; a ``SetDataSchema`` needed first (the first data, or
optional columns added) is committed in the same head move, so a refused ``AddData``
leaves no ``SetDataSchema`` behind. Every block is encoded and read back under the decode
limits before anything is stored (`storage.dataset.Dataset.commit_events`).

Watermark: the maximum of the previous watermark and the newest event time (dates count
as midnight UTC), unless set explicitly (`pull` with ``set_watermark``), which commits a
watermark-only ``AddData`` and must not move the watermark back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fbs.model import AddData, Multihash, OffsetInterval, SourceState, Timestamp
from node.ingest.compute import Plan
from node.ingest.errors import IngestError
from node.ingest.writer import WrittenSlice
from storage.chain import ChainState
from storage.dataset import Dataset, PendingEvent

__all__ = ["IngestResult", "commit_plan"]


@dataclass(frozen=True, slots=True)
class IngestResult:
    """Outcome of one ingest or pull.

    Attributes:
        old_head / new_head: heads before and after (equal if nothing was committed).
        num_records: records appended.
        offset_interval: offsets of the new records (``None`` if none).
        new_watermark: the watermark committed (``None`` if none was committed).
        schema_committed: a ``SetDataSchema`` block was committed.
        up_to_date: a polling source reported nothing new (nothing committed).
        duplicate_input: a push ingest whose input is identical to the last one committed
            through that source; nothing was committed (see `PUSH_INPUT_STATE_KIND`).
        empty_input: a push ingest whose input holds no records (an empty file or
            stream, a CSV with only a header...); nothing was committed.
        blocks: hashes of the committed blocks, oldest first.
    """

    old_head: Multihash | None
    new_head: Multihash | None
    num_records: int = 0
    offset_interval: OffsetInterval | None = None
    new_watermark: Timestamp | None = None
    schema_committed: bool = False
    up_to_date: bool = False
    duplicate_input: bool = False
    empty_input: bool = False
    blocks: tuple[Multihash, ...] = field(default_factory=tuple)

    @property
    def committed(self) -> bool:
        """True when at least one block was committed."""
        return bool(self.blocks)


def _watermark(
    state: ChainState | None, written: WrittenSlice | None, explicit: Timestamp | None
) -> Timestamp | None:
    prev = None if state is None else state.last_watermark
    if explicit is not None:
        if prev is not None and explicit < prev:
            raise IngestError(f"watermark {explicit} is before the current watermark {prev}")
        return explicit
    newest = None if written is None else written.max_event_time
    if newest is None:
        return prev
    return newest if prev is None or newest > prev else prev


def commit_plan(
    dataset: Dataset,
    head: Multihash | None,
    state: ChainState | None,
    plan: Plan,
    source_state: SourceState | None,
    explicit_watermark: Timestamp | None,
    system_time: Timestamp,
) -> IngestResult:
    # SetDataSchema changes none of the fields an AddData is built from (offsets,
    # checkpoint, watermark, source state), so both are planned against ``state``.
    events: list[PendingEvent] = []
    if plan.schema_event is not None:
        events.append(PendingEvent(plan.schema_event))
    written = plan.slice
    has_data = written is not None and written.num_records > 0
    watermark = _watermark(state, written, explicit_watermark)
    prev_wm = None if state is None else state.last_watermark
    source_changed = source_state is not None and (
        state is None or state.last_source_state != source_state
    )
    added = has_data or source_changed or watermark != prev_wm
    if added:
        event = AddData(
            prev_checkpoint=None if state is None else state.last_checkpoint,
            prev_offset=None if state is None else state.last_offset,
            new_data=written.data_slice() if has_data and written is not None else None,
            new_watermark=watermark,
            new_source_state=source_state if source_changed else None,
        )
        data_file = written.path if has_data and written is not None else None
        # The slice was written into the data store's quarantine and hashed as written:
        # the commit moves it in (no copy, no second hash).
        digest = written.physical_hash.digest if has_data and written is not None else None
        events.append(PendingEvent(event, data_file, data_digest=digest))
    if not events:
        return IngestResult(head, head)
    # One head move: a refused AddData leaves no SetDataSchema behind either.
    results = dataset.commit_events(events, system_time=system_time, expected_head=head)
    return IngestResult(
        old_head=head,
        new_head=results[-1].new_head,
        num_records=written.num_records if has_data and written is not None else 0,
        offset_interval=written.offset_interval if has_data and written is not None else None,
        new_watermark=watermark if added else None,
        schema_committed=plan.schema_event is not None,
        blocks=tuple(r.new_head for r in results),
    )
