"""Nanosecond-precision UTC timestamps, as stored in ODF blocks.

ODF keeps instants in a 16-byte flatbuffers struct ``Timestamp`` (year int32, day of
year uint16 with Jan 1 = 1, seconds from midnight uint32, nanoseconds uint32) and in
YAML as RFC 3339 text. `Timestamp` is the single in-memory representation: an integer
count of nanoseconds since the Unix epoch. Calendar arithmetic is done with integers
(proleptic Gregorian, any year chrono can represent), so values outside the range of
`datetime.datetime` still round-trip through blocks.
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from typing import Final

from fbs.errors import InvalidTimestamp
from fbs.value import OrderedValue, set_field

NANOS_PER_SECOND: Final = 1_000_000_000
SECONDS_PER_DAY: Final = 86_400
NANOS_PER_DAY: Final = NANOS_PER_SECOND * SECONDS_PER_DAY

#: Year range accepted in the struct form (the range of chrono's ``NaiveDate``, which
#: kamu uses to read blocks; anything outside it cannot come from a kamu node).
MIN_YEAR: Final = -262_143
MAX_YEAR: Final = 262_142

#: Longest RFC 3339 string accepted (defence against huge inputs).
MAX_RFC3339_LEN: Final = 64

_RFC3339_RE: Final = re.compile(
    r"(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})[Tt ]"
    r"(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})(?:\.(?P<frac>\d{1,9}))?"
    r"(?P<tz>[Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)

_EPOCH_DATETIME: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in_year(year: int) -> int:
    return 366 if _is_leap(year) else 365


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if _is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y = year - (1 if month <= 2 else 0)
    era = y // 400
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _civil_year_from_days(days: int) -> int:
    """The proleptic Gregorian year containing day ``days`` since the epoch."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0)


class Timestamp(OrderedValue):
    """A UTC instant with nanosecond precision.

    Attributes:
        nanos: nanoseconds since 1970-01-01T00:00:00Z (negative before the epoch).
    """

    __slots__ = ("nanos",)

    nanos: int

    def __init__(self, nanos: int) -> None:
        if type(nanos) is not int:
            raise InvalidTimestamp(f"Timestamp.nanos must be an int, got {nanos!r}")
        set_field(self, "nanos", nanos)

    # -- constructors -------------------------------------------------------------

    @classmethod
    def now(cls) -> Timestamp:
        """The current time (wall clock)."""
        return cls(time.time_ns())

    @classmethod
    def from_datetime(cls, value: _dt.datetime) -> Timestamp:
        """Convert an aware `datetime` (any zone) to UTC.

        Raises:
            InvalidTimestamp: for a naive datetime (its zone would be a guess).
        """
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidTimestamp("naive datetime: attach a timezone (e.g. UTC) first")
        delta = value - _EPOCH_DATETIME
        seconds = delta.days * SECONDS_PER_DAY + delta.seconds
        return cls(seconds * NANOS_PER_SECOND + delta.microseconds * 1000)

    @classmethod
    def from_ymd_hms(
        cls,
        year: int,
        month: int,
        day: int,
        hour: int = 0,
        minute: int = 0,
        second: int = 0,
        nanosecond: int = 0,
    ) -> Timestamp:
        """Build a UTC timestamp from calendar fields (validated).

        Raises:
            InvalidTimestamp: for out-of-range fields.
        """
        if not (MIN_YEAR <= year <= MAX_YEAR) or not (1 <= month <= 12):
            raise InvalidTimestamp(f"invalid year/month {year}-{month}")
        if not (1 <= day <= _days_in_month(year, month)):
            raise InvalidTimestamp(f"invalid day {year}-{month}-{day}")
        if not (0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60):
            raise InvalidTimestamp(f"invalid time {hour}:{minute}:{second}")
        if not (0 <= nanosecond < NANOS_PER_SECOND):
            raise InvalidTimestamp(f"invalid nanosecond {nanosecond}")
        days = _days_from_civil(year, month, day)
        secs = days * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second
        return cls(secs * NANOS_PER_SECOND + nanosecond)

    @classmethod
    def parse_rfc3339(cls, text: str) -> Timestamp:
        """Parse RFC 3339 text (``Z`` or a numeric offset), converting to UTC.

        Leap seconds (``:60``) and more than 9 fractional digits are refused.

        Raises:
            InvalidTimestamp: if ``text`` is not a valid RFC 3339 date-time.
        """
        if not isinstance(text, str) or len(text) > MAX_RFC3339_LEN:
            raise InvalidTimestamp(f"not an RFC 3339 timestamp: {text!r}")
        m = _RFC3339_RE.fullmatch(text)
        if m is None:
            raise InvalidTimestamp(f"not an RFC 3339 timestamp: {text!r}")
        frac = m["frac"] or ""
        nanos = int(frac.ljust(9, "0")) if frac else 0
        ts = cls.from_ymd_hms(
            int(m["year"]),
            int(m["month"]),
            int(m["day"]),
            int(m["hour"]),
            int(m["minute"]),
            int(m["second"]),
            nanos,
        )
        tz = m["tz"]
        if tz in ("Z", "z"):
            return ts
        hours, minutes = int(tz[1:3]), int(tz[4:6])
        if hours > 23 or minutes > 59:
            raise InvalidTimestamp(f"invalid UTC offset in {text!r}")
        offset = (hours * 3600 + minutes * 60) * NANOS_PER_SECOND
        return cls(ts.nanos - offset if tz[0] == "+" else ts.nanos + offset)

    @classmethod
    def from_struct_parts(
        cls, year: int, ordinal: int, seconds_from_midnight: int, nanoseconds: int
    ) -> Timestamp:
        """Build from the flatbuffers struct fields.

        Raises:
            InvalidTimestamp: for an impossible combination (e.g. ordinal 366 in a
                common year, seconds >= 86400, nanoseconds >= 1e9).
        """
        if not (MIN_YEAR <= year <= MAX_YEAR):
            raise InvalidTimestamp(f"year {year} out of range")
        if not (1 <= ordinal <= _days_in_year(year)):
            raise InvalidTimestamp(f"day of year {ordinal} invalid for {year}")
        if not (0 <= seconds_from_midnight < SECONDS_PER_DAY):
            raise InvalidTimestamp(f"seconds from midnight {seconds_from_midnight} invalid")
        if not (0 <= nanoseconds < NANOS_PER_SECOND):
            raise InvalidTimestamp(f"nanoseconds {nanoseconds} invalid")
        days = _days_from_civil(year, 1, 1) + ordinal - 1
        secs = days * SECONDS_PER_DAY + seconds_from_midnight
        return cls(secs * NANOS_PER_SECOND + nanoseconds)

    # -- renderings ---------------------------------------------------------------

    def to_struct_parts(self) -> tuple[int, int, int, int]:
        """``(year, ordinal, seconds_from_midnight, nanoseconds)`` for the flatbuffers struct.

        Raises:
            InvalidTimestamp: if the year is outside [`MIN_YEAR`, `MAX_YEAR`].
        """
        days, rem = divmod(self.nanos, NANOS_PER_DAY)
        secs, nanos = divmod(rem, NANOS_PER_SECOND)
        year = _civil_year_from_days(days)
        if not (MIN_YEAR <= year <= MAX_YEAR):
            raise InvalidTimestamp(f"year {year} cannot be stored in a block")
        ordinal = days - _days_from_civil(year, 1, 1) + 1
        return year, ordinal, secs, nanos

    def to_datetime(self) -> _dt.datetime:
        """An aware UTC `datetime` (microsecond precision: nanoseconds are truncated).

        Raises:
            InvalidTimestamp: if the instant is outside `datetime`'s year range 1..9999.
        """
        micros = self.nanos // 1000
        try:
            return _EPOCH_DATETIME + _dt.timedelta(microseconds=micros)
        except OverflowError:
            raise InvalidTimestamp(f"{self.nanos} ns is outside datetime's range") from None

    def to_rfc3339(self) -> str:
        """RFC 3339 in UTC with ``Z``; fractional seconds in groups of 3/6/9 digits, only if needed.

        Matches chrono's ``SecondsFormat::AutoSi`` output used by kamu's YAML.
        """
        days, rem = divmod(self.nanos, NANOS_PER_DAY)
        secs, nanos = divmod(rem, NANOS_PER_SECOND)
        year = _civil_year_from_days(days)
        doy = days - _days_from_civil(year, 1, 1)
        month = 1
        while doy >= _days_in_month(year, month):
            doy -= _days_in_month(year, month)
            month += 1
        day = doy + 1
        ytext = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+05d}"
        hh, rest = divmod(secs, 3600)
        mm, ss = divmod(rest, 60)
        if nanos == 0:
            frac = ""
        elif nanos % 1_000_000 == 0:
            frac = f".{nanos // 1_000_000:03d}"
        elif nanos % 1000 == 0:
            frac = f".{nanos // 1000:06d}"
        else:
            frac = f".{nanos:09d}"
        return f"{ytext}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}{frac}Z"

    def __str__(self) -> str:
        return self.to_rfc3339()

    def __repr__(self) -> str:
        return f"Timestamp({self.to_rfc3339()!r})"
