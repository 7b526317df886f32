"""Pure rules of the ODF metadata model that several layers apply (one place for each).

- Objects a block references: `new_data`, `new_checkpoint` and `referenced_objects`
  (only ``AddData`` and ``ExecuteTransform`` name data and checkpoint files).
- Schema evolution (chain rule 12): `same_type` compares data types the one way every
  layer uses (field attributes such as encodings may change freely; optionality counts);
  `schema_change_problem` says why one schema may not follow another; `evolve_schema`
  derives the schema under which data of a given shape may follow the current one.
- Transform normalization: `normalize_transform` (legacy ``TransformSql.query``).

Nothing here does I/O or imports outside `fbs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from fbs.model import (
    AddData,
    Checkpoint,
    DataField,
    DataSchema,
    DataSlice,
    DataType,
    DataTypeList,
    DataTypeMap,
    DataTypeOption,
    DataTypeStruct,
    ExecuteTransform,
    MetadataEvent,
    SqlQueryStep,
    Transform,
    TransformSql,
)
from fbs.multiformats import Multihash

__all__ = [
    "OBJECT_KINDS",
    "ObjectKind",
    "ObjectRef",
    "SchemaChangeProblem",
    "SchemaProblemKind",
    "evolve_schema",
    "new_checkpoint",
    "new_data",
    "normalize_transform",
    "referenced_objects",
    "same_type",
    "schema_change_problem",
    "strip_attributes",
]

# -- objects a block references ----------------------------------------------------------------

ObjectKind = Literal["data", "checkpoint"]
#: The kinds of objects a block can reference, in the order `referenced_objects` lists them.
OBJECT_KINDS: Final[tuple[ObjectKind, ObjectKind]] = ("data", "checkpoint")


class ObjectRef(NamedTuple):
    """A data or checkpoint file named by a block: its kind, physical hash and byte size."""

    kind: ObjectKind
    physical_hash: Multihash
    size: int


def new_data(event: MetadataEvent) -> DataSlice | None:
    """The data slice ``event`` adds (``AddData`` / ``ExecuteTransform``), else None."""
    if isinstance(event, AddData | ExecuteTransform):
        return event.new_data
    return None


def new_checkpoint(event: MetadataEvent) -> Checkpoint | None:
    """The checkpoint ``event`` records (``AddData`` / ``ExecuteTransform``), else None."""
    if isinstance(event, AddData | ExecuteTransform):
        return event.new_checkpoint
    return None


def referenced_objects(event: MetadataEvent) -> tuple[ObjectRef, ...]:
    """Every object file ``event`` names: its data slice first, then its checkpoint."""
    out: list[ObjectRef] = []
    d = new_data(event)
    if d is not None:
        out.append(ObjectRef("data", d.physical_hash, d.size))
    c = new_checkpoint(event)
    if c is not None:
        out.append(ObjectRef("checkpoint", c.physical_hash, c.size))
    return tuple(out)


# -- schema evolution (rule 12) -----------------------------------------------------------------


def strip_attributes(t: DataType) -> DataType:
    """``t`` with every nested field's attributes removed (they may change freely)."""
    if isinstance(t, DataTypeStruct):
        return DataTypeStruct(
            fields=tuple(DataField(name=f.name, type=strip_attributes(f.type)) for f in t.fields)
        )
    if isinstance(t, DataTypeOption):
        return DataTypeOption(inner=strip_attributes(t.inner))
    if isinstance(t, DataTypeList):
        return t.replace(item_type=strip_attributes(t.item_type))
    if isinstance(t, DataTypeMap):
        return t.replace(
            key_type=strip_attributes(t.key_type), value_type=strip_attributes(t.value_type)
        )
    return t


def same_type(a: DataType, b: DataType) -> bool:
    """Whether ``a`` and ``b`` are the same type for schema evolution (attributes ignored)."""
    return strip_attributes(a) == strip_attributes(b)


SchemaProblemKind = Literal["duplicate", "removed", "retyped", "added-required"]


@dataclass(frozen=True, slots=True)
class SchemaChangeProblem:
    """Why a schema may not follow another: ``kind`` and the field concerned (if one)."""

    kind: SchemaProblemKind
    field: str | None = None

    def __str__(self) -> str:
        if self.kind == "duplicate":
            return "duplicate field names"
        if self.kind == "removed":
            return f"field {self.field!r} was removed"
        if self.kind == "retyped":
            return f"field {self.field!r} changed its type or optionality"
        return f"added field {self.field!r} must be optional"


def schema_change_problem(
    current: DataSchema | None, new: DataSchema
) -> SchemaChangeProblem | None:
    """Why ``new`` may not follow ``current`` (None: the first schema), or None if it may.

    Evolution may only change attributes, reorder fields and add optional fields; field
    names must be distinct. Whether ``new`` changes anything at all is not checked here.
    """
    names = [f.name for f in new.fields]
    if len(set(names)) != len(names):
        return SchemaChangeProblem("duplicate")
    if current is None:
        return None
    old_fields = {f.name: f for f in current.fields}
    new_fields = {f.name: f for f in new.fields}
    for name, old in old_fields.items():
        if name not in new_fields:
            return SchemaChangeProblem("removed", name)
        if not same_type(old.type, new_fields[name].type):
            return SchemaChangeProblem("retyped", name)
    for name, f in new_fields.items():
        if name not in old_fields and not isinstance(f.type, DataTypeOption):
            return SchemaChangeProblem("added-required", name)
    return None


def _required(t: DataType) -> DataType:
    return t.inner if isinstance(t, DataTypeOption) else t


def evolve_schema(current: DataSchema, output: DataSchema) -> DataSchema | None:
    """The schema under which data of schema ``output`` may follow ``current`` (rule 12).

    ``output`` describes produced data whose column nullability is an artifact: its fields
    match recorded ones by name and type, top-level optionality ignored. The result has
    ``output``'s field order; fields already recorded keep their recorded definitions, new
    fields are recorded as optional. It equals ``current`` when ``output`` fits it as it
    is, and is None when a recorded field is missing or has another type.
    """
    recorded = {f.name: f for f in current.fields}
    if not recorded.keys() <= {f.name for f in output.fields}:
        return None
    fields: list[DataField] = []
    for f in output.fields:
        old = recorded.get(f.name)
        if old is not None:
            if not same_type(_required(old.type), _required(f.type)):
                return None
            fields.append(old)
        elif isinstance(f.type, DataTypeOption):
            fields.append(f)
        else:
            fields.append(f.replace(type=DataTypeOption(inner=f.type)))
    return current.replace(fields=tuple(fields))


# -- transforms ---------------------------------------------------------------------------------


def normalize_transform(transform: Transform) -> Transform:
    """Move a legacy ``TransformSql.query`` into ``queries: [{query}]`` (as kamu does)."""
    if (
        isinstance(transform, TransformSql)
        and transform.query is not None
        and not transform.queries
    ):
        return transform.replace(query=None, queries=(SqlQueryStep(query=transform.query),))
    return transform
