"""CSV read step: options, schemas, typed errors naming file/line/column."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from fbs.model import ReadStepCsv
from node.ingest.errors import ReadError, SchemaError, UnsupportedFormat
from node.ingest.read import read_batches


def _write(tmp_path: Path, text: str, name: str = "in.csv", encoding: str = "utf-8") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode(encoding))
    return p


def _read(step: ReadStepCsv, path: Path, **kw: int) -> pa.Table:
    batches = list(read_batches(step, path, **kw))
    return pa.Table.from_batches(batches) if batches else pa.table({})


def test_defaults_no_header_all_strings(tmp_path: Path) -> None:
    p = _write(tmp_path, "a,1\nb,\n")
    t = _read(ReadStepCsv(), p)
    assert t.schema.names == ["_c0", "_c1"]
    assert t.schema.types == [pa.string(), pa.string()]
    assert t.to_pylist() == [{"_c0": "a", "_c1": "1"}, {"_c0": "b", "_c1": None}]


def test_header_and_infer(tmp_path: Path) -> None:
    p = _write(tmp_path, "name,n,x\nA,1,1.5\nB,2,2.5\n")
    t = _read(ReadStepCsv(header=True, infer_schema=True), p)
    assert t.schema.types == [pa.string(), pa.int64(), pa.float64()]
    assert t.column("n").to_pylist() == [1, 2]


def test_separator_quote_escape_null_encoding(tmp_path: Path) -> None:
    text = "k;v\n'a;b';NA\n'it\\'s';é\n"
    p = _write(tmp_path, text, encoding="latin-1")
    step = ReadStepCsv(
        header=True, separator=";", quote="'", escape="\\", null_value="NA", encoding="latin1"
    )
    assert _read(step, p).to_pylist() == [{"k": "a;b", "v": None}, {"k": "it's", "v": "é"}]


def test_doubled_quotes_and_newlines_in_values(tmp_path: Path) -> None:
    p = _write(tmp_path, 'a,b\n"x ""q""","line1\nline2"\n')
    assert _read(ReadStepCsv(header=True), p).to_pylist() == [{"a": 'x "q"', "b": "line1\nline2"}]


def test_ddl_schema_by_header_name_any_order(tmp_path: Path) -> None:
    p = _write(tmp_path, "extra,pop,city\n1,10,A\n2,20,B\n")
    step = ReadStepCsv(header=True, ddl_schema=("city STRING", "pop BIGINT"))
    t = _read(step, p)
    assert t.schema == pa.schema([("city", pa.string()), ("pop", pa.int64())])
    assert t.to_pylist() == [{"city": "A", "pop": 10}, {"city": "B", "pop": 20}]


def test_ddl_schema_positional_without_header(tmp_path: Path) -> None:
    p = _write(tmp_path, "A,10\n")
    t = _read(ReadStepCsv(ddl_schema=("city STRING", "pop INT")), p)
    assert t.to_pylist() == [{"city": "A", "pop": 10}]


def test_timestamps_default_iso_and_mixed_zones(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "t\n2020-01-01 10:00:00\n2020-01-01T10:00:00+01:00\n2020-01-01T10:00:00.123Z\n"
    )
    t = _read(ReadStepCsv(header=True, ddl_schema=("t TIMESTAMP",)), p)
    assert t.schema.field("t").type == pa.timestamp("ms", "UTC")
    utc = dt.UTC
    assert t.column("t").to_pylist() == [
        dt.datetime(2020, 1, 1, 10, tzinfo=utc),
        dt.datetime(2020, 1, 1, 9, tzinfo=utc),
        dt.datetime(2020, 1, 1, 10, 0, 0, 123000, tzinfo=utc),
    ]


def test_spark_style_formats(tmp_path: Path) -> None:
    p = _write(tmp_path, "t,d\n02/01/2020 13:05,31.12.2019\n")
    step = ReadStepCsv(
        header=True,
        ddl_schema=("t TIMESTAMP", "d DATE"),
        timestamp_format="dd/MM/yyyy HH:mm",
        date_format="dd.MM.yyyy",
    )
    row = _read(step, p).to_pylist()[0]
    assert row["t"] == dt.datetime(2020, 1, 2, 13, 5, tzinfo=dt.UTC)
    assert row["d"] == dt.date(2019, 12, 31)


def test_fractional_seconds_format(tmp_path: Path) -> None:
    p = _write(tmp_path, "t\n2020-01-01 00:00:00.250\n")
    step = ReadStepCsv(
        header=True, ddl_schema=("t TIMESTAMP",), timestamp_format="yyyy-MM-dd HH:mm:ss.SSS"
    )
    assert _read(step, p).column("t")[0].as_py().microsecond == 250000


def test_bad_value_names_file_line_column(tmp_path: Path) -> None:
    p = _write(tmp_path, "city,pop\nA,1\nB,x\n")
    step = ReadStepCsv(header=True, ddl_schema=("city STRING", "pop BIGINT"))
    with pytest.raises(ReadError) as info:
        _read(step, p)
    e = info.value
    assert (e.path, e.line, e.column) == (p, 3, "pop")
    assert "'x'" in str(e) and str(p) in str(e)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('city,pop\n"A\nmulti\nline",1\nB,2\n"C",x\n', 6),
        ('city,pop\n\n"A\n\nx",1\n\nB,y\n', 7),
    ],
)
def test_bad_value_after_multiline_field_names_physical_line(
    tmp_path: Path, text: str, line: int
) -> None:
    p = _write(tmp_path, text)
    step = ReadStepCsv(header=True, ddl_schema=("city STRING", "pop BIGINT"))
    with pytest.raises(ReadError) as info:
        _read(step, p)
    assert (info.value.line, info.value.column) == (line, "pop")


def test_bad_value_in_later_block_is_located(tmp_path: Path) -> None:
    rows = "".join(f"{i},{i}\n" for i in range(300_000))
    p = _write(tmp_path, "a,b\n" + rows + "7,oops\n")
    step = ReadStepCsv(header=True, ddl_schema=("a INT", "b BIGINT"))
    with pytest.raises(ReadError) as info:
        for _ in read_batches(step, p):
            pass
    assert info.value.line == 300_002
    assert info.value.column == "b"


def test_bad_timestamp_is_located(tmp_path: Path) -> None:
    p = _write(tmp_path, "t\n2020-01-01\nnot a time\n")
    with pytest.raises(ReadError) as info:
        _read(ReadStepCsv(header=True, ddl_schema=("t TIMESTAMP",)), p)
    assert (info.value.line, info.value.column) == (3, "t")


def test_malformed_row_names_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "a,b\n1,2\n3\n4,5\n")
    with pytest.raises(ReadError) as info:
        _read(ReadStepCsv(header=True), p)
    assert info.value.line == 3
    assert "expected 2 fields" in str(info.value)


def test_missing_column_in_header(tmp_path: Path) -> None:
    p = _write(tmp_path, "city\nA\n")
    with pytest.raises(ReadError, match="missing \\['pop'\\]"):
        _read(ReadStepCsv(header=True, ddl_schema=("city STRING", "pop INT")), p)


def test_not_null_violation(tmp_path: Path) -> None:
    p = _write(tmp_path, "a\n1\n\n2\n,\n")
    p = _write(tmp_path, "a,b\n1,x\n,y\n")
    with pytest.raises(ReadError) as info:
        _read(ReadStepCsv(header=True, ddl_schema=("a INT NOT NULL", "b STRING")), p)
    assert info.value.column == "a" and info.value.line == 3


def test_option_errors(tmp_path: Path) -> None:
    p = _write(tmp_path, "a\n")
    with pytest.raises(UnsupportedFormat):
        _read(ReadStepCsv(separator="::"), p)
    with pytest.raises(SchemaError):
        _read(ReadStepCsv(encoding="no-such-codec"), p)
    with pytest.raises(SchemaError):
        _read(ReadStepCsv(ddl_schema=("a BOGUS",)), p)


def test_empty_file_and_missing_file(tmp_path: Path) -> None:
    assert list(read_batches(ReadStepCsv(header=True), _write(tmp_path, ""))) == []
    with pytest.raises(ReadError, match="no such file"):
        list(read_batches(ReadStepCsv(), tmp_path / "nope.csv"))


def test_batches_are_bounded(tmp_path: Path) -> None:
    p = _write(tmp_path, "".join(f"{i}\n" for i in range(1000)))
    batches = list(read_batches(ReadStepCsv(ddl_schema=("n INT",)), p, batch_rows=64))
    assert max(b.num_rows for b in batches) <= 64
    assert sum(b.num_rows for b in batches) == 1000
    assert pa.Table.from_batches(batches).column("n").to_pylist() == list(range(1000))
