"""CSV reader (`ReadStepCsv`) on pyarrow's streaming CSV reader.

Options and defaults follow Spark: ``separator`` ``,`` (one character), ``encoding``
``utf8``, ``quote`` ``"`` (empty: no quoting), ``escape`` ``\\`` (empty: none; equal to the
quote: doubled quotes), ``header`` false (columns are then named ``_c0``, ``_c1``...),
``inferSchema`` false (every column a string unless a schema is declared; when true,
types are inferred from the first block of the file), ``nullValue`` ``""`` (an unquoted
field equal to it is null; a quoted ``""`` stays an empty string), ``dateFormat`` /
``timestampFormat`` (see `node.ingest.readers._common`). ``""`` inside a quoted field is
always read as one quote (RFC 4180).

With a declared schema and ``header`` true, columns are matched by header name when the
header holds every declared name (extra columns are ignored, order may differ); otherwise
the header must have as many columns as the schema, which is then applied by position
(Spark's ``enforceSchema``). Without a header the schema is applied by position.

Memory is bounded by `CSV_BLOCK_BYTES` (pyarrow parses a block at a time; with
`CSV_USE_THREADS` it converts a block's columns in parallel and reads a few blocks
ahead). Line numbers in errors count physical lines, also after quoted fields that
span lines.
"""

from __future__ import annotations

import codecs
import csv as pycsv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.csv as pa_csv

from fbs.model.source import ReadStepCsv
from node.ingest.errors import ReadError, SchemaError, UnsupportedFormat
from node.ingest.readers._common import Conformer, Location, rebatch

#: Bytes pyarrow parses at a time (bounds memory; also the type-inference sample).
CSV_BLOCK_BYTES: Final = 4 << 20
#: Let pyarrow parse and convert a block's columns on its thread pool.
CSV_USE_THREADS: Final = True

_EXPECTED_RE: Final = re.compile(r"Expected (\d+) columns")

#: Longest physical line the error diagnosis pass accepts (Python csv field limit).
MAX_DIAGNOSE_FIELD: Final = 64 << 20


class _Dialect:
    """The resolved options of a `ReadStepCsv`."""

    def __init__(self, step: ReadStepCsv) -> None:
        sep = step.separator if step.separator is not None else ","
        if len(sep) != 1:
            raise UnsupportedFormat(f"CSV separator must be one character, got {sep!r}")
        self.separator = sep
        self.encoding = step.encoding or "utf8"
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise SchemaError(f"unknown CSV encoding {self.encoding!r}") from None
        quote = step.quote if step.quote is not None else '"'
        escape = step.escape if step.escape is not None else "\\"
        if len(quote) > 1 or len(escape) > 1:
            raise UnsupportedFormat("CSV quote and escape must be one character (or empty)")
        self.quote: str | None = quote or None
        self.escape: str | None = escape if escape and escape != quote else None
        self.header = bool(step.header)
        self.infer = bool(step.infer_schema)
        self.null_value = step.null_value if step.null_value is not None else ""

    def parse_options(self) -> pa_csv.ParseOptions:
        return pa_csv.ParseOptions(
            delimiter=self.separator,
            quote_char=self.quote if self.quote else False,
            double_quote=self.quote is not None,
            escape_char=self.escape if self.escape else False,
            newlines_in_values=True,
        )

    def read_options(
        self, *, names: list[str] | None = None, skip_rows: int = 0
    ) -> pa_csv.ReadOptions:
        return pa_csv.ReadOptions(
            block_size=CSV_BLOCK_BYTES,
            encoding=self.encoding,
            column_names=names,
            autogenerate_column_names=names is None and not self.header,
            skip_rows=skip_rows,
            use_threads=CSV_USE_THREADS,
        )

    def convert_options(self, types: dict[str, Any] | None) -> pa_csv.ConvertOptions:
        return pa_csv.ConvertOptions(
            column_types=types,
            include_columns=list(types) if types is not None else None,
            null_values=[self.null_value],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            timestamp_parsers=[],
        )


def _open(
    path: Path, dialect: _Dialect, read: pa_csv.ReadOptions, types: dict[str, Any] | None
) -> Any:
    return pa_csv.open_csv(
        path,
        read_options=read,
        parse_options=dialect.parse_options(),
        convert_options=dialect.convert_options(types),
    )


def _arrow_error(path: Path, dialect: _Dialect, e: Exception) -> ReadError:
    text = str(e)
    if "Empty CSV file" in text:
        return ReadError("empty file", path=path)
    m = _EXPECTED_RE.search(text)
    if m is not None:
        return _find_bad_row(path, dialect, int(m.group(1)))
    return ReadError(f"not readable as CSV: {text}", path=path)


def _header_names(path: Path, dialect: _Dialect) -> list[str] | None:
    """Column names in the header (or ``_cN`` names without one); None for an empty file."""
    try:
        reader = _open(path, dialect, dialect.read_options(), None)
    except pa.ArrowInvalid as e:
        if "Empty CSV file" in str(e):
            return None
        raise _arrow_error(path, dialect, e) from None
    except OSError as e:
        raise ReadError(f"cannot open: {e}", path=path) from None
    names = list(reader.schema.names)
    reader.close()
    if dialect.header:
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ReadError(f"duplicate column {dup!r} in the header", path=path, line=1)
        return names
    return [f"_c{i}" for i in range(len(names))]


def _needs_text(arrow_type: pa.DataType, dialect_date_format: bool) -> bool:
    """Types the pyarrow CSV converter cannot produce as declared: read as text first."""
    t = pa.types
    return (
        t.is_timestamp(arrow_type)
        or (t.is_date(arrow_type) and dialect_date_format)
        or t.is_nested(arrow_type)
        or t.is_time(arrow_type)
        or t.is_duration(arrow_type)
        or t.is_large_string(arrow_type)
        or t.is_string_view(arrow_type)
    )


def _python_reader(f: Any, dialect: _Dialect) -> Any:
    """Python's csv reader with the step's dialect (error-diagnosis passes only)."""
    pycsv.field_size_limit(MAX_DIAGNOSE_FIELD)
    return pycsv.reader(
        f,
        delimiter=dialect.separator,
        quotechar=dialect.quote or '"',
        quoting=pycsv.QUOTE_MINIMAL if dialect.quote else pycsv.QUOTE_NONE,
        escapechar=dialect.escape,
        doublequote=dialect.quote is not None,
        strict=False,
    )


def _find_bad_row(path: Path, dialect: _Dialect, expected: int) -> ReadError:
    """Locate the first record with the wrong number of fields (error path only)."""
    try:
        with path.open(encoding=dialect.encoding, newline="") as f:
            reader = _python_reader(f, dialect)
            for fields in reader:
                if fields and len(fields) != expected:
                    return ReadError(
                        f"expected {expected} fields, found {len(fields)}",
                        path=path,
                        line=reader.line_num,
                    )
    except (OSError, UnicodeError, pycsv.Error) as e:
        return ReadError(f"not readable as CSV: {e}", path=path)
    return ReadError(f"malformed CSV row (expected {expected} fields)", path=path)


def _record_line(path: Path, dialect: _Dialect, record: int) -> int | None:
    """Physical line (1-based) where record ``record`` (0-based, blank lines not counted)
    starts; None if the file cannot be scanned (error path only)."""
    try:
        with path.open(encoding=dialect.encoding, newline="") as f:
            reader = _python_reader(f, dialect)
            index, consumed = 0, 0
            for fields in reader:
                if fields:
                    if index == record:
                        # line_num counts the lines consumed so far (a blank line is
                        # its own empty row): the record starts right after them.
                        return consumed + 1
                    index += 1
                consumed = reader.line_num
    except (OSError, UnicodeError, pycsv.Error):
        return None
    return None


def read_csv(
    step: ReadStepCsv, path: Path, schema: pa.Schema | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream the batches of a CSV file under ``schema`` (see the module docstring).

    Raises:
        ReadError: unreadable file, malformed row (with its line), a value that does not
            fit its column (line and column), a header that does not match the schema.
        SchemaError: unknown encoding or time format letter.
        UnsupportedFormat: multi-character separator/quote/escape.
    """
    dialect = _Dialect(step)
    names = _header_names(path, dialect)
    if names is None:
        return
    conformer = Conformer(
        schema,
        missing_as_null=False,
        date_format=step.date_format,
        timestamp_format=step.timestamp_format,
    )
    skip = 1 if dialect.header else 0
    if schema is None:
        read_names = names
        direct: dict[str, Any] | None = None if dialect.infer else dict.fromkeys(names, pa.string())
    else:
        declared = list(schema.names)
        if dialect.header and set(declared) <= set(names):
            read_names = names
        elif len(names) == len(declared):
            read_names = declared
        else:
            missing = [n for n in declared if n not in names]
            raise ReadError(
                f"header does not match the schema: missing {missing}, "
                f"file has {len(names)} columns, schema {len(declared)}",
                path=path,
                line=1 if dialect.header else None,
            )
        has_date_fmt = step.date_format is not None
        direct = {
            f.name: (pa.string() if _needs_text(f.type, has_date_fmt) else f.type) for f in schema
        }
    yield from _stream(path, dialect, read_names, skip, direct, conformer, batch_rows)


def _stream(
    path: Path,
    dialect: _Dialect,
    names: list[str],
    skip: int,
    types: dict[str, Any] | None,
    conformer: Conformer,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    def line_of(row: int) -> int:
        # Only called for an error: find where that record starts (quoted fields may
        # span lines), else assume one record per line.
        return _record_line(path, dialect, row + skip) or row + 1 + skip

    try:
        reader = _open(path, dialect, dialect.read_options(names=names, skip_rows=skip), types)
    except pa.ArrowInvalid as e:
        raise _classify(path, dialect, names, skip, types, conformer, e, 0) from None
    except OSError as e:
        raise ReadError(f"cannot open: {e}", path=path) from None
    rows = 0
    with reader:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as e:
                raise _classify(path, dialect, names, skip, types, conformer, e, rows) from None
            except (OSError, UnicodeError) as e:
                raise ReadError(f"cannot read: {e}", path=path) from None
            loc = Location(path, rows, line_of)
            rows += batch.num_rows
            yield from rebatch([conformer.conform(batch, loc)], batch_rows)


def _classify(
    path: Path,
    dialect: _Dialect,
    names: list[str],
    skip: int,
    types: dict[str, Any] | None,
    conformer: Conformer,
    error: Exception,
    rows_before: int,
) -> ReadError:
    """Turn a pyarrow error into a precise `ReadError` (re-reads the file; error path)."""
    text = str(error)
    if "CSV parse error" in text:
        return _arrow_error(path, dialect, error)
    if "conversion error" not in text or types is None:
        return ReadError(f"after line {rows_before + skip}: {text}", path=path)
    # Re-read everything as text and convert with our own code, which names row and column.
    as_text = dict.fromkeys(types, pa.string())
    try:
        for batch in _stream(path, dialect, names, skip, as_text, conformer, 1 << 30):
            del batch
    except ReadError as located:
        return located
    return ReadError(f"after line {rows_before + skip}: {text}", path=path)
