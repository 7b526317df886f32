"""Bounded JSON decoding of what peers send.

`json.loads` alone is not safe on hostile input: deep nesting escapes as
`RecursionError`, a 5,000-digit integer as `ValueError` (CPython's int-to-str guard),
and nothing limits the size of a single field. `load_peer_json` checks every named
limit of `JsonLimits` and reports any violation, like any syntax error, as one typed
error, `PeerJsonError` (a `PeerMisbehaved` that carries the `Offence` to charge).

The nesting depth is measured on the raw text *before* the decoder runs (strings
stripped, brackets counted), so no input can make the decoder recurse deeply.
Numbers are checked by their text length before they are converted.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

from p2p.errors import PeerMisbehaved
from p2p.peers import Offence

__all__ = [
    "DEFAULT_JSON_LIMITS",
    "JsonLimits",
    "PeerJsonError",
    "load_peer_json",
    "load_peer_object",
]


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """Named limits of `load_peer_json`; any violation raises `PeerJsonError`.

    Attributes:
        max_bytes: largest document (UTF-8 bytes).
        max_depth: deepest nesting of arrays and objects (a scalar has depth 0).
        max_number_chars: longest number, in characters (sign, digits, dot, exponent).
        max_string_chars: longest string, keys included.
        max_items: most values in the document (every array element and object member).
    """

    max_bytes: int = 64 * 2**10
    max_depth: int = 32
    max_number_chars: int = 40
    max_string_chars: int = 8 * 2**10
    max_items: int = 4096


#: The limits used when none are given.
DEFAULT_JSON_LIMITS: Final = JsonLimits()


class PeerJsonError(PeerMisbehaved):
    """A peer's JSON that does not decode or breaks a `JsonLimits` limit.

    Attributes:
        offence: what to charge the peer (`Offence.PROTOCOL_ERROR` for bad syntax,
            `Offence.LIMIT_EXCEEDED` for a limit).
    """

    def __init__(self, message: str, offence: Offence = Offence.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.offence = offence


# A JSON string literal (unrolled loop: no backtracking between alternatives).
_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET: Final = re.compile(r"[^\[\]{}]+")
_OPEN: Final = frozenset("[{")
_WALKED: Final = frozenset({str, list, dict})


def _too_deep(bare: str, max_depth: int) -> bool:
    """Whether ``bare`` (the text without its strings) nests arrays/objects deeper
    than ``max_depth`` (an unterminated string is the decoder's error to report)."""
    depth = 0
    for c in _NOT_BRACKET.sub("", bare):
        if c in _OPEN:
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


@functools.cache
def _number_runs(max_chars: int) -> re.Pattern[str]:
    """Runs of number characters longer than ``max_chars`` (outside strings, a run is
    one number token, or invalid JSON)."""
    return re.compile(f"[-+.0-9eE]{{{max_chars + 1},}}")


def _limit(what: str, message: str) -> PeerJsonError:
    return PeerJsonError(f"{what}: {message}", Offence.LIMIT_EXCEEDED)


def load_peer_json(
    data: bytes | bytearray | memoryview,
    limits: JsonLimits = DEFAULT_JSON_LIMITS,
    *,
    what: str = "peer JSON",
) -> Any:
    """Decode untrusted UTF-8 JSON within ``limits``.

    Duplicate object keys and the non-JSON constants ``NaN``/``Infinity`` are refused,
    so one value has one meaning for every reader.

    Args:
        data: the raw document.
        limits: the limits to enforce.
        what: names the document in error messages.

    Raises:
        PeerJsonError: not UTF-8 JSON (offence `Offence.PROTOCOL_ERROR`), or a limit
            broken (`Offence.LIMIT_EXCEEDED`).
    """
    if len(data) > limits.max_bytes:
        raise _limit(what, f"larger than {limits.max_bytes} bytes")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise PeerJsonError(f"{what} is not UTF-8") from None
    bare = _STRING.sub("", text)
    if _too_deep(bare, limits.max_depth):
        raise _limit(what, f"nested deeper than {limits.max_depth}")
    # Every number's length from the text without strings, before any is converted:
    # one regex pass, not a Python call per number (a smart-protocol batch holds
    # hundreds of thousands of them).
    if _number_runs(limits.max_number_chars).search(bare):
        raise _limit(what, f"number longer than {limits.max_number_chars} characters")

    def parse_float(s: str) -> float:
        value = float(s)
        if not math.isfinite(value):
            raise _limit(what, "number out of range")
        return value

    def constant(s: str) -> Any:
        raise PeerJsonError(f"{what}: {s} is not JSON")

    def members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            raise PeerJsonError(f"{what}: duplicate object key")
        return obj

    try:
        value = json.loads(
            text,
            parse_float=parse_float,
            parse_constant=constant,
            object_pairs_hook=members,
        )
    except json.JSONDecodeError as e:
        raise PeerJsonError(f"{what} is not JSON: {e.msg} at {e.pos}") from None
    _check_sizes(value, limits, what)
    return value


def load_peer_object(
    data: bytes | bytearray | memoryview,
    limits: JsonLimits = DEFAULT_JSON_LIMITS,
    *,
    what: str = "peer JSON",
) -> dict[str, Any]:
    """`load_peer_json` for a document that must be a JSON object.

    Raises:
        PeerJsonError: see `load_peer_json`; also a document that is not an object.
    """
    value = load_peer_json(data, limits, what=what)
    if not isinstance(value, dict):
        raise PeerJsonError(f"{what} is not a JSON object")
    return value


def _check_sizes(value: Any, limits: JsonLimits, what: str) -> None:
    """Walk the decoded value (depth already bounded) for long strings and item counts."""
    items = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if len(v) > limits.max_string_chars:
                raise _limit(what, f"string longer than {limits.max_string_chars} characters")
            continue
        if isinstance(v, dict):
            children: list[Any] = [*v.keys(), *v.values()]
            items += len(v)
        elif isinstance(v, list):
            children = v
            items += len(v)
        else:
            continue
        if items > limits.max_items:
            raise _limit(what, f"more than {limits.max_items} values")
        # Numbers, booleans and null have nothing to check: only strings and containers
        # are walked (a batch's payload is a long array of numbers).
        stack.extend([c for c in children if type(c) in _WALKED])
