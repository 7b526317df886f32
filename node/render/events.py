"""One-line human summaries of metadata events, for `odf log` tables."""

from __future__ import annotations

from fbs import model as m
from fbs.model.schema import union_of


def _interval(s: m.DataSlice | None) -> str:
    if s is None:
        return ""
    i = s.offset_interval
    return f"records [{i.start}, {i.end}] ({i.end - i.start + 1})"


def _tag(value: object, union: str) -> str:
    return union_of(union).variant_of(value).tag


def event_summary(event: object) -> str:
    """A short description of an event's most useful facts."""
    match event:
        case m.Seed():
            return f"{event.dataset_kind.name} dataset {event.dataset_id}"
        case m.AddData() | m.ExecuteTransform():
            parts = []
            if event.new_data is not None:
                parts.append(_interval(event.new_data))
            if event.new_watermark is not None:
                parts.append(f"watermark {event.new_watermark.to_rfc3339()}")
            if isinstance(event, m.AddData) and event.new_source_state is not None:
                parts.append(f"source state {event.new_source_state.kind}")
            if isinstance(event, m.ExecuteTransform):
                parts.append(f"{len(event.query_inputs)} input(s)")
            if event.new_checkpoint is not None:
                parts.append("checkpoint")
            return ", ".join(parts) or "no new data"
        case m.AddPushSource():
            return (
                f"source {event.source_name!r}: read {_tag(event.read, 'ReadStep')}, "
                f"merge {_tag(event.merge, 'MergeStrategy')}"
            )
        case m.SetPollingSource():
            return (
                f"fetch {_tag(event.fetch, 'FetchStep')}, read {_tag(event.read, 'ReadStep')}, "
                f"merge {_tag(event.merge, 'MergeStrategy')}"
            )
        case m.SetTransform():
            aliases = ", ".join(i.alias or i.dataset_ref for i in event.inputs)
            return f"inputs: {aliases}"
        case m.SetVocab():
            cols = [
                c
                for c in (
                    event.offset_column,
                    event.operation_type_column,
                    event.system_time_column,
                    event.event_time_column,
                )
                if c
            ]
            return "columns: " + ", ".join(cols)
        case m.SetInfo():
            return (event.description or "")[:60]
        case m.SetLicense():
            return event.short_name
        case m.SetDataSchema():
            if event.schema is not None:
                return "fields: " + ", ".join(f.name for f in event.schema.fields)
            return "raw arrow schema"
        case m.SetAttachments():
            return "attachments"
        case m.DisablePushSource():
            return f"source {event.source_name!r}"
        case _:
            return ""
