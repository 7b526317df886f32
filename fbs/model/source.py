"""Ingest and transform building blocks: fetch, prepare, read, preprocess, merge steps."""

from __future__ import annotations

from fbs.frozen import model
from fbs.model import schema as s
from fbs.model.data import DataSchema
from fbs.model.enums import CompressionFormat, MqttQos, SourceOrdering

__all__ = [
    "EVENT_TIME_SOURCE",
    "FETCH_STEP",
    "MERGE_STRATEGY",
    "PREP_STEP",
    "READ_STEP",
    "SOURCE_CACHING",
    "TRANSFORM",
    "EnvVar",
    "EventTimeSource",
    "EventTimeSourceFromMetadata",
    "EventTimeSourceFromPath",
    "EventTimeSourceFromSystemTime",
    "FetchStep",
    "FetchStepContainer",
    "FetchStepEthereumLogs",
    "FetchStepFilesGlob",
    "FetchStepMqtt",
    "FetchStepUrl",
    "MergeStrategy",
    "MergeStrategyAppend",
    "MergeStrategyChangelogStream",
    "MergeStrategyLedger",
    "MergeStrategySnapshot",
    "MergeStrategyUpsertStream",
    "MqttTopicSubscription",
    "PrepStep",
    "PrepStepDecompress",
    "PrepStepPipe",
    "ReadStep",
    "ReadStepCsv",
    "ReadStepEsriShapefile",
    "ReadStepGeoJson",
    "ReadStepJson",
    "ReadStepNdGeoJson",
    "ReadStepNdJson",
    "ReadStepParquet",
    "RequestHeader",
    "SourceCaching",
    "SourceCachingForever",
    "SqlQueryStep",
    "TemporalTable",
    "Transform",
    "TransformSql",
]

# -- read steps ---------------------------------------------------------------------------


@s.table(
    s.vec_string("ddl_schema", optional=True),
    s.string("separator", optional=True),
    s.string("encoding", optional=True),
    s.string("quote", optional=True),
    s.string("escape", optional=True),
    s.scalar("header", s.BOOL, optional=True),
    s.scalar("infer_schema", s.BOOL, optional=True),
    s.string("null_value", optional=True),
    s.string("date_format", optional=True),
    s.string("timestamp_format", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class ReadStepCsv:
    """Read CSV."""

    ddl_schema: tuple[str, ...] | None = None
    separator: str | None = None
    encoding: str | None = None
    quote: str | None = None
    escape: str | None = None
    header: bool | None = None
    infer_schema: bool | None = None
    null_value: str | None = None
    date_format: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@s.table(
    s.vec_string("ddl_schema", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class ReadStepGeoJson:
    """Read a GeoJSON FeatureCollection."""

    ddl_schema: tuple[str, ...] | None = None
    schema: DataSchema | None = None


@s.table(
    s.vec_string("ddl_schema", optional=True),
    s.string("sub_path", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class ReadStepEsriShapefile:
    """Read an ESRI shapefile archive."""

    ddl_schema: tuple[str, ...] | None = None
    sub_path: str | None = None
    schema: DataSchema | None = None


@s.table(
    s.vec_string("ddl_schema", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class ReadStepParquet:
    """Read Parquet."""

    ddl_schema: tuple[str, ...] | None = None
    schema: DataSchema | None = None


@s.table(
    s.string("sub_path", optional=True),
    s.vec_string("ddl_schema", optional=True),
    s.string("date_format", optional=True),
    s.string("encoding", optional=True),
    s.string("timestamp_format", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class ReadStepJson:
    """Read a JSON document (array of records, optionally under ``sub_path``)."""

    sub_path: str | None = None
    ddl_schema: tuple[str, ...] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@s.table(
    s.vec_string("ddl_schema", optional=True),
    s.string("date_format", optional=True),
    s.string("encoding", optional=True),
    s.string("timestamp_format", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class ReadStepNdJson:
    """Read newline-delimited JSON."""

    ddl_schema: tuple[str, ...] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@s.table(
    s.vec_string("ddl_schema", optional=True),
    s.sub_table("schema", "DataSchema", optional=True),
)
@model
class ReadStepNdGeoJson:
    """Read newline-delimited GeoJSON features."""

    ddl_schema: tuple[str, ...] | None = None
    schema: DataSchema | None = None


# -- transforms ---------------------------------------------------------------------------


@s.table(s.string("alias", optional=True), s.string("query"))
@model
class SqlQueryStep:
    """One named SQL step (the step without alias is the output)."""

    alias: str | None = None
    query: str


@s.table(s.string("name"), s.vec_string("primary_key"))
@model
class TemporalTable:
    """An input to be treated as a temporal table."""

    name: str
    primary_key: tuple[str, ...]


@s.table(
    s.string("engine"),
    s.string("version", optional=True),
    s.string("query", optional=True),
    s.vec_table("queries", "SqlQueryStep", optional=True),
    s.vec_table("temporal_tables", "TemporalTable", optional=True),
)
@model
class TransformSql:
    """SQL transform executed by ``engine``."""

    engine: str
    version: str | None = None
    query: str | None = None
    queries: tuple[SqlQueryStep, ...] | None = None
    temporal_tables: tuple[TemporalTable, ...] | None = None


# -- merge strategies ---------------------------------------------------------------------


@s.table()
@model
class MergeStrategyAppend:
    """Append all records."""


@s.table(s.vec_string("primary_key"))
@model
class MergeStrategyLedger:
    """Append-only ledger keyed by ``primary_key``."""

    primary_key: tuple[str, ...]


@s.table(s.vec_string("primary_key"), s.vec_string("compare_columns", optional=True))
@model
class MergeStrategySnapshot:
    """Diff full snapshots by ``primary_key``."""

    primary_key: tuple[str, ...]
    compare_columns: tuple[str, ...] | None = None


@s.table(s.vec_string("primary_key"))
@model
class MergeStrategyChangelogStream:
    """Input is already a changelog stream."""

    primary_key: tuple[str, ...]


@s.table(s.vec_string("primary_key"))
@model
class MergeStrategyUpsertStream:
    """Input is an upsert stream."""

    primary_key: tuple[str, ...]


# -- fetch steps --------------------------------------------------------------------------


@s.table()
@model
class EventTimeSourceFromMetadata:
    """Event time from the source's metadata (e.g. Last-Modified)."""


@s.table(s.string("pattern"), s.string("timestamp_format", optional=True))
@model
class EventTimeSourceFromPath:
    """Event time extracted from the path by a regex."""

    pattern: str
    timestamp_format: str | None = None


@s.table()
@model
class EventTimeSourceFromSystemTime:
    """Event time = system time of ingestion."""


@s.table()
@model
class SourceCachingForever:
    """Fetch once, never re-fetch."""


@s.table(s.string("name"), s.string("value"))
@model
class RequestHeader:
    """HTTP request header."""

    name: str
    value: str


@s.table(
    s.string("url"),
    s.union_field("event_time", "EventTimeSource", optional=True),
    s.union_field("cache", "SourceCaching", optional=True),
    s.vec_table("headers", "RequestHeader", optional=True),
)
@model
class FetchStepUrl:
    """Fetch from a URL."""

    url: str
    event_time: EventTimeSource | None = None
    cache: SourceCaching | None = None
    headers: tuple[RequestHeader, ...] | None = None


@s.table(
    s.string("path"),
    s.union_field("event_time", "EventTimeSource", optional=True),
    s.union_field("cache", "SourceCaching", optional=True),
    s.enum_field("order", SourceOrdering, s.INT32, optional=True),
)
@model
class FetchStepFilesGlob:
    """Fetch local files matching a glob."""

    path: str
    event_time: EventTimeSource | None = None
    cache: SourceCaching | None = None
    order: SourceOrdering | None = None


@s.table(s.string("name"), s.string("value", optional=True))
@model
class EnvVar:
    """Environment variable of a fetch container."""

    name: str
    value: str | None = None


@s.table(
    s.string("image"),
    s.vec_string("command", optional=True),
    s.vec_string("args", optional=True),
    s.vec_table("env", "EnvVar", optional=True),
)
@model
class FetchStepContainer:
    """Run a container that writes data to stdout."""

    image: str
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: tuple[EnvVar, ...] | None = None


@s.table(s.string("path"), s.enum_field("qos", MqttQos, s.INT32, optional=True))
@model
class MqttTopicSubscription:
    """MQTT topic filter and QoS."""

    path: str
    qos: MqttQos | None = None


@s.table(
    s.string("host"),
    s.scalar("port", s.INT32),
    s.string("username", optional=True),
    s.string("password", optional=True),
    s.vec_table("topics", "MqttTopicSubscription"),
)
@model
class FetchStepMqtt:
    """Subscribe to MQTT topics."""

    host: str
    port: int
    username: str | None = None
    password: str | None = None
    topics: tuple[MqttTopicSubscription, ...]


@s.table(
    s.scalar("chain_id", s.UINT64, optional=True),
    s.string("node_url", optional=True),
    s.string("filter", optional=True),
    s.string("signature", optional=True),
)
@model
class FetchStepEthereumLogs:
    """Ingest Ethereum logs."""

    chain_id: int | None = None
    node_url: str | None = None
    filter: str | None = None
    signature: str | None = None


# -- prepare steps ------------------------------------------------------------------------


@s.table(
    s.enum_field("format", CompressionFormat, s.INT32),
    s.string("sub_path", optional=True),
)
@model
class PrepStepDecompress:
    """Decompress an archive."""

    format: CompressionFormat
    sub_path: str | None = None


@s.table(s.vec_string("command"))
@model
class PrepStepPipe:
    """Pipe data through a command."""

    command: tuple[str, ...]


# -- unions -------------------------------------------------------------------------------

ReadStep = (
    ReadStepCsv
    | ReadStepGeoJson
    | ReadStepEsriShapefile
    | ReadStepParquet
    | ReadStepJson
    | ReadStepNdJson
    | ReadStepNdGeoJson
)
Transform = TransformSql
MergeStrategy = (
    MergeStrategyAppend
    | MergeStrategyLedger
    | MergeStrategySnapshot
    | MergeStrategyChangelogStream
    | MergeStrategyUpsertStream
)
FetchStep = (
    FetchStepUrl | FetchStepFilesGlob | FetchStepContainer | FetchStepMqtt | FetchStepEthereumLogs
)
EventTimeSource = (
    EventTimeSourceFromMetadata | EventTimeSourceFromPath | EventTimeSourceFromSystemTime
)
SourceCaching = SourceCachingForever
PrepStep = PrepStepDecompress | PrepStepPipe

READ_STEP = s.union(
    "ReadStep",
    "ReadStep",
    ReadStepCsv,
    ReadStepGeoJson,
    ReadStepEsriShapefile,
    ReadStepParquet,
    ReadStepJson,
    ReadStepNdJson,
    ReadStepNdGeoJson,
)
TRANSFORM = s.union("Transform", "Transform", TransformSql)
MERGE_STRATEGY = s.union(
    "MergeStrategy",
    "MergeStrategy",
    MergeStrategyAppend,
    MergeStrategyLedger,
    MergeStrategySnapshot,
    MergeStrategyChangelogStream,
    MergeStrategyUpsertStream,
)
FETCH_STEP = s.union(
    "FetchStep",
    "FetchStep",
    FetchStepUrl,
    FetchStepFilesGlob,
    FetchStepContainer,
    FetchStepMqtt,
    FetchStepEthereumLogs,
)
EVENT_TIME_SOURCE = s.union(
    "EventTimeSource",
    "EventTimeSource",
    EventTimeSourceFromMetadata,
    EventTimeSourceFromPath,
    EventTimeSourceFromSystemTime,
)
SOURCE_CACHING = s.union("SourceCaching", "SourceCaching", SourceCachingForever)
PREP_STEP = s.union("PrepStep", "PrepStep", PrepStepDecompress, PrepStepPipe)
