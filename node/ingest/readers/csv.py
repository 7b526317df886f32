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

Malformed files are refused with a `ReadError` naming file, line and (where known)
column: a record with too many or too few fields, bytes the declared ``encoding`` cannot
decode (e.g. latin-1 read as utf-8), and a quoted field never closed before the end of the
file (pyarrow would read it as one value swallowing the rest of the file). When the file
holds the quote character at all, pyarrow reads it followed by a probe record of nulls
(`_ProbedFile`): if the last record read back is that probe, every quote was closed and the
probe is dropped; otherwise (the probe was swallowed), or where the probe cannot be used, a
second pass with Python's csv reader finds the last record and re-parses it strictly. An
empty (blank) file yields no batches; bytes from which no first line can be parsed are
refused.

Memory is bounded by `CSV_BLOCK_BYTES` (pyarrow parses a block at a time; with
`CSV_USE_THREADS` it converts a block's columns in parallel and reads a few blocks
ahead). Line numbers in errors count physical lines, also after quoted fields that
span lines.
"""

from __future__ import annotations

import codecs
import csv as pycsv
import io
import mmap
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.csv as pa_csv

from fbs.model.source import ReadStepCsv
from node.ingest.errors import ReadError, SchemaError, UnsupportedFormat
from node.ingest.readers._common import Conformer, Location, rebatch, warn_input

#: Bytes pyarrow parses at a time (bounds memory; also the type-inference sample).
CSV_BLOCK_BYTES: Final = 4 << 20
#: Bytes read to find the column names (a larger first block is read if no row fits).
HEADER_BLOCK_BYTES: Final = 64 << 10
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
        self,
        *,
        names: list[str] | None = None,
        skip_rows: int = 0,
        block_size: int = CSV_BLOCK_BYTES,
    ) -> pa_csv.ReadOptions:
        return pa_csv.ReadOptions(
            block_size=block_size,
            encoding=self.encoding,
            column_names=names,
            autogenerate_column_names=names is None and not self.header,
            skip_rows=skip_rows,
            use_threads=CSV_USE_THREADS and block_size >= CSV_BLOCK_BYTES,
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
    path: Path | io.RawIOBase,
    dialect: _Dialect,
    read: pa_csv.ReadOptions,
    types: dict[str, Any] | None,
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


def _open_first_rows(path: Path, dialect: _Dialect) -> Any:
    """A reader whose schema names the columns, from a small first block if it holds a row.

    The reader infers column types from its first block: a `HEADER_BLOCK_BYTES` block
    keeps that cheap. When no row fits in it (or it cuts a character), the file is opened
    again with the full block size, whose errors are the ones reported.
    """
    try:
        return _open(path, dialect, dialect.read_options(block_size=HEADER_BLOCK_BYTES), None)
    except (pa.ArrowInvalid, UnicodeError):
        return _open(path, dialect, dialect.read_options(), None)


def _header_names(path: Path, dialect: _Dialect) -> list[str] | None:
    """Column names in the header (or ``_cN`` names without one); None for an empty file."""
    try:
        reader = _open_first_rows(path, dialect)
    except pa.ArrowInvalid as e:
        if "Empty CSV file" in str(e):
            if _is_blank(path):
                return None
            # Bytes but no first line pyarrow can parse: say what is wrong with them.
            located = _find_undecodable(path, dialect, None)
            if located.line is not None:
                raise located from None
            raise ReadError(
                "no CSV record can be read (an unterminated quote in the first line?)",
                path=path,
                line=1,
            ) from None
        raise _arrow_error(path, dialect, e) from None
    except UnicodeError:
        raise _find_undecodable(path, dialect, None) from None
    except OSError as e:
        raise ReadError(f"cannot open: {e}", path=path) from None
    try:
        names = list(reader.schema.names)
    except UnicodeError:
        raise _find_undecodable(path, dialect, None) from None
    finally:
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
    except UnicodeError:
        return _find_undecodable(path, dialect, None)
    except (OSError, pycsv.Error) as e:
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


def _find_undecodable(path: Path, dialect: _Dialect, names: list[str] | None) -> ReadError:
    """Locate the first field with bytes the declared encoding cannot decode (error path)."""
    hint = f"not valid {dialect.encoding}; declare the file's encoding in the read step"
    try:
        with path.open(encoding=dialect.encoding, errors="surrogateescape", newline="") as f:
            reader = _python_reader(f, dialect)
            consumed = 0
            for fields in reader:
                for i, value in enumerate(fields):
                    bad = next((c for c in value if "\udc80" <= c <= "\udcff"), None)
                    if bad is not None:
                        column = names[i] if names is not None and i < len(names) else None
                        byte = ord(bad) - 0xDC00
                        return ReadError(
                            f"byte 0x{byte:02x} is {hint} (field {i + 1})",
                            path=path,
                            line=consumed + 1,
                            column=column,
                        )
                consumed = reader.line_num
    except (OSError, UnicodeError, pycsv.Error) as e:
        return ReadError(f"not readable as CSV: {e}", path=path)
    return ReadError(f"text is {hint}", path=path)


#: Most bytes `_is_blank` looks at (a blank file larger than this is not "empty").
_BLANK_SCAN_BYTES: Final = 1 << 20


def _is_blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (an empty input)."""
    with path.open("rb") as f:
        data = f.read(_BLANK_SCAN_BYTES + 1)
    return len(data) <= _BLANK_SCAN_BYTES and not data.strip()


def _contains(path: Path, needle: bytes) -> bool:
    """Whether the file holds ``needle`` (a scan at memory speed)."""
    if not needle:
        return False
    with path.open("rb") as f:
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return mm.find(needle) != -1
        except ValueError:  # empty file
            return False


class _ProbedFile(io.RawIOBase):
    """The file's bytes followed by ``tail`` (the probe record), as pyarrow's input."""

    def __init__(self, path: Path, tail: bytes) -> None:
        super().__init__()
        self._file = path.open("rb", buffering=0)
        self._tail = tail

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._file.readinto(buffer)
        if n:
            return int(n)
        view = memoryview(buffer).cast("B")
        k = min(len(view), len(self._tail))
        view[:k] = self._tail[:k]
        self._tail = self._tail[k:]
        return k

    def close(self) -> None:
        self._file.close()
        super().close()


def _needs_quote_check(path: Path, dialect: _Dialect) -> bool:
    """Whether the file may hold an unterminated quoted field (it holds the quote at all)."""
    if dialect.quote is None:
        return False
    try:
        needle = dialect.quote.encode(dialect.encoding)
    except (UnicodeError, LookupError):
        return True
    return _contains(path, needle)


def _probe_tail(
    path: Path, dialect: _Dialect, names: list[str], types: dict[str, Any] | None
) -> bytes | None:
    """The probe record appended after the file (None: the probe cannot be used).

    A newline, then one field per column, each the null value: read back as a row of
    nulls in every column when the parser ends the file outside a quoted field, and as
    part of the last value when a quoted field was left open. It needs every column
    converted (a swallowed probe must show in the last row), a null value the parser
    reads literally, a UTF-8 file (bytes appended as they are) that does not end with the
    escape character or the separator (the newline added would change how its last
    record reads), and a non-blank probe line (a blank line is skipped).
    """
    if codecs.lookup(dialect.encoding).name != "utf-8":
        return None
    if types is not None and set(types) != set(names):
        return None
    null = dialect.null_value
    specials = {dialect.separator, "\n", "\r", dialect.quote, dialect.escape} - {None}
    if any(c in null for c in specials if c) or (not null and len(names) < 2):
        return None
    try:
        with path.open("rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 1))
            last = f.read(1)
    except OSError:
        return None
    # After an escape character the newline would be escaped; after a separator at the
    # very end pyarrow reads the empty last field as "" (as if quoted), not as null.
    if last in {c.encode() for c in (dialect.escape, dialect.separator) if c is not None}:
        return None
    return ("\n" + dialect.separator.join([null] * len(names)) + "\n").encode()


def _is_probe_row(batch: pa.RecordBatch) -> bool:
    """Whether the last row of ``batch`` is the probe record (null in every column)."""
    last = batch.slice(batch.num_rows - 1, 1)
    return all(column.null_count == 1 for column in last.columns)


def _check_quotes_closed(path: Path, dialect: _Dialect, names: list[str]) -> None:
    """Refuse a quoted field left open at the end of the file.

    pyarrow reads an unterminated quoted field as running to the end of the file (one
    record swallowing the rest). Only the last record can be affected: it is located
    with Python's csv reader and re-parsed strictly. Skipped when the file holds no quote
    character at all.

    Raises:
        ReadError: naming the line where the unterminated record starts and its column.
    """
    if not _needs_quote_check(path, dialect):
        return
    assert dialect.quote is not None
    try:
        with path.open(encoding=dialect.encoding, errors="replace", newline="") as f:
            reader = _python_reader(f, dialect)
            last_start, last_fields, consumed = 0, None, 0
            for fields in reader:
                if fields:
                    last_start, last_fields = consumed, fields
                consumed = reader.line_num
            if last_fields is None:
                return
            f.seek(0)
            for _ in range(last_start):
                f.readline()
            strict = pycsv.reader(
                f,
                delimiter=dialect.separator,
                quotechar=dialect.quote,
                quoting=pycsv.QUOTE_MINIMAL,
                escapechar=dialect.escape,
                doublequote=True,
                strict=True,
            )
            for _ in strict:
                pass
    except pycsv.Error as e:
        if "unexpected end of data" not in str(e):
            return  # other strictness complaints: pyarrow's reading stands
        i = len(last_fields) - 1 if last_fields else 0
        raise ReadError(
            f"unterminated quoted field (field {i + 1} is opened with {dialect.quote} "
            "and never closed before the end of the file)",
            path=path,
            line=last_start + 1,
            column=names[i] if i < len(names) else None,
        ) from None
    except (OSError, UnicodeError):
        return


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
        read_names = _columns_for_schema(path, dialect, names, list(schema.names))
        has_date_fmt = step.date_format is not None
        direct = {
            f.name: (pa.string() if _needs_text(f.type, has_date_fmt) else f.type) for f in schema
        }
    job = _Job(path, dialect, read_names, skip, direct, conformer, batch_rows)
    yield from _warn_if_no_records(job, _stream(job))


def _columns_for_schema(
    path: Path, dialect: _Dialect, names: list[str], declared: list[str]
) -> list[str]:
    """The names the file's columns are read under, with a declared schema.

    A header holding every declared name is read by name; otherwise a file with as many
    columns as the schema is read by position, as kamu's reader does (the declared schema
    replaces the header). Either way one warning says what the header's author may not
    expect: columns dropped, or header names read as other names.

    Raises:
        ReadError: neither applies (a declared column missing and the counts differ).
    """
    if dialect.header and set(declared) <= set(names):
        extra = [n for n in names if n not in declared]
        if extra:
            warn_input(path, f"columns not in the schema are ignored: {', '.join(extra)}")
        return names
    if len(names) == len(declared):
        renamed = [f"{h} as {d}" for h, d in zip(names, declared, strict=True) if h != d]
        # A JSON file's first line is no header: the no-records warning or the read
        # error that follows says what is wrong, without listing JSON fragments here.
        if dialect.header and renamed and not _starts_like_json(path):
            warn_input(
                path,
                "header names differ from the schema, columns read by position: "
                + ", ".join(renamed),
            )
        return declared
    missing = [n for n in declared if n not in names]
    raise ReadError(
        f"header does not match the schema: missing {missing}, "
        f"file has {len(names)} columns, schema {len(declared)}",
        path=path,
        line=1 if dialect.header else None,
    )


def _warn_if_no_records(job: _Job, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, with a warning when a non-blank file gave no record at all.

    A file in another format (NDJSON given to a CSV source) often parses as a header line
    and nothing else: silence would read as "nothing new".
    """
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        yield batch
    if rows:
        return
    what = "only a header line" if job.dialect.header else "no record"
    hint = "; it looks like JSON" if _starts_like_json(job.path) else ""
    warn_input(job.path, f"no CSV records (the file holds {what}){hint}")


def _starts_like_json(path: Path) -> bool:
    """Whether the file's first non-blank byte opens a JSON object or array."""
    try:
        with path.open("rb") as f:
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return False
    return head[:1] in (b"{", b"[")


@dataclass(frozen=True)
class _Job:
    """One read of a CSV file: what every parse of it (probed, plain, re-read) needs."""

    path: Path
    dialect: _Dialect
    names: list[str]
    skip: int
    types: dict[str, Any] | None
    conformer: Conformer
    batch_rows: int

    def open(self, source: Path | _ProbedFile) -> pa_csv.CSVStreamingReader:
        """A pyarrow reader of ``source`` (the file, or the file and its probe)."""
        read = self.dialect.read_options(names=self.names, skip_rows=self.skip)
        return _open(source, self.dialect, read, self.types)


def _stream(job: _Job, *, check_quotes: bool = True) -> Iterator[pa.RecordBatch]:
    """Conformed batches of the file; an unterminated quote at its end is refused.

    The check reads the file followed by the probe record (`_probe_tail`) when it can;
    if the probe was swallowed or made the parse fail, the rows not yet handed out are
    read again without it, ending with the exact (slow) check.
    """
    if check_quotes and not _needs_quote_check(job.path, job.dialect):
        check_quotes = False
    tail = _probe_tail(job.path, job.dialect, job.names, job.types) if check_quotes else None
    if tail is None:
        yield from _parse(job, check_quotes)
        return
    handed_out = 0
    try:
        for batch in _parse_probed(job, tail):
            handed_out += batch.num_rows
            yield batch
        return
    except _ProbeFailed:
        pass
    rest = _parse(job, True)
    yield from _skip_rows(rest, handed_out)


class _ProbeFailed(Exception):
    """The probed parse cannot tell (the probe was swallowed or broke the parse)."""


def _skip_rows(batches: Iterator[pa.RecordBatch], count: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if count >= batch.num_rows:
            count -= batch.num_rows
            continue
        yield batch.slice(count) if count else batch
        count = 0


def _parse_probed(job: _Job, tail: bytes) -> Iterator[pa.RecordBatch]:
    """`_parse` of the file followed by ``tail``, the probe row dropped.

    Each raw batch is held back until the next one arrives, so the last one is not
    handed out before its last row was found to be the probe.

    Raises:
        _ProbeFailed: on any parse error, or when the last row is not the probe.
    """
    source = _ProbedFile(job.path, tail)
    try:
        reader = job.open(source)
    except (pa.ArrowException, UnicodeError, OSError):
        source.close()
        raise _ProbeFailed from None
    path, conformer, batch_rows = job.path, job.conformer, job.batch_rows
    line_of = _line_finder(path, job.dialect, job.skip)
    rows = 0
    held: pa.RecordBatch | None = None
    with reader, source:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (pa.ArrowException, UnicodeError, OSError):
                raise _ProbeFailed from None
            if not batch.num_rows:
                continue
            if held is not None:
                yield from rebatch(
                    [conformer.conform(held, Location(path, rows, line_of))], batch_rows
                )
                rows += held.num_rows
            held = batch
    if held is None or not _is_probe_row(held):
        raise _ProbeFailed
    held = held.slice(0, held.num_rows - 1)
    if held.num_rows:
        yield from rebatch([conformer.conform(held, Location(path, rows, line_of))], batch_rows)


def _line_finder(path: Path, dialect: _Dialect, skip: int) -> Callable[[int], int]:
    def line_of(row: int) -> int:
        # Only called for an error: find where that record starts (quoted fields may
        # span lines), else assume one record per line.
        return _record_line(path, dialect, row + skip) or row + 1 + skip

    return line_of


def _parse(job: _Job, check_quotes: bool) -> Iterator[pa.RecordBatch]:
    """Conformed batches of the file as it is; with ``check_quotes``, the exact check last."""
    path, dialect, names = job.path, job.dialect, job.names
    line_of = _line_finder(path, dialect, job.skip)
    try:
        reader = job.open(path)
    except pa.ArrowInvalid as e:
        raise _classify(job, e, 0) from None
    except UnicodeError:
        raise _find_undecodable(path, dialect, names) from None
    except OSError as e:
        raise ReadError(f"cannot open: {e}", path=path) from None
    rows = 0
    with reader:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                if check_quotes:
                    _check_quotes_closed(path, dialect, names)
                return
            except pa.ArrowInvalid as e:
                raise _classify(job, e, rows) from None
            except UnicodeError:
                raise _find_undecodable(path, dialect, names) from None
            except OSError as e:
                raise ReadError(f"cannot read: {e}", path=path) from None
            loc = Location(path, rows, line_of)
            rows += batch.num_rows
            yield from rebatch([job.conformer.conform(batch, loc)], job.batch_rows)


def _classify(job: _Job, error: Exception, rows_before: int) -> ReadError:
    """Turn a pyarrow error into a precise `ReadError` (re-reads the file; error path)."""
    path, dialect, types, skip = job.path, job.dialect, job.types, job.skip
    text = str(error)
    if "CSV parse error" in text:
        return _arrow_error(path, dialect, error)
    if "invalid UTF8" in text or "invalid utf8" in text.lower():
        return _find_undecodable(path, dialect, job.names)
    if (
        "conversion error" not in text
        or types is None
        or all(pa.types.is_string(t) for t in types.values())
    ):
        return ReadError(f"after line {rows_before + skip}: {text}", path=path)
    # Re-read everything as text and convert with our own code, which names row and column.
    as_text = dict.fromkeys(types, pa.string())
    try:
        for batch in _stream(replace(job, types=as_text, batch_rows=1 << 30), check_quotes=False):
            del batch
    except ReadError as located:
        return located
    return ReadError(f"after line {rows_before + skip}: {text}", path=path)
