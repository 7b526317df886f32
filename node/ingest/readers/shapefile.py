"""ESRI Shapefile reader (`ReadStepEsriShapefile`) on the ``pyshp`` package.

The input is either a zip archive holding the ``.shp`` with its ``.shx`` / ``.dbf``
siblings (``subPath`` names the ``.shp`` member, or a glob matching one; without it the
archive must hold exactly one ``.shp``), or a ``.shp`` file whose siblings sit next to it.
Each shape becomes one row: the DBF attributes as columns plus a ``geometry`` column with
the shape as GeoJSON text (as the GeoJSON readers do). Without ``pyshp`` installed the step
raises `UnsupportedFormat` naming the package.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from fbs.model.source import ReadStepEsriShapefile
from node.ingest.errors import PrepareError, ReadError, UnsupportedFormat
from node.ingest.prepare import DEFAULT_LIMITS, extract_member, open_zip
from node.ingest.readers._common import Conformer, Location, rebatch
from node.ingest.readers.geojson import GEOMETRY_COLUMN

_SIDECARS = (".shp", ".shx", ".dbf", ".prj", ".cpg")


def _shapefile_module() -> Any:
    try:
        return importlib.import_module("shapefile")
    except ImportError:
        raise UnsupportedFormat(
            "EsriShapefile needs the 'pyshp' package (pip install pyshp)"
        ) from None


def _extract(path: Path, sub_path: str | None, tmp: Path) -> Path:
    try:
        zf = open_zip(path, DEFAULT_LIMITS)
    except PrepareError as e:
        raise ReadError(str(e), path=path) from None
    with zf:
        names = [i.filename for i in zf.infolist() if not i.is_dir()]
        shps = [n for n in names if n.lower().endswith(".shp")]
        if sub_path is not None:
            shps = [n for n in shps if n == sub_path or fnmatch.fnmatchcase(n, sub_path)]
        if len(shps) != 1:
            raise ReadError(
                f"expected one .shp member{f' matching {sub_path!r}' if sub_path else ''}, "
                f"found {len(shps)}",
                path=path,
            )
        stem = shps[0][:-4]
        for info in zf.infolist():
            if info.filename[: len(stem)] == stem and info.filename[len(stem) :].lower() in (
                _SIDECARS
            ):
                out = tmp / ("data" + info.filename[len(stem) :].lower())
                try:
                    extract_member(zf, info, out, DEFAULT_LIMITS, path)
                except PrepareError as e:
                    raise ReadError(str(e), path=path) from None
        return tmp / "data.shp"


def _value(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


def read_shapefile(
    step: ReadStepEsriShapefile, path: Path, schema: pa.Schema | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream the rows of a shapefile (or a zip holding one).

    Raises:
        UnsupportedFormat: ``pyshp`` is not installed.
        ReadError: not a shapefile / archive, missing members, a value that does not fit.
    """
    shapefile = _shapefile_module()
    conformer = Conformer(schema, missing_as_null=True)
    with tempfile.TemporaryDirectory(prefix="odf-shp-") as tmp:
        shp = _extract(path, step.sub_path, Path(tmp)) if zipfile.is_zipfile(path) else path
        try:
            reader = shapefile.Reader(str(shp))
        except (shapefile.ShapefileException, OSError, ValueError) as e:
            raise ReadError(f"not a readable shapefile: {e}", path=path) from None
        with reader:
            names = [f[0] for f in reader.fields[1:]]
            if GEOMETRY_COLUMN in names:
                raise ReadError(
                    "an attribute named 'geometry' clashes with the geometry column",
                    path=path,
                    column=GEOMETRY_COLUMN,
                )
            rows: list[dict[str, Any]] = []
            done = 0
            try:
                for sr in reader.iterShapeRecords():
                    row = {n: _value(v) for n, v in zip(names, sr.record, strict=False)}
                    geo = sr.shape.__geo_interface__ if sr.shape.shapeType else None
                    row[GEOMETRY_COLUMN] = (
                        None if geo is None else json.dumps(geo, separators=(",", ":"))
                    )
                    rows.append(row)
                    if len(rows) >= batch_rows:
                        yield from _emit(rows, conformer, path, done, batch_rows)
                        done += len(rows)
                        rows = []
            except (shapefile.ShapefileException, OSError, ValueError, struct.error) as e:
                raise ReadError(f"corrupt shapefile after record {done}: {e}", path=path) from None
            if rows:
                yield from _emit(rows, conformer, path, done, batch_rows)


def _emit(
    rows: list[dict[str, Any]], conformer: Conformer, path: Path, done: int, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    try:
        batch = pa.RecordBatch.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ReadError(f"records {done + 1}..{done + len(rows)}: {e}", path=path) from None
    yield from rebatch([conformer.conform(batch, Location(path, done, lambda r: None))], batch_rows)
