"""Typed, frozen values for everything in the ODF v0.38.0 flatbuffers schema.

Every schema table is a frozen, slotted, keyword-only class, written with its codec spec by
``scripts/gen-model`` from fbs/schema/odf.fbs (see `fbs.value`), whose fields are the
schema's snake_case names in schema (slot) order; ``value.replace(field=...)`` copies one
with fields changed. Conventions:

- optional fields default to ``None`` (absent in the flatbuffer); vectors are tuples;
  an optional vector distinguishes ``None`` (absent) from ``()`` (empty vector);
- multihash bytes are `fbs.multiformats.Multihash`, DID bytes `fbs.did.DatasetId`,
  ``TransformInput.dataset_ref`` is the textual DatasetRef (`str`), instants are
  `fbs.timestamp.Timestamp`, enums are `enum.IntEnum` with spec member names
  (``TimeUnit.Millisecond``, ``CompressionFormat.Gzip``, ``DatasetKind.Root`` ...);
- `ExtraAttributes` holds a JSON object (``attributes``) and its canonical text
  (``json_text``: compact, keys sorted at every level);
- a union is a type alias of its variant classes (``ReadStep = ReadStepCsv | ...``);
  vectors of unions (``SetPollingSource.prepare``, ``DatasetSnapshot.metadata``) are
  tuples of variants (the ``*Wrapper`` tables are a codec detail).

Reflection API (`fbs.model.schema`, re-exported here):

- ``schema_of(cls_or_value) -> TableDesc``: ``name`` (schema table name), ``cls``,
  ``num_slots`` and ``fields``: a tuple of `FieldDesc` in slot order with
  ``name`` (python), ``camel`` (YAML/JSON name), ``slot`` (vtable slot of the value;
  for unions ``type_slot == slot - 1`` holds the ``_type`` byte), ``kind`` (`FieldKind`:
  STRING, MULTIHASH, DATASET_ID, BYTES, JSON, SCALAR, ENUM, TIMESTAMP, TABLE, UNION,
  VEC_STRING, VEC_TABLE, VEC_UNION), ``optional``, ``scalar`` (`ScalarType` with struct
  ``fmt`` and range, for SCALAR/ENUM), ``default`` (flatbuffers default of non-optional
  scalars/enums: not written when equal), ``enum_type``, ``ref`` (referenced table or
  union name; resolved by the ``table`` / ``union`` properties) and ``wrapper`` (wrapper
  table name of VEC_UNION).
- ``union_of(name) -> UnionDesc``: ``variants`` = `VariantDesc` (``code`` 1-based type code,
  ``cls``, ``tag`` = YAML kind without the union prefix: ``Csv``, ``Sql``, ``FilesGlob``,
  ``String``, ``Option``, ``AddData`` ...), lookups ``by_code``, ``by_cls``, ``by_tag``
  and ``variant_of(value)``. Module constants such as `DATA_TYPE`, `READ_STEP`,
  `METADATA_EVENT` are the same descriptors.
- ``table_by_name(name)``, ``all_tables()``, ``all_unions()``.
"""

from __future__ import annotations

from fbs.did import DatasetId
from fbs.model import data, engine, enums, events, extra, schema, source
from fbs.model.data import *  # noqa: F403
from fbs.model.engine import *  # noqa: F403
from fbs.model.enums import *  # noqa: F403
from fbs.model.events import *  # noqa: F403
from fbs.model.extra import *  # noqa: F403
from fbs.model.schema import (
    FieldDesc,
    FieldKind,
    ScalarType,
    TableDesc,
    UnionDesc,
    VariantDesc,
    all_tables,
    all_unions,
    schema_of,
    table_by_name,
    union_of,
)
from fbs.model.source import *  # noqa: F403
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp

__all__ = [
    "DatasetId",
    "FieldDesc",
    "FieldKind",
    "Multihash",
    "ScalarType",
    "TableDesc",
    "Timestamp",
    "UnionDesc",
    "VariantDesc",
    "all_tables",
    "all_unions",
    "schema",
    "schema_of",
    "table_by_name",
    "union_of",
]
__all__ += data.__all__
__all__ += engine.__all__
__all__ += enums.__all__
__all__ += events.__all__
__all__ += extra.__all__
__all__ += source.__all__
