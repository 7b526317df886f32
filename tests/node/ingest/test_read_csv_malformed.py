"""Malformed CSV is refused with file, line and column; odd-but-valid is read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fbs.model.source import ReadStepCsv
from node.ingest.errors import ReadError
from node.ingest.read import read_batches


def rows(path: Path, step: ReadStepCsv) -> list[dict[str, object]]:
    out: list[dict[str, object]] = pa.Table.from_batches(list(read_batches(step, path))).to_pylist()
    return out


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    return path


TEXT = ReadStepCsv(header=True, ddl_schema=("a STRING", "b STRING"))


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b'a,b\n1,"x\n2,y\n', "line 2, column 'b'"),
        (b'a,b\n1,x\n2,"y', "line 3, column 'b'"),
        (b'a,b\n1,"x""\n', "line 2, column 'b'"),
        (b'a,b\n1,"x\\"\n', "line 2, column 'b'"),  # escaped closing quote
    ],
)
def test_unterminated_quote(tmp_path: Path, data: bytes, where: str) -> None:
    with pytest.raises(ReadError, match="unterminated quoted field") as e:
        rows(write(tmp_path, data), TEXT)
    assert where in str(e.value)


def test_unterminated_quote_with_another_quote_char(tmp_path: Path) -> None:
    step = ReadStepCsv(header=True, quote="'", ddl_schema=("a STRING", "b STRING"))
    with pytest.raises(ReadError, match="line 2, column 'b'"):
        rows(write(tmp_path, b"a,b\n1,'x\n"), step)
    assert rows(write(tmp_path, b'a,b\n1,"x\n'), step) == [{"a": "1", "b": '"x'}]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'a,b\n1,x"y\n', [{"a": "1", "b": 'x"y'}]),  # a quote inside an unquoted field
        (b'a,b\n1,"x\ny"\n2,"z"', [{"a": "1", "b": "x\ny"}, {"a": "2", "b": "z"}]),
        (b'a,b\n1,"say ""hi"""\n', [{"a": "1", "b": 'say "hi"'}]),
        (b"a,b\n1,2\n", [{"a": "1", "b": "2"}]),  # no quote at all: no second pass
    ],
)
def test_valid_quoting_is_read(tmp_path: Path, data: bytes, expected: list[object]) -> None:
    assert rows(write(tmp_path, data), TEXT) == expected


def test_quoting_disabled(tmp_path: Path) -> None:
    step = ReadStepCsv(header=True, quote="", ddl_schema=("a STRING", "b STRING"))
    assert rows(write(tmp_path, b'a,b\n1,"x\n'), step) == [{"a": "1", "b": '"x'}]


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"a,b\n1,M\xfcnchen\n", "line 2, column 'b': byte 0xfc"),
        (b"a,b\n1,ok\n2,ok\n\xff,3\n", "line 4, column 'a': byte 0xff"),
        (b"a,\xfcb\n1,2\n", "line 1: byte 0xfc"),
        (b"\xfe\xff\x00garbage", "line 1: byte 0xfe"),
    ],
)
def test_undecodable_bytes(tmp_path: Path, data: bytes, where: str) -> None:
    with pytest.raises(ReadError, match="not valid utf8") as e:
        rows(write(tmp_path, data), TEXT)
    assert where in str(e.value)


def test_undecodable_bytes_in_a_typed_column(tmp_path: Path) -> None:
    step = ReadStepCsv(header=True, ddl_schema=("a BIGINT", "b STRING"))
    with pytest.raises(ReadError, match="line 2, column 'a': byte 0xfc"):
        rows(write(tmp_path, b"a,b\n\xfc,x\n"), step)


def test_declared_encoding_reads_latin1(tmp_path: Path) -> None:
    step = ReadStepCsv(header=True, encoding="latin1", ddl_schema=("a STRING", "b STRING"))
    assert rows(write(tmp_path, b"a,b\n1,M\xfcnchen\n"), step) == [{"a": "1", "b": "München"}]


@pytest.mark.parametrize("data", [b"", b"\n\n", b"a,b\n"])
def test_empty_inputs_have_no_records(tmp_path: Path, data: bytes) -> None:
    assert list(read_batches(TEXT, write(tmp_path, data))) == []
