"""`ExtraAttributes`: the JSON-object extension point of ODF tables."""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

from fbs.errors import InvalidValue
from fbs.value import KEEP, Frozen, set_field

__all__ = ["ExtraAttributes", "canonical_json"]


#: Deepest JSON nesting accepted in extra attributes.
MAX_JSON_DEPTH = 64


def _check_json(value: Any, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise InvalidValue(f"JSON nested deeper than {MAX_JSON_DEPTH}")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidValue(f"JSON object keys must be strings, got {k!r}")
            _check_json(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _check_json(v, depth + 1)
    elif value is not None and not isinstance(value, str | int | float):
        raise InvalidValue(f"not a JSON value: {type(value).__name__}")


def canonical_json(value: Any) -> str:
    """Compact JSON with object keys sorted at every level, as kamu (serde_json) writes it.

    Floats are rendered like serde_json (shortest round-trip digits, ``ryu`` layout:
    ``1e20``, ``1e-7``, ``0.00001``, ``10.0``), not like Python (``1e+20``, ``1e-07``),
    because the text is part of the block bytes.

    Raises:
        InvalidValue: if ``value`` is not JSON-serializable (non-string keys, NaN, cycles,
            too deep).
    """
    _check_json(value, 0)
    try:
        return _encode(value)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidValue(f"not a JSON value: {e}") from None


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return format_float_like_serde(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        items = sorted(value.items())
        return "{" + ",".join(f"{_encode(k)}:{_encode(v)}" for k, v in items) + "}"
    return "[" + ",".join(_encode(v) for v in value) + "]"


def format_float_like_serde(value: float) -> str:
    """Render a finite float exactly as Rust's ``ryu`` (used by serde_json) does.

    Raises:
        ValueError: for NaN or infinities (not JSON).
    """
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{value!r} is not a JSON number")
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    # Python's repr gives the same shortest round-trip digits as ryu; only the layout differs.
    sign, digit_tuple, exponent = decimal.Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    exp = int(exponent) + (len(digits) - len(stripped))
    digits = stripped
    length = len(digits)
    point = length + exp  # position of the decimal point relative to the digits
    if exp >= 0 and point <= 16:
        text = digits + "0" * exp + ".0"
    elif 0 < point <= 16:
        text = digits[:point] + "." + digits[point:]
    elif -5 < point <= 0:
        text = "0." + "0" * -point + digits
    elif length == 1:
        text = f"{digits}e{point - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{point - 1}"
    return ("-" if sign else "") + text


class ExtraAttributes(Frozen):
    """Custom ``<domain>/<path>`` keyed attributes (a JSON object).

    Equality and hashing use the canonical JSON text, so ``{"a": 1}`` and
    ``{"a": True}`` differ (as they do in the block bytes).

    Attributes:
        attributes: the JSON object (a private copy is kept).
        json_text: its canonical compact JSON text (what is stored in blocks).
    """

    __slots__ = ("attributes", "json_text")

    attributes: Mapping[str, Any]
    json_text: str

    def __init__(self, attributes: Mapping[str, Any]) -> None:
        if not isinstance(attributes, Mapping):
            raise InvalidValue("ExtraAttributes.attributes must be a mapping (JSON object)")
        text = canonical_json(dict(attributes))
        set_field(self, "json_text", text)
        set_field(self, "attributes", json.loads(text))

    def __eq__(self, other: object) -> bool:
        if type(other) is ExtraAttributes:
            return self.json_text == other.json_text
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.json_text)

    def __repr__(self) -> str:
        return f"ExtraAttributes(attributes={self.attributes!r})"

    def replace(self, *, attributes: Mapping[str, Any] = KEEP) -> ExtraAttributes:
        """A copy with other attributes (or the same ones)."""
        return ExtraAttributes(self.attributes if attributes is KEEP else attributes)

    @classmethod
    def from_json(cls, text: str) -> ExtraAttributes:
        """Parse JSON text that must hold an object.

        Raises:
            InvalidValue: if the text is not a JSON object.
        """
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InvalidValue(f"invalid JSON in extra attributes: {e}") from None
        if not isinstance(value, dict):
            raise InvalidValue("extra attributes must be a JSON object")
        return cls(value)
