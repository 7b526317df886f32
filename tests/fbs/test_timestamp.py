"""Timestamp: calendar conversions, RFC 3339 text, flatbuffers struct parts."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.errors import InvalidTimestamp
from fbs.timestamp import MAX_YEAR, MIN_YEAR, NANOS_PER_SECOND, Timestamp

# Nanosecond range covering chrono's whole representable year range.
_MIN_NANOS = Timestamp.from_ymd_hms(MIN_YEAR, 1, 1).nanos
_MAX_NANOS = Timestamp.from_ymd_hms(MAX_YEAR, 12, 31, 23, 59, 59, NANOS_PER_SECOND - 1).nanos


def test_struct_parts_of_known_instants() -> None:
    # Values from docs §1.1 (kamu byte dumps).
    assert Timestamp.parse_rfc3339("2020-01-01T12:00:00Z").to_struct_parts() == (2020, 1, 43200, 0)
    assert Timestamp.parse_rfc3339("2050-01-01T12:00:00Z").to_struct_parts() == (2050, 1, 43200, 0)
    assert Timestamp(0).to_struct_parts() == (1970, 1, 0, 0)
    assert Timestamp(-1).to_struct_parts() == (1969, 365, 86399, 999_999_999)
    assert Timestamp.from_ymd_hms(2024, 12, 31).to_struct_parts() == (2024, 366, 0, 0)


@settings(max_examples=300)
@given(st.integers(_MIN_NANOS, _MAX_NANOS))
def test_struct_parts_round_trip(nanos: int) -> None:
    ts = Timestamp(nanos)
    assert Timestamp.from_struct_parts(*ts.to_struct_parts()) == ts


@settings(max_examples=300)
@given(st.datetimes(timezones=st.just(dt.UTC)))
def test_matches_datetime(value: dt.datetime) -> None:
    ts = Timestamp.from_datetime(value)
    assert ts.to_datetime() == value
    year, ordinal, secs, nanos = ts.to_struct_parts()
    assert (year, ordinal) == (value.year, value.timetuple().tm_yday)
    assert secs == value.hour * 3600 + value.minute * 60 + value.second
    assert nanos == value.microsecond * 1000
    assert Timestamp.parse_rfc3339(value.isoformat()) == ts


@settings(max_examples=300)
@given(st.integers(_MIN_NANOS, _MAX_NANOS))
def test_rfc3339_round_trip(nanos: int) -> None:
    ts = Timestamp(nanos)
    text = ts.to_rfc3339()
    assert text.endswith("Z")
    if Timestamp.from_ymd_hms(0, 1, 1).nanos <= nanos < Timestamp.from_ymd_hms(9999, 12, 31).nanos:
        assert Timestamp.parse_rfc3339(text) == ts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2020-01-01T12:00:00Z", "2020-01-01T12:00:00Z"),
        ("2020-01-01T12:00:00.5Z", "2020-01-01T12:00:00.500Z"),
        ("2020-01-01T12:00:00.000001Z", "2020-01-01T12:00:00.000001Z"),
        ("2020-01-01T12:00:00.123456789Z", "2020-01-01T12:00:00.123456789Z"),
        ("2020-01-01T12:00:00.1234Z", "2020-01-01T12:00:00.123400Z"),
        ("2020-01-01T14:30:00+02:30", "2020-01-01T12:00:00Z"),
        ("2020-01-01T00:00:00-01:00", "2020-01-01T01:00:00Z"),
        ("2019-12-31t23:00:00-13:00", "2020-01-01T12:00:00Z"),
        ("2020-02-29 12:00:00z", "2020-02-29T12:00:00Z"),
    ],
)
def test_rfc3339_rendering(text: str, expected: str) -> None:
    assert Timestamp.parse_rfc3339(text).to_rfc3339() == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2020-01-01",
        "2020-01-01T12:00:00",
        "2020-13-01T12:00:00Z",
        "2021-02-29T12:00:00Z",
        "2020-01-01T24:00:00Z",
        "2020-01-01T12:00:60Z",
        "2020-01-01T12:00:00.1234567891Z",
        "2020-01-01T12:00:00+24:00",
        "2020-01-01T12:00:00+0200",
        "２０２０-01-01T12:00:00Z",
        "x" * 1000,
    ],
)
def test_rfc3339_rejects(text: str) -> None:
    with pytest.raises(InvalidTimestamp):
        Timestamp.parse_rfc3339(text)


@pytest.mark.parametrize(
    "parts",
    [
        (2021, 366, 0, 0),
        (2020, 0, 0, 0),
        (2020, 367, 0, 0),
        (2020, 1, 86400, 0),
        (2020, 1, 0, NANOS_PER_SECOND),
        (MAX_YEAR + 1, 1, 0, 0),
        (MIN_YEAR - 1, 1, 0, 0),
    ],
)
def test_impossible_struct_parts(parts: tuple[int, int, int, int]) -> None:
    with pytest.raises(InvalidTimestamp):
        Timestamp.from_struct_parts(*parts)


def test_misc() -> None:
    with pytest.raises(InvalidTimestamp):
        Timestamp.from_datetime(dt.datetime(2020, 1, 1))  # naive
    with pytest.raises(InvalidTimestamp):
        Timestamp(1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidTimestamp):
        Timestamp(_MAX_NANOS + 10**18).to_struct_parts()
    with pytest.raises(InvalidTimestamp):
        Timestamp(_MAX_NANOS).to_datetime()
    a, b = Timestamp(1), Timestamp(2)
    assert a < b and max(a, b) is b
    assert Timestamp.now() > Timestamp.parse_rfc3339("2024-01-01T00:00:00Z")
    assert str(Timestamp(0)) == "1970-01-01T00:00:00Z"
    assert Timestamp.from_ymd_hms(-1, 12, 31).to_rfc3339() == "-0001-12-31T00:00:00Z"
    tz = dt.timezone(dt.timedelta(hours=5))
    assert Timestamp.from_datetime(
        dt.datetime(2020, 1, 1, 17, tzinfo=tz)
    ) == Timestamp.parse_rfc3339("2020-01-01T12:00:00Z")
