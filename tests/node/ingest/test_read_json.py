"""Json, NdJson, GeoJson, NdGeoJson read steps."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from fbs.model import ReadStepGeoJson, ReadStepJson, ReadStepNdGeoJson, ReadStepNdJson
from node.ingest.errors import ReadError
from node.ingest.read import read_batches


def _table(step: object, path: Path, **kw: int) -> pa.Table:
    return pa.Table.from_batches(list(read_batches(step, path, **kw)))  # type: ignore[arg-type]


def _ndjson(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "in.ndjson"
    p.write_text("".join(line + "\n" for line in lines))
    return p


def test_ndjson_inferred(tmp_path: Path) -> None:
    p = _ndjson(tmp_path, ['{"a": 1, "b": "x"}', '{"a": 2, "b": null}'])
    t = _table(ReadStepNdJson(), p)
    assert t.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]


def test_ndjson_schema_missing_keys_null_and_extra_ignored(tmp_path: Path) -> None:
    p = _ndjson(tmp_path, ['{"a": 1, "t": "2020-01-01T00:00:00Z", "z": 9}', '{"a": 2}'])
    t = _table(ReadStepNdJson(ddl_schema=("a INT", "t TIMESTAMP", "s STRING")), p)
    assert t.schema == pa.schema(
        [("a", pa.int32()), ("t", pa.timestamp("ms", "UTC")), ("s", pa.string())]
    )
    assert t.column("t").to_pylist() == [dt.datetime(2020, 1, 1, tzinfo=dt.UTC), None]
    assert t.column("s").null_count == 2


def test_ndjson_timestamp_format(tmp_path: Path) -> None:
    p = _ndjson(tmp_path, ['{"t": "2020/03/04 05:06"}'])
    step = ReadStepNdJson(ddl_schema=("t TIMESTAMP",), timestamp_format="yyyy/MM/dd HH:mm")
    assert _table(step, p).column("t")[0].as_py() == dt.datetime(2020, 3, 4, 5, 6, tzinfo=dt.UTC)


def test_ndjson_bad_value_line_and_column(tmp_path: Path) -> None:
    p = _ndjson(tmp_path, ['{"a": 1}', '{"a": 2}', '{"a": "three"}'])
    with pytest.raises(ReadError) as info:
        _table(ReadStepNdJson(ddl_schema=("a BIGINT",)), p)
    assert info.value.line == 3
    assert info.value.column == "a"


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ('{"a": "three", "b": ["x"]}', "a", "expected a number, found a string"),
        ('{"a": 3, "b": "x"}', "b", "expected an array, found a string"),
        ('{"a": 3, "b": [1]}', "b/[]", "expected a string, found a number"),
        ('[{"a": 3}]', None, "not a JSON object but an array (NdJson holds one object per line)"),
        ('"text"', None, "not a JSON object but a string (NdJson holds one object per line)"),
    ],
)
def test_ndjson_kind_mismatch_in_words(
    tmp_path: Path, line: str, column: str | None, message: str
) -> None:
    """Arrow's "Column(/a) changed from number to string" describes its inference; the
    user gets what was expected and found (and a top-level non-object named as such)."""
    p = _ndjson(tmp_path, ['{"a": 1, "b": []}', line])
    with pytest.raises(ReadError) as info:
        _table(ReadStepNdJson(ddl_schema=("a BIGINT", "b ARRAY<STRING>")), p)
    assert (info.value.line, info.value.column) == (2, column)
    assert str(info.value).endswith(message)


def test_ndjson_malformed_line(tmp_path: Path) -> None:
    p = _ndjson(tmp_path, ['{"a": 1}', '{"a": '])
    with pytest.raises(ReadError) as info:
        _table(ReadStepNdJson(), p)
    assert info.value.line == 2


def test_ndjson_not_null(tmp_path: Path) -> None:
    p = _ndjson(tmp_path, ['{"a": 1}', "{}"])
    with pytest.raises(ReadError, match="NOT NULL") as info:
        _table(ReadStepNdJson(ddl_schema=("a INT NOT NULL",)), p)
    assert info.value.line == 2


def test_json_sub_path(tmp_path: Path) -> None:
    p = tmp_path / "doc.json"
    p.write_text(json.dumps({"meta": {}, "data": {"items": [{"k": "a", "v": 1}, {"k": "b"}]}}))
    t = _table(ReadStepJson(sub_path="data.items", ddl_schema=("k STRING", "v INT")), p)
    assert t.to_pylist() == [{"k": "a", "v": 1}, {"k": "b", "v": None}]


def test_json_top_level_array_chunks_keep_schema(tmp_path: Path) -> None:
    p = tmp_path / "doc.json"
    p.write_text(json.dumps([{"n": i} for i in range(100)]))
    batches = list(read_batches(ReadStepJson(), p, batch_rows=10))
    assert len(batches) == 10
    assert all(b.schema == batches[0].schema for b in batches)


def test_json_errors(tmp_path: Path) -> None:
    p = tmp_path / "doc.json"
    p.write_text('{"data": [1, 2]}')
    with pytest.raises(ReadError, match="subPath 'nope'"):
        _table(ReadStepJson(sub_path="nope"), p)
    with pytest.raises(ReadError, match="record 1: expected a JSON object"):
        _table(ReadStepJson(sub_path="data"), p)
    p.write_text('{"data": [\n{"a": 1},\n{"a": }]}')
    with pytest.raises(ReadError) as info:
        _table(ReadStepJson(sub_path="data"), p)
    assert info.value.line == 3
    p.write_text('[{"a": 1}, {"a": "x"}]')
    with pytest.raises(ReadError, match="record 2") as info:
        _table(ReadStepJson(ddl_schema=("a INT",)), p)
    assert info.value.column == "a"


_POINT = {"type": "Point", "coordinates": [1.0, 2.0]}


def test_geojson_feature_collection(tmp_path: Path) -> None:
    doc = {
        "type": "FeatureCollection",
        "features": [
            {"type": "Feature", "properties": {"name": "a", "n": 1}, "geometry": _POINT},
            {"type": "Feature", "properties": {"name": "b", "n": 2}, "geometry": None},
        ],
    }
    p = tmp_path / "x.geojson"
    p.write_text(json.dumps(doc))
    t = _table(ReadStepGeoJson(), p)
    assert t.column("name").to_pylist() == ["a", "b"]
    assert json.loads(t.column("geometry")[0].as_py()) == _POINT
    assert t.column("geometry")[1].as_py() is None
    typed = _table(ReadStepGeoJson(ddl_schema=("n BIGINT", "geometry STRING")), p)
    assert typed.schema.names == ["n", "geometry"]


def test_geojson_errors(tmp_path: Path) -> None:
    p = tmp_path / "x.geojson"
    p.write_text(json.dumps({"type": "Feature"}))
    with pytest.raises(ReadError, match="FeatureCollection"):
        _table(ReadStepGeoJson(), p)
    clash = {"type": "Feature", "properties": {"geometry": 1}, "geometry": None}
    p.write_text(json.dumps({"type": "FeatureCollection", "features": [clash]}))
    with pytest.raises(ReadError, match="clashes"):
        _table(ReadStepGeoJson(), p)


def test_ndgeojson(tmp_path: Path) -> None:
    f = {"type": "Feature", "properties": {"id": 7}, "geometry": _POINT}
    p = tmp_path / "x.ndgeojson"
    p.write_text(json.dumps(f) + "\n\n" + json.dumps(f) + "\n" + '{"type": "Nope"}\n')
    with pytest.raises(ReadError) as info:
        _table(ReadStepNdGeoJson(), p)
    assert info.value.line == 4
    p.write_text(json.dumps(f) + "\n" + json.dumps({**f, "properties": {"id": "x"}}) + "\n")
    with pytest.raises(ReadError) as info:
        _table(ReadStepNdGeoJson(ddl_schema=("id INT", "geometry STRING")), p)
    assert (info.value.line, info.value.column) == (2, "id")


def test_ndjson_other_encoding(tmp_path: Path) -> None:
    p = tmp_path / "latin.ndjson"
    p.write_bytes('{"s": "café"}\n'.encode("latin-1"))
    t = _table(ReadStepNdJson(encoding="ISO-8859-1"), p)
    assert t.column("s").to_pylist() == ["café"]
