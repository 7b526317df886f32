"""Shared reader machinery: applying a declared schema to batches, time formats, rebatching.

Every reader produces raw Arrow batches and hands them to `Conformer`, which selects and
casts the declared columns, so that type errors are reported the same way for every format:
a `ReadError` naming the file, the line (or record number) and the column.

Time formats (``dateFormat``, ``timestampFormat`` of the read steps and
``EventTimeSourceFromPath.timestampFormat``) accept Spark / Java ``DateTimeFormatter``
patterns, translated to strptime: ``yyyy yy MM MMM MMMM dd d HH H hh h mm m ss s
S..S (fraction) a EEE EEEE XXX XX X Z z`` and ``'literal'`` text. A pattern that contains
``%`` is taken to be a strptime format already. Without a format, ISO 8601 / RFC 3339 is
expected (``2020-01-01``, ``2020-01-01 10:00:00``, ``2020-01-01T10:00:00.123Z``,
``...+01:00``). Timestamps without a zone are taken to be UTC; every timestamp comes out
as ``timestamp("ms", "UTC")`` (finer precision is truncated, as Spark does).
"""

from __future__ import annotations

import datetime as dt
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

import pyarrow as pa
import pyarrow.compute as pc

from node.ingest.errors import ReadError, SchemaError


class InputWarning(UserWarning):
    """Input read the way kamu reads it, but maybe not the way its author meant.

    Raised through `warnings` (readers are generators deep under the callers): the CLI
    prints each as one ``odf: warning:`` line; other callers may record or log them.
    """

    #: Shown by the CLI as ``odf: warning: <message>``.
    odf_warning: ClassVar[bool] = True


def warn_input(path: Path, message: str) -> None:
    """Emit one `InputWarning` about ``path``: ``"<file name>: <message>"``."""
    warnings.warn(InputWarning(f"{path.name}: {message}"), stacklevel=2)


#: Rows per batch handed to the caller unless it asks otherwise.
DEFAULT_BATCH_ROWS: Final = 65_536

#: The Arrow type every timestamp column is normalized to.
TIMESTAMP_TYPE: Final = pa.timestamp("ms", "UTC")

#: Longest value quoted back in an error message.
MAX_QUOTED_VALUE: Final = 80

#: An ISO 8601 date-time ending with a zone designator (``Z``, ``+01``, ``+0100``, ``+01:00``).
_ZONE_PATTERN: Final = r"\d[T ]\d\d(?::?\d\d)*(?:[.,]\d+)?(?:[Zz]|[+-]\d\d(?::?\d\d)?)$"
_ZONE_RE: Final = re.compile(_ZONE_PATTERN)

_JAVA_TOKENS: Final = [
    ("yyyy", "%Y"),
    ("uuuu", "%Y"),
    ("yy", "%y"),
    ("MMMM", "%B"),
    ("MMM", "%b"),
    ("MM", "%m"),
    ("M", "%m"),
    ("dd", "%d"),
    ("d", "%d"),
    ("DDD", "%j"),
    ("HH", "%H"),
    ("H", "%H"),
    ("hh", "%I"),
    ("h", "%I"),
    ("mm", "%M"),
    ("m", "%M"),
    ("ss", "%S"),
    ("s", "%S"),
    ("EEEE", "%A"),
    ("EEE", "%a"),
    ("a", "%p"),
    ("XXX", "%z"),
    ("XX", "%z"),
    ("X", "%z"),
    ("xxx", "%z"),
    ("xx", "%z"),
    ("ZZZ", "%z"),
    ("ZZ", "%z"),
    ("Z", "%z"),
    ("z", "%Z"),
]


def translate_time_format(pattern: str) -> str:
    """A strptime format for a Spark/Java ``DateTimeFormatter`` pattern.

    Raises:
        SchemaError: for pattern letters that have no strptime equivalent.
    """
    if "%" in pattern:
        return pattern
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise SchemaError(f"unterminated quote in time format {pattern!r}")
            literal = pattern[i + 1 : end]
            out.append("'" if literal == "" else literal.replace("%", "%%"))
            i = end + 1
            continue
        if c == "S":
            j = i
            while j < len(pattern) and pattern[j] == "S":
                j += 1
            out.append("%f")
            i = j
            continue
        if c.isalpha():
            for token, fmt in _JAVA_TOKENS:
                if pattern.startswith(token, i):
                    out.append(fmt)
                    i += len(token)
                    break
            else:
                raise SchemaError(f"unsupported letter {c!r} in time format {pattern!r}")
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_QUOTED_VALUE else text[:MAX_QUOTED_VALUE] + "..."


@dataclass(frozen=True, slots=True)
class Location:
    """Maps a row of the current batch to a place in the source file."""

    path: Path
    first_row: int
    line_of: Callable[[int], int | None]

    def error(self, row: int, column: str | None, reason: str) -> ReadError:
        """A `ReadError` for batch row ``row`` (0-based)."""
        global_row = self.first_row + row
        line = self.line_of(global_row)
        if line is None:
            reason = f"record {global_row + 1}: {reason}"
        return ReadError(reason, path=self.path, line=line, column=column)


# -- value conversion ----------------------------------------------------------------------


def _first_failing(arr: pa.Array, convert: Callable[[pa.Array], pa.Array]) -> int:
    """Index of the first element ``convert`` refuses (error path only)."""
    step = 4096
    for start in range(0, len(arr), step):
        chunk = arr.slice(start, step)
        try:
            convert(chunk)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
            for i in range(len(chunk)):
                try:
                    convert(chunk.slice(i, 1))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
                    return start + i
    return 0


def _first_new_null(source: pa.Array, result: pa.Array) -> int | None:
    lost = pc.and_(pc.is_valid(source), pc.is_null(result))
    if not pc.any(lost).as_py():
        return None
    return int(pc.index(lost, True).as_py())


def _python_strptime(arr: pa.Array, fmt: str) -> pa.Array:
    """strptime in Python for formats Arrow's strptime lacks (``%f`` fractions)."""
    out: list[dt.datetime | None] = []
    for value in arr.to_pylist():
        if value is None:
            out.append(None)
            continue
        parsed = dt.datetime.strptime(value, fmt)
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
        out.append(parsed)
    return pa.array(out, type=pa.timestamp("us")).cast(TIMESTAMP_TYPE, safe=False)


def _strptime(arr: pa.Array, fmt: str) -> pa.Array:
    if "%f" in fmt:
        return _python_strptime(arr, fmt)
    # Zone-less results are UTC by our convention, zoned ones are UTC already.
    return pc.strptime(arr, format=fmt, unit="ms", error_is_null=False).cast(TIMESTAMP_TYPE)


def _has_zone(text: str) -> bool:
    """Whether an ISO 8601 value ends with a zone designator (a guess; casts verify it)."""
    return _ZONE_RE.search(text) is not None


def _cast_iso(arr: pa.Array, zoned: bool) -> pa.Array:
    """ISO 8601 text to ms UTC: parsed as ms, or as us (sub-ms digits, truncated) if refused.

    Parsing straight to ms is exact when it succeeds (no digit below the ms is dropped)
    and spares a second pass over the column; a value with sub-ms digits makes it fail
    (at that value) and the column is parsed as us and truncated, as before.
    """
    tz = "UTC" if zoned else None
    try:
        return pc.cast(arr, pa.timestamp("ms", tz)).cast(TIMESTAMP_TYPE)
    except pa.ArrowInvalid:
        pass
    return pc.cast(arr, pa.timestamp("us", tz)).cast(TIMESTAMP_TYPE, safe=False)


def _zone_guess(arr: pa.Array) -> bool | None:
    """Whether the column looks zoned, from its first and last values.

    None: every value is null, or the two disagree (a mixed column).
    """
    if arr.null_count == len(arr):
        return None
    valid = arr.drop_null() if arr.null_count else arr
    first, last = _has_zone(str(valid[0].as_py())), _has_zone(str(valid[-1].as_py()))
    return first if first == last else None


def _iso_timestamps(arr: pa.Array) -> pa.Array:
    """ISO 8601 text → ms UTC; zone-less values are UTC, zoned ones are converted.

    Vectorized: the first and last values decide which Arrow cast is tried (a cast
    that fails on many values is slow, so no second whole-column attempt is made);
    otherwise the zone-less values get ``+00:00`` appended and the column is cast once.
    Only a column with values Arrow's ISO parser refuses goes value by value (which
    also locates a bad value, through the caller).
    """
    if arr.null_count == len(arr):
        return pa.nulls(len(arr), TIMESTAMP_TYPE)
    zoned = _zone_guess(arr)
    if zoned is not None:
        try:
            return _cast_iso(arr, zoned)
        except pa.ArrowInvalid:
            pass
    # The guess was wrong for some values: mark the zoned ones (this also covers a
    # column that is uniformly the other way; a cast failing on many values is slow).
    mask = pc.match_substring_regex(arr, _ZONE_PATTERN)
    try:
        fixed = pc.if_else(mask, arr, pc.binary_join_element_wise(arr, "+00:00", ""))
        return _cast_iso(fixed, True)
    except pa.ArrowInvalid:
        pass
    return _python_iso_timestamps(arr)


def _python_iso_timestamps(arr: pa.Array) -> pa.Array:
    """The value-by-value path (dates mixed with zoned values, lowercase ``z``...)."""
    out: list[dt.datetime | None] = []
    for value in arr.to_pylist():
        if value is None:
            out.append(None)
            continue
        parsed = dt.datetime.fromisoformat(value.replace("z", "Z"))
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
        out.append(parsed)
    return pa.array(out, type=pa.timestamp("us")).cast(TIMESTAMP_TYPE, safe=False)


def _to_timestamp(arr: pa.Array, target: pa.DataType, fmt: str | None) -> pa.Array:
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        arr = arr.cast(pa.string())
        result = _strptime(arr, fmt) if fmt else _iso_timestamps(arr)
    elif pa.types.is_timestamp(t):
        result = arr if t.tz is not None else arr.cast(pa.timestamp(t.unit, "UTC"))
    elif pa.types.is_date(t):
        result = arr.cast(pa.timestamp("ms")).cast(pa.timestamp("ms", "UTC"))
    else:
        raise ValueError(f"cannot convert {t} to a timestamp")
    return result.cast(target, safe=False)


def _to_date(arr: pa.Array, fmt: str | None) -> pa.Array:
    t = arr.type
    if (pa.types.is_string(t) or pa.types.is_large_string(t)) and fmt:
        return _strptime(arr.cast(pa.string()), fmt).cast(pa.timestamp("ms")).cast(pa.date32())
    if pa.types.is_timestamp(t):
        return arr.cast(pa.timestamp(t.unit)).cast(pa.date32(), safe=False)
    return pc.cast(arr, pa.date32())


def convert_array(
    arr: pa.Array,
    target: pa.DataType,
    *,
    date_format: str | None = None,
    timestamp_format: str | None = None,
) -> pa.Array:
    """Cast ``arr`` to ``target`` (safe casts; time text parsed with the given formats).

    Raises:
        pyarrow.ArrowInvalid | ValueError: for a value that does not fit (callers locate it).
    """
    if arr.type == target:
        return arr
    if pa.types.is_timestamp(target):
        return _to_timestamp(arr, target, timestamp_format)
    if pa.types.is_date32(target):
        return _to_date(arr, date_format)
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), target)
    return pc.cast(arr, target, safe=True)


# -- schema application --------------------------------------------------------------------


class Conformer:
    """Selects and casts the columns of raw batches to a declared schema.

    Args:
        schema: the declared schema (None: keep the raw columns, only normalizing
            timestamps to ms UTC).
        missing_as_null: a declared, nullable column absent from the input reads as nulls
            (JSON semantics); otherwise it is a `ReadError`.
    """

    def __init__(
        self,
        schema: pa.Schema | None,
        *,
        missing_as_null: bool,
        date_format: str | None = None,
        timestamp_format: str | None = None,
    ) -> None:
        self.schema = schema
        self.missing_as_null = missing_as_null
        self.date_format = translate_time_format(date_format) if date_format else None
        self.timestamp_format = (
            translate_time_format(timestamp_format) if timestamp_format else None
        )

    def _convert(self, arr: pa.Array, target: pa.DataType) -> pa.Array:
        return convert_array(
            arr, target, date_format=self.date_format, timestamp_format=self.timestamp_format
        )

    def column(self, arr: pa.Array, field: pa.Field, loc: Location) -> pa.Array:
        """``arr`` converted to ``field`` (type and nullability).

        Raises:
            ReadError: naming the first value that does not convert or a null in a
                NOT NULL column.
        """
        try:
            result = self._convert(arr, field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError) as e:
            if pa.types.is_struct(arr.type) or pa.types.is_list(arr.type):
                reason = f"cannot convert {arr.type} to {field.type}: {e}"
                raise loc.error(0, field.name, reason) from None
            row = _first_failing(arr, lambda a: self._convert(a, field.type))
            value = arr[row].as_py() if len(arr) else None
            raise loc.error(
                row, field.name, f"value {_quote(value)} does not fit type {field.type}"
            ) from None
        if result is arr:  # already of the declared type: no value can have been lost
            row_lost = None
        else:
            if isinstance(result, pa.ChunkedArray):
                result = result.combine_chunks()
            row_lost = _first_new_null(arr, result) if len(arr) else None
        if row_lost is not None:
            value = arr[row_lost].as_py()
            raise loc.error(
                row_lost, field.name, f"value {_quote(value)} does not fit type {field.type}"
            )
        if not field.nullable and result.null_count:
            row = int(pc.index(pc.is_null(result), True).as_py())
            raise loc.error(row, field.name, "null in a NOT NULL column")
        return result

    def conform(self, batch: pa.RecordBatch, loc: Location) -> pa.RecordBatch:
        """The batch with the declared schema's columns, in its order and types.

        Raises:
            ReadError: for a missing column or a value that does not fit.
        """
        if self.schema is None:
            return self._normalize(batch, loc)
        columns = []
        names = batch.schema.names
        for field in self.schema:
            if field.name not in names:
                if self.missing_as_null and field.nullable:
                    columns.append(pa.nulls(batch.num_rows, field.type))
                    continue
                raise ReadError(
                    f"missing column {field.name!r} (input has {', '.join(names) or 'none'})",
                    path=loc.path,
                    column=field.name,
                )
            columns.append(self.column(batch.column(names.index(field.name)), field, loc))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _normalize(self, batch: pa.RecordBatch, loc: Location) -> pa.RecordBatch:
        """Without a declared schema: timestamps become ms UTC, everything else stays."""
        if not any(pa.types.is_timestamp(f.type) for f in batch.schema):
            return batch
        fields = [
            pa.field(f.name, TIMESTAMP_TYPE, f.nullable) if pa.types.is_timestamp(f.type) else f
            for f in batch.schema
        ]
        schema = pa.schema(fields)
        columns = [self.column(batch.column(i), fields[i], loc) for i in range(len(fields))]
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def rebatch(batches: Iterable[pa.RecordBatch], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Split batches larger than ``batch_rows`` (never merges: memory stays bounded)."""
    for batch in batches:
        if batch.num_rows <= batch_rows:
            if batch.num_rows:
                yield batch
            continue
        for start in range(0, batch.num_rows, batch_rows):
            yield batch.slice(start, batch_rows)
