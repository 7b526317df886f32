"""Engine protocol messages (flatbuffers carried in the engine gRPC ``bytes`` fields)."""

from __future__ import annotations

from fbs.did import DatasetId
from fbs.frozen import model
from fbs.model import schema as s
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import Transform
from fbs.timestamp import Timestamp

__all__ = [
    "RAW_QUERY_RESPONSE",
    "TRANSFORM_RESPONSE",
    "RawQueryRequest",
    "RawQueryResponse",
    "RawQueryResponseInternalError",
    "RawQueryResponseInvalidQuery",
    "RawQueryResponseProgress",
    "RawQueryResponseRoot",
    "RawQueryResponseSuccess",
    "TransformRequest",
    "TransformRequestInput",
    "TransformResponse",
    "TransformResponseInternalError",
    "TransformResponseInvalidQuery",
    "TransformResponseProgress",
    "TransformResponseRoot",
    "TransformResponseSuccess",
    "Watermark",
]


@s.table(
    s.vec_string("input_data_paths"),
    s.union_field("transform", "Transform"),
    s.string("output_data_path"),
)
@model
class RawQueryRequest:
    """Run a query over input files, writing one output file."""

    input_data_paths: tuple[str, ...]
    transform: Transform
    output_data_path: str


@s.table()
@model
class RawQueryResponseProgress:
    """Still working."""


@s.table(s.scalar("num_records", s.UINT64))
@model
class RawQueryResponseSuccess:
    """Query finished."""

    num_records: int


@s.table(s.string("message"))
@model
class RawQueryResponseInvalidQuery:
    """The query is invalid."""

    message: str


@s.table(s.string("message"), s.string("backtrace", optional=True))
@model
class RawQueryResponseInternalError:
    """The engine failed."""

    message: str
    backtrace: str | None = None


RawQueryResponse = (
    RawQueryResponseProgress
    | RawQueryResponseSuccess
    | RawQueryResponseInvalidQuery
    | RawQueryResponseInternalError
)
RAW_QUERY_RESPONSE = s.union(
    "RawQueryResponse",
    "RawQueryResponse",
    RawQueryResponseProgress,
    RawQueryResponseSuccess,
    RawQueryResponseInvalidQuery,
    RawQueryResponseInternalError,
)


@s.table(s.union_field("value", "RawQueryResponse"))
@model
class RawQueryResponseRoot:
    """Root table of a raw-query response message."""

    value: RawQueryResponse


@s.table(s.timestamp("system_time"), s.timestamp("event_time"))
@model
class Watermark:
    """An explicit watermark of an input: block system time -> event time."""

    system_time: Timestamp
    event_time: Timestamp


@s.table(
    s.dataset_id("dataset_id"),
    s.string("dataset_alias"),
    s.string("query_alias"),
    s.sub_table("vocab", "DatasetVocabulary"),
    s.sub_table("offset_interval", "OffsetInterval", optional=True),
    s.vec_string("data_paths"),
    s.string("schema_file"),
    s.vec_table("explicit_watermarks", "Watermark"),
)
@model
class TransformRequestInput:
    """One input of a transform request."""

    dataset_id: DatasetId
    dataset_alias: str
    query_alias: str
    vocab: DatasetVocabulary
    offset_interval: OffsetInterval | None = None
    data_paths: tuple[str, ...]
    schema_file: str
    explicit_watermarks: tuple[Watermark, ...]


@s.table(
    s.dataset_id("dataset_id"),
    s.string("dataset_alias"),
    s.timestamp("system_time"),
    s.sub_table("vocab", "DatasetVocabulary"),
    s.union_field("transform", "Transform"),
    s.vec_table("query_inputs", "TransformRequestInput"),
    s.scalar("next_offset", s.UINT64),
    s.string("prev_checkpoint_path", optional=True),
    s.string("new_checkpoint_path"),
    s.string("new_data_path"),
)
@model
class TransformRequest:
    """Ask an engine to run one transformation step."""

    dataset_id: DatasetId
    dataset_alias: str
    system_time: Timestamp
    vocab: DatasetVocabulary
    transform: Transform
    query_inputs: tuple[TransformRequestInput, ...]
    next_offset: int
    prev_checkpoint_path: str | None = None
    new_checkpoint_path: str
    new_data_path: str


@s.table()
@model
class TransformResponseProgress:
    """Still working."""


@s.table(
    s.sub_table("new_offset_interval", "OffsetInterval", optional=True),
    s.timestamp("new_watermark", optional=True),
)
@model
class TransformResponseSuccess:
    """Transformation finished."""

    new_offset_interval: OffsetInterval | None = None
    new_watermark: Timestamp | None = None


@s.table(s.string("message"))
@model
class TransformResponseInvalidQuery:
    """The query is invalid."""

    message: str


@s.table(s.string("message"), s.string("backtrace", optional=True))
@model
class TransformResponseInternalError:
    """The engine failed."""

    message: str
    backtrace: str | None = None


TransformResponse = (
    TransformResponseProgress
    | TransformResponseSuccess
    | TransformResponseInvalidQuery
    | TransformResponseInternalError
)
TRANSFORM_RESPONSE = s.union(
    "TransformResponse",
    "TransformResponse",
    TransformResponseProgress,
    TransformResponseSuccess,
    TransformResponseInvalidQuery,
    TransformResponseInternalError,
)


@s.table(s.union_field("value", "TransformResponse"))
@model
class TransformResponseRoot:
    """Root table of a transform response message."""

    value: TransformResponse
