"""The end-of-file probe: the fast unterminated-quote check agrees with the exact one.

`read_csv` reads a file holding the quote character followed by a probe record of nulls,
instead of re-scanning the file with Python's csv reader. For any input, the rows it
returns or the error it raises must be those of the Python-csv path (`_parse` with the
slow check), except where Python's csv reader and pyarrow disagree on whether a quote is
still open at the end (an escape character before a carriage return, say): there the
probe follows pyarrow, which is what reads the data, and an independent sentinel read
confirms pyarrow closed every quote.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fbs.model.source import ReadStepCsv
from node.ingest.errors import ReadError
from node.ingest.read import read_schema
from node.ingest.readers import csv as csv_reader
from node.ingest.readers._common import Conformer

TEXT = ReadStepCsv(header=True, ddl_schema=("a STRING", "b STRING"))
TYPED = ReadStepCsv(header=True, ddl_schema=("a BIGINT", "b STRING"))
NO_SCHEMA = ReadStepCsv(header=True)
ESCAPE_IS_QUOTE = ReadStepCsv(header=True, escape='"', ddl_schema=("a STRING", "b STRING"))


def outcome(step: ReadStepCsv, path: Path) -> object:
    """Rows read by `read_csv` (the probe where it applies), or the error text."""
    try:
        batches = list(csv_reader.read_csv(step, path, read_schema(step), 1 << 16))
    except ReadError as e:
        return str(e)
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def exact_outcome(step: ReadStepCsv, path: Path) -> object:
    """The same read with the exact (Python csv) unterminated-quote check, no probe."""
    dialect = csv_reader._Dialect(step)
    schema = read_schema(step)
    try:
        names = csv_reader._header_names(path, dialect)
        if names is None:
            return []
        assert schema is not None
        types = {f.name: f.type for f in schema}
        read_names = names if set(types) <= set(names) else list(types)
        conformer = Conformer(schema, missing_as_null=False)
        batches = list(
            csv_reader._parse(
                csv_reader._Job(path, dialect, read_names, 1, types, conformer, 1 << 16), True
            )
        )
    except ReadError as e:
        return str(e)
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def pyarrow_ends_outside_quotes(path: Path, step: ReadStepCsv) -> bool:
    """An oracle independent of the probe: a distinctive record appended comes back whole."""
    sentinel = tmp = path.with_suffix(".sentinel")
    tmp.write_bytes(path.read_bytes() + b"\nZZ,ZZ\n")
    try:
        dialect = csv_reader._Dialect(step)
        table = pa.csv.read_csv(
            sentinel,
            read_options=pa.csv.ReadOptions(column_names=["a", "b"], skip_rows=1),
            parse_options=dialect.parse_options(),
            convert_options=pa.csv.ConvertOptions(
                column_types={"a": pa.string(), "b": pa.string()}
            ),
        )
    except pa.ArrowInvalid:
        return False
    return bool(table.num_rows) and table.slice(table.num_rows - 1).to_pylist() == [
        {"a": "ZZ", "b": "ZZ"}
    ]


def plain_rows(step: ReadStepCsv, path: Path) -> object:
    """What pyarrow reads, without any unterminated-quote check."""
    dialect = csv_reader._Dialect(step)
    schema = read_schema(step)
    assert schema is not None
    types = {f.name: f.type for f in schema}
    conformer = Conformer(schema, missing_as_null=False)
    batches = list(
        csv_reader._parse(
            csv_reader._Job(path, dialect, ["a", "b"], 1, types, conformer, 1 << 16), False
        )
    )
    return pa.Table.from_batches(batches).to_pylist() if batches else []


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    body=st.text(alphabet='ab1,"\\\n\r', max_size=24),
    step=st.sampled_from([TEXT, TYPED, ESCAPE_IS_QUOTE]),
)
def test_probe_agrees_with_the_exact_check(tmp_path: Path, body: str, step: ReadStepCsv) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(("a,b\n" + body).encode())
    fast, exact = outcome(step, path), exact_outcome(step, path)
    if fast != exact:
        # Python's csv reader sees an open quote where pyarrow does not.
        assert isinstance(exact, str) and "unterminated quoted field" in exact
        assert pyarrow_ends_outside_quotes(path, step)
        assert fast == plain_rows(step, path)


@pytest.mark.parametrize(
    "data",
    [
        b'a,b\n1,"x"\n2,"y"\n',  # closed quotes: the probe row is read back and dropped
        b'a,b\n1,"x"\n2,"y"',  # no final newline
        b'a,b\n1,"x\ny"\n',  # a value spanning lines
        b'a,b\n1,"x\n',  # unterminated: the probe is swallowed
        b'a,b\n1,"5',  # unterminated in the last column, a value that would convert
        b"a,b\n1,x\\",  # ends with the escape character: no probe
        b'a,b\n1,"x\\"\n',  # escaped closing quote
        b'a,b\n"1",2\r\n',
        b"a,b\n",  # header only
        b"a,b\n,\n",  # a row of nulls last: not mistaken for the probe
    ],
)
@pytest.mark.parametrize("step", [TEXT, TYPED])
def test_probe_cases(tmp_path: Path, data: bytes, step: ReadStepCsv) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    assert outcome(step, path) == exact_outcome(step, path)


def test_a_last_row_of_nulls_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b'a,b\n"1",x\n,\n')
    assert outcome(TEXT, path) == [{"a": "1", "b": "x"}, {"a": None, "b": None}]


def test_the_probe_is_used_for_a_quoted_file(tmp_path: Path) -> None:
    """A well-formed quoted file is read by the probed parse alone (no fallback)."""
    path = tmp_path / "in.csv"
    path.write_bytes(b'a,b\n"1","x"\n"2","y"\n')
    dialect = csv_reader._Dialect(TEXT)
    tail = csv_reader._probe_tail(path, dialect, ["a", "b"], {"a": pa.string(), "b": pa.string()})
    assert tail == b"\n,\n"
    conformer = Conformer(read_schema(TEXT), missing_as_null=False)
    batches = list(
        csv_reader._parse_probed(
            csv_reader._Job(
                path, dialect, ["a", "b"], 1, {"a": pa.string(), "b": pa.string()}, conformer, 10
            ),
            tail,
        )
    )
    assert pa.Table.from_batches(batches).to_pylist() == [
        {"a": "1", "b": "x"},
        {"a": "2", "b": "y"},
    ]


def test_the_probe_is_not_used_when_columns_are_left_out(tmp_path: Path) -> None:
    """An unconverted column could swallow the probe unseen: the exact check runs instead."""
    path = tmp_path / "in.csv"
    path.write_bytes(b'a,b,c\n1,x,"open\n')
    dialect = csv_reader._Dialect(TEXT)
    assert csv_reader._probe_tail(path, dialect, ["a", "b", "c"], {"a": pa.string()}) is None
    with pytest.raises(ReadError, match="unterminated quoted field"):
        list(csv_reader.read_csv(TEXT, path, read_schema(TEXT), 10))


def test_no_schema_file(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b'a,b\n"1",x\n')
    assert outcome(NO_SCHEMA, path) == [{"a": "1", "b": "x"}]
    path.write_bytes(b'a,b\n1,"x\n')
    assert "unterminated quoted field" in str(outcome(NO_SCHEMA, path))
