"""Declared schemas of read steps (`read_schema`) and their application."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fbs.arrow_schema import data_schema_from_arrow
from fbs.model import (
    DataField,
    DataSchema,
    DataTypeList,
    DataTypeOption,
    DataTypeString,
    ReadStepCsv,
    ReadStepNdJson,
    ReadStepParquet,
)
from node.ingest.errors import SchemaError
from node.ingest.read import read_batches, read_schema


def test_no_schema() -> None:
    assert read_schema(ReadStepCsv()) is None


def test_ddl_and_odf_schema_agree() -> None:
    ddl = ("event_time TIMESTAMP", "city STRING", "n BIGINT NOT NULL", "p DECIMAL(10,2)")
    from_ddl = read_schema(ReadStepCsv(ddl_schema=ddl))
    assert from_ddl is not None
    odf = data_schema_from_arrow(from_ddl)
    assert read_schema(ReadStepCsv(schema=odf)) == from_ddl


def test_both_refused() -> None:
    odf = DataSchema(fields=(DataField(name="a", type=DataTypeString()),))
    with pytest.raises(SchemaError, match="not both"):
        read_schema(ReadStepParquet(ddl_schema=("a STRING",), schema=odf))


def test_bad_ddl_is_schema_error() -> None:
    with pytest.raises(SchemaError, match="unknown type"):
        read_schema(ReadStepNdJson(ddl_schema=("a WHATEVER",)))


def test_bad_odf_schema_is_schema_error() -> None:
    bad = DataSchema(
        fields=(
            DataField(
                name="x",
                type=DataTypeOption(inner=DataTypeOption(inner=DataTypeString())),
            ),
        )
    )
    with pytest.raises(SchemaError):
        read_schema(ReadStepCsv(schema=bad))


def test_rfc016_schema_applied_while_reading(tmp_path: Path) -> None:
    p = tmp_path / "x.ndjson"
    p.write_text('{"tags": ["a", "b"], "other": 1}\n')
    odf = DataSchema(
        fields=(
            DataField(
                name="tags",
                type=DataTypeOption(
                    inner=DataTypeList(item_type=DataTypeOption(inner=DataTypeString()))
                ),
            ),
        )
    )
    t = pa.Table.from_batches(list(read_batches(ReadStepNdJson(schema=odf), p)))
    assert t.schema.names == ["tags"]
    assert t.column("tags").to_pylist() == [["a", "b"]]
