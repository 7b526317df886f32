"""ExtraAttributes JSON text: compact, sorted keys, serde_json (ryu) float layout."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.errors import InvalidValue
from fbs.model.extra import ExtraAttributes, canonical_json, format_float_like_serde


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1.0"),
        (10.0, "10.0"),
        (-0.5, "-0.5"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e16"),
        (1.5e20, "1.5e20"),
        (123.456, "123.456"),
        (1e-4, "0.0001"),
        (1e-5, "0.00001"),
        (1.25e-5, "0.0000125"),
        (1e-6, "1e-6"),
        (1.25e-7, "1.25e-7"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e308"),
    ],
)
def test_float_layout_matches_ryu(value: float, text: str) -> None:
    assert format_float_like_serde(value) == text


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_text_round_trips(value: float) -> None:
    text = format_float_like_serde(value)
    assert float(text) == value
    assert math.copysign(1.0, float(text)) == math.copysign(1.0, value)
    assert "+" not in text and "e0" not in text.replace("e0.", "")


def test_nan_and_infinity_are_refused() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidValue):
            canonical_json({"x": bad})


def test_canonical_text_is_compact_sorted_and_unescaped() -> None:
    attrs = {"b": [1, 2.5, None, True], "a": {"z": "é\n", "y": 1e20}}
    text = canonical_json(attrs)
    assert text == '{"a":{"y":1e20,"z":"é\\n"},"b":[1,2.5,null,true]}'
    assert json.loads(text) == attrs
    assert ExtraAttributes(attrs).json_text == text
