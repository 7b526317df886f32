"""The pure model rules of `fbs.rules`: referenced objects, schema evolution, normalization."""

from __future__ import annotations

from fbs.model import (
    AddData,
    Checkpoint,
    DataField,
    DataSchema,
    DataSlice,
    DataTypeInt64,
    DataTypeList,
    DataTypeOption,
    DataTypeString,
    DataTypeStruct,
    ExecuteTransform,
    ExtraAttributes,
    OffsetInterval,
    SetInfo,
    SqlQueryStep,
    TransformSql,
)
from fbs.multiformats import SHA3_256, Multihash
from fbs.rules import (
    ObjectRef,
    SchemaChangeProblem,
    evolve_schema,
    new_checkpoint,
    new_data,
    normalize_transform,
    referenced_objects,
    same_type,
    schema_change_problem,
)


def _mh(n: int) -> Multihash:
    return Multihash(SHA3_256, bytes([n]) * 32)


SLICE = DataSlice(
    logical_hash=_mh(1),
    physical_hash=_mh(2),
    offset_interval=OffsetInterval(start=0, end=9),
    size=123,
)
CHECKPOINT = Checkpoint(physical_hash=_mh(3), size=45)


# -- referenced objects -------------------------------------------------------------------------


def test_referenced_objects_data_then_checkpoint() -> None:
    event = AddData(new_data=SLICE, new_checkpoint=CHECKPOINT)
    assert referenced_objects(event) == (
        ObjectRef("data", _mh(2), 123),
        ObjectRef("checkpoint", _mh(3), 45),
    )
    assert new_data(event) is SLICE
    assert new_checkpoint(event) is CHECKPOINT


def test_referenced_objects_of_execute_transform() -> None:
    only_checkpoint = ExecuteTransform(query_inputs=(), new_checkpoint=CHECKPOINT)
    assert referenced_objects(only_checkpoint) == (ObjectRef("checkpoint", _mh(3), 45),)
    assert new_data(only_checkpoint) is None
    only_data = ExecuteTransform(query_inputs=(), new_data=SLICE)
    assert referenced_objects(only_data) == (ObjectRef("data", _mh(2), 123),)


def test_events_without_objects() -> None:
    assert referenced_objects(AddData(prev_offset=3)) == ()
    assert referenced_objects(SetInfo(description="x")) == ()
    assert new_data(SetInfo()) is None
    assert new_checkpoint(SetInfo()) is None


# -- schema evolution ---------------------------------------------------------------------------

I64 = DataTypeInt64()
STR = DataTypeString()


def _f(name: str, t: object, extra: ExtraAttributes | None = None) -> DataField:
    return DataField(name=name, type=t, extra=extra)  # type: ignore[arg-type]


def _schema(*fields: DataField) -> DataSchema:
    return DataSchema(fields=fields)


def test_same_type_ignores_nested_attributes_not_optionality() -> None:
    encoded = ExtraAttributes({"arrow.apache.org/bufferEncoding": {"kind": "View"}})
    a = DataTypeStruct(fields=(_f("s", STR, encoded),))
    b = DataTypeStruct(fields=(_f("s", STR),))
    assert same_type(a, b)
    assert same_type(DataTypeList(item_type=a), DataTypeList(item_type=b))
    assert not same_type(I64, DataTypeOption(inner=I64))
    assert not same_type(I64, STR)


def test_schema_change_allowed() -> None:
    cur = _schema(_f("a", I64), _f("b", STR))
    reordered_with_optional = _schema(
        _f("b", STR, ExtraAttributes({"k": 1})), _f("c", DataTypeOption(inner=I64)), _f("a", I64)
    )
    assert schema_change_problem(cur, reordered_with_optional) is None
    assert schema_change_problem(None, cur) is None


def test_schema_change_refused() -> None:
    cur = _schema(_f("a", I64), _f("b", STR))
    cases = {
        "removed": _schema(_f("a", I64)),
        "retyped": _schema(_f("a", I64), _f("b", I64)),
        "added-required": _schema(_f("a", I64), _f("b", STR), _f("c", I64)),
        "duplicate": _schema(_f("a", I64), _f("b", STR), _f("b", STR)),
    }
    for kind, new in cases.items():
        problem = schema_change_problem(cur, new)
        assert problem is not None and problem.kind == kind, kind
    assert schema_change_problem(None, _schema(_f("x", I64), _f("x", I64))) == (
        SchemaChangeProblem("duplicate")
    )
    assert str(SchemaChangeProblem("removed", "b")) == "field 'b' was removed"
    assert str(SchemaChangeProblem("retyped", "b")) == "field 'b' changed its type or optionality"
    assert str(SchemaChangeProblem("added-required", "c")) == "added field 'c' must be optional"
    assert str(SchemaChangeProblem("duplicate")) == "duplicate field names"


def test_evolve_schema() -> None:
    cur = _schema(_f("a", I64), _f("b", DataTypeOption(inner=STR)))
    # Top-level nullability of produced data is an artifact: the recorded field stays.
    same = _schema(_f("a", DataTypeOption(inner=I64)), _f("b", STR))
    assert evolve_schema(cur, same) == cur
    grown = _schema(_f("b", STR), _f("n", I64), _f("a", I64))
    evolved = evolve_schema(cur, grown)
    assert evolved == _schema(
        _f("b", DataTypeOption(inner=STR)), _f("n", DataTypeOption(inner=I64)), _f("a", I64)
    )
    assert evolved is not None and schema_change_problem(cur, evolved) is None
    assert evolve_schema(cur, _schema(_f("a", I64))) is None  # dropped
    assert evolve_schema(cur, _schema(_f("a", STR), _f("b", STR))) is None  # retyped


# -- transforms ---------------------------------------------------------------------------------


def test_normalize_transform() -> None:
    legacy = TransformSql(engine="spark", query="SELECT 1")
    assert normalize_transform(legacy) == TransformSql(
        engine="spark", queries=(SqlQueryStep(query="SELECT 1"),)
    )
    modern = TransformSql(engine="spark", queries=(SqlQueryStep(query="SELECT 2"),))
    assert normalize_transform(modern) is modern
    both = TransformSql(engine="spark", query="q", queries=(SqlQueryStep(query="SELECT 3"),))
    assert normalize_transform(both) is both
