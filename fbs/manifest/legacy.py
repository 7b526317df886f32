"""Older and newer DatasetSnapshot manifest forms, converted to the current one.

kamu itself reads only the current ``kind: DatasetSnapshot`` envelope; manifests in the
wild still use earlier ODF forms, and ODF v0.39 adds RFC-018 resource manifests. This
module rewrites such *plain data* (parsed YAML / JSON) into the current form before the
model reads it, and reports every rewrite as a `Deprecation` naming the field, so the
caller can print one notice line each. The rewrite never guesses: a value that has no
exact current equivalent (a non-default removed Csv option, a ``multiLine`` JSON Lines
reader) is refused with a `ManifestFieldError`, and anything the rules do not touch is
left for the model to accept or refuse as usual. The current form passes unchanged
with no notice, so the block written is the same whatever form was given.

Rules (see ../shared/docs/manifest-forms.md §1.2 and §2):

- RFC-018 resource (``$schema: https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset``,
  ``headers``, ``spec``, ``status``): name = ``headers.account`` + ``/`` + ``headers.name``;
  kind and metadata from ``spec``; ``status``, ``headers.id/labels/annotations`` and
  ``spec.volume`` never reach blocks and are dropped; ``spec.did`` is refused (a new
  dataset's DID comes from its new key);
- pre-v0.30 envelope: ``apiVersion`` → ``version``, ``content.id`` → ``content.name``;
- transform inputs (pre-v0.34): ``{name: N}`` → ``{datasetRef: N}``;
  ``{name: N, datasetRef: R}`` / ``{id: D, name: N}`` → ``{datasetRef: D or R, alias: N}``;
- queries (pre-v0.34): when every step has an alias and the last one is the dataset's
  name, that last alias is dropped (the output is now the step without an alias);
- temporal tables (pre-v0.30): ``id`` → ``name``;
- read steps (pre-v0.38): ``schema: [DDL, ...]`` → ``ddlSchema``; ``kind: JsonLines``
  (pre-v0.34) → ``NdJson`` when ``multiLine`` / ``primitivesAsString`` are absent or false;
  Csv options removed in v0.34 are dropped when they hold their default;
- merge ``Snapshot`` (pre-v0.34): ``observationColumn`` / ``obsv*`` dropped when default;
- push sources (v0.33.1): ``source`` → ``sourceName``;
- ``SetDataSchema`` (pre-v0.37): a base64 string ``schema`` → ``rawArrowSchema``.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from fbs.errors import ManifestFieldError

__all__ = ["DATASET_RESOURCE_SCHEMA", "Deprecation", "upgrade_snapshot_manifest"]

#: The ``$schema`` of an ODF v0.39 Dataset resource (RFC-018).
DATASET_RESOURCE_SCHEMA: Final = "https://opendatafabric.org/schemas/dataset/v1alpha1/Dataset"
#: Other spellings of the same type: the ``.json`` suffix of early drafts, the short name.
_DATASET_SCHEMA_ALIASES: Final = frozenset(
    {DATASET_RESOURCE_SCHEMA, DATASET_RESOURCE_SCHEMA + ".json", "Dataset"}
)
_RESOURCE_KEYS: Final = frozenset({"$schema", "headers", "spec", "status"})
_HEADER_KEYS: Final = frozenset(
    {"name", "id", "account", "labels", "annotations"}
    | {"generation", "createdAt", "updatedAt", "deletedAt"}  # node-set, harmless on input
)
_SPEC_KEYS: Final = frozenset({"kind", "metadata", "did", "volume"})

#: Csv options removed in ODF v0.34, with the default that makes dropping them exact.
_CSV_REMOVED_DEFAULTS: Final[dict[str, tuple[object, ...]]] = {
    "comment": ("",),
    "enforceSchema": (True,),
    "ignoreLeadingWhiteSpace": (False,),
    "ignoreTrailingWhiteSpace": (False,),
    "emptyValue": ("",),
    "nanValue": ("NaN",),
    "positiveInf": ("Inf",),
    "negativeInf": ("-Inf",),
    "multiLine": (False,),
}
#: JSON Lines options NdJson does not have; only ``false`` converts exactly.
_JSON_LINES_REMOVED: Final = ("multiLine", "primitivesAsString")
#: Snapshot merge options removed in ODF v0.34 (RFC-015), with their defaults.
_SNAPSHOT_REMOVED_DEFAULTS: Final[dict[str, tuple[object, ...]]] = {
    "observationColumn": ("observed",),
    "obsvAdded": ("I",),
    "obsvChanged": ("U",),
    "obsvRemoved": ("D",),
}

Plain = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Deprecation:
    """One rewrite of an old (or resource) form: where, and what it became.

    Attributes:
        path: the field as written (``content.metadata[0].read.schema``).
        message: what it was read as.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class _Upgrade:
    """Collects the deprecations of one document while it is rewritten."""

    def __init__(self) -> None:
        self.notes: list[Deprecation] = []

    def note(self, path: str, message: str) -> None:
        self.notes.append(Deprecation(path, message))


def upgrade_snapshot_manifest(obj: object) -> tuple[object, tuple[Deprecation, ...]]:
    """Rewrite a DatasetSnapshot manifest of any known form into the current form.

    Args:
        obj: plain data of one document (not modified).

    Returns:
        The current-form plain data (``obj`` itself when nothing needed a rewrite) and
        the rewrites made, in document order.

    Raises:
        ManifestFieldError: an old form with no exact current equivalent, or a resource
            manifest of another type or with fields this node cannot honour.
    """
    up = _Upgrade()
    if not isinstance(obj, Mapping):
        return obj, ()
    if "$schema" in obj:
        doc: Plain = _from_resource(obj, up)
        where = "spec"
    else:
        doc = _envelope(obj, up)
        where = "content"
    content = doc.get("content")
    if doc.get("kind") == "DatasetSnapshot" and isinstance(content, Mapping):
        doc["content"] = _content(content, where, up)
    if not up.notes:
        return obj, ()
    return doc, tuple(up.notes)


# -- envelopes --------------------------------------------------------------------------


def _envelope(obj: Mapping[str, Any], up: _Upgrade) -> Plain:
    doc = dict(obj)
    if "apiVersion" in doc and "version" not in doc:
        doc["version"] = doc.pop("apiVersion")
        up.note("apiVersion", "renamed to version (ODF v0.30)")
    content = doc.get("content")
    if (
        doc.get("kind") == "DatasetSnapshot"
        and isinstance(content, Mapping)
        and "id" in content
        and "name" not in content
    ):
        doc["content"] = _renamed(content, "id", "name")
        up.note("content.id", "renamed to name (ODF v0.30)")
    return doc


def _from_resource(obj: Mapping[str, Any], up: _Upgrade) -> Plain:
    schema = obj.get("$schema")
    if schema not in _DATASET_SCHEMA_ALIASES:
        raise ManifestFieldError(
            "$schema",
            f"unsupported resource type {schema!r} (this node reads {DATASET_RESOURCE_SCHEMA})",
        )
    _only_keys(obj, _RESOURCE_KEYS, "")
    headers = _mapping(obj.get("headers"), "headers")
    spec = _mapping(obj.get("spec"), "spec")
    _only_keys(headers, _HEADER_KEYS, "headers")
    _only_keys(spec, _SPEC_KEYS, "spec")
    if spec.get("did") is not None:
        raise ManifestFieldError(
            "spec.did", "a new dataset gets the DID of its new key; a given DID cannot be used"
        )
    for key in ("kind", "metadata"):
        if spec.get(key) is None:
            raise ManifestFieldError("spec", f"Dataset spec is missing {key!r}")
    name = headers.get("name")
    if not isinstance(name, str):
        raise ManifestFieldError("headers.name", "expected the dataset name (a string)")
    account = _account_name(headers.get("account"))
    up.note("$schema", "ODF v0.39 Dataset resource read as a DatasetSnapshot")
    if spec.get("volume") is not None:
        up.note("spec.volume", "ignored: datasets are stored in this workspace")
    content = {
        "name": name if account is None else f"{account}/{name}",
        "kind": spec["kind"],
        "metadata": spec["metadata"],
    }
    return {"kind": "DatasetSnapshot", "version": 1, "content": content}


def _account_name(account: object) -> str | None:
    """The account name of ``headers.account``: a string, or ``{name, id?, did?}``."""
    if account is None:
        return None
    if isinstance(account, str):
        return account
    if isinstance(account, Mapping):
        _only_keys(account, frozenset({"name", "id", "did"}), "headers.account")
        name = account.get("name")
        if isinstance(name, str):
            return name
    raise ManifestFieldError(
        "headers.account", "expected an account name (a string or a mapping with name)"
    )


# -- DatasetSnapshot content ------------------------------------------------------------


def _content(content: Mapping[str, Any], where: str, up: _Upgrade) -> Plain:
    out = dict(content)
    metadata = out.get("metadata")
    name = out.get("name")
    if isinstance(metadata, list):
        out["metadata"] = [
            _event(e, f"{where}.metadata[{i}]", name, up) for i, e in enumerate(metadata)
        ]
    return out


def _tag(obj: Mapping[str, Any]) -> str:
    tag = obj.get("kind")
    return tag.lower() if isinstance(tag, str) else ""


def _event(event: object, path: str, name: object, up: _Upgrade) -> object:
    if not isinstance(event, Mapping):
        return event
    tag = _tag(event)
    out = dict(event)
    if tag == "settransform":
        _transform_inputs(out, path, up)
        transform = out.get("transform")
        if isinstance(transform, Mapping):
            out["transform"] = _transform(transform, f"{path}.transform", name, up)
    elif tag in ("setpollingsource", "addpushsource"):
        if tag == "addpushsource":
            _rename_source(out, path, up)
        _sub(out, "read", path, up, _read_step)
        _sub(out, "merge", path, up, _merge)
        preprocess = out.get("preprocess")
        if isinstance(preprocess, Mapping):
            out["preprocess"] = _transform(preprocess, f"{path}.preprocess", None, up)
    elif tag == "disablepushsource":
        _rename_source(out, path, up)
    elif (
        tag == "setdataschema"
        and isinstance(out.get("schema"), str)
        and "rawArrowSchema" not in out
    ):
        out["rawArrowSchema"] = out.pop("schema")
        up.note(f"{path}.schema", "a base64 Arrow schema is now rawArrowSchema (ODF v0.37)")
    return out


def _sub(
    out: Plain,
    key: str,
    path: str,
    up: _Upgrade,
    fn: Callable[[Mapping[str, Any], str, _Upgrade], Plain],
) -> None:
    value = out.get(key)
    if isinstance(value, Mapping):
        out[key] = fn(value, f"{path}.{key}", up)


def _rename_source(out: Plain, path: str, up: _Upgrade) -> None:
    if "source" in out and "sourceName" not in out:
        out["sourceName"] = out.pop("source")
        up.note(f"{path}.source", "renamed to sourceName (ODF v0.34)")


def _transform_inputs(out: Plain, path: str, up: _Upgrade) -> None:
    inputs = out.get("inputs")
    if not isinstance(inputs, list):
        return
    out["inputs"] = [_input(item, f"{path}.inputs[{i}]", up) for i, item in enumerate(inputs)]


def _input(item: object, path: str, up: _Upgrade) -> object:
    if not isinstance(item, Mapping) or "name" not in item:
        return item
    if "alias" in item:
        raise ManifestFieldError(path, "an input has name (before ODF v0.34) or alias, not both")
    out = dict(item)
    name = out.pop("name")
    ident = out.pop("id", None)
    ref = out.get("datasetRef")
    if ident is not None:
        # kamu (v0.152) resolved an input by id first, then datasetRef, then name.
        out["datasetRef"] = ident
        out["alias"] = name
        up.note(f"{path}.id", "read as datasetRef, name as alias (ODF v0.34)")
    elif ref is not None:
        out["alias"] = name
        up.note(f"{path}.name", "read as alias (ODF v0.34)")
    else:
        out["datasetRef"] = name
        up.note(f"{path}.name", "read as datasetRef (ODF v0.34)")
    return out


def _transform(transform: Mapping[str, Any], path: str, name: object, up: _Upgrade) -> Plain:
    out = dict(transform)
    tables = out.get("temporalTables")
    if isinstance(tables, list):
        out["temporalTables"] = [
            _temporal_table(t, f"{path}.temporalTables[{i}]", up) for i, t in enumerate(tables)
        ]
    queries = out.get("queries")
    if not isinstance(name, str) or not isinstance(queries, list) or not queries:
        return out
    if not all(isinstance(q, Mapping) and q.get("alias") is not None for q in queries):
        return out
    last = queries[-1]
    if str(last["alias"]).lower() in _name_spellings(name):
        step = {k: v for k, v in last.items() if k != "alias"}
        out["queries"] = [*queries[:-1], step]
        up.note(
            f"{path}.queries[{len(queries) - 1}].alias",
            "dropped: the output is now the query without an alias (ODF v0.34)",
        )
    return out


def _name_spellings(name: str) -> tuple[str, ...]:
    """The dataset name, with and without its account, as the old output alias."""
    return (name.lower(), name.rsplit("/", 1)[-1].lower())


def _temporal_table(table: object, path: str, up: _Upgrade) -> object:
    if isinstance(table, Mapping) and "id" in table and "name" not in table:
        up.note(f"{path}.id", "renamed to name (ODF v0.30)")
        return _renamed(table, "id", "name")
    return table


def _read_step(read: Mapping[str, Any], path: str, up: _Upgrade) -> Plain:
    out = dict(read)
    tag = _tag(out)
    if tag == "jsonlines":
        for key in _JSON_LINES_REMOVED:
            if out.get(key) not in (None, False):
                raise ManifestFieldError(
                    f"{path}.{key}",
                    f"JsonLines {key}: true has no NdJson equivalent (removed in ODF v0.34)",
                )
            out.pop(key, None)
        out["kind"] = "NdJson"
        up.note(f"{path}.kind", f"{read['kind']} read as NdJson (ODF v0.34)")
    elif tag == "csv":
        _drop_defaults(out, _CSV_REMOVED_DEFAULTS, path, "Csv", up)
    schema = out.get("schema")
    if isinstance(schema, list):
        if out.get("ddlSchema") is not None:
            raise ManifestFieldError(path, "a read step may declare ddlSchema or schema, not both")
        out["ddlSchema"] = out.pop("schema")
        up.note(f"{path}.schema", "a DDL list is now ddlSchema (ODF v0.38)")
    return out


def _merge(merge: Mapping[str, Any], path: str, up: _Upgrade) -> Plain:
    out = dict(merge)
    if _tag(out) == "snapshot":
        _drop_defaults(out, _SNAPSHOT_REMOVED_DEFAULTS, path, "Snapshot merge", up)
    return out


def _drop_defaults(
    out: Plain,
    removed: Mapping[str, tuple[object, ...]],
    path: str,
    what: str,
    up: _Upgrade,
) -> None:
    for key, defaults in removed.items():
        if key not in out:
            continue
        value = out.pop(key)
        if value is not None and not _is_default(value, defaults):
            shown = ", ".join(repr(d) for d in defaults)
            raise ManifestFieldError(
                f"{path}.{key}",
                f"{what} option {key} was removed in ODF v0.34; only its default "
                f"({shown}) can be converted, got {value!r}",
            )
        up.note(f"{path}.{key}", "dropped: removed in ODF v0.34 (held its default)")


def _is_default(value: object, defaults: tuple[object, ...]) -> bool:
    # bool is an int: compare types too, so `1` is not taken for `True`.
    return any(type(value) is type(d) and value == d for d in defaults)


# -- helpers ----------------------------------------------------------------------------


def _renamed(obj: Mapping[str, Any], old: str, new: str) -> Plain:
    return {(new if k == old else k): v for k, v in obj.items()}


def _mapping(obj: object, path: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ManifestFieldError(path, "expected a mapping")
    return obj


def _only_keys(obj: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise ManifestFieldError(
                where, f"unknown field (expected one of: {', '.join(sorted(allowed))})"
            )
