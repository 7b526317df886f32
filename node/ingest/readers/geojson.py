"""GeoJSON readers: `ReadStepGeoJson` (a FeatureCollection) and `ReadStepNdGeoJson`.

Each Feature becomes one row: its ``properties`` as columns, plus a ``geometry`` column
holding the Feature's geometry as compact GeoJSON text (a string column; null for a
Feature without geometry). Keeping geometry as GeoJSON text is lossless, needs no GIS
library, and matches what kamu stores for geo data without a spatial engine. A property
named ``geometry`` clashes with that column and is refused. The Feature ``id`` and any
foreign members are not kept (declare them as properties if they matter).

A FeatureCollection is read whole (at most `MAX_JSON_DOCUMENT_BYTES`); NdGeoJson (one
Feature per line) streams. Declared schemas apply to the properties and ``geometry``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from fbs.model.source import ReadStepGeoJson, ReadStepNdGeoJson
from node.ingest.errors import ReadError
from node.ingest.readers._common import Conformer
from node.ingest.readers.json import load_document, records_to_batches

#: Name of the column that carries each Feature's geometry (GeoJSON text).
GEOMETRY_COLUMN: Final = "geometry"
#: Longest line accepted in an NdGeoJson file.
MAX_NDGEOJSON_LINE_BYTES: Final = 64 << 20


def feature_record(feature: Any, path: Path, where: str) -> dict[str, Any]:
    """The row of one GeoJSON Feature.

    Raises:
        ReadError: if ``feature`` is not a Feature object or clashes with ``geometry``.
    """
    if not isinstance(feature, dict) or feature.get("type") != "Feature":
        raise ReadError(f"{where}: expected a GeoJSON Feature object", path=path)
    props = feature.get("properties") or {}
    if not isinstance(props, dict):
        raise ReadError(f"{where}: Feature properties must be an object", path=path)
    if GEOMETRY_COLUMN in props:
        raise ReadError(
            f"{where}: a property named {GEOMETRY_COLUMN!r} clashes with the geometry column",
            path=path,
            column=GEOMETRY_COLUMN,
        )
    geometry = feature.get("geometry")
    record = dict(props)
    record[GEOMETRY_COLUMN] = (
        None if geometry is None else json.dumps(geometry, separators=(",", ":"))
    )
    return record


def read_geojson(
    step: ReadStepGeoJson, path: Path, schema: pa.Schema | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """The batches of a GeoJSON FeatureCollection (one row per Feature).

    Raises:
        ReadError: not JSON, not a FeatureCollection, a bad Feature, a value that does
            not fit its column.
    """
    del step
    doc = load_document(path, None)
    if not isinstance(doc, dict) or doc.get("type") != "FeatureCollection":
        raise ReadError("expected a GeoJSON FeatureCollection", path=path)
    features = doc.get("features")
    if not isinstance(features, list):
        raise ReadError("FeatureCollection has no 'features' array", path=path)
    records = ((i + 1, feature_record(f, path, f"feature {i + 1}")) for i, f in enumerate(features))
    conformer = Conformer(schema, missing_as_null=True)
    yield from records_to_batches(records, path, conformer, batch_rows, lines=False)


def _nd_features(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        f = path.open("rb")
    except OSError as e:
        raise ReadError(f"cannot open: {e}", path=path) from None
    with f:
        for number, raw in enumerate(f, start=1):
            if len(raw) > MAX_NDGEOJSON_LINE_BYTES:
                raise ReadError(
                    f"line longer than {MAX_NDGEOJSON_LINE_BYTES} bytes", path=path, line=number
                )
            if not raw.strip():
                continue
            try:
                feature = json.loads(raw)
            except (json.JSONDecodeError, UnicodeError) as e:
                raise ReadError(f"not valid JSON: {e}", path=path, line=number) from None
            except RecursionError:
                raise ReadError("JSON nested too deeply", path=path, line=number) from None
            try:
                yield number, feature_record(feature, path, f"line {number}")
            except ReadError as e:
                raise ReadError(
                    e.reason.removeprefix(f"line {number}: "),
                    path=path,
                    line=number,
                    column=e.column,
                ) from None


def read_ndgeojson(
    step: ReadStepNdGeoJson, path: Path, schema: pa.Schema | None, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream the batches of a file with one GeoJSON Feature per line.

    Raises:
        ReadError: a line that is not a Feature, a value that does not fit its column.
    """
    del step
    conformer = Conformer(schema, missing_as_null=True)
    yield from records_to_batches(_nd_features(path), path, conformer, batch_rows, lines=True)
