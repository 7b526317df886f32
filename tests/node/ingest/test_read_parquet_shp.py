"""Parquet and ESRI shapefile read steps."""

from __future__ import annotations

import datetime as dt
import json
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fbs.model import ReadStepEsriShapefile, ReadStepParquet
from node.ingest.errors import ReadError
from node.ingest.read import read_batches


def _parquet(tmp_path: Path) -> Path:
    p = tmp_path / "in.parquet"
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int32()),
            "t": pa.array([0, 1000, 2000], pa.timestamp("us")),
            "s": ["a", "b", "c"],
        }
    )
    pq.write_table(table, p, row_group_size=2)
    return p


def test_parquet_plain_normalizes_timestamps(tmp_path: Path) -> None:
    batches = list(read_batches(ReadStepParquet(), _parquet(tmp_path), batch_rows=2))
    assert [b.num_rows for b in batches] == [2, 1]
    assert batches[0].schema.field("t").type == pa.timestamp("ms", "UTC")


def test_parquet_schema_selects_and_casts(tmp_path: Path) -> None:
    step = ReadStepParquet(ddl_schema=("s STRING", "id BIGINT"))
    t = pa.Table.from_batches(list(read_batches(step, _parquet(tmp_path))))
    assert t.schema == pa.schema([("s", pa.string()), ("id", pa.int64())])
    assert t.column("id").to_pylist() == [1, 2, 3]


def test_parquet_errors(tmp_path: Path) -> None:
    p = _parquet(tmp_path)
    with pytest.raises(ReadError) as info:
        list(read_batches(ReadStepParquet(ddl_schema=("nope INT",)), p))
    assert info.value.column == "nope"
    with pytest.raises(ReadError, match="record 1") as info:
        list(read_batches(ReadStepParquet(ddl_schema=("s INT",)), p))
    assert info.value.column == "s"
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(ReadError, match="not a readable Parquet"):
        list(read_batches(ReadStepParquet(), bad))


def test_parquet_date_column_from_timestamp(tmp_path: Path) -> None:
    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"d": pa.array([dt.date(2020, 1, 2)])}), p)
    step = ReadStepParquet(ddl_schema=("d DATE",))
    t = pa.Table.from_batches(list(read_batches(step, p)))
    assert t.column("d").to_pylist() == [dt.date(2020, 1, 2)]


def test_shapefile_zip(tmp_path: Path) -> None:
    shapefile = pytest.importorskip("shapefile")
    base = tmp_path / "places"
    with shapefile.Writer(str(base), shapeType=shapefile.POINT) as w:
        w.field("name", "C", size=20)
        w.field("pop", "N", size=10)
        w.point(1.0, 2.0)
        w.record("a", 10)
        w.point(3.0, 4.0)
        w.record("b", 20)
    archive = tmp_path / "places.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for ext in (".shp", ".shx", ".dbf"):
            zf.write(base.with_suffix(ext), f"dir/places{ext}")
    step = ReadStepEsriShapefile(
        sub_path="dir/*.shp", ddl_schema=("name STRING", "pop BIGINT", "geometry STRING")
    )
    t = pa.Table.from_batches(list(read_batches(step, archive)))
    assert t.column("name").to_pylist() == ["a", "b"]
    assert t.column("pop").to_pylist() == [10, 20]
    geom = json.loads(t.column("geometry")[1].as_py())
    assert geom["type"] == "Point" and list(geom["coordinates"]) == [3.0, 4.0]
    plain = pa.Table.from_batches(
        list(read_batches(ReadStepEsriShapefile(), base.with_suffix(".shp")))
    )
    assert plain.num_rows == 2
    with pytest.raises(ReadError, match=r"expected one \.shp"):
        list(read_batches(ReadStepEsriShapefile(sub_path="nope.shp"), archive))
