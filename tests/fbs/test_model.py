"""The model mirrors fbs/schema/odf.fbs: tables, field order/kinds, unions, enums."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import fbs.model as m
from fbs.errors import InvalidValue
from fbs.model import FieldKind, schema_of, table_by_name, union_of

SCHEMA = Path(__file__).resolve().parents[2] / "fbs" / "schema" / "odf.fbs"
WRAPPERS = {"PrepStepWrapper", "MetadataEventWrapper"}


def _parse_fbs() -> tuple[
    dict[str, list[tuple[str, str, bool]]], dict[str, list[str]], dict[str, tuple[str, list[str]]]
]:
    text = re.sub(r"//[^\n]*", "", SCHEMA.read_text())
    tables: dict[str, list[tuple[str, str, bool]]] = {}
    unions: dict[str, list[str]] = {}
    enums: dict[str, tuple[str, list[str]]] = {}
    for kind, name, base, body in re.findall(
        r"(table|union|enum|struct)\s+(\w+)\s*(?::\s*(\w+))?\s*(?:\([^)]*\))?\s*\{([^}]*)\}",
        text,
    ):
        if kind == "table":
            fields = []
            for fname, ftype, rest in re.findall(r"(\w+)\s*:\s*([\w\[\]]+)([^;]*);", body):
                fields.append((fname, ftype, "= null" in rest))
            tables[name] = fields
        elif kind == "union":
            unions[name] = re.findall(r"\w+", body)
        elif kind == "enum":
            enums[name] = (base, re.findall(r"\w+", body))
    return tables, unions, enums


FBS_TABLES, FBS_UNIONS, FBS_ENUMS = _parse_fbs()

_SCALARS = {"bool", "uint8", "int16", "int32", "uint32", "int64", "uint64"}


def _expected_kind(ftype: str, name: str) -> set[FieldKind]:
    if ftype == "string":
        return {FieldKind.STRING, FieldKind.JSON}
    if ftype == "[ubyte]":
        return {FieldKind.MULTIHASH, FieldKind.DATASET_ID, FieldKind.BYTES}
    if ftype == "[string]":
        return {FieldKind.VEC_STRING}
    if ftype in _SCALARS:
        return {FieldKind.SCALAR}
    if ftype == "Timestamp":
        return {FieldKind.TIMESTAMP}
    if ftype in FBS_ENUMS:
        return {FieldKind.ENUM}
    if ftype in FBS_UNIONS:
        return {FieldKind.UNION}
    if ftype.startswith("["):
        inner = ftype[1:-1]
        return {FieldKind.VEC_UNION} if inner in WRAPPERS else {FieldKind.VEC_TABLE}
    return {FieldKind.TABLE}


def test_every_schema_table_has_a_model() -> None:
    modeled = {t.name for t in m.all_tables()}
    assert modeled == set(FBS_TABLES) - WRAPPERS
    assert len(modeled) == 95


@pytest.mark.parametrize("name", sorted(set(FBS_TABLES) - WRAPPERS))
def test_table_fields_match_schema(name: str) -> None:
    desc = table_by_name(name)
    fbs_fields = FBS_TABLES[name]
    assert [f.name for f in desc.fields] == [f[0] for f in fbs_fields]
    slot = 0
    for f, (_, ftype, optional_scalar) in zip(desc.fields, fbs_fields, strict=True):
        assert f.kind in _expected_kind(ftype, f.name), (name, f.name)
        if f.kind is FieldKind.UNION:
            slot += 1
            assert f.ref == ftype and f.type_slot == slot - 1
        assert f.slot == slot
        slot += 1
        if f.kind in (FieldKind.SCALAR, FieldKind.ENUM):
            assert f.optional == optional_scalar, (name, f.name)
            assert f.scalar is not None
            if f.kind is FieldKind.SCALAR:
                assert f.scalar.name == ftype
            else:
                assert f.scalar.name == FBS_ENUMS[ftype][0]
                assert f.enum_type is not None and f.enum_type.__name__ == ftype
        if f.kind in (FieldKind.TABLE, FieldKind.VEC_TABLE):
            assert f.ref == ftype.strip("[]")
            assert f.table.cls is getattr(m, f.ref)
        if f.kind is FieldKind.VEC_UNION:
            assert f.wrapper == ftype.strip("[]")
            wrapper = FBS_TABLES[f.wrapper]
            assert [w[0] for w in wrapper] == ["value"]
            assert f.ref == wrapper[0][1]
    assert desc.num_slots == slot
    assert list(inspect.signature(desc.cls).parameters) == [f.name for f in desc.fields]


@pytest.mark.parametrize("name", sorted(FBS_UNIONS))
def test_unions_match_schema(name: str) -> None:
    desc = union_of(name)
    assert [v.cls.__name__ for v in desc.variants] == FBS_UNIONS[name]
    assert [v.code for v in desc.variants] == list(range(1, len(FBS_UNIONS[name]) + 1))
    prefix = "" if name == "MetadataEvent" else name
    for v in desc.variants:
        assert v.cls.__name__ == prefix + v.tag
        assert desc.by_tag[v.tag] is v and desc.by_code[v.code] is v
        assert desc.variant_of(v.cls()) is v if not schema_of(v.cls).fields else True


@pytest.mark.parametrize("name", sorted(FBS_ENUMS))
def test_enums_match_schema(name: str) -> None:
    et = getattr(m, name)
    assert [e.name for e in et] == FBS_ENUMS[name][1]
    assert [int(e) for e in et] == list(range(len(et)))


def test_yaml_tags_and_names() -> None:
    assert m.READ_STEP.by_tag["Csv"].cls is m.ReadStepCsv
    assert m.TRANSFORM.by_tag["Sql"].cls is m.TransformSql
    assert m.FETCH_STEP.by_tag["FilesGlob"].cls is m.FetchStepFilesGlob
    assert m.DATA_TYPE.by_tag["String"].cls is m.DataTypeString
    assert m.DATA_TYPE.by_tag["Option"].cls is m.DataTypeOption
    assert m.METADATA_EVENT.by_tag["AddData"].code == 1
    assert len(m.DATA_TYPE.variants) == 24 and len(m.METADATA_EVENT.variants) == 13
    assert m.TimeUnit.Millisecond.name == "Millisecond"
    assert int(m.CompressionFormat.Gzip) == 0
    block = schema_of(m.MetadataBlock)
    assert [f.camel for f in block.fields] == [
        "systemTime",
        "prevBlockHash",
        "sequenceNumber",
        "event",
    ]
    assert schema_of(m.ReadStepCsv(header=True)).fields[5].camel == "header"


def test_values_are_frozen_and_hashable() -> None:
    v = m.SetInfo(description="x", keywords=("a",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.description = "y"  # type: ignore[misc]
    assert hash(v) == hash(m.SetInfo(description="x", keywords=("a",)))
    with pytest.raises(TypeError):
        m.OffsetInterval(1, 2)  # type: ignore[call-arg]  # keyword-only


def test_extra_attributes_canonical() -> None:
    a = m.ExtraAttributes({"b": {"z": 1, "a": [1, {"y": 2, "x": None}]}, "a": "é"})
    assert a.json_text == '{"a":"é","b":{"a":[1,{"x":null,"y":2}],"z":1}}'
    assert a == m.ExtraAttributes.from_json(a.json_text) and hash(a) == hash(
        m.ExtraAttributes.from_json(a.json_text)
    )
    assert m.ExtraAttributes({"a": 1}) != m.ExtraAttributes({"a": True})
    bads: list[Any] = [{1: 2}, {"a": float("nan")}, {"a": object()}]
    for bad in bads:
        with pytest.raises(InvalidValue):
            m.ExtraAttributes(bad)
    with pytest.raises(InvalidValue):
        m.ExtraAttributes.from_json("[1]")
    with pytest.raises(InvalidValue):
        m.ExtraAttributes.from_json("{")
