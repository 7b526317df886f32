"""Property tests: generated model values round-trip; hostile documents only raise ManifestError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fbs.did import DatasetId
from fbs.errors import ManifestError
from fbs.manifest import (
    dump_manifest,
    dumps_json,
    from_plain,
    load_manifest,
    manifest_from_plain,
    manifest_to_plain,
    to_plain,
)
from fbs.model import (
    METADATA_EVENT,
    DatasetSnapshot,
    ExtraAttributes,
    FieldDesc,
    FieldKind,
    MetadataBlock,
    TableDesc,
    UnionDesc,
    schema_of,
)
from fbs.multiformats import ARROW0_SHA3_256, SHA3_256, Multihash
from fbs.timestamp import Timestamp

DATA = Path(__file__).parent / "data" / "manifests"
FIXTURE_TEXTS = [p.read_text(encoding="utf-8") for p in sorted(DATA.glob("*.yaml"))]

#: Nesting (tables/unions) after which generated values only use leaf variants and
#: leave optional complex fields out, keeping examples small.
MAX_GEN_DEPTH = 4
MAX_LIST = 3

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- generic value strategies over the reflection API -----------------------------------

# Any Unicode text the binary format can store (no lone surrogates), including
# characters YAML treats specially (line separators, BOM, control characters).
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
multihashes = st.builds(
    Multihash,
    st.sampled_from([SHA3_256, ARROW0_SHA3_256]),
    st.binary(min_size=32, max_size=32),
)
dataset_ids = st.builds(DatasetId, st.binary(min_size=32, max_size=32))
# Years 1..9999 keep to_rfc3339 within 4 digits (what RFC 3339 allows).
timestamps = st.builds(
    Timestamp,
    st.integers(-62_135_596_800 * 10**9, 253_402_300_799 * 10**9 + 999_999_999),
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=MAX_LIST) | st.dictionaries(text, inner, max_size=MAX_LIST)
    ),
    max_leaves=8,
)
extras = st.builds(ExtraAttributes, st.dictionaries(text, json_values, max_size=MAX_LIST))

_COMPLEX = {
    FieldKind.TABLE,
    FieldKind.UNION,
    FieldKind.VEC_TABLE,
    FieldKind.VEC_UNION,
}


def _is_leaf(cls: type) -> bool:
    return all(f.optional or f.kind not in _COMPLEX for f in schema_of(cls).fields)


def table_values(desc: TableDesc, depth: int = 0) -> st.SearchStrategy[Any]:
    if desc.cls is ExtraAttributes:
        return extras
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for f in desc.fields:
        s = field_values(f, depth + 1)
        if f.optional:
            s = st.none() if depth >= MAX_GEN_DEPTH and f.kind in _COMPLEX else st.none() | s
        parts[f.name] = s
    return st.fixed_dictionaries(parts).map(lambda kw: desc.cls(**kw))


def union_values(union: UnionDesc, depth: int) -> st.SearchStrategy[Any]:
    descs = [schema_of(v.cls) for v in union.variants if depth < MAX_GEN_DEPTH or _is_leaf(v.cls)]
    return st.one_of([_deferred_table(d, depth) for d in descs])


def _deferred_table(desc: TableDesc, depth: int) -> st.SearchStrategy[Any]:
    # Deferred so that recursive unions (DataType) are built lazily.
    return st.deferred(lambda: table_values(desc, depth))


def field_values(f: FieldDesc, depth: int) -> st.SearchStrategy[Any]:
    k = f.kind
    if k is FieldKind.STRING:
        return text
    if k is FieldKind.MULTIHASH:
        return multihashes
    if k is FieldKind.DATASET_ID:
        return dataset_ids
    if k is FieldKind.BYTES:
        return st.binary(max_size=16)
    if k is FieldKind.SCALAR:
        assert f.scalar is not None
        if f.scalar.is_bool:
            return st.booleans()
        return st.integers(f.scalar.lo, f.scalar.hi)
    if k is FieldKind.ENUM:
        assert f.enum_type is not None
        return st.sampled_from(list(f.enum_type))
    if k is FieldKind.TIMESTAMP:
        return timestamps
    if k is FieldKind.TABLE:
        return st.deferred(lambda: table_values(f.table, depth))
    if k is FieldKind.UNION:
        return union_values(f.union, depth)
    size = 0 if depth > MAX_GEN_DEPTH else MAX_LIST
    if k is FieldKind.VEC_STRING:
        return st.lists(text, max_size=MAX_LIST).map(tuple)
    if k is FieldKind.VEC_TABLE:
        return st.lists(st.deferred(lambda: table_values(f.table, depth)), max_size=size).map(tuple)
    if k is FieldKind.VEC_UNION:
        return st.lists(union_values(f.union, depth), max_size=size).map(tuple)
    raise AssertionError(k)


blocks = table_values(schema_of(MetadataBlock))
snapshots = table_values(schema_of(DatasetSnapshot))
events = union_values(METADATA_EVENT, 0)
manifest_values = st.one_of(blocks, snapshots, events)


# -- round trips ------------------------------------------------------------------------


@SETTINGS
@given(manifest_values)
def test_value_plain_value_is_identity(value: Any) -> None:
    plain = manifest_to_plain(value)
    json.dumps(plain)  # plain data is JSON-compatible
    assert manifest_from_plain(plain).content == value


@SETTINGS
@given(manifest_values)
def test_yaml_round_trip_is_stable(value: Any) -> None:
    text = dump_manifest(value)
    doc = load_manifest(text)
    assert doc.content == value
    assert dump_manifest(doc) == text


@SETTINGS
@given(manifest_values)
def test_json_round_trip(value: Any) -> None:
    assert load_manifest(dumps_json(value)).content == value


@SETTINGS
@given(events)
def test_union_plain_round_trip(value: Any) -> None:
    plain = to_plain(value, union=METADATA_EVENT)
    assert plain["kind"] == METADATA_EVENT.variant_of(value).tag
    assert from_plain(METADATA_EVENT, plain) == value


# -- hostile input ----------------------------------------------------------------------

YAML_SNIPPETS = [
    "&a ", "*a", "!!binary ", "!!python/object:os.system ", "<<: ", "? ", "- ", ": ", "[", "]",
    "{", "}", "'", '"', "|", ">-", "#", "\t", "\n", "\n  ", "%YAML 1.1\n", "---\n", "...\n",
    "~", "null", "yes", "0x10", "1e3", "-1", "18446744073709551616", "2020-01-01", ".nan",
    "kind: ", "Csv", "String", "\ufeff", "\u2028", "\x85", "\x00", "\\", "ü",
]  # fmt: skip


def _apply(text: str, edits: list[tuple[int, int, int, str]]) -> str:
    for op, pos, length, snippet in edits:
        i = pos % (len(text) + 1)
        if op == 0:
            text = text[:i] + snippet + text[i:]
        elif op == 1:
            text = text[:i] + text[i + length :]
        else:
            text = text[:i] + snippet + text[i + length :]
    return text


mutations = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 10_000),
        st.integers(0, 20),
        st.sampled_from(YAML_SNIPPETS) | st.text(max_size=4),
    ),
    min_size=1,
    max_size=6,
)


def _only_manifest_errors(data: str | bytes) -> None:
    try:
        doc = load_manifest(data)
    except ManifestError:
        return
    # Whatever was accepted must be writable and read back the same.
    again = load_manifest(dump_manifest(doc))
    assert again.content == doc.content


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FIXTURE_TEXTS), mutations)
def test_mutated_fixtures_only_raise_manifest_error(base: str, edits: Any) -> None:
    _only_manifest_errors(_apply(base, edits))


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(FIXTURE_TEXTS),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8),
)
def test_byte_flipped_fixtures_only_raise_manifest_error(base: str, flips: Any) -> None:
    data = bytearray(base.encode())
    for pos, byte in flips:
        data[pos % len(data)] = byte
    _only_manifest_errors(bytes(data))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=200))
def test_random_text_only_raises_manifest_error(data: str | bytes) -> None:
    _only_manifest_errors(data)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _replace(obj: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in obj.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(obj)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_structural_mutations_only_raise_manifest_error(data: st.DataObject) -> None:
    value = data.draw(manifest_values)
    plain = manifest_to_plain(value)
    path = data.draw(st.sampled_from(_paths(plain)))
    replacement = data.draw(json_values | st.sampled_from(["Csv", "String", "kind", 2**70, -1]))
    mutated = _replace(plain, path, replacement)
    try:
        doc = manifest_from_plain(mutated)
    except ManifestError:
        return
    assert manifest_from_plain(manifest_to_plain(doc)) == doc
