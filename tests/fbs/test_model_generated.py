"""The table classes generated from fbs/schema/odf.fbs (``scripts/gen-model``).

Each class is compared with the dataclass that ``dataclass(frozen=True, slots=True,
kw_only=True)`` makes of the same fields: signature, repr, equality, hashing, ``replace``,
immutability, pickling and copying, on instances whose every field is set. The generator
itself is checked to be current and to refuse what it cannot model.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import fbs.model as m
from fbs.did import DatasetId
from fbs.model import FieldDesc, FieldKind, TableDesc, all_tables, schema_of
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from fbs.value import Frozen

ROOT = Path(__file__).resolve().parents[2]
GEN_MODEL = ROOT / "scripts" / "gen-model"
GENERATED = [t for t in all_tables() if t.cls is not m.ExtraAttributes]


def _sample(desc: TableDesc, tag: int, depth: int = 0) -> Any:
    """An instance of ``desc``'s class with every field set from ``tag``."""
    return desc.cls(**{f.name: _value(f, tag, depth) for f in desc.fields})


def _value(f: FieldDesc, tag: int, depth: int) -> Any:
    kind = f.kind
    simple: dict[FieldKind, Any] = {
        FieldKind.STRING: f"{f.name}-{tag}",
        FieldKind.MULTIHASH: Multihash.sha3_256(bytes([tag])),
        FieldKind.DATASET_ID: DatasetId(bytes([tag]) * 32),
        FieldKind.BYTES: bytes([tag]),
        FieldKind.TIMESTAMP: Timestamp(tag),
        FieldKind.VEC_STRING: (f"{f.name}-{tag}",),
        FieldKind.JSON: {"k": tag},
    }
    if kind in simple:
        return simple[kind]
    if kind is FieldKind.SCALAR:
        assert f.scalar is not None
        return bool(tag % 2) if f.scalar.is_bool else tag
    if kind is FieldKind.ENUM:
        assert f.enum_type is not None
        members = list(f.enum_type)
        return members[tag % len(members)]
    if depth > 2:  # deep enough: the optional end of a recursive type, or a leaf
        return None if f.optional else _shallow(f, tag)
    if kind in (FieldKind.TABLE, FieldKind.VEC_TABLE):
        one = _sample(f.table, tag, depth + 1)
        return one if kind is FieldKind.TABLE else (one,)
    variants = f.union.variants
    one = _sample(schema_of(variants[tag % len(variants)].cls), tag, depth + 1)
    return one if kind is FieldKind.UNION else (one,)


def _shallow(f: FieldDesc, tag: int) -> Any:
    """A required nested value that stops a recursion: empty, or a field-less variant."""
    if f.kind in (FieldKind.VEC_TABLE, FieldKind.VEC_UNION):
        return ()
    if f.kind is FieldKind.TABLE:  # required tables do not nest without end
        return _sample(f.table, tag, 0)
    return next(v.cls() for v in f.union.variants if not schema_of(v.cls).fields)


def _reference(desc: TableDesc) -> type:
    """The frozen, slotted, keyword-only dataclass of the same fields and defaults."""
    params = inspect.signature(desc.cls).parameters.values()
    fields = [
        (p.name, p.annotation)
        if p.default is inspect.Parameter.empty
        else (p.name, p.annotation, dataclasses.field(default=p.default))
        for p in params
    ]
    return dataclasses.make_dataclass(
        desc.cls.__name__, fields, frozen=True, slots=True, kw_only=True
    )


def _facts(cls: type, values: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """What one can observe of instances made of ``values`` (and ``other``)."""
    a, b, same = cls(**values), cls(**other), cls(**values)
    facts: dict[str, Any] = {
        "repr": repr(a),
        "equal": (a == same, a != same, a == b, a != b, a == object()),
        "hash": (hash(a) == hash(same), hash(a) == hash(a.__class__(**values))),
    }
    for name in values:
        changed = (
            a.replace(**{name: other[name]})
            if isinstance(a, Frozen)
            else dataclasses.replace(a, **{name: other[name]})
        )
        facts[f"replace {name}"] = (repr(changed), a == changed, hash(a) == hash(changed))
    return facts


@pytest.mark.parametrize("desc", GENERATED, ids=lambda d: d.name)
def test_class_behaves_as_its_dataclass(desc: TableDesc) -> None:
    ref = _reference(desc)
    assert inspect.signature(desc.cls).parameters == inspect.signature(ref).parameters
    values = {f.name: _value(f, 1, 0) for f in desc.fields}
    other = {f.name: _value(f, 2, 0) for f in desc.fields}
    ours = _facts(desc.cls, values, other)
    theirs = _facts(ref, values, other)
    assert ours == theirs
    assert set(desc.cls.__slots__) == set(values)


@pytest.mark.parametrize("desc", GENERATED, ids=lambda d: d.name)
def test_instances_are_frozen_and_copy_by_value(desc: TableDesc) -> None:
    value = _sample(desc, 3)
    for name in [f.name for f in desc.fields] + ["not_a_field"]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(value, name)
    assert not hasattr(value, "__dict__")
    for again in (
        pickle.loads(pickle.dumps(value)),
        copy.copy(value),
        copy.deepcopy(value),
        value.replace(),
    ):
        assert type(again) is type(value) and again == value and repr(again) == repr(value)
        assert again is not value


def test_tables_of_other_classes_with_the_same_fields_differ() -> None:
    # ReadStepGeoJson and ReadStepParquet have the same fields, as dataclasses would.
    assert m.ReadStepGeoJson() != m.ReadStepParquet()
    assert m.DataTypeBool() != m.DataTypeDate() and m.DataTypeBool() == m.DataTypeBool()
    assert m.MergeStrategyLedger(primary_key=("a",)) != m.MergeStrategyChangelogStream(
        primary_key=("a",)
    )


def test_replace_checks_its_arguments_as_the_constructor_does() -> None:
    interval = m.OffsetInterval(start=1, end=2)
    assert interval.replace(end=5) == m.OffsetInterval(start=1, end=5)
    with pytest.raises(TypeError):
        interval.replace(middle=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        m.OffsetInterval(start=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        dataclasses.replace(interval, end=5)  # type: ignore[type-var]


def test_every_table_class_takes_its_spec_fields() -> None:
    for desc in all_tables():
        assert list(inspect.signature(desc.cls).parameters) == [f.name for f in desc.fields]
    assert len(GENERATED) == len(all_tables()) - 1  # ExtraAttributes is written by hand


def test_generated_modules_are_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(GEN_MODEL), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def gen() -> dict[str, Any]:
    return runpy.run_path(str(GEN_MODEL), run_name="gen_model")


HEAD = '// @module fbs.model.t\n// Doc.\n\nattribute "odf_default";\n\n'


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ("table T {\n a: string = null;\n}", "`= null` on a non-scalar"),
        ("table T {\n a: uint64 (required);\n}", "`required` on a scalar"),
        ('table T {\n a: string (odf_default: "x");\n}', "odf_default on other"),
        ("table T {\n a: Nope;\n}", "unknown type"),
        ("table T {\n a: string (deprecated);\n}", "unsupported attribute"),
        ("table T {\n a: uint64 = 3;\n}", "unsupported field"),
        ("enum E: int32 {\n A = 1,\n}", "unsupported member"),
        ("table T { a: string; }", "unsupported declaration"),
        ("union X {\n T,\n}\ntable T {\n}\ntable XWrapper {\n other: string;\n}", "`value: X`"),
        ("struct S {\n a: int32;\n}", "has no model type"),
        ("union U {\n T,\n}\n// @module fbs.model.u\n\ntable T {\n}", "is not a table here"),
        ("table T {\n a: string;\n", "is not closed"),
        ("table T {\n a: string (id: 1);\n b: string (id: 0);\n}", "id 1, not 0"),
    ],
)
def test_generator_refuses(gen: dict[str, Any], schema: str, why: str) -> None:
    with pytest.raises(gen["SchemaError"], match=why):
        gen["build"](gen["parse"](HEAD + schema))


def test_generator_writes_a_table_class(gen: dict[str, Any]) -> None:
    text = HEAD + "/// A table.\ntable T {\n  a: string (required);\n  b: uint64 = null;\n}\n"
    (mod,) = gen["build"](gen["parse"](text)).values()
    source = gen["render"](mod)
    assert '"""Doc.\n\nGenerated by scripts/gen-model' in source
    assert 'class T(Frozen):\n    """A table."""' in source
    assert "def __init__(self, *, a: str, b: int | None = None) -> None:" in source
    assert '@s.table(s.string("a"), s.scalar("b", s.UINT64, optional=True))' in source
