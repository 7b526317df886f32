"""`ExtraAttributes`: the JSON-object extension point of ODF tables."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fbs.errors import InvalidValue
from fbs.model import schema as s

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

    Raises:
        InvalidValue: if ``value`` is not JSON-serializable (non-string keys, NaN, cycles,
            too deep).
    """
    _check_json(value, 0)
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidValue(f"not a JSON value: {e}") from None


@s.table(s.json_object("attributes"))
@dataclass(frozen=True, slots=True)
class ExtraAttributes:
    """Custom ``<domain>/<path>`` keyed attributes (a JSON object).

    Equality and hashing use the canonical JSON text, so ``{"a": 1}`` and
    ``{"a": True}`` differ (as they do in the block bytes).

    Attributes:
        attributes: the JSON object (a private copy is kept).
        json_text: its canonical compact JSON text (what is stored in blocks).
    """

    attributes: Mapping[str, Any] = field(compare=False)
    json_text: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.attributes, Mapping):
            raise InvalidValue("ExtraAttributes.attributes must be a mapping (JSON object)")
        text = canonical_json(dict(self.attributes))
        object.__setattr__(self, "json_text", text)
        object.__setattr__(self, "attributes", json.loads(text))

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
