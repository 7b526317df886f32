"""Complete validation of a `DatasetSnapshot` before anything is stored.

`validate_snapshot` refuses, with a `ManifestFieldError` naming the place
(``content.name``, ``content.metadata[2].read.ddlSchema``...), everything that would
otherwise be accepted by ``odf add`` and only fail later (at ingest, pull, verify, or
when a block is read back):

- the name: ``name`` or ``account/name`` (ODF ``DatasetAlias``; any other ``/`` is refused);
- every event fits a block the decoder reads back: each one is encoded in a block and
  decoded under the decode limits (`fbs.limits`), so e.g. a 10 MiB ``SetInfo``
  description is refused here instead of being stored as an unreadable block;
- declared read schemas: ``ddlSchema`` parses (known types, no duplicate columns) and an
  RFC-016 ``schema`` converts to Arrow; not both at once;
- the vocabulary: system column names are distinct; a declared read schema (of a source
  without preprocess) holds the event time column named by a ``SetVocab`` and no column
  named like the ``offset`` or ``system_time`` column;
- merge keys: every primary key column is in the declared read schema (or is the event
  time column), when a schema is declared and there is no preprocess step;
- transform inputs: with ``is_known_input``, every ``datasetRef`` must be known.

Pure: no I/O (pyarrow is used only to parse schemas).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from fbs.errors import FbsError, InvalidName, ManifestFieldError
from fbs.limits import DEFAULT_LIMITS, DecodeLimits
from fbs.model import (
    AddPushSource,
    DatasetSnapshot,
    DatasetVocabulary,
    MetadataBlock,
    MetadataEvent,
    SetPollingSource,
    SetTransform,
    SetVocab,
)
from fbs.timestamp import Timestamp

if TYPE_CHECKING:
    import pyarrow as pa

    from fbs.model import ReadStep

__all__ = ["check_event_fits_block", "validate_snapshot"]

#: Block header fields used for the size check (the real ones are the same size).
_CHECK_TIME: Final = Timestamp(0)


def check_event_fits_block(
    event: MetadataEvent, *, path: str = "", limits: DecodeLimits = DEFAULT_LIMITS
) -> None:
    """Refuse an event whose block would not decode under ``limits``.

    The event is encoded in a block (with a previous-block hash, as every non-Seed block
    has) and decoded back; encoding errors are refused too.

    Raises:
        ManifestFieldError: the block is too large or hits a decode limit (named).
    """
    from fbs.codec import decode_block, encode_block
    from fbs.multiformats import Multihash

    block = MetadataBlock(
        system_time=_CHECK_TIME,
        prev_block_hash=Multihash.sha3_256(b""),
        sequence_number=1,
        event=event,
    )
    try:
        raw = encode_block(block)
    except FbsError as e:
        raise ManifestFieldError(path, f"{type(event).__name__} cannot be encoded: {e}") from None
    if len(raw) > limits.max_block_bytes:
        raise ManifestFieldError(
            path,
            f"{type(event).__name__} block would be {len(raw)} bytes, over the "
            f"{limits.max_block_bytes}-byte block limit",
        )
    try:
        decode_block(raw, limits)
    except FbsError as e:
        raise ManifestFieldError(
            path, f"{type(event).__name__} block would not be readable: {e}"
        ) from None


def _declared_schema(read: ReadStep, path: str) -> pa.Schema | None:
    from fbs.arrow_schema import arrow_schema_from_data, parse_ddl_schema

    if read.ddl_schema is not None and read.schema is not None:
        raise ManifestFieldError(path, "a read step may declare ddlSchema or schema, not both")
    try:
        if read.ddl_schema is not None:
            return parse_ddl_schema(read.ddl_schema)
        if read.schema is not None:
            return arrow_schema_from_data(read.schema)
    except FbsError as e:
        which = "ddlSchema" if read.ddl_schema is not None else "schema"
        raise ManifestFieldError(f"{path}.{which}", str(e)) from None
    return None


def _vocabulary(events: tuple[MetadataEvent, ...]) -> tuple[DatasetVocabulary, SetVocab | None]:
    base = DatasetVocabulary()
    last: SetVocab | None = None
    for e in events:
        if isinstance(e, SetVocab):
            last = e
    if last is None:
        return base, None
    return (
        DatasetVocabulary(
            offset_column=last.offset_column or base.offset_column,
            operation_type_column=last.operation_type_column or base.operation_type_column,
            system_time_column=last.system_time_column or base.system_time_column,
            event_time_column=last.event_time_column or base.event_time_column,
        ),
        last,
    )


def _check_vocab(vocab: DatasetVocabulary, path: str) -> None:
    names = {
        "offsetColumn": vocab.offset_column,
        "operationTypeColumn": vocab.operation_type_column,
        "systemTimeColumn": vocab.system_time_column,
        "eventTimeColumn": vocab.event_time_column,
    }
    for key, value in names.items():
        if not value or not value.strip():
            raise ManifestFieldError(f"{path}.{key}", "column name must not be empty")
    seen: dict[str, str] = {}
    for key, value in names.items():
        if value in seen:
            raise ManifestFieldError(
                f"{path}.{key}", f"column {value!r} is already the {seen[value]}"
            )
        seen[value] = key


def _check_source(
    event: AddPushSource | SetPollingSource,
    path: str,
    vocab: DatasetVocabulary,
    explicit: SetVocab | None,
) -> None:
    schema = _declared_schema(event.read, f"{path}.read")
    if schema is None or event.preprocess is not None:
        return  # the columns are only known once data (or the preprocess output) exists
    columns = set(schema.names)
    where = f"{path}.read.{'ddlSchema' if event.read.ddl_schema is not None else 'schema'}"
    for system in (vocab.offset_column, vocab.system_time_column):
        if system in columns:
            raise ManifestFieldError(
                where, f"column {system!r} clashes with the system column of that name"
            )
    if (
        explicit is not None
        and explicit.event_time_column is not None
        and explicit.event_time_column not in columns
    ):
        raise ManifestFieldError(
            where,
            f"the SetVocab event time column {explicit.event_time_column!r} is not "
            f"declared (columns: {', '.join(schema.names)})",
        )
    key = getattr(event.merge, "primary_key", None)
    if key:
        known = columns | {vocab.event_time_column}
        missing = [k for k in key if k not in known]
        if missing:
            raise ManifestFieldError(
                f"{path}.merge.primaryKey",
                f"column(s) {', '.join(map(repr, missing))} not in the read schema "
                f"(columns: {', '.join(schema.names)})",
            )


def validate_snapshot(
    snapshot: DatasetSnapshot,
    *,
    is_known_input: Callable[[str], bool] | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> None:
    """Refuse a snapshot that could be stored but not used (see the module docstring).

    Args:
        snapshot: the parsed manifest.
        is_known_input: says whether a transform input reference resolves; ``None``
            skips that check.
        limits: the decode limits every block must satisfy.

    Raises:
        ManifestFieldError: naming the first problem found and where it is.
    """
    from fbs.did import DatasetAlias

    try:
        DatasetAlias.parse(snapshot.name)
    except InvalidName as e:
        raise ManifestFieldError(
            "content.name",
            f"{e} (a dataset name is letters, digits and '-' in '.'-separated parts, "
            "optionally prefixed by one 'account/')",
        ) from None
    vocab, explicit = _vocabulary(snapshot.metadata)
    for i, event in enumerate(snapshot.metadata):
        path = f"content.metadata[{i}]"
        if isinstance(event, SetVocab):
            _check_vocab(vocab, path)
        elif isinstance(event, AddPushSource | SetPollingSource):
            _check_source(event, path, vocab, explicit)
        elif isinstance(event, SetTransform) and is_known_input is not None:
            for j, item in enumerate(event.inputs):
                if not is_known_input(item.dataset_ref):
                    raise ManifestFieldError(
                        f"{path}.inputs[{j}].datasetRef",
                        f"unknown transform input {item.dataset_ref!r}",
                    )
        check_event_fits_block(event, path=path, limits=limits)
