"""Metadata events, blocks, snapshots and their fragments."""

from __future__ import annotations

from fbs.did import DatasetId
from fbs.frozen import model
from fbs.model import schema as s
from fbs.model.data import DataSchema
from fbs.model.enums import DatasetKind
from fbs.model.extra import ExtraAttributes
from fbs.model.source import FetchStep, MergeStrategy, PrepStep, ReadStep, Transform
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp

__all__ = [
    "ATTACHMENTS",
    "METADATA_EVENT",
    "AddData",
    "AddPushSource",
    "AttachmentEmbedded",
    "Attachments",
    "AttachmentsEmbedded",
    "Checkpoint",
    "DataSlice",
    "DatasetSnapshot",
    "DatasetVocabulary",
    "DisablePollingSource",
    "DisablePushSource",
    "ExecuteTransform",
    "ExecuteTransformInput",
    "Manifest",
    "MetadataBlock",
    "MetadataEvent",
    "OffsetInterval",
    "Seed",
    "SetAttachments",
    "SetDataSchema",
    "SetInfo",
    "SetLicense",
    "SetPollingSource",
    "SetTransform",
    "SetVocab",
    "SourceState",
    "TransformInput",
]

# -- fragments ----------------------------------------------------------------------------


@s.table(s.scalar("start", s.UINT64), s.scalar("end", s.UINT64))
@model
class OffsetInterval:
    """Closed interval of record offsets ``[start, end]``."""

    start: int
    end: int


@s.table(
    s.multihash("logical_hash"),
    s.multihash("physical_hash"),
    s.sub_table("offset_interval", "OffsetInterval"),
    s.scalar("size", s.UINT64),
)
@model
class DataSlice:
    """A data file added by a block."""

    logical_hash: Multihash
    physical_hash: Multihash
    offset_interval: OffsetInterval
    size: int


@s.table(s.multihash("physical_hash"), s.scalar("size", s.UINT64))
@model
class Checkpoint:
    """An engine/ingest checkpoint file."""

    physical_hash: Multihash
    size: int


@s.table(s.string("source_name"), s.string("kind"), s.string("value"))
@model
class SourceState:
    """Resumption state of a source (e.g. ``odf/etag``)."""

    source_name: str
    kind: str
    value: str


@s.table(
    s.string("offset_column", optional=True),
    s.string("operation_type_column", optional=True),
    s.string("system_time_column", optional=True),
    s.string("event_time_column", optional=True),
)
@model
class SetVocab:
    """Override system column names."""

    offset_column: str | None = None
    operation_type_column: str | None = None
    system_time_column: str | None = None
    event_time_column: str | None = None


@s.table(
    s.string("offset_column"),
    s.string("operation_type_column"),
    s.string("system_time_column"),
    s.string("event_time_column"),
)
@model
class DatasetVocabulary:
    """Resolved system column names."""

    offset_column: str = "offset"
    operation_type_column: str = "op"
    system_time_column: str = "system_time"
    event_time_column: str = "event_time"


# -- events -------------------------------------------------------------------------------


@s.table(
    s.multihash("prev_checkpoint", optional=True),
    s.scalar("prev_offset", s.UINT64, optional=True),
    s.sub_table("new_data", "DataSlice", optional=True),
    s.sub_table("new_checkpoint", "Checkpoint", optional=True),
    s.timestamp("new_watermark", optional=True),
    s.sub_table("new_source_state", "SourceState", optional=True),
    s.sub_table("extra", "ExtraAttributes", optional=True),
)
@model
class AddData:
    """Data ingested into a root dataset."""

    prev_checkpoint: Multihash | None = None
    prev_offset: int | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: Timestamp | None = None
    new_source_state: SourceState | None = None
    extra: ExtraAttributes | None = None


@s.table(
    s.string("source_name"),
    s.union_field("read", "ReadStep"),
    s.union_field("preprocess", "Transform", optional=True),
    s.union_field("merge", "MergeStrategy"),
)
@model
class AddPushSource:
    """Declare a push source."""

    source_name: str
    read: ReadStep
    preprocess: Transform | None = None
    merge: MergeStrategy


@s.table(s.string("path"), s.string("content"))
@model
class AttachmentEmbedded:
    """An embedded attachment (e.g. README)."""

    path: str
    content: str


@s.table(s.vec_table("items", "AttachmentEmbedded"))
@model
class AttachmentsEmbedded:
    """Attachments stored in the block."""

    items: tuple[AttachmentEmbedded, ...]


Attachments = AttachmentsEmbedded
ATTACHMENTS = s.union("Attachments", "Attachments", AttachmentsEmbedded)


@s.table(
    s.dataset_id("dataset_id"),
    s.multihash("prev_block_hash", optional=True),
    s.multihash("new_block_hash", optional=True),
    s.scalar("prev_offset", s.UINT64, optional=True),
    s.scalar("new_offset", s.UINT64, optional=True),
)
@model
class ExecuteTransformInput:
    """Input range consumed by a transform step."""

    dataset_id: DatasetId
    prev_block_hash: Multihash | None = None
    new_block_hash: Multihash | None = None
    prev_offset: int | None = None
    new_offset: int | None = None


@s.table(
    s.vec_table("query_inputs", "ExecuteTransformInput"),
    s.multihash("prev_checkpoint", optional=True),
    s.scalar("prev_offset", s.UINT64, optional=True),
    s.sub_table("new_data", "DataSlice", optional=True),
    s.sub_table("new_checkpoint", "Checkpoint", optional=True),
    s.timestamp("new_watermark", optional=True),
)
@model
class ExecuteTransform:
    """Result of a derivative transformation step."""

    query_inputs: tuple[ExecuteTransformInput, ...]
    prev_checkpoint: Multihash | None = None
    prev_offset: int | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: Timestamp | None = None


@s.table(s.dataset_id("dataset_id"), s.enum_field("dataset_kind", DatasetKind, s.INT32))
@model
class Seed:
    """First block of every dataset: its identity and kind."""

    dataset_id: DatasetId
    dataset_kind: DatasetKind


@s.table(
    s.union_field("fetch", "FetchStep"),
    s.vec_union("prepare", "PrepStep", "PrepStepWrapper", optional=True),
    s.union_field("read", "ReadStep"),
    s.union_field("preprocess", "Transform", optional=True),
    s.union_field("merge", "MergeStrategy"),
)
@model
class SetPollingSource:
    """Declare a polling source."""

    fetch: FetchStep
    prepare: tuple[PrepStep, ...] | None = None
    read: ReadStep
    preprocess: Transform | None = None
    merge: MergeStrategy


@s.table(s.string("dataset_ref"), s.string("alias", optional=True))
@model
class TransformInput:
    """Input of a derivative dataset: textual DatasetRef (``did:odf:...`` or alias)."""

    dataset_ref: str
    alias: str | None = None


@s.table(s.vec_table("inputs", "TransformInput"), s.union_field("transform", "Transform"))
@model
class SetTransform:
    """Define a derivative transformation."""

    inputs: tuple[TransformInput, ...]
    transform: Transform


@s.table(s.union_field("attachments", "Attachments"))
@model
class SetAttachments:
    """Replace the dataset's attachments."""

    attachments: Attachments


@s.table(s.string("description", optional=True), s.vec_string("keywords", optional=True))
@model
class SetInfo:
    """Description and keywords."""

    description: str | None = None
    keywords: tuple[str, ...] | None = None


@s.table(
    s.string("short_name"),
    s.string("name"),
    s.string("spdx_id", optional=True),
    s.string("website_url"),
)
@model
class SetLicense:
    """License of the dataset."""

    short_name: str
    name: str
    spdx_id: str | None = None
    website_url: str


@s.table(
    s.raw_bytes("raw_arrow_schema", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class SetDataSchema:
    """Dataset schema (``raw_arrow_schema`` = deprecated Arrow IPC flatbuffer bytes)."""

    raw_arrow_schema: bytes | None = None
    schema: DataSchema | None = None


@s.table(s.string("source_name"))
@model
class DisablePushSource:
    """Disable a push source."""

    source_name: str


@s.table()
@model
class DisablePollingSource:
    """Disable the polling source."""


MetadataEvent = (
    AddData
    | ExecuteTransform
    | Seed
    | SetPollingSource
    | SetTransform
    | SetVocab
    | SetAttachments
    | SetInfo
    | SetLicense
    | SetDataSchema
    | AddPushSource
    | DisablePushSource
    | DisablePollingSource
)

METADATA_EVENT = s.union(
    "MetadataEvent",
    "",
    AddData,
    ExecuteTransform,
    Seed,
    SetPollingSource,
    SetTransform,
    SetVocab,
    SetAttachments,
    SetInfo,
    SetLicense,
    SetDataSchema,
    AddPushSource,
    DisablePushSource,
    DisablePollingSource,
)

# -- containers ---------------------------------------------------------------------------


@s.table(
    s.string("name"),
    s.enum_field("kind", DatasetKind, s.INT32),
    s.vec_union("metadata", "MetadataEvent", "MetadataEventWrapper"),
)
@model
class DatasetSnapshot:
    """Declarative dataset definition: alias, kind and initial events."""

    name: str
    kind: DatasetKind
    metadata: tuple[MetadataEvent, ...]


@s.table(s.scalar("kind", s.INT64), s.scalar("version", s.INT32), s.raw_bytes("content"))
@model
class Manifest:
    """Envelope of stored objects: multicodec ``kind``, format ``version``, nested buffer."""

    kind: int
    version: int
    content: bytes


@s.table(
    s.timestamp("system_time"),
    s.multihash("prev_block_hash", optional=True),
    s.scalar("sequence_number", s.UINT64),
    s.union_field("event", "MetadataEvent"),
)
@model
class MetadataBlock:
    """One link of a metadata chain."""

    system_time: Timestamp
    prev_block_hash: Multihash | None = None
    sequence_number: int
    event: MetadataEvent
