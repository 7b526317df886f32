"""Model values <-> plain JSON-compatible data (RFC-013 manifest shapes).

The conversion is generic over the reflection API of `fbs.model` (field descriptors
in schema order, union descriptors with YAML tags, enum spec names); only
`ExtraAttributes` is special-cased because the format renders it as a bare mapping.

Shapes (output; input is more lenient, see `from_plain`):

- tables are mappings with camelCase keys in schema order; absent optionals are
  omitted, defaults are never materialized;
- union values are internally tagged: ``{"kind": "<Tag>", <variant fields>...}``;
- hashes are multibase base16 (``f1620...``), DIDs ``did:odf:fed01...``, instants
  RFC 3339 UTC with ``Z``, raw bytes standard base64 with padding, enums their
  PascalCase spec names, scalars ints / bools.

Every problem with plain input raises `ManifestFieldError` carrying the path of the
offending value (e.g. ``content.metadata[2].read.schema.fields[0].type``).
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import json
import math
import types
from collections.abc import Mapping
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import (
    FbsError,
    InvalidValue,
    ManifestFieldError,
    ManifestLimitExceeded,
)
from fbs.manifest.limits import DEFAULT_MANIFEST_LIMITS, ManifestLimits
from fbs.model.extra import ExtraAttributes
from fbs.model.schema import (
    FieldDesc,
    FieldKind,
    TableDesc,
    UnionDesc,
    VariantDesc,
    all_unions,
    schema_of,
    table_by_name,
    union_of,
)
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp

__all__ = [
    "TAG_KEY",
    "YamlFloat",
    "YamlInt",
    "check_plain",
    "from_plain",
    "from_plain_desc",
    "resolve_target",
    "to_plain",
]

#: Key holding the variant tag of an internally tagged union value.
TAG_KEY: Final = "kind"

Target = type | UnionDesc | TableDesc | str | types.UnionType


class YamlInt(int):
    """An integer read from an unquoted YAML scalar; remembers the scalar's text.

    YAML resolves ``value: 10`` to a number, but a string field may legitimately hold
    ``10``; `from_plain` uses the original text there (as serde_yaml does).
    """

    yaml_text: str

    def __new__(cls, value: int, text: str) -> YamlInt:
        obj = super().__new__(cls, value)
        obj.yaml_text = text
        return obj


class YamlFloat(float):
    """A float read from an unquoted YAML scalar; remembers the scalar's text."""

    yaml_text: str

    def __new__(cls, value: float, text: str) -> YamlFloat:
        obj = super().__new__(cls, value)
        obj.yaml_text = text
        return obj


# -- helpers ----------------------------------------------------------------------------


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def _type_name(obj: object) -> str:
    if obj is None:
        return "null"
    if isinstance(obj, bool):
        return "a boolean"
    if isinstance(obj, int):
        return "an integer"
    if isinstance(obj, float):
        return "a number"
    if isinstance(obj, str):
        return "a string"
    if isinstance(obj, Mapping):
        return "a mapping"
    if isinstance(obj, list | tuple):
        return "a sequence"
    return f"a {type(obj).__name__}"


def _casings(name: str) -> tuple[str, ...]:
    """Accepted spellings of a PascalCase name: itself, camelCase, all-lowercase."""
    return (name, name[:1].lower() + name[1:], name.lower())


@functools.cache
def _tag_index(union: UnionDesc) -> dict[str, VariantDesc]:
    index: dict[str, VariantDesc] = {}
    for v in union.variants:
        for spelling in _casings(v.tag):
            if index.setdefault(spelling, v) is not v:
                raise TypeError(f"{union.name}: ambiguous tag spelling {spelling!r}")
    return index


@functools.cache
def _enum_index(enum_type: type[enum.IntEnum]) -> dict[str, enum.IntEnum]:
    index: dict[str, enum.IntEnum] = {}
    for member in enum_type:
        for spelling in _casings(member.name):
            if index.setdefault(spelling, member) is not member:
                raise TypeError(f"{enum_type.__name__}: ambiguous spelling {spelling!r}")
    return index


@functools.cache
def _fields_by_camel(desc: TableDesc) -> dict[str, FieldDesc]:
    return {f.camel: f for f in desc.fields}


def _is_extra(desc: TableDesc) -> bool:
    # The format writes ExtraAttributes as the attribute mapping itself, not as
    # ``{attributes: {...}}``.
    return desc.cls is ExtraAttributes


def _check_union_tables() -> None:
    """Import-time guard: a variant field named ``kind`` would clash with the tag."""
    for u in all_unions():
        _tag_index(u)
        for v in u.variants:
            if TAG_KEY in _fields_by_camel(schema_of(v.cls)):
                raise TypeError(f"{u.name}.{v.tag} has a field named {TAG_KEY!r}")


def resolve_target(target: Target) -> TableDesc | UnionDesc:
    """Descriptor for a conversion target.

    Args:
        target: a model class (``SetInfo``), a union alias (``ReadStep``), a
            `TableDesc` / `UnionDesc` (``METADATA_EVENT``), or a schema name
            (``"MetadataEvent"``, ``"SetInfo"``; union names win).

    Raises:
        InvalidValue: if ``target`` names nothing in the schema. Single-variant unions
            (``Transform = TransformSql``) are plain classes: pass their `UnionDesc`
            (``TRANSFORM``) to get the tagged form.
    """
    if isinstance(target, TableDesc | UnionDesc):
        return target
    if isinstance(target, str):
        try:
            return union_of(target)
        except KeyError:
            pass
        try:
            return table_by_name(target)
        except KeyError:
            raise InvalidValue(f"no table or union named {target!r}") from None
    if isinstance(target, types.UnionType):
        members = set(target.__args__)
        for u in all_unions():
            if {v.cls for v in u.variants} == members:
                return u
        raise InvalidValue(f"{target} is not a schema union")
    try:
        return schema_of(target)
    except KeyError:
        raise InvalidValue(f"{target!r} is not a model class") from None


# -- limits -----------------------------------------------------------------------------


def check_plain(obj: object, limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS) -> None:
    """Check nesting depth and expanded node count of plain data, iteratively.

    Shared sub-objects (YAML aliases) are counted at every use, so an alias "bomb" is
    stopped after `ManifestLimits.max_nodes` steps; a cyclic structure hits the depth
    limit.

    Raises:
        ManifestLimitExceeded: if a limit is exceeded.
    """
    stack: list[tuple[object, int]] = [(obj, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise ManifestLimitExceeded(f"manifest has more than {limits.max_nodes} nodes")
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limits.max_depth and len(children) > 0:
            raise ManifestLimitExceeded(f"manifest nested deeper than {limits.max_depth}")
        stack.extend((c, depth + 1) for c in children)


# -- plain -> model ---------------------------------------------------------------------


def from_plain(
    target: Target,
    obj: object,
    *,
    path: str = "",
    limits: ManifestLimits = DEFAULT_MANIFEST_LIMITS,
) -> Any:
    """Build a model value from plain data (parsed YAML / JSON).

    Leniency: union tags and enum names are accepted in PascalCase, camelCase or
    all-lowercase; a union value may be the bare tag (short form, ``type: String``)
    when its variant needs no fields; ``null`` for an optional field means absent; a
    string field accepts an unquoted YAML number by its text (`YamlInt`, `YamlFloat`).

    Args:
        target: see `resolve_target`.
        obj: the plain data.
        path: location of ``obj`` used in error messages (e.g. ``"content"``).
        limits: depth / node bounds checked before converting.

    Raises:
        ManifestFieldError: wrong type, unknown or missing field, bad tag, out-of-range
            number, malformed hash / DID / timestamp / base64; ``path`` says where.
        ManifestLimitExceeded: ``obj`` is too deep or too large.
        InvalidValue: ``target`` is not a schema table or union.
    """
    desc = resolve_target(target)
    check_plain(obj, limits)
    return from_plain_desc(desc, obj, path)


def from_plain_desc(desc: TableDesc | UnionDesc, obj: object, path: str) -> Any:
    """`from_plain` for a resolved descriptor, *without* the limits check.

    Only for data already checked with `check_plain` (e.g. by the YAML loader).

    Raises:
        ManifestFieldError: see `from_plain`.
    """
    if isinstance(desc, UnionDesc):
        return _union_from(desc, obj, path)
    return _table_from(desc, obj, path)


def _union_from(union: UnionDesc, obj: object, path: str) -> Any:
    index = _tag_index(union)
    if isinstance(obj, str):
        variant = index.get(obj)
        if variant is None:
            raise ManifestFieldError(path, _unknown_tag(union, obj))
        desc = schema_of(variant.cls)
        required = [f.camel for f in desc.fields if not f.optional]
        if required:
            raise ManifestFieldError(
                path,
                f"{union.name} {variant.tag!r} needs field(s) {', '.join(required)}; "
                f"the short form (bare name) is only for variants without required fields",
            )
        return _construct(desc, {}, path)
    if not isinstance(obj, Mapping):
        raise ManifestFieldError(
            path,
            f"expected a {union.name} mapping with {TAG_KEY!r} or a bare variant name, "
            f"got {_type_name(obj)}",
        )
    tag = obj.get(TAG_KEY)
    if tag is None:
        raise ManifestFieldError(path, f"missing {TAG_KEY!r} naming the {union.name} variant")
    if not isinstance(tag, str):
        raise ManifestFieldError(_child(path, TAG_KEY), f"expected a string, got {_type_name(tag)}")
    variant = index.get(tag)
    if variant is None:
        raise ManifestFieldError(_child(path, TAG_KEY), _unknown_tag(union, tag))
    return _table_from(schema_of(variant.cls), obj, path, skip_tag=True)


def _unknown_tag(union: UnionDesc, tag: str) -> str:
    tags = ", ".join(v.tag for v in union.variants)
    return f"unknown {union.name} variant {tag!r} (expected one of: {tags})"


def _table_from(desc: TableDesc, obj: object, path: str, *, skip_tag: bool = False) -> Any:
    if not isinstance(obj, Mapping):
        raise ManifestFieldError(path, f"expected a {desc.name} mapping, got {_type_name(obj)}")
    if _is_extra(desc):
        return _extra_from(obj, path)
    fields = _fields_by_camel(desc)
    kwargs: dict[str, Any] = {}
    for key, raw in obj.items():
        if skip_tag and key == TAG_KEY:
            continue
        if not isinstance(key, str):
            raise ManifestFieldError(path, f"keys must be strings, got {_type_name(key)} {key!r}")
        fd = fields.get(key)
        where = _child(path, key)
        if fd is None:
            valid = ", ".join(fields) or "none"
            raise ManifestFieldError(where, f"unknown field of {desc.name} (valid: {valid})")
        if raw is None:
            if fd.optional:
                continue
            raise ManifestFieldError(where, "required field must not be null")
        kwargs[fd.name] = _field_from(fd, raw, where)
    missing = [f.camel for f in desc.fields if not f.optional and f.name not in kwargs]
    if missing:
        raise ManifestFieldError(
            path, f"{desc.name} is missing required field(s): {', '.join(missing)}"
        )
    return _construct(desc, kwargs, path)


def _construct(desc: TableDesc, kwargs: dict[str, Any], path: str) -> Any:
    try:
        return desc.cls(**kwargs)
    except (FbsError, TypeError, ValueError) as e:
        raise ManifestFieldError(path, f"invalid {desc.name}: {e}") from None


def _as_str(obj: object, path: str) -> str:
    if isinstance(obj, YamlInt | YamlFloat):
        return obj.yaml_text
    if not isinstance(obj, str):
        hint = " (quote it)" if isinstance(obj, bool | int | float) else ""
        raise ManifestFieldError(path, f"expected a string, got {_type_name(obj)}{hint}")
    try:
        obj.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestFieldError(path, "string is not valid Unicode text") from None
    return str(obj)


def _as_text(obj: object, path: str, what: str) -> str:
    """A genuine string (not a number's text): hashes, DIDs, timestamps, names."""
    if not isinstance(obj, str):
        raise ManifestFieldError(path, f"expected {what} string, got {_type_name(obj)}")
    return obj


def _as_seq(obj: object, path: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(obj, list | tuple):
        raise ManifestFieldError(path, f"expected a sequence, got {_type_name(obj)}")
    return obj


def _field_from(fd: FieldDesc, raw: object, path: str) -> Any:
    kind = fd.kind
    if kind is FieldKind.STRING:
        return _as_str(raw, path)
    if kind is FieldKind.MULTIHASH:
        text = _as_text(raw, path, "a multibase hash")
        try:
            return Multihash.from_multibase(text)
        except FbsError as e:
            raise ManifestFieldError(path, f"invalid hash: {e}") from None
    if kind is FieldKind.DATASET_ID:
        text = _as_text(raw, path, "a DID")
        try:
            return DatasetId.from_did(text)
        except FbsError as e:
            raise ManifestFieldError(path, f"invalid DID: {e}") from None
    if kind is FieldKind.BYTES:
        text = _as_text(raw, path, "a base64")
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, ValueError):
            raise ManifestFieldError(path, "invalid base64 (standard alphabet, padded)") from None
    if kind is FieldKind.SCALAR:
        return _scalar_from(fd, raw, path)
    if kind is FieldKind.ENUM:
        assert fd.enum_type is not None
        text = _as_text(raw, path, f"a {fd.enum_type.__name__}")
        member = _enum_index(fd.enum_type).get(text)
        if member is None:
            names = ", ".join(m.name for m in fd.enum_type)
            raise ManifestFieldError(
                path, f"unknown {fd.enum_type.__name__} {text!r} (expected one of: {names})"
            )
        return member
    if kind is FieldKind.TIMESTAMP:
        text = _as_text(raw, path, "an RFC 3339 timestamp")
        try:
            ts = Timestamp.parse_rfc3339(text)
            ts.to_struct_parts()  # must be storable in a block
        except FbsError as e:
            raise ManifestFieldError(path, f"invalid timestamp: {e}") from None
        return ts
    if kind is FieldKind.TABLE:
        return _table_from(fd.table, raw, path)
    if kind is FieldKind.UNION:
        return _union_from(fd.union, raw, path)
    if kind is FieldKind.VEC_STRING:
        return tuple(_as_str(x, _item(path, i)) for i, x in enumerate(_as_seq(raw, path)))
    if kind is FieldKind.VEC_TABLE:
        desc = fd.table
        return tuple(_table_from(desc, x, _item(path, i)) for i, x in enumerate(_as_seq(raw, path)))
    if kind is FieldKind.VEC_UNION:
        union = fd.union
        return tuple(
            _union_from(union, x, _item(path, i)) for i, x in enumerate(_as_seq(raw, path))
        )
    # JSON fields only occur inside ExtraAttributes, which is handled as a whole.
    raise ManifestFieldError(path, f"unsupported field kind {kind.value}")


def _scalar_from(fd: FieldDesc, raw: object, path: str) -> int | bool:
    st = fd.scalar
    assert st is not None
    if st.is_bool:
        if not isinstance(raw, bool):
            raise ManifestFieldError(path, f"expected true or false, got {_type_name(raw)}")
        return raw
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ManifestFieldError(path, f"expected an integer, got {_type_name(raw)}")
    if not (st.lo <= raw <= st.hi):
        raise ManifestFieldError(path, f"{raw} is out of range for {st.name} [{st.lo}, {st.hi}]")
    return int(raw)


def _extra_from(obj: Mapping[Any, Any], path: str) -> ExtraAttributes:
    attrs = _json_from(obj, path)
    try:
        return ExtraAttributes(attrs)
    except FbsError as e:
        raise ManifestFieldError(path, f"invalid extra attributes: {e}") from None


def _json_from(obj: object, path: str) -> Any:
    """Copy a JSON value, normalizing YAML number subclasses and refusing non-JSON data."""
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ManifestFieldError(path, "JSON numbers must be finite")
        return float(obj)
    if isinstance(obj, str):
        return _as_str(obj, path)
    if isinstance(obj, list | tuple):
        return [_json_from(x, _item(path, i)) for i, x in enumerate(obj)]
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            # An unquoted YAML number as a key (``2020: x``) is its text, as in serde_yaml.
            if not isinstance(k, str | YamlInt | YamlFloat):
                raise ManifestFieldError(path, f"JSON object keys must be strings, got {k!r}")
            key = _as_str(k, path)
            if key in out:
                raise ManifestFieldError(path, f"duplicate key {key!r}")
            out[key] = _json_from(v, _child(path, key))
        return out
    raise ManifestFieldError(path, f"not a JSON value: {_type_name(obj)}")


# -- model -> plain ---------------------------------------------------------------------


def to_plain(value: object, *, union: UnionDesc | str | None = None) -> Any:
    """Convert a model value to plain JSON-compatible data.

    Args:
        value: a model table instance, a tuple/list of them, or a leaf value
            (`Multihash`, `DatasetId`, `Timestamp`, enum member, bytes, str, int, bool).
        union: render ``value`` as a tagged member of this union (``METADATA_EVENT``
            or ``"MetadataEvent"``); union-typed *fields* are always tagged.

    Raises:
        InvalidValue: ``value`` is not a valid model value (wrong type in a field,
            missing required field, out-of-range scalar, not a member of ``union``).
    """
    if union is not None:
        desc = union if isinstance(union, UnionDesc) else union_of(union)
        return _union_to(desc, value, "")
    return _value_to(value, "")


def _value_to(value: object, path: str) -> Any:
    try:
        desc = schema_of(value)
    except KeyError:
        pass
    else:
        return _table_to(desc, value, path)
    if isinstance(value, list | tuple):
        return [_value_to(v, _item(path, i)) for i, v in enumerate(value)]
    if isinstance(value, Multihash):
        return value.to_multibase()
    if isinstance(value, DatasetId):
        return value.to_did_odf()
    if isinstance(value, Timestamp):
        return value.to_rfc3339()
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, str | int | bool):
        return value
    raise InvalidValue(f"{path or 'value'}: cannot convert {type(value).__name__}")


def _union_to(union: UnionDesc, value: object, path: str) -> dict[str, Any]:
    variant = union.by_cls.get(type(value))
    if variant is None:
        raise InvalidValue(f"{path or 'value'}: {type(value).__name__} is not a {union.name}")
    out: dict[str, Any] = {TAG_KEY: variant.tag}
    out.update(_table_to(schema_of(variant.cls), value, path))
    return out


def _table_to(desc: TableDesc, value: object, path: str) -> Any:
    if not isinstance(value, desc.cls):
        raise InvalidValue(f"{path or 'value'}: expected {desc.name}, got {type(value).__name__}")
    if isinstance(value, ExtraAttributes):
        return json.loads(value.json_text)
    out: dict[str, Any] = {}
    for fd in desc.fields:
        v = getattr(value, fd.name)
        where = _child(path, fd.camel)
        if v is None:
            if not fd.optional:
                raise InvalidValue(f"{where}: required field is None")
            continue
        out[fd.camel] = _field_to(fd, v, where)
    return out


def _expect(value: object, cls: type | tuple[type, ...], path: str) -> None:
    if not isinstance(value, cls):
        raise InvalidValue(f"{path}: unexpected {type(value).__name__}")


def _field_to(fd: FieldDesc, v: object, path: str) -> Any:
    kind = fd.kind
    if kind is FieldKind.STRING:
        _expect(v, str, path)
        return v
    if kind is FieldKind.MULTIHASH:
        _expect(v, Multihash, path)
        assert isinstance(v, Multihash)
        return v.to_multibase()
    if kind is FieldKind.DATASET_ID:
        _expect(v, DatasetId, path)
        assert isinstance(v, DatasetId)
        return v.to_did_odf()
    if kind is FieldKind.BYTES:
        _expect(v, bytes, path)
        assert isinstance(v, bytes)
        return base64.b64encode(v).decode("ascii")
    if kind is FieldKind.SCALAR:
        st = fd.scalar
        assert st is not None
        if st.is_bool:
            _expect(v, bool, path)
            return v
        if isinstance(v, bool) or not isinstance(v, int) or not (st.lo <= v <= st.hi):
            raise InvalidValue(f"{path}: {v!r} is not a valid {st.name}")
        return int(v)
    if kind is FieldKind.ENUM:
        assert fd.enum_type is not None
        _expect(v, fd.enum_type, path)
        assert isinstance(v, enum.Enum)
        return v.name
    if kind is FieldKind.TIMESTAMP:
        _expect(v, Timestamp, path)
        assert isinstance(v, Timestamp)
        return v.to_rfc3339()
    if kind is FieldKind.TABLE:
        return _table_to(fd.table, v, path)
    if kind is FieldKind.UNION:
        return _union_to(fd.union, v, path)
    if kind in (FieldKind.VEC_STRING, FieldKind.VEC_TABLE, FieldKind.VEC_UNION):
        _expect(v, (tuple, list), path)
        assert isinstance(v, tuple | list)
        if kind is FieldKind.VEC_STRING:
            for i, x in enumerate(v):
                _expect(x, str, _item(path, i))
            return list(v)
        if kind is FieldKind.VEC_TABLE:
            desc = fd.table
            return [_table_to(desc, x, _item(path, i)) for i, x in enumerate(v)]
        union = fd.union
        return [_union_to(union, x, _item(path, i)) for i, x in enumerate(v)]
    raise InvalidValue(f"{path}: unsupported field kind {kind.value}")


_check_union_tables()
