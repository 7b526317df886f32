"""ISO 8601 timestamp text → timestamp(ms, "UTC"): the vectorized paths keep the semantics."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.model import ReadStepCsv
from node.ingest.errors import ReadError
from node.ingest.read import read_batches
from node.ingest.readers._common import TIMESTAMP_TYPE, convert_array

UTC = dt.UTC


def reference(values: list[str | None]) -> list[dt.datetime | None]:
    """The documented semantics, value by value: zone-less = UTC, ms truncation."""
    out: list[dt.datetime | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        parsed = dt.datetime.fromisoformat(v.replace("z", "Z"))
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        out.append(parsed.replace(microsecond=parsed.microsecond // 1000 * 1000))
    return out


def convert(values: list[str | None]) -> pa.Array:
    result = convert_array(pa.array(values, pa.string()), TIMESTAMP_TYPE)
    assert result.type == TIMESTAMP_TYPE
    return result


@pytest.mark.parametrize(
    "values",
    [
        ["2020-01-01T10:00:00Z", "2020-01-01T10:00:00.123+01:00", None],
        ["2020-01-01 10:00:00", "2020-01-01T10:00:00.999999", None, "2020-01-01"],
        # first and last disagree: a mixed column
        ["2020-01-01T10:00:00Z", "2020-01-01 11:00:00", "2020-01-01T12:00:00-05:30"],
        # first and last agree, a value in between does not
        ["2020-01-01T10:00:00Z", "2020-01-01 11:00:00", "2020-01-01T12:00:00+0100"],
        ["2020-01-01 11:00:00", "2020-01-01T10:00:00Z", "2020-01-01 12:00:00"],
        # dates mixed with zoned values (value-by-value path)
        ["2020-01-01", "2020-01-02T03:04:05+02:00"],
        ["2020-01-01T10:00:00z", "2020-01-01T10:00:00+01"],
        [None, None],
        [],
    ],
)
def test_iso_text_semantics(values: list[str | None]) -> None:
    assert convert(values).to_pylist() == reference(values)


@pytest.mark.parametrize("zone", ["Z", "", "+01:00"])
def test_sub_ms_digits_anywhere_in_a_long_column_are_truncated(zone: str) -> None:
    # A column is parsed straight to ms first: a value with sub-ms digits (first, middle
    # or only the last) must send it to the us parse, not fail it or round it.
    plain = [f"2024-03-01T00:00:{i % 60:02d}.{i % 1000:03d}{zone}" for i in range(3000)]
    for at in (0, 1500, 2999):
        column = list(plain)
        column[at] = f"2024-03-01T00:00:00.123987{zone}"
        assert convert(column).to_pylist() == reference(column)
    assert convert(plain).to_pylist() == reference(plain)


def test_mixed_column_large_enough_to_matter() -> None:
    values = ["2024-03-01T00:00:00Z", "2024-03-01 01:00:00", None, "2024-03-01T02:00:00+02:00"]
    column = values * 5000
    assert convert(column).to_pylist() == reference(column)


_when = st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)).map(
    lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)
)
_zone = st.sampled_from(["", "Z", "+00:00", "+01:00", "-05:30", "+0930"])
_sep = st.sampled_from(["T", " "])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.tuples(_when, _sep, _zone)), max_size=30))
def test_random_columns_match_the_reference(
    cells: list[tuple[dt.datetime, str, str] | None],
) -> None:
    values = [
        None if c is None else c[0].isoformat(sep=c[1], timespec="milliseconds") + c[2]
        for c in cells
    ]
    assert convert(values).to_pylist() == reference(values)


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("2020-01-01T00:00:00Z\nnope\n2020-01-01T00:00:00Z\n", 3),
        ("2020-01-01 00:00:00\n2020-01-01T00:00:00Z\n2020-13-01 00:00:00\n", 4),
    ],
)
def test_bad_value_is_located(tmp_path: Path, body: str, line: int) -> None:
    p = tmp_path / "t.csv"
    p.write_text("t\n" + body)
    with pytest.raises(ReadError) as info:
        list(read_batches(ReadStepCsv(header=True, ddl_schema=("t TIMESTAMP",)), p))
    assert (info.value.path, info.value.line, info.value.column) == (p, line, "t")


def test_bad_value_in_a_long_zoned_column_is_located(tmp_path: Path) -> None:
    rows = ["2021-06-01T00:00:00Z"] * 70_000
    rows[65_000] = "2021-06-01T00:00:00Q"
    p = tmp_path / "t.csv"
    p.write_text("t\n" + "\n".join(rows) + "\n")
    with pytest.raises(ReadError) as info:
        list(read_batches(ReadStepCsv(header=True, ddl_schema=("t TIMESTAMP",)), p))
    assert (info.value.line, info.value.column) == (65_002, "t")
