"""`fbs.value`: the hand-written value classes behave as the dataclasses of their fields.

Each class is compared with ``dataclass(frozen=True, slots=True[, order=True])`` of the
same fields (its own ``__repr__``, where it writes one, kept on both): equality, hashing,
order, ``replace``; and every instance is frozen, slotted and copies by value.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from fbs.did import AccountName, DatasetAlias, DatasetId, DatasetName
from fbs.limits import DecodeLimits
from fbs.model import (
    ExtraAttributes,
    FieldDesc,
    FieldKind,
    OffsetInterval,
    ScalarType,
    TableDesc,
    VariantDesc,
    union_of,
)
from fbs.model.schema import UINT8
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from fbs.value import OrderedValue, Value

# Two distinct, valid field sets per class.
SAMPLES: dict[type, tuple[dict[str, Any], dict[str, Any]]] = {
    DatasetId: ({"public_key": b"a" * 32}, {"public_key": b"b" * 32}),
    DatasetName: ({"value": "name-a"}, {"value": "name-b"}),
    AccountName: ({"value": "account-a"}, {"value": "account-b"}),
    DatasetAlias: (
        {"dataset_name": DatasetName("a"), "account_name": AccountName("x")},
        {"dataset_name": DatasetName("b"), "account_name": None},
    ),
    Multihash: ({"code": 0x16, "digest": b"a" * 32}, {"code": 0x16, "digest": b"b" * 32}),
    Timestamp: ({"nanos": 1}, {"nanos": -2}),
    DecodeLimits: (
        {"max_block_bytes": 1, "max_vector_len": 5},
        {"max_block_bytes": 2, "max_decoded_bytes": 7},
    ),
    ScalarType: (
        {"name": "a", "fmt": "<B", "size": 1, "lo": 0, "hi": 1},
        {"name": "b", "fmt": "<h", "size": 2, "lo": -1, "hi": 2},
    ),
    FieldDesc: (
        {"name": "a", "camel": "a", "slot": 0, "kind": FieldKind.SCALAR, "optional": False},
        {"name": "b", "camel": "b", "slot": 1, "kind": FieldKind.STRING, "optional": True},
    ),
    TableDesc: (
        {"name": "A", "cls": OffsetInterval, "fields": (), "num_slots": 0},
        {"name": "B", "cls": int, "fields": (), "num_slots": 1},
    ),
    VariantDesc: (
        {"code": 1, "cls": OffsetInterval, "tag": "a"},
        {"code": 2, "cls": int, "tag": "b"},
    ),
}


def _reference(cls: type) -> type:
    """The dataclass of ``cls``'s fields and defaults, with ``cls``'s own methods."""
    params = inspect.signature(cls).parameters.values()
    fields = [
        (p.name, p.annotation)
        if p.default is inspect.Parameter.empty
        else (p.name, p.annotation, dataclasses.field(default=p.default))
        for p in params
    ]
    own = {"__repr__", "__str__"}  # the class's other methods, which its repr may call
    namespace = {
        k: v
        for k, v in vars(cls).items()
        if (k in own or not k.startswith("_")) and k not in ("replace", *cls.__slots__)
    }
    return dataclasses.make_dataclass(
        cls.__name__,
        fields,
        namespace=namespace,
        frozen=True,
        slots=True,
        order=issubclass(cls, OrderedValue),
    )


def _facts(cls: type, one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    a, b, same = cls(**one), cls(**two), cls(**one)
    facts: dict[str, Any] = {
        "repr": (repr(a), repr(b)),
        "equal": (a == same, a != same, a == b, a != b, a == object()),
        "hash": hash(a) == hash(same),
    }
    if issubclass(cls, OrderedValue) or getattr(cls, "__lt__", None) is not object.__lt__:
        try:
            facts["order"] = (a < b, a <= b, a > b, a >= b, a <= same, a < same)
        except TypeError:
            facts["order"] = "unordered"
    for name in two:
        c = a.replace(**{name: two[name]}) if isinstance(a, Value) else None
        c = c if c is not None else dataclasses.replace(a, **{name: two[name]})
        facts[f"replace {name}"] = (repr(c), c == a, c == cls(**{**one, name: two[name]}))
    return facts


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda c: c.__name__)
def test_behaves_as_the_dataclass_of_its_fields(cls: type) -> None:
    one, two = SAMPLES[cls]
    assert _facts(cls, one, two) == _facts(_reference(cls), one, two)


@pytest.mark.parametrize("cls", [*SAMPLES, ExtraAttributes], ids=lambda c: c.__name__)
def test_frozen_slotted_and_copied_by_value(cls: type) -> None:
    value = cls(**SAMPLES[cls][0]) if cls in SAMPLES else cls({"a": [1, {"b": None}]})
    assert not hasattr(value, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.anything = 1
    for name in value.__slots__:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(value, name)
    for again in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
        assert type(again) is type(value) and again == value and hash(again) == hash(value)


def test_union_descriptors_compare_by_name_and_variants() -> None:
    u = union_of("ReadStep")
    again = type(u)(u.name, u.variants, {}, {}, {})
    assert again == u and hash(again) == hash(u) and repr(again) == repr(u)
    assert "by_tag" not in repr(u) and u != type(u)("Other", u.variants, {}, {}, {})


def test_extra_attributes_compare_by_canonical_text() -> None:
    a = ExtraAttributes({"b": 1, "a": 2})
    assert a == ExtraAttributes({"a": 2, "b": 1}) and a != ExtraAttributes({"a": True})
    assert repr(a) == "ExtraAttributes(attributes={'a': 2, 'b': 1})"
    assert a.replace(attributes={"c": 3}) == ExtraAttributes({"c": 3}) and a.replace() == a


def test_values_of_different_classes_differ_and_do_not_order() -> None:
    assert DatasetName("a") != AccountName("a")
    with pytest.raises(TypeError):
        _ = Timestamp(1) < Multihash.sha3_256(b"")  # type: ignore[operator]
    assert sorted([Timestamp(3), Timestamp(-1)]) == [Timestamp(-1), Timestamp(3)]
    assert ScalarType("uint8", "<B", 1, 0, 255) == UINT8
