"""Join the part files of a parallel Spark write into one Parquet file, without re-encoding.

An ODF transform must produce exactly one data file whose rows are in offset order. Making
Spark write one file means one task for the whole query (kamu's engine does that); here
Spark writes one part file per partition on all cores, and `merge_parts` then concatenates
the parts' row groups in partition order by copying their column chunks byte for byte
(``copy_file_range``: the kernel copies, nothing is decoded) and writing a new footer
(`engine.thrift_compact`). Partition order is the order ``coalesce(1)`` would have
produced, so the result has the same rows in the same order as a single-task write.

Layout: every row group's column chunks are written in schema order, so a row group's
first chunk is also its first byte (readers assign row groups to splits by that
position). Page indexes and bloom filters of the parts are not carried over (they hold
absolute positions; both are optional), and ``sorting_columns`` is dropped because
column numbers change.

Columns whose values are an arithmetic sequence over the whole file (the ODF offset,
a constant ``op``, a constant ``system_time``) are not computed by Spark at all: they are
`SequenceColumn`s, written here per row group as ``DELTA_BINARY_PACKED`` pages (a few
bytes per 256 values, since every delta is the same) with exact min/max statistics. Only
the merge knows how many rows precede each row group, so offsets cost neither a second
pass over the data nor a single-task write.

The merged file keeps Spark's footer metadata (``org.apache.spark.*``) with the row schema
replaced by the full output schema, so Spark reads the columns back with their SQL types.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from engine.errors import EngineInternalError
from engine.thrift_compact import (
    T_BINARY,
    T_BOOL,
    T_I16,
    T_I32,
    T_I64,
    T_LIST,
    T_STRUCT,
    ThriftError,
    TList,
    TStruct,
    decode_struct,
    encode_struct,
    encode_uvarint,
    zigzag,
)

__all__ = [
    "ARROW_SCHEMA_KEY",
    "DELTA_BLOCK_SIZE",
    "DELTA_MINIBLOCKS",
    "MAX_FOOTER_BYTES",
    "MAX_PAGE_VALUES",
    "SPARK_ROW_METADATA_KEY",
    "SequenceColumn",
    "delta_sequence_page",
    "merge_parts",
    "part_files",
]

#: Values per DELTA_BINARY_PACKED block and miniblocks per block (Arrow C++'s 256 / 4,
#: so the bytes equal what pyarrow writes for the same values).
DELTA_BLOCK_SIZE: Final = 256
DELTA_MINIBLOCKS: Final = 4
#: Most values in one synthesized data page (its bytes: ~5 per 256 values).
MAX_PAGE_VALUES: Final = 1 << 22
#: Largest part footer read (Spark's are a few KiB).
MAX_FOOTER_BYTES: Final = 64 * 1024 * 1024
#: Footer key of the Arrow schema pyarrow writes.
ARROW_SCHEMA_KEY: Final = "ARROW:schema"
#: Footer key holding Spark's row schema (JSON of a StructType).
SPARK_ROW_METADATA_KEY: Final = "org.apache.spark.sql.parquet.row.metadata"

_PART_RE: Final = re.compile(r"part-(\d+)-.*\.parquet$")
_INT_RANGES: Final = {"INT32": (-(2**31), 2**31 - 1), "INT64": (-(2**63), 2**63 - 1)}
_MAGIC: Final = b"PAR1"
# parquet.thrift enum values used here.
_TYPE_IDS: Final = {"INT32": 1, "INT64": 2}
_REQUIRED: Final = 0
_ENC_RLE: Final = 3
_ENC_DELTA: Final = 5
_CODEC_SNAPPY: Final = 1
_PAGE_DATA: Final = 0
_CONVERTED_TIMESTAMP_MILLIS: Final = 9


@dataclass(frozen=True, slots=True, kw_only=True)
class SequenceColumn:
    """A required integer column equal to ``first + step * row`` over the merged file.

    Attributes:
        name: column name in the output.
        physical: Parquet physical type.
        first: value of the file's first row.
        step: difference between consecutive rows (0 for a constant).
        timestamp_millis: annotate as ``TIMESTAMP(MILLIS, UTC)`` (INT64 only).
    """

    name: str
    physical: Literal["INT32", "INT64"]
    first: int
    step: int
    timestamp_millis: bool = False

    def value_at(self, row: int) -> int:
        """The value of row ``row`` (0-based) of the merged file."""
        return self.first + self.step * row

    def check(self, rows: int) -> None:
        """Raise `EngineInternalError` if some value of ``rows`` rows would overflow."""
        lo, hi = _INT_RANGES[self.physical]
        last = self.value_at(max(rows - 1, 0))
        if not (lo <= self.first <= hi and lo <= last <= hi):
            raise EngineInternalError(
                f"column {self.name!r}: values {self.first}..{last} overflow {self.physical}"
            )


def delta_sequence_page(first: int, step: int, count: int) -> bytes:
    """DELTA_BINARY_PACKED bytes of ``first, first + step, ...`` (``count`` values).

    Every delta equals ``step`` = the block's min delta, so every miniblock has bit width
    0 and no body: a block is its min delta plus one zero byte per miniblock.
    """
    if count < 1:
        raise ValueError("a page holds at least one value")
    header = (
        encode_uvarint(DELTA_BLOCK_SIZE)
        + encode_uvarint(DELTA_MINIBLOCKS)
        + encode_uvarint(count)
        + encode_uvarint(zigzag(first))
    )
    blocks = -(-(count - 1) // DELTA_BLOCK_SIZE)
    return header + (encode_uvarint(zigzag(step)) + bytes(DELTA_MINIBLOCKS)) * blocks


def part_files(folder: Path) -> list[Path]:
    """The ``part-NNNNN-*.parquet`` files of a Spark output folder, in partition order."""
    found = []
    for path in folder.iterdir():
        m = _PART_RE.match(path.name)
        if m:
            found.append((int(m.group(1)), path.name, path))
    return [p for _, _, p in sorted(found)]


@dataclass(frozen=True, slots=True)
class _Part:
    """One part file: its path, decoded footer and top-level field layout."""

    path: Path
    meta: TStruct
    schema: list[TStruct]
    #: Per top-level field: (first schema element, element count, first leaf, leaf count).
    fields: list[tuple[int, int, int, int]]


def _read_footer(path: Path) -> TStruct:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size < 12:
            raise EngineInternalError(f"{path.name}: not a Parquet file")
        f.seek(size - 8)
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != _MAGIC or length > min(size - 12, MAX_FOOTER_BYTES):
            raise EngineInternalError(f"{path.name}: not a Parquet file")
        f.seek(size - 8 - length)
        footer = f.read(length)
    try:
        meta, _ = decode_struct(footer)
    except ThriftError as e:
        raise EngineInternalError(f"{path.name}: bad Parquet footer: {e}") from None
    if meta.get_value(8) is not None:
        raise EngineInternalError(f"{path.name}: encrypted Parquet files are not supported")
    return meta


def _open_part(path: Path) -> _Part:
    meta = _read_footer(path)
    schema_list = meta.list_value(2)
    if schema_list is None or not schema_list.items:
        raise EngineInternalError(f"{path.name}: Parquet footer without a schema")
    schema = [e for e in schema_list.items if isinstance(e, TStruct)]
    fields = []
    pos, leaf = 1, 0
    for _ in range(schema[0].int_value(5)):
        start, leaves, pending = pos, 0, 1
        while pending:
            if pos >= len(schema):
                raise EngineInternalError(f"{path.name}: truncated Parquet schema")
            children = schema[pos].int_value(5)
            leaves += children == 0
            pending += children - 1
            pos += 1
        fields.append((start, pos - start, leaf, leaves))
        leaf += leaves
    return _Part(path=path, meta=meta, schema=schema, fields=fields)


def _i64(value: int) -> tuple[int, object]:
    return (T_I64, value)


def _sequence_schema(col: SequenceColumn) -> TStruct:
    element = TStruct(
        {
            1: (T_I32, _TYPE_IDS[col.physical]),
            3: (T_I32, _REQUIRED),
            4: (T_BINARY, col.name.encode()),
        }
    )
    if col.timestamp_millis:
        millis = TStruct({1: (T_STRUCT, TStruct())})
        timestamp = TStruct({1: (T_BOOL, True), 2: (T_STRUCT, millis)})
        element[6] = (T_I32, _CONVERTED_TIMESTAMP_MILLIS)
        element[10] = (T_STRUCT, TStruct({8: (T_STRUCT, timestamp)}))
    return element


def _statistics(fmt: str, lo: int, hi: int) -> TStruct:
    lo_b, hi_b = struct.pack(fmt, lo), struct.pack(fmt, hi)
    return TStruct(
        {
            1: (T_BINARY, hi_b),
            2: (T_BINARY, lo_b),
            3: _i64(0),
            5: (T_BINARY, hi_b),
            6: (T_BINARY, lo_b),
        }
    )


def _sequence_chunk(col: SequenceColumn, row: int, rows: int, pos: int) -> tuple[bytes, TStruct]:
    """The bytes of one row group's column chunk of ``col`` and its ColumnChunk struct."""
    import pyarrow as pa

    fmt = "<i" if col.physical == "INT32" else "<q"
    out = bytearray()
    uncompressed_total = 0
    done = 0
    while done < rows:
        n = min(MAX_PAGE_VALUES, rows - done)
        a, b = col.value_at(row + done), col.value_at(row + done + n - 1)
        page = delta_sequence_page(col.value_at(row + done), col.step, n)
        # Snappy like every other column of an ODF slice (the pages are tiny either way).
        compressed = pa.compress(page, codec="snappy", asbytes=True)
        header = encode_struct(
            TStruct(
                {
                    1: (T_I32, _PAGE_DATA),
                    2: (T_I32, len(page)),
                    3: (T_I32, len(compressed)),
                    5: (
                        T_STRUCT,
                        TStruct(
                            {
                                1: (T_I32, n),
                                2: (T_I32, _ENC_DELTA),
                                3: (T_I32, _ENC_RLE),
                                4: (T_I32, _ENC_RLE),
                                5: (T_STRUCT, _statistics(fmt, min(a, b), max(a, b))),
                            }
                        ),
                    ),
                }
            )
        )
        out += header
        out += compressed
        uncompressed_total += len(header) + len(page)
        done += n
    a, b = col.value_at(row), col.value_at(row + max(rows - 1, 0))
    meta = TStruct(
        {
            1: (T_I32, _TYPE_IDS[col.physical]),
            2: (T_LIST, TList(T_I32, [_ENC_DELTA])),
            3: (T_LIST, TList(T_BINARY, [col.name.encode()])),
            4: (T_I32, _CODEC_SNAPPY),
            5: _i64(rows),
            6: _i64(uncompressed_total),
            7: _i64(len(out)),
            9: _i64(pos),
            12: (T_STRUCT, _statistics(fmt, min(a, b), max(a, b))),
        }
    )
    return bytes(out), TStruct({2: _i64(pos), 3: (T_STRUCT, meta)})


def _chunk_range(chunk: TStruct) -> tuple[int, int]:
    """Where a column chunk's pages lie in its file: (start, length)."""
    meta = chunk.struct_value(3)
    if meta is None or chunk.get_value(1) is not None:
        raise EngineInternalError("Parquet column chunk without inline metadata")
    data = meta.int_value(9)
    dictionary = meta.get_value(11)
    start = dictionary if isinstance(dictionary, int) and 0 < dictionary < data else data
    return start, meta.int_value(7)


def _shifted_chunk(chunk: TStruct, start: int, shift: int) -> TStruct:
    """``chunk`` (starting at ``start``) moved by ``shift`` bytes."""
    meta = chunk.struct_value(3)
    assert meta is not None  # checked by _chunk_range
    new_meta = meta.copy()
    for fid in (9, 10, 11):  # data, index and dictionary page offsets
        value = meta.get_value(fid)
        if isinstance(value, int) and value > 0:
            new_meta[fid] = _i64(value + shift)
    for fid in (14, 15):  # bloom filter: not copied
        new_meta.pop(fid, None)
    return TStruct({2: _i64(start + shift), 3: (T_STRUCT, new_meta)})


def _copy(src: int, dst: int, offset: int, length: int) -> None:
    """Append ``length`` bytes of ``src`` from ``offset`` to ``dst`` (in-kernel if possible)."""
    end = offset + length
    while offset < end:
        try:
            n = os.copy_file_range(src, dst, end - offset, offset)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            n = 0
        if n == 0:
            chunk = os.pread(src, min(end - offset, 1 << 20), offset)
            if not chunk:
                raise EngineInternalError("Parquet part file shorter than its footer says")
            os.write(dst, chunk)
            n = len(chunk)
        offset += n


def merge_parts(
    parts: Sequence[Path],
    target: Path,
    columns: Sequence[SequenceColumn | int],
    *,
    spark_schema_json: str | None = None,
    root_name: str | None = None,
) -> int:
    """Write ``target`` from ``parts`` (in order) and return its number of rows.

    Args:
        parts: Parquet files with identical schemas, in the order their rows go out.
        target: the file to create (must not exist).
        columns: the output's top-level columns in order: an ``int`` copies that
            top-level field (by index, with all its leaf columns) of the parts, a
            `SequenceColumn` is synthesized.
        spark_schema_json: Spark row schema to record in the footer (else the parts').
        root_name: name of the schema's root element (else the parts').

    Raises:
        EngineInternalError: no parts, unreadable or differing parts, a column index out
            of range, or a sequence that overflows its type.
        OSError: if the target cannot be written.
    """
    if not parts:
        raise EngineInternalError("Spark wrote no part files")
    try:
        return _merge(parts, target, columns, spark_schema_json, root_name)
    except ThriftError as e:  # a footer whose fields have unexpected types
        raise EngineInternalError(f"bad Parquet footer in a part file: {e}") from None


def write_merged(
    target: str | os.PathLike[str],
    write_parts: Callable[[Path], Sequence[Path]],
    columns: Sequence[SequenceColumn | int],
    *,
    spark_schema_json: str | None = None,
    root_name: str | None = None,
) -> int:
    """Write the one file ``target`` from parts staged next to it; return its row count.

    ``write_parts`` gets a fresh staging directory beside ``target`` (same filesystem, so
    the final rename is atomic) and returns the part files it wrote there, in row order;
    they are joined by `merge_parts` and the result replaces ``target``. The staging
    directory is removed whatever happens, so a failed write leaves nothing behind.

    Raises:
        EngineInternalError: as `merge_parts`, or when a file cannot be written or moved.
    """
    target_path = Path(target)
    target_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = target_path.parent / f".odf-engine-{uuid.uuid4().hex}"
    try:
        parts = write_parts(tmp_dir)
        merged = tmp_dir / "merged.parquet"
        rows = merge_parts(
            parts, merged, columns, spark_schema_json=spark_schema_json, root_name=root_name
        )
        os.replace(merged, target_path)
        return rows
    except OSError as e:
        raise EngineInternalError(f"cannot write the output {target}: {e}") from None
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _merge(
    parts: Sequence[Path],
    target: Path,
    columns: Sequence[SequenceColumn | int],
    spark_schema_json: str | None,
    root_name: str | None = None,
) -> int:
    opened = [_open_part(p) for p in parts]
    first = opened[0]
    schema_bytes = encode_struct(TStruct({2: (T_LIST, TList(T_STRUCT, list(first.schema)))}))
    for part in opened[1:]:
        other = encode_struct(TStruct({2: (T_LIST, TList(T_STRUCT, list(part.schema)))}))
        if other != schema_bytes:
            raise EngineInternalError("Spark part files have different schemas")
    width = len(first.fields)
    total = 0
    for part in opened:
        total += part.meta.int_value(3)
    out_schema: list[object] = []
    out_orders: list[object] = []
    orders = first.meta.list_value(7)
    for col in columns:
        if isinstance(col, SequenceColumn):
            col.check(total)
            out_schema.append(_sequence_schema(col))
            out_orders.append(TStruct({1: (T_STRUCT, TStruct())}))  # TypeDefinedOrder
        elif 0 <= col < width:
            start, count, leaf, leaves = first.fields[col]
            out_schema.extend(first.schema[start : start + count])
            if orders is not None:
                out_orders.extend(orders.items[leaf : leaf + leaves])
        else:
            raise EngineInternalError(f"column index {col} out of range (parts have {width})")
    root = first.schema[0].copy()
    root[5] = (T_I32, len(columns))
    if root_name is not None:
        root[4] = (T_BINARY, root_name.encode())

    row_groups: list[object] = []
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, _MAGIC)
        pos = len(_MAGIC)
        row = 0
        for part in opened:
            src = os.open(part.path, os.O_RDONLY)
            try:
                pos, row = _copy_row_groups(part, columns, src, fd, pos, row, row_groups)
            finally:
                os.close(src)
        meta = TStruct(
            {
                1: first.meta.get(1, (T_I32, 1)),
                2: (T_LIST, TList(T_STRUCT, [root, *out_schema])),
                3: _i64(row),
                4: (T_LIST, TList(T_STRUCT, row_groups)),
            }
        )
        identity = list(columns) == list(range(width))
        kv = _key_values(first.meta, spark_schema_json, drop_arrow_schema=not identity)
        if kv.items:
            meta[5] = (T_LIST, kv)
        if 6 in first.meta:
            meta[6] = first.meta[6]
        if orders is not None:
            meta[7] = (T_LIST, TList(T_STRUCT, out_orders))
        footer = encode_struct(meta)
        os.write(fd, footer + len(footer).to_bytes(4, "little") + _MAGIC)
    except BaseException:
        os.close(fd)
        target.unlink(missing_ok=True)
        raise
    os.close(fd)
    return row


def _key_values(meta: TStruct, spark_schema_json: str | None, *, drop_arrow_schema: bool) -> TList:
    """The parts' footer metadata, with the Spark row schema replaced if given.

    An Arrow schema (written by pyarrow, not Spark) describes the parts' columns only,
    so it goes when the columns change.
    """
    items = meta.list_value(5)
    out = TList(T_STRUCT, [])
    dropped = set()
    if spark_schema_json is not None:
        dropped.add(SPARK_ROW_METADATA_KEY.encode())
    if drop_arrow_schema:
        dropped.add(ARROW_SCHEMA_KEY.encode())
    for kv in items.items if items is not None else []:
        if isinstance(kv, TStruct) and kv.get_value(1) not in dropped:
            out.items.append(kv)
    if spark_schema_json is not None:
        out.items.append(
            TStruct(
                {
                    1: (T_BINARY, SPARK_ROW_METADATA_KEY.encode()),
                    2: (T_BINARY, spark_schema_json.encode()),
                }
            )
        )
    return out


def _copy_row_groups(
    part: _Part,
    columns: Sequence[SequenceColumn | int],
    src: int,
    dst: int,
    pos: int,
    row: int,
    row_groups: list[object],
) -> tuple[int, int]:
    """Append ``part``'s row groups (synthesizing sequences); returns (pos, row) after."""
    groups = part.meta.list_value(4)
    for group in groups.items if groups is not None else []:
        if not isinstance(group, TStruct):
            raise EngineInternalError(f"{part.path.name}: bad row group")
        rows = group.int_value(3)
        if rows == 0:
            continue  # nothing to read; a sequence chunk cannot be empty
        chunks_list = group.list_value(1)
        chunks = [c for c in (chunks_list.items if chunks_list else []) if isinstance(c, TStruct)]
        start_pos = pos
        out_chunks: list[object] = []
        uncompressed = 0
        for col in columns:
            if isinstance(col, SequenceColumn):
                data, chunk = _sequence_chunk(col, row, rows, pos)
                os.write(dst, data)
                pos += len(data)
                out_chunks.append(chunk)
                meta = chunk.struct_value(3)
                uncompressed += meta.int_value(6) if meta else 0
                continue
            _, _, leaf, leaves = part.fields[col]
            if leaf + leaves > len(chunks):
                raise EngineInternalError(f"{part.path.name}: row group misses columns")
            for source in chunks[leaf : leaf + leaves]:
                src_start, length = _chunk_range(source)
                moved = _shifted_chunk(source, src_start, pos - src_start)
                _copy(src, dst, src_start, length)
                pos += length
                out_chunks.append(moved)
                meta = moved.struct_value(3)
                uncompressed += meta.int_value(6) if meta else 0
        row_groups.append(
            TStruct(
                {
                    1: (T_LIST, TList(T_STRUCT, out_chunks)),
                    2: _i64(uncompressed),
                    3: _i64(rows),
                    5: _i64(start_pos),
                    6: _i64(pos - start_pos),
                    7: (T_I16, len(row_groups)),
                }
            )
        )
        row += rows
    return pos, row
