"""JSON readers: `ReadStepNdJson` (one object per line) and `ReadStepJson` (one document).

NdJson streams through pyarrow's JSON reader (`JSON_BLOCK_BYTES` at a time). A JSON document
is parsed whole (at most `MAX_JSON_DOCUMENT_BYTES`); ``subPath`` is a dot path to the array
of records inside it (``data.items``; a numeric segment indexes an array); a single object
there is one record. Records are then converted in chunks through the same pyarrow reader,
so both formats share type semantics.

With a declared schema, fields are matched by name: a missing key reads as null (an error
for a NOT NULL column), keys not in the schema are ignored. Without one, types are inferred
(from the first block / chunk); timestamps come out as ms UTC. Time text is parsed as
described in `node.ingest.readers._common`. Errors name the file and line (NdJson) or the
record number (Json).
"""

from __future__ import annotations

import codecs
import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.json as pa_json

from fbs.model.source import ReadStepJson, ReadStepNdJson
from node.ingest.errors import ReadError, SchemaError
from node.ingest.readers._common import TIMESTAMP_TYPE, Conformer, Location, rebatch

#: Bytes pyarrow parses at a time when streaming NdJson.
JSON_BLOCK_BYTES: Final = 4 << 20
#: Largest JSON / GeoJSON document read whole.
MAX_JSON_DOCUMENT_BYTES: Final = 512 << 20

_ROW_RE: Final = re.compile(r"in row (\d+)")
_COLUMN_RE: Final = re.compile(r"Column\(/?([^)]*)\)")
_CHANGED_RE: Final = re.compile(r"Column\(/?([^)]*)\) changed from (\w+) to (\w+)")


def _a(kind: str) -> str:
    """``kind`` (a JSON kind as Arrow names it: object, array, string ...) with its article."""
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _check_encoding(encoding: str | None) -> str:
    name = encoding or "utf-8"
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise SchemaError(f"unknown JSON encoding {name!r}") from None


def read_schema_for_json(schema: pa.Schema) -> pa.Schema:
    """The schema pyarrow parses with: time types as text (we parse them ourselves)."""
    fields = []
    for f in schema:
        t = f.type
        textual = pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t)
        fields.append(pa.field(f.name, pa.string(), True) if textual else f.with_nullable(True))
    return pa.schema(fields)


def _parse_options(schema: pa.Schema | None, *, strict: bool) -> pa_json.ParseOptions:
    if schema is None:
        return pa_json.ParseOptions(newlines_in_values=False)
    return pa_json.ParseOptions(
        explicit_schema=schema,
        unexpected_field_behavior="error" if strict else "ignore",
        newlines_in_values=False,
    )


def _json_error(path: Path, e: Exception, first_row: int, *, lines: bool) -> ReadError:
    text = str(e)
    row_m = _ROW_RE.search(text)
    col_m = _COLUMN_RE.search(text)
    column = col_m.group(1) or None if col_m else None
    reason = text.removeprefix("JSON parse error: ")
    changed = _CHANGED_RE.search(text)
    if changed is not None:  # Arrow's wording names its inference, not the user's data
        was, found = changed.group(2), changed.group(3)
        reason = (
            f"expected {_a(was)}, found {_a(found)}"
            if column
            else f"not a JSON object but {_a(found)} (NdJson holds one object per line)"
        )
    if "unexpected field" in text:
        reason += " (a field absent from the first block: declare a schema)"
    if row_m is None:
        return ReadError(reason, path=path, column=column)
    row = first_row + int(row_m.group(1))
    if lines:
        return ReadError(reason, path=path, line=row + 1, column=column)
    return ReadError(f"record {row + 1}: {reason}", path=path, column=column)


def read_ndjson(
    step: ReadStepNdJson, path: Path, schema: pa.Schema | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream the batches of a newline-delimited JSON file.

    Raises:
        ReadError: unreadable file, malformed line, a value that does not fit its column.
        SchemaError: unknown encoding or time format letter.
    """
    encoding = _check_encoding(step.encoding)
    conformer = Conformer(
        schema,
        missing_as_null=True,
        date_format=step.date_format,
        timestamp_format=step.timestamp_format,
    )
    parse_schema = read_schema_for_json(schema) if schema is not None else None
    try:
        raw: Any = path.open("rb")
    except OSError as e:
        raise ReadError(f"cannot open: {e}", path=path) from None
    with raw:
        source = raw if encoding == "utf-8" else codecs.EncodedFile(raw, "utf-8", encoding)
        try:
            reader = pa_json.open_json(
                source,
                read_options=pa_json.ReadOptions(block_size=JSON_BLOCK_BYTES, use_threads=False),
                parse_options=_parse_options(parse_schema, strict=False),
            )
        except pa.ArrowInvalid as e:
            if "Empty JSON file" in str(e) or "empty" in str(e).lower():
                return
            raise _json_error(path, e, 0, lines=True) from None
        except (OSError, UnicodeError) as e:
            raise ReadError(f"cannot read: {e}", path=path) from None
        rows = 0
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as e:
                raise _json_error(path, e, rows, lines=True) from None
            except (OSError, UnicodeError) as e:
                raise ReadError(f"cannot read: {e}", path=path) from None
            loc = Location(path, rows, lambda r: r + 1)
            rows += batch.num_rows
            yield from rebatch([conformer.conform(batch, loc)], batch_rows)


def load_document(path: Path, encoding: str | None) -> Any:
    """Parse a whole JSON document (size-limited).

    Raises:
        ReadError: unreadable, too large or not JSON (with the line of a syntax error).
    """
    codec = _check_encoding(encoding)
    try:
        size = path.stat().st_size
        if size > MAX_JSON_DOCUMENT_BYTES:
            raise ReadError(
                f"JSON document of {size} bytes exceeds the limit of {MAX_JSON_DOCUMENT_BYTES}",
                path=path,
            )
        text = path.read_bytes().decode(codec)
    except OSError as e:
        raise ReadError(f"cannot open: {e}", path=path) from None
    except UnicodeError as e:
        raise ReadError(f"not valid {codec}: {e}", path=path) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ReadError(f"not valid JSON: {e.msg}", path=path, line=e.lineno) from None
    except RecursionError:
        raise ReadError("JSON nested too deeply", path=path) from None


def select_sub_path(doc: Any, sub_path: str | None, path: Path) -> list[Any]:
    """The records at ``sub_path`` (dot path) of a parsed document.

    Raises:
        ReadError: if the path does not exist or does not lead to an array / object.
    """
    node = doc
    if sub_path:
        walked: list[str] = []
        for part in sub_path.split("."):
            walked.append(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise ReadError(
                    f"subPath {'.'.join(walked)!r} not found in the document", path=path
                )
    if isinstance(node, dict):
        return [node]
    if not isinstance(node, list):
        raise ReadError(
            f"expected an array of records at {sub_path or 'the top level'}, "
            f"found {type(node).__name__}",
            path=path,
        )
    return node


def records_to_batches(
    records: Iterable[tuple[int, Any]],
    path: Path,
    conformer: Conformer,
    batch_rows: int,
    *,
    lines: bool,
) -> Iterator[pa.RecordBatch]:
    """Convert ``(line or record number, record)`` pairs to conformed batches, chunk by chunk.

    The first chunk's inferred schema (no declared schema) is enforced on later chunks.

    Raises:
        ReadError: a record that is not an object or a value that does not fit.
    """
    declared = conformer.schema
    parse_schema = read_schema_for_json(declared) if declared is not None else None
    strict = False
    chunk: list[tuple[int, dict[str, Any]]] = []

    def flush() -> Iterator[pa.RecordBatch]:
        nonlocal parse_schema, strict
        numbers = [n for n, _ in chunk]
        buf = io.BytesIO()
        for _, rec in chunk:
            buf.write(json.dumps(rec, ensure_ascii=False, allow_nan=False).encode())
            buf.write(b"\n")
        block = max(1 << 20, buf.tell() + 1)
        buf.seek(0)
        try:
            table = pa_json.read_json(
                buf,
                read_options=pa_json.ReadOptions(use_threads=False, block_size=block),
                parse_options=_parse_options(parse_schema, strict=strict),
            )
        except pa.ArrowInvalid as e:
            m = _ROW_RE.search(str(e))
            bad = numbers[int(m.group(1))] if m and int(m.group(1)) < len(numbers) else None
            located = _json_error(path, e, 0, lines=lines)
            if bad is None:
                raise located from None
            if lines:
                raise ReadError(
                    located.reason, path=path, line=bad, column=located.column
                ) from None
            raise ReadError(
                f"record {bad}: {located.reason}", path=path, column=located.column
            ) from None
        if parse_schema is None:
            parse_schema = _normalized(table.schema)
            strict = True
        batch = table.combine_chunks().to_batches()
        if not batch:
            return
        if lines:
            loc = Location(path, 0, lambda r: numbers[r])
        else:
            # Json records are numbered consecutively: "record N" comes from first_row.
            loc = Location(path, numbers[0] - 1, lambda r: None)
        yield conformer.conform(batch[0], loc)

    for number, rec in records:
        if not isinstance(rec, dict):
            reason = f"expected a JSON object, found {type(rec).__name__}"
            if lines:
                raise ReadError(reason, path=path, line=number)
            raise ReadError(f"record {number}: {reason}", path=path)
        chunk.append((number, rec))
        if len(chunk) >= batch_rows:
            yield from rebatch(flush(), batch_rows)
            chunk = []
    if chunk:
        yield from rebatch(flush(), batch_rows)


def _normalized(schema: pa.Schema) -> pa.Schema:
    """An inferred schema with timestamps as ms UTC, for parsing later chunks alike."""
    return pa.schema(
        [pa.field(f.name, TIMESTAMP_TYPE) if pa.types.is_timestamp(f.type) else f for f in schema]
    )


def read_json(
    step: ReadStepJson, path: Path, schema: pa.Schema | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """The batches of a JSON document's records (``subPath`` selects the array).

    Raises:
        ReadError: unreadable / oversized file, bad JSON, missing ``subPath``, a record that
            is not an object, a value that does not fit its column.
        SchemaError: unknown encoding or time format letter.
    """
    doc = load_document(path, step.encoding)
    records = select_sub_path(doc, step.sub_path, path)
    conformer = Conformer(
        schema,
        missing_as_null=True,
        date_format=step.date_format,
        timestamp_format=step.timestamp_format,
    )
    numbered = ((i + 1, rec) for i, rec in enumerate(records))
    yield from records_to_batches(numbered, path, conformer, batch_rows, lines=False)
