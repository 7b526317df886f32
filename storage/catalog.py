"""The workspace catalog, read without the metadata model: find ``.odf/``, list and
resolve its datasets, and summarize each from its head and chain-state cache.

Commands that only show what the workspace holds (``odf list``, ``odf log``) start here:
this module imports no flatbuffer model, codec, chain rules, keys or asyncio, which
together cost several times the interpreter's own start. `storage.workspace.Workspace`
delegates its opening, scanning and alias lookups to the functions below, so both paths
share one implementation.

A summary (`cached_summary`) comes from the chain-state cache that `storage.dataset`
keeps (``cache/chain-state/<did>.json``) and is used only when the cache is intact (its
SHA3 checks), names this dataset, and was written at the current ``refs/head`` whose
block is present and hashes to its name; otherwise it is ``None`` and the caller
computes the state through `storage.dataset` (which validates the chain).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, InvalidName
from fbs.multiformats import Multihash
from storage.errors import (
    CorruptChain,
    DatasetNotFound,
    InvalidAlias,
    StorageError,
    WorkspaceError,
    WorkspaceNotFound,
)
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import atomic_write_bytes, read_bytes_limited
from storage.layout import DatasetLayout
from storage.refs import HEAD

if TYPE_CHECKING:
    from storage.dataset import Dataset

__all__ = [
    "DatasetEntry",
    "DatasetSummary",
    "SliceList",
    "block_rows_cache_path",
    "cached_block_rows",
    "cached_slices",
    "cached_summary",
    "check_root",
    "entries",
    "find_root",
    "open_dataset",
    "read_index",
    "rebuild_index",
    "resolve",
    "scan",
    "slices_cache_path",
    "state_cache_path",
    "write_block_rows",
    "write_slices_cache",
]

WORKSPACE_DIR: Final = ".odf"
WORKSPACE_VERSION: Final = "1"
VERSION_FILE: Final = "version"
INDEX_FILE: Final = "aliases.json"
DATASETS_DIR: Final = "datasets"
CACHE_DIR: Final = "cache"
STATE_CACHE_DIR: Final = "chain-state"
#: Per-dataset lists of the data slices a head references (`cached_slices`).
SLICES_CACHE_DIR: Final = "slices"
SLICES_FORMAT_VERSION: Final = 1
#: Refuse to parse a slice list larger than this (a cache: recomputed instead).
MAX_SLICES_CACHE_SIZE: Final = 64 * 2**20
#: Per-dataset rows that ``odf log`` shows of each block (`cached_block_rows`).
BLOCK_ROWS_CACHE_DIR: Final = "log"
BLOCK_ROWS_FORMAT_VERSION: Final = 1
#: Refuse to parse (and stop growing) a block-rows cache larger than this.
MAX_BLOCK_ROWS_CACHE_SIZE: Final = 64 * 2**20
#: Refuse to parse an alias index larger than this (it is a cache; rebuilt instead).
MAX_INDEX_FILE_SIZE: Final = 64 * 2**20
#: Parent directories searched for ``.odf/`` before giving up.
MAX_SEARCH_DEPTH: Final = 256
#: `storage.chain.STATE_FORMAT_VERSION` and `storage.dataset.MAX_STATE_CACHE_SIZE`,
#: repeated so that reading a summary needs neither module (a test keeps them equal).
STATE_FORMAT_VERSION: Final = 1
MAX_STATE_CACHE_SIZE: Final = 16 * 2**20
#: `fbs.model.DatasetKind` names by value (a test keeps them equal).
KIND_NAMES: Final = {0: "Root", 1: "Derivative"}


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    """A dataset of the workspace: alias, DID and directory."""

    alias: str
    id: DatasetId
    path: Path


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    """What ``odf list`` shows of a dataset: kind name, head and chain totals."""

    kind: str
    head: Multihash
    blocks: int
    records: int
    size: int


@dataclass(frozen=True, slots=True)
class SliceList:
    """The data slices a dataset's chain references up to ``head``, oldest first, as
    (physical hash, size) pairs, with what its reader derived from the chain at that
    head (``schema``: opaque bytes, e.g. an Arrow IPC schema; ``has_schema``: whether
    the chain declares a data schema at all)."""

    head: Multihash
    slices: tuple[tuple[Multihash, int], ...]
    has_schema: bool
    schema: bytes | None


# -- the workspace root -----------------------------------------------------------------


def check_root(root: Path) -> None:
    """Check that ``root`` (a ``.odf`` directory) is a workspace of a supported version.

    Raises:
        WorkspaceError: it is not one.
    """
    if root.is_symlink() or not root.is_dir() or not (root / VERSION_FILE).is_file():
        raise WorkspaceError(f"{root} is not an odf-node workspace")
    version = (root / VERSION_FILE).read_bytes()[:16].decode("ascii", "replace").strip()
    if version != WORKSPACE_VERSION:
        raise WorkspaceError(f"unsupported workspace version {version!r} in {root}")


def find_root(path: Path | None = None) -> Path:
    """The ``.odf`` directory in ``path`` (default: the current directory) or its parents.

    Raises:
        WorkspaceNotFound: no workspace up to the filesystem root.
        WorkspaceError: a ``.odf`` that is not a workspace of a supported version.
    """
    here = (Path.cwd() if path is None else Path(path)).resolve()
    for depth, directory in enumerate((here, *here.parents)):
        if depth > MAX_SEARCH_DEPTH:
            break
        candidate = directory / WORKSPACE_DIR
        if candidate.is_dir() and not candidate.is_symlink():
            check_root(candidate)
            return candidate
    raise WorkspaceNotFound(f"no {WORKSPACE_DIR}/ workspace in {here} or its parents")


def state_cache_path(root: Path, did: DatasetId) -> Path:
    """The chain-state cache file of dataset ``did`` in workspace ``root``."""
    return root / CACHE_DIR / STATE_CACHE_DIR / f"{did.as_multibase()}.json"


# -- aliases ----------------------------------------------------------------------------


def parse_alias(alias: object) -> DatasetAlias:
    """``alias`` as a `DatasetAlias`.

    Raises:
        InvalidAlias: not a valid ``[account/]name``.
    """
    try:
        return DatasetAlias.parse(alias)  # type: ignore[arg-type]  # checked inside
    except InvalidName as e:
        raise InvalidAlias(str(e)) from None


def alias_key(alias: DatasetAlias) -> str:
    """The case-insensitive index key of ``alias``."""
    account = "" if alias.account_name is None else alias.account_name.key + "/"
    return account + alias.dataset_name.key


def scan(root: Path, *, ops: FsOps = DEFAULT_OPS) -> list[DatasetEntry]:
    """Every dataset directory of workspace ``root`` with a canonical DID name.

    A dataset with an unreadable or invalid ``info/alias`` is still listed (and
    resolvable) under its DID's multibase text.
    """
    out: list[DatasetEntry] = []
    try:
        entries = list(os.scandir(root / DATASETS_DIR))
    except FileNotFoundError:
        return out
    for e in entries:
        try:
            did = DatasetId.from_multibase(e.name)
        except FbsError:
            continue
        if did.as_multibase() != e.name or not e.is_dir(follow_symlinks=False):
            continue
        path = Path(e.path)
        try:
            text = DatasetLayout(path, ops=ops).read_alias()
            alias = str(parse_alias(text)) if text is not None else did.as_multibase()
        except InvalidAlias:
            alias = did.as_multibase()
        out.append(DatasetEntry(alias, did, path))
    return out


def entries(root: Path, *, ops: FsOps = DEFAULT_OPS) -> list[DatasetEntry]:
    """All datasets of workspace ``root``, sorted by alias (case-insensitive)."""
    return sorted(scan(root, ops=ops), key=lambda e: (e.alias.lower(), e.id))


def rebuild_index(root: Path, *, ops: FsOps = DEFAULT_OPS) -> dict[str, str]:
    """Rebuild ``aliases.json`` from every dataset's ``info/alias``; returns key → DID."""
    index: dict[str, list[str]] = {}
    for entry in scan(root, ops=ops):
        with contextlib.suppress(InvalidAlias):
            index[alias_key(parse_alias(entry.alias))] = [entry.alias, entry.id.as_multibase()]
    data = json.dumps({"version": 1, "aliases": index}, sort_keys=True).encode()
    atomic_write_bytes(root / INDEX_FILE, data, ops=ops)
    return {k: v[1] for k, v in index.items()}


def read_index(root: Path) -> dict[str, Any]:
    """The alias index (key → ``[alias, DID]``); empty when missing or unreadable."""
    try:
        data = read_bytes_limited(root / INDEX_FILE, MAX_INDEX_FILE_SIZE)
        parsed = json.loads(data) if data is not None else None
    except (OSError, StorageError, ValueError):
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("aliases"), dict):
        return {}
    aliases: dict[str, Any] = parsed["aliases"]
    return aliases


def resolve(root: Path, ref: str | DatasetId, *, ops: FsOps = DEFAULT_OPS) -> DatasetEntry:
    """Find a dataset by alias (``[account/]name``, case-insensitive) or DID.

    The index is a cache: a hit is confirmed against the dataset's ``info/alias``, and a
    miss or mismatch rebuilds it once.

    Raises:
        InvalidAlias: ``ref`` is neither a DID nor a valid alias.
        InvalidDid: ``ref`` starts with ``did:`` but is not a valid DID.
        DatasetNotFound: no such dataset here.
    """
    if isinstance(ref, DatasetId) or ref.startswith("did:"):
        did = ref if isinstance(ref, DatasetId) else DatasetId.from_did(ref)
        return _resolve_did(root, did, ops)
    alias = parse_alias(ref)
    key = alias_key(alias)
    for attempt in range(2):
        index = read_index(root) if attempt == 0 else rebuild_index(root, ops=ops)
        item = index.get(key)
        did_text = item[1] if isinstance(item, list) and len(item) == 2 else item
        if not isinstance(did_text, str):
            continue
        try:
            did = DatasetId.from_multibase(did_text)
        except FbsError:
            continue
        path = root / DATASETS_DIR / did.as_multibase()
        with contextlib.suppress(InvalidAlias):
            text = DatasetLayout(path, ops=ops).read_alias() if path.is_dir() else None
            if text is not None and alias_key(parse_alias(text)) == key:
                return DatasetEntry(text, did, path)
    raise DatasetNotFound(f"no dataset {alias}")


def _resolve_did(root: Path, did: DatasetId, ops: FsOps) -> DatasetEntry:
    path = root / DATASETS_DIR / did.as_multibase()
    if not path.is_dir() or path.is_symlink():
        raise DatasetNotFound(f"no dataset {did}")
    try:
        text = DatasetLayout(path, ops=ops).read_alias()
    except InvalidAlias:
        text = None
    return DatasetEntry(text or did.as_multibase(), did, path)


def open_dataset(
    root: Path, entry: DatasetEntry, *, require_head: bool = True, ops: FsOps = DEFAULT_OPS
) -> Dataset:
    """Open dataset ``entry`` of workspace ``root`` (with its chain-state cache).

    Every dataset here has a head: `storage.workspace.Workspace.add_snapshot` and pulls
    assemble a dataset in ``staging/`` and rename it in only after its Seed is committed.
    A missing ``refs/head`` is therefore damage, never an empty dataset, and is refused
    unless ``require_head`` is False (``verify`` reports it instead).

    Raises:
        CorruptChain: ``refs/head`` is missing (with ``require_head``).
    """
    # Imported here: the codec and chain rules are what listing must not pay for.
    from storage.dataset import Dataset

    layout = DatasetLayout(entry.path, ops=ops)
    ds = Dataset.open(layout, state_cache=state_cache_path(root, entry.id))
    if require_head:
        try:
            os.lstat(ds.layout.head_path)
        except FileNotFoundError:
            raise CorruptChain(
                f"dataset {entry.alias}: refs/head is missing (the workspace is damaged); "
                f"run `odf verify --integrity {entry.alias}`"
            ) from None
    return ds


# -- summaries --------------------------------------------------------------------------


def cached_summary(root: Path, entry: DatasetEntry) -> DatasetSummary | None:
    """The summary of ``entry`` from its chain-state cache, or ``None`` when the cache
    cannot be trusted for the current head (see the module docstring).

    Reads ``refs/head``, the head block (hash-checked, not decoded) and the cache file.

    Raises:
        InvalidRef: ``refs/head`` does not hold a canonical hash.
    """
    head = _head_if_intact(DatasetLayout(entry.path))
    if head is None:
        return None
    state = _read_state_json(state_cache_path(root, entry.id))
    if state is None:
        return None
    try:
        fits = state["head"] == head.to_multibase() and state["dataset_id"] == entry.id.to_did_odf()
        kind = KIND_NAMES[state["kind"]]
        seq, last_offset, size = state["sequence_number"], state["last_offset"], state["data_size"]
    except (KeyError, TypeError):
        return None
    if not fits or not isinstance(seq, int) or not isinstance(size, int):
        return None
    if last_offset is not None and not isinstance(last_offset, int):
        return None
    records = 0 if last_offset is None else last_offset + 1
    return DatasetSummary(kind, head, seq + 1, records, size)


def _head_if_intact(layout: DatasetLayout) -> Multihash | None:
    """``refs/head`` when its block is present and hashes to its name, else None.

    Raises:
        InvalidRef: ``refs/head`` does not hold a canonical hash.
    """
    head = layout.refs.get_or_none(HEAD)
    if head is None:
        return None
    try:
        layout.blocks.check(head)
    except (StorageError, OSError):
        return None
    return head


# -- slice lists ------------------------------------------------------------------------
# What ``odf sql`` stages for a dataset, kept so that a query does not decode the whole
# chain (which needs the model and codec) when the head has not moved. The list is a
# cache in the workspace like the chain-state cache: self-checked (SHA3 of its body),
# used only for the current, intact head of the dataset it names; the slices it lists
# are still hash-checked (`storage.verified`) before anything reads them.


def slices_cache_path(root: Path, did: DatasetId) -> Path:
    """The slice-list cache file of dataset ``did`` in workspace ``root``."""
    return root / CACHE_DIR / SLICES_CACHE_DIR / f"{did.as_multibase()}.json"


def cached_slices(root: Path, entry: DatasetEntry) -> SliceList | None:
    """The slice list of ``entry`` at its current head, or ``None`` when no intact
    cache was written for that head (the caller then walks the chain and writes one
    with `write_slices_cache`).

    Raises:
        InvalidRef: ``refs/head`` does not hold a canonical hash.
    """
    path = slices_cache_path(root, entry.id)
    body = _read_checked_json(path, SLICES_FORMAT_VERSION, MAX_SLICES_CACHE_SIZE)
    if body is None:
        return None
    try:
        head_text, did_text = body["head"], body["dataset_id"]
        has_schema, schema_b64, items = body["has_schema"], body["schema"], body["slices"]
        if did_text != entry.id.to_did_odf() or not isinstance(has_schema, bool):
            return None
        head = _head_if_intact(DatasetLayout(entry.path))
        if head is None or head.to_multibase() != head_text:
            return None
        slices = tuple((Multihash.from_multibase(h), _size(n)) for h, n in items)
        schema = None if schema_b64 is None else base64.b64decode(schema_b64, validate=True)
    except (KeyError, TypeError, ValueError, FbsError):
        return None
    return SliceList(head, slices, has_schema, schema)


def _size(n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError("not a size")
    return n


def write_slices_cache(root: Path, entry: DatasetEntry, listing: SliceList) -> None:
    """Keep ``listing`` for `cached_slices` (best effort: a failure only costs a walk)."""
    body = {
        "dataset_id": entry.id.to_did_odf(),
        "head": listing.head.to_multibase(),
        "has_schema": listing.has_schema,
        "schema": None if listing.schema is None else base64.b64encode(listing.schema).decode(),
        "slices": [[h.to_multibase(), size] for h, size in listing.slices],
    }
    _write_checked_json(slices_cache_path(root, entry.id), SLICES_FORMAT_VERSION, body)


# -- block rows -------------------------------------------------------------------------
# What ``odf log`` shows of each block (a presentation its caller computes from the
# decoded block), by block hash, with the block's predecessor: a log of blocks that did
# not change since the last one decodes none (no model, no codec). Each block is still
# read and hash-checked by the caller before its row is shown.


def block_rows_cache_path(root: Path, did: DatasetId) -> Path:
    """The block-rows cache file of dataset ``did`` in workspace ``root``."""
    return root / CACHE_DIR / BLOCK_ROWS_CACHE_DIR / f"{did.as_multibase()}.json"


def cached_block_rows(root: Path, entry: DatasetEntry) -> dict[str, Any]:
    """Rows kept for ``entry``'s blocks (block hash multibase -> the caller's row); empty
    when there is no intact cache. The caller checks each row's shape."""
    path = block_rows_cache_path(root, entry.id)
    body = _read_checked_json(path, BLOCK_ROWS_FORMAT_VERSION, MAX_BLOCK_ROWS_CACHE_SIZE)
    if body is None or body.get("dataset_id") != entry.id.to_did_odf():
        return {}
    rows = body.get("rows")
    return rows if isinstance(rows, dict) else {}


def write_block_rows(root: Path, entry: DatasetEntry, rows: dict[str, Any]) -> None:
    """Keep ``rows`` (JSON values by block hash) for `cached_block_rows` (best effort)."""
    body = {"dataset_id": entry.id.to_did_odf(), "rows": rows}
    path = block_rows_cache_path(root, entry.id)
    _write_checked_json(path, BLOCK_ROWS_FORMAT_VERSION, body, MAX_BLOCK_ROWS_CACHE_SIZE)


def _write_checked_json(
    path: Path, version: int, body: dict[str, Any], limit: int = MAX_SLICES_CACHE_SIZE
) -> None:
    """Write a self-checking cache file (see `_read_checked_json`); best effort."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha3_256(text.encode("utf-8")).hexdigest()
    data = json.dumps({"format": version, "sha3": digest, "state": text}).encode("utf-8")
    if len(data) > limit:
        return  # it would not be read back
    # No fsync: a torn or lost file fails its SHA3 check and is only recomputed.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _read_state_json(path: Path) -> dict[str, Any] | None:
    """The body of a `storage.chain.state_to_json` file, if intact (else ``None``)."""
    return _read_checked_json(path, STATE_FORMAT_VERSION, MAX_STATE_CACHE_SIZE)


def _read_checked_json(path: Path, version: int, limit: int) -> dict[str, Any] | None:
    """The body of a self-checking cache file (`storage.chain.state_to_json`'s format:
    ``{"format", "sha3", "state"}``, the SHA3 of the ``state`` text), if intact, of format
    ``version`` and at most ``limit`` bytes; else ``None``."""
    try:
        data = read_bytes_limited(path, limit)
        if data is None:
            return None
        outer = json.loads(data)
        if not isinstance(outer, dict) or outer.get("format") != version:
            return None
        text = outer["state"]
        if hashlib.sha3_256(text.encode("utf-8")).hexdigest() != outer["sha3"]:
            return None
        body = json.loads(text)
    except (OSError, StorageError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a cache is never worth failing for
    return body if isinstance(body, dict) else None
