"""The ``.odf/`` workspace: many datasets, an alias index, keys and caches.

::

    <project>/.odf/
      version                       workspace format version ("1")
      aliases.json                  alias index (a cache: rebuilt from info/alias files)
      datasets/<did multibase>/     one kamu-layout dataset per DID (fed01...)
      keys/                         private keys (`storage.keystore`, mode 0700)
      cache/chain-state/<did>.json  chain-state caches (`storage.dataset`)
      cache/verified/<did>.json     verified-read stamps (`storage.verified`)
      cache/sound-slices/<did>.json slices whose logical hash verify checked (`storage.verify`)
      staging/<random>/             datasets being created (invisible until renamed)
      trash/<random>/               datasets being deleted
      .lock                         flock serializing alias changes

Atomic creation: a dataset (Seed plus every snapshot event) is built in
``staging/``, its key is saved, and only then is the directory renamed into
``datasets/``; a snapshot with an invalid event leaves no dataset behind (a crash
may leave a staging directory or an unused key, both invisible and harmless; `gc`
removes stale staging directories). Deletion renames the dataset into ``trash/``
first (it disappears atomically), then removes it. The dataset's key is *retired*
to ``keys/deleted/``, not destroyed (see `KeyStore.retire`).

The alias index is only a cache of each dataset's ``info/alias``: every lookup is
confirmed against that file and a miss or mismatch triggers a rebuild.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError, ManifestFieldError
from fbs.model import (
    AddPushSource,
    DatasetKind,
    DatasetSnapshot,
    MetadataEvent,
    Seed,
    SetPollingSource,
    SetTransform,
    TransformInput,
)
from fbs.multiformats import Multihash
from fbs.rules import normalize_transform, referenced_objects
from fbs.timestamp import Timestamp
from storage.catalog import (
    CACHE_DIR,
    DATASETS_DIR,
    INDEX_FILE,
    STATE_CACHE_DIR,
    VERSION_FILE,
    WORKSPACE_DIR,
    WORKSPACE_VERSION,
    DatasetEntry,
    block_rows_cache_path,
    check_root,
    entries,
    find_root,
    open_dataset,
    read_index,
    rebuild_index,
    resolve,
    scan,
    slices_cache_path,
    state_cache_path,
)
from storage.catalog import alias_key as _alias_key
from storage.catalog import parse_alias as _parse_alias
from storage.dataset import Dataset
from storage.errors import (
    DatasetExists,
    DatasetNotFound,
    InvalidAlias,
    StorageError,
    WorkspaceError,
)
from storage.faults import DEFAULT_OPS, FsOps
from storage.fsutil import (
    DEFAULT_STALE_PENDING_AGE_S,
    FILE_MODE,
    atomic_write_bytes,
    cleanup_pending,
    ensure_dir,
    pending_name,
)
from storage.gc import (
    DEFAULT_GC_GRACE_S,
    GcReport,
    TempFile,
    collect_garbage,
    find_temp_files,
)
from storage.keystore import KeyStore
from storage.layout import DatasetLayout
from storage.lockfile import FileLock
from storage.verified import forget_under, record_path_for

if TYPE_CHECKING:
    from fbs.keys import KeyPair  # loads ed25519 (nacl): only `add_snapshots` makes keys

__all__ = [
    "WORKSPACE_DIR",
    "DatasetEntry",
    "Workspace",
    "WorkspaceGcReport",
]

KEYS_DIR: Final = "keys"
STAGING_DIR: Final = "staging"
TRASH_DIR: Final = "trash"
LOCK_FILE: Final = ".lock"
#: How long alias changes wait for the workspace lock.
DEFAULT_LOCK_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class WorkspaceGcReport:
    """Per-dataset GC reports (keyed by alias) plus what could not be collected.

    Attributes:
        blocks / data / checkpoints: `GcReport` per dataset alias.
        skipped: aliases whose chain could not be read completely (nothing was
            deleted there) with the reason.
        staging_removed: stale staging/trash directories removed.
        temp_removed: stale ``.pending-*`` files removed (would be, in a dry run) from
            every dataset directory and the workspace's own directories (keys, cache,
            index), including those of skipped datasets (a temp file is never referenced).
        temp_kept: younger ``.pending-*`` files left alone (a writer may still own them).
    """

    blocks: dict[str, GcReport] = field(default_factory=dict)
    data: dict[str, GcReport] = field(default_factory=dict)
    checkpoints: dict[str, GcReport] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    staging_removed: tuple[Path, ...] = ()
    temp_removed: tuple[Path, ...] = ()
    temp_kept: tuple[Path, ...] = ()

    @property
    def bytes_freed(self) -> int:
        """Bytes freed (or freeable, in a dry run) across all stores."""
        return sum(
            r.bytes_freed for d in (self.blocks, self.data, self.checkpoints) for r in d.values()
        )


@dataclass(frozen=True, slots=True)
class _AddPlan:
    """A validated snapshot, ready to be written: alias, identity, block events."""

    alias: DatasetAlias
    key: KeyPair
    events: tuple[MetadataEvent, ...]


def _input_alias(ref: str) -> str:
    """kamu's default alias of a transform input: its reference's canonical text."""
    from fbs.manifest.refs import canonical_ref_text, parse_local_ref

    return canonical_ref_text(parse_local_ref(ref))


class Workspace:
    """An ``.odf/`` directory (see the module docstring).

    Args:
        root: the ``.odf`` directory itself.
        ops: the file-operations seam used for every mutation.
    """

    def __init__(self, root: Path, *, ops: FsOps = DEFAULT_OPS) -> None:
        self.root = Path(root)
        self.ops = ops
        self.keys = KeyStore(self.root / KEYS_DIR, ops=ops)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def init(cls, path: Path, *, exist_ok: bool = False, ops: FsOps = DEFAULT_OPS) -> Workspace:
        """Create ``<path>/.odf/``.

        Raises:
            WorkspaceError: if it exists (unless ``exist_ok``) or is not a directory.
        """
        root = Path(path) / WORKSPACE_DIR
        if root.exists() or root.is_symlink():
            if not exist_ok:
                raise WorkspaceError(f"workspace {root} already exists")
            return cls._checked(root, ops)
        try:
            for sub in (DATASETS_DIR, STAGING_DIR, TRASH_DIR, f"{CACHE_DIR}/{STATE_CACHE_DIR}"):
                ensure_dir(root / sub, ops=ops)
            atomic_write_bytes(root / VERSION_FILE, WORKSPACE_VERSION.encode(), ops=ops)
        except StorageError as e:
            raise WorkspaceError(f"cannot create workspace {root}: {e}") from None
        return cls(root, ops=ops)

    @classmethod
    def _checked(cls, root: Path, ops: FsOps) -> Workspace:
        check_root(root)
        return cls(root, ops=ops)

    @classmethod
    def open(cls, path: Path | None = None, *, ops: FsOps = DEFAULT_OPS) -> Workspace:
        """Find ``.odf/`` in ``path`` (default: the current directory) or its parents.

        Raises:
            WorkspaceNotFound: no workspace up to the filesystem root.
            WorkspaceError: a ``.odf`` that is not a workspace of a supported version.
        """
        return cls(find_root(path), ops=ops)  # storage.catalog: shared with `odf list`

    # -- paths ------------------------------------------------------------------------------

    @property
    def datasets_dir(self) -> Path:
        """``datasets/``."""
        return self.root / DATASETS_DIR

    def _layout(self, path: Path) -> DatasetLayout:
        return DatasetLayout(path, ops=self.ops)

    def _state_cache(self, did: DatasetId) -> Path:
        return state_cache_path(self.root, did)

    def _dataset_dir(self, did: DatasetId) -> Path:
        return self.datasets_dir / did.as_multibase()

    def _open(self, entry: DatasetEntry, *, require_head: bool = True) -> Dataset:
        """Open a dataset of the workspace.

        Every dataset here has a head: `add_snapshot` and pulls assemble a dataset in
        ``staging/`` and rename it in only after its Seed is committed. A missing
        ``refs/head`` is therefore damage, never an empty dataset, and is refused
        unless ``require_head`` is False (``verify`` reports it instead).

        Raises:
            CorruptChain: ``refs/head`` is missing (with ``require_head``).
        """
        return open_dataset(self.root, entry, require_head=require_head, ops=self.ops)

    def temp_dirs(self, entry: DatasetEntry | None = None) -> tuple[Path, ...]:
        """Directories where writers create ``.pending-*`` files: a dataset's own
        (``refs``, ``blocks``, ``data``, ``checkpoints``, ``info``), or with no
        ``entry`` the workspace's (root, keys, chain-state cache)."""
        if entry is None:
            return (self.root, self.root / KEYS_DIR, self.root / CACHE_DIR / STATE_CACHE_DIR)
        layout = self._layout(entry.path)
        return (
            layout.refs_dir,
            layout.blocks_dir,
            layout.data_dir,
            layout.checkpoints_dir,
            layout.info_dir,
        )

    def temp_files(
        self,
        entry: DatasetEntry | None = None,
        *,
        older_than_s: float = DEFAULT_STALE_PENDING_AGE_S,
        now: float | None = None,
    ) -> tuple[TempFile, ...]:
        """The ``.pending-*`` files in `temp_dirs` (see `storage.gc.find_temp_files`)."""
        return find_temp_files(self.temp_dirs(entry), older_than_s=older_than_s, now=now)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        ensure_dir(self.root, ops=self.ops)
        lock = FileLock(self.root / LOCK_FILE, mode=FILE_MODE)
        if not lock.acquire(DEFAULT_LOCK_TIMEOUT_S):
            raise WorkspaceError("workspace lock busy")
        try:
            yield
        finally:
            lock.release()

    # -- index ------------------------------------------------------------------------------

    def _scan(self) -> list[DatasetEntry]:
        """Every dataset directory (see `storage.catalog.scan`)."""
        return scan(self.root, ops=self.ops)

    def rebuild_index(self) -> dict[str, str]:
        """Rebuild ``aliases.json`` from every dataset's ``info/alias``; returns key → DID."""
        return rebuild_index(self.root, ops=self.ops)

    def _read_index(self) -> dict[str, Any]:
        return read_index(self.root)

    def _write_index(self, index: dict[str, Any]) -> None:
        data = json.dumps({"version": 1, "aliases": index}, sort_keys=True).encode()
        atomic_write_bytes(self.root / INDEX_FILE, data, ops=self.ops)

    # -- lookups ----------------------------------------------------------------------------

    def resolve(self, ref: str | DatasetId) -> DatasetEntry:
        """Find a dataset by alias (``[account/]name``, case-insensitive) or DID.

        Raises:
            InvalidAlias: ``ref`` is neither a DID nor a valid alias.
            InvalidDid: ``ref`` starts with ``did:`` but is not a valid DID.
            DatasetNotFound: no such dataset here.
        """
        return resolve(self.root, ref, ops=self.ops)

    def get(self, ref: str | DatasetId, *, require_head: bool = True) -> Dataset:
        """Open the dataset ``ref`` names (see `resolve`).

        Raises:
            CorruptChain: its ``refs/head`` is missing (unless ``require_head`` is False;
                see `_open`).
        """
        return self._open(self.resolve(ref), require_head=require_head)

    def list(self) -> list[DatasetEntry]:
        """All datasets, sorted by alias (case-insensitive)."""
        return entries(self.root, ops=self.ops)

    # -- creation ---------------------------------------------------------------------------

    def create_dataset(self, alias: str, kind: DatasetKind = DatasetKind.Root) -> Dataset:
        """Create an empty dataset (Seed block only) with a fresh ed25519 identity.

        Raises:
            InvalidAlias: invalid alias.
            DatasetExists: the alias is taken.
        """
        return self.add_snapshot(DatasetSnapshot(name=alias, kind=kind, metadata=()))

    def _normalize_inputs(self, event: SetTransform) -> SetTransform:
        inputs: list[TransformInput] = []
        for i in event.inputs:
            try:
                entry = self.resolve(i.dataset_ref)
            except (DatasetNotFound, InvalidAlias, FbsError) as e:
                raise DatasetNotFound(f"unknown transform input {i.dataset_ref!r}: {e}") from None
            inputs.append(
                TransformInput(
                    dataset_ref=entry.id.to_did_odf(), alias=i.alias or _input_alias(i.dataset_ref)
                )
            )
        return SetTransform(inputs=tuple(inputs), transform=normalize_transform(event.transform))

    def normalize_event(self, event: MetadataEvent) -> MetadataEvent:
        """Snapshot event → block event: normalize transforms, resolve transform inputs.

        Raises:
            DatasetNotFound: a transform input that is not in this workspace.
        """
        if isinstance(event, SetTransform):
            return self._normalize_inputs(event)
        if isinstance(event, AddPushSource | SetPollingSource) and event.preprocess is not None:
            return event.replace(preprocess=normalize_transform(event.preprocess))
        return event

    def _lookup(self, ref: str) -> DatasetEntry | None:
        """Like `resolve`, but never writes (no index rebuild); None when not found."""
        if ref.startswith("did:"):
            did = DatasetId.from_did(ref)
            path = self._dataset_dir(did)
            if not path.is_dir() or path.is_symlink():
                return None
            try:
                text = self._layout(path).read_alias()
            except InvalidAlias:
                text = None
            return DatasetEntry(text or did.as_multibase(), did, path)
        key = _alias_key(_parse_alias(ref))
        item = self._read_index().get(key)
        did_text = item[1] if isinstance(item, list) and len(item) == 2 else item
        if isinstance(did_text, str):
            with contextlib.suppress(FbsError, InvalidAlias):
                did = DatasetId.from_multibase(did_text)
                path = self._dataset_dir(did)
                text = self._layout(path).read_alias() if path.is_dir() else None
                if text is not None and _alias_key(_parse_alias(text)) == key:
                    return DatasetEntry(text, did, path)
        for entry in self._scan():
            with contextlib.suppress(InvalidAlias):
                if _alias_key(_parse_alias(entry.alias)) == key:
                    return entry
        return None

    def _plan_snapshot(
        self,
        snapshot: DatasetSnapshot,
        pending: dict[str, DatasetEntry],
        when: Timestamp,
    ) -> _AddPlan:
        """Validate a snapshot completely without writing anything.

        Every block (Seed included) is built, encoded, decoded back under the dataset's
        decode limits and validated against the chain rules; the name must be free and
        every transform input must resolve (to a dataset here or to one in ``pending``,
        added earlier in the same batch).
        """
        from fbs.codec import block_hash, decode_block, encode_block
        from fbs.limits import DEFAULT_LIMITS
        from fbs.manifest.validate import validate_snapshot
        from fbs.model import MetadataBlock
        from storage.chain import validate_append

        if not isinstance(snapshot, DatasetSnapshot):
            raise WorkspaceError(f"expected a DatasetSnapshot, got {type(snapshot).__name__}")
        alias = _parse_alias(snapshot.name)
        validate_snapshot(snapshot)
        key_text = _alias_key(alias)
        if key_text in pending or self._lookup(str(alias)) is not None:
            raise DatasetExists(f"dataset {alias} already exists")

        def find(ref: str) -> DatasetEntry:
            try:
                if not ref.startswith("did:"):
                    hit = pending.get(_alias_key(_parse_alias(ref)))
                    if hit is not None:
                        return hit
                else:
                    for p in pending.values():
                        if p.id.to_did_odf() == ref or str(p.id) == ref:
                            return p
                entry = self._lookup(ref)
            except (InvalidAlias, FbsError) as e:
                raise DatasetNotFound(f"unknown transform input {ref!r}: {e}") from None
            if entry is None:
                raise DatasetNotFound(f"unknown transform input {ref!r}: no dataset {ref}")
            return entry

        events = [self._normalize_with(e, find) for e in snapshot.metadata]
        from fbs.keys import KeyPair

        key = KeyPair.generate()
        seed = Seed(dataset_id=key.dataset_id, dataset_kind=DatasetKind(snapshot.kind))
        state = None
        head: Multihash | None = None
        for n, event in enumerate([seed, *events]):
            block = MetadataBlock(
                system_time=when, prev_block_hash=head, sequence_number=n, event=event
            )
            raw = encode_block(block)
            try:
                decode_block(raw, DEFAULT_LIMITS)
            except FbsError as e:
                where = "Seed" if n == 0 else f"content.metadata[{n - 1}]"
                raise ManifestFieldError(where, f"block would not be readable: {e}") from None
            head = block_hash(raw)
            state = validate_append(state, block, head)
        return _AddPlan(alias, key, tuple(events))

    def _normalize_with(
        self, event: MetadataEvent, find: Callable[[str], DatasetEntry]
    ) -> MetadataEvent:
        if isinstance(event, SetTransform):
            inputs: list[TransformInput] = []
            for i in event.inputs:
                entry = find(i.dataset_ref)
                inputs.append(
                    TransformInput(
                        dataset_ref=entry.id.to_did_odf(),
                        alias=i.alias or _input_alias(i.dataset_ref),
                    )
                )
            return SetTransform(
                inputs=tuple(inputs), transform=normalize_transform(event.transform)
            )
        return self.normalize_event(event)

    def add_snapshot(
        self, snapshot: DatasetSnapshot, *, system_time: Timestamp | None = None
    ) -> Dataset:
        """Create a dataset from a snapshot: Seed, then one block per event.

        All blocks share one system time (like kamu). Everything is validated before
        anything is written (`fbs.manifest.validate.validate_snapshot`, every block
        encoded, read back and checked against the chain rules): a refused snapshot leaves
        the workspace byte-for-byte unchanged, and on a later (I/O) error nothing of the
        dataset becomes visible.

        Raises:
            InvalidAlias: invalid ``snapshot.name``.
            ManifestError: a snapshot that could be stored but not used (`ManifestFieldError`
                naming the place).
            DatasetExists: the alias is taken.
            DatasetNotFound: a transform input that is not in this workspace.
            ChainRuleViolation: an event breaks a chain rule.
        """
        (ds,) = self.add_snapshots([snapshot], system_time=system_time)
        return ds

    def add_snapshots(
        self, snapshots: Sequence[DatasetSnapshot], *, system_time: Timestamp | None = None
    ) -> tuple[Dataset, ...]:
        """Create several datasets (in order; inputs may name earlier ones of the batch).

        Every snapshot is validated (see `add_snapshot`) before the first one is written,
        so one refused snapshot adds none of them.

        Raises:
            What `add_snapshot` raises.
        """
        when = system_time or Timestamp.now()
        pending: dict[str, DatasetEntry] = {}
        plans: list[_AddPlan] = []
        for snap in snapshots:
            plan = self._plan_snapshot(snap, pending, when)
            plans.append(plan)
            did = plan.key.dataset_id
            pending[_alias_key(plan.alias)] = DatasetEntry(
                str(plan.alias), did, self._dataset_dir(did)
            )
        return tuple(
            self._write_plan(plan, snap, when) for plan, snap in zip(plans, snapshots, strict=True)
        )

    def _write_plan(self, plan: _AddPlan, snapshot: DatasetSnapshot, when: Timestamp) -> Dataset:
        alias, key, events = plan.alias, plan.key, plan.events
        with self._locked():
            try:
                self.resolve(str(alias))
            except DatasetNotFound:
                pass
            else:
                raise DatasetExists(f"dataset {alias} already exists")
            did = key.dataset_id
            staging = self.root / STAGING_DIR / pending_name().lstrip(".")
            cache = self._state_cache(did)
            try:
                ensure_dir(staging.parent, ops=self.ops)
                ds = Dataset.create(self._layout(staging), state_cache=cache)
                head: Multihash | None = None
                seed = Seed(dataset_id=did, dataset_kind=DatasetKind(snapshot.kind))
                for event in [seed, *events]:
                    head = ds.commit(event, system_time=when, expected_head=head).new_head
                ds.layout.write_alias(str(alias))
                self.keys.save(key)
                final = self._dataset_dir(did)
                ensure_dir(self.datasets_dir, ops=self.ops)
                self.ops.replace(staging, final)
                self.ops.fsync_dir(self.datasets_dir)
                self.ops.fsync_dir(staging.parent)
            except Exception:
                shutil.rmtree(staging, ignore_errors=True)
                cache.unlink(missing_ok=True)
                if self.keys.has(did):
                    self.keys.retire(did)
                raise
            index = self._read_index()
            index[_alias_key(alias)] = [str(alias), did.as_multibase()]
            self._write_index(index)
        return Dataset.open(self._layout(final), state_cache=cache)

    # -- deletion ---------------------------------------------------------------------------

    def delete(self, ref: str | DatasetId) -> DatasetEntry:
        """Delete a dataset: it disappears atomically; its key is retired, not erased; its
        caches (chain state, slice list, log rows, verified-read stamps, sound slices) are
        dropped.

        Raises:
            InvalidAlias / InvalidDid / DatasetNotFound: see `resolve`.
        """
        with self._locked():
            entry = self.resolve(ref)
            trash = self.root / TRASH_DIR / pending_name().lstrip(".")
            ensure_dir(trash.parent, ops=self.ops)
            self.ops.replace(entry.path, trash)
            self.ops.fsync_dir(self.datasets_dir)
            index = {
                k: v
                for k, v in self._read_index().items()
                if not (isinstance(v, list) and len(v) == 2 and v[1] == entry.id.as_multibase())
            }
            self._write_index(index)
            self.keys.retire(entry.id)
            cache = self._state_cache(entry.id)
            cache.unlink(missing_ok=True)
            # The read caches of `odf sql` and `odf log` are checked against the head, so a
            # stale one is harmless; dropped anyway so deleted datasets leave no files behind.
            slices_cache_path(self.root, entry.id).unlink(missing_ok=True)
            block_rows_cache_path(self.root, entry.id).unlink(missing_ok=True)
            # Its verified-read stamps too: they name files that are gone, and a dataset
            # fetched again under the same DID must be hashed afresh.
            record = record_path_for(cache)
            assert record is not None
            record.unlink(missing_ok=True)
            forget_under(entry.path)
            from storage.verify import SOUND_SLICES_DIR  # only delete needs it

            (cache.parent.parent / SOUND_SLICES_DIR / cache.name).unlink(missing_ok=True)
        shutil.rmtree(trash, ignore_errors=True)
        return entry

    # -- gc ---------------------------------------------------------------------------------

    def gc(
        self,
        *,
        dry_run: bool = False,
        grace_period_s: float = DEFAULT_GC_GRACE_S,
        pending_age_s: float = DEFAULT_STALE_PENDING_AGE_S,
        now: float | None = None,
    ) -> WorkspaceGcReport:
        """Remove objects no chain references (blocks, data, checkpoints) in every dataset.

        Referenced = every block reachable from the head and every data/checkpoint file
        those blocks name. A dataset whose chain cannot be read completely (or whose
        ``refs/head`` is missing) is skipped (never delete what we cannot prove
        unreferenced). Stale ``.pending-*`` files (older than ``pending_age_s``) are
        removed everywhere, skipped datasets included (see `storage.gc`).
        """
        report = WorkspaceGcReport()
        current = time.time() if now is None else now
        temp: list[Path] = []
        for entry in self.list():
            blocks: set[Multihash] = set()
            data: set[Multihash] = set()
            checkpoints: set[Multihash] = set()
            try:
                ds = self._open(entry)
                for h, _raw, block in ds.iter_blocks():
                    blocks.add(h)
                    for obj in referenced_objects(block.event):
                        (data if obj.kind == "data" else checkpoints).add(obj.physical_hash)
            except (StorageError, FbsError, OSError) as e:
                report.skipped[entry.alias] = str(e)
                continue
            args: dict[str, Any] = {
                "grace_period_s": grace_period_s,
                "pending_age_s": pending_age_s,
                "dry_run": dry_run,
                "now": current,
            }
            report.blocks[entry.alias] = collect_garbage(ds.layout.blocks, blocks, **args)
            report.data[entry.alias] = collect_garbage(ds.layout.data, data, **args)
            report.checkpoints[entry.alias] = collect_garbage(
                ds.layout.checkpoints, checkpoints, **args
            )
        for entry_or_ws in [*self.list(), None]:
            for directory in self.temp_dirs(entry_or_ws):
                with contextlib.suppress(OSError):
                    temp += cleanup_pending(
                        directory,
                        older_than_s=pending_age_s,
                        now=current,
                        dry_run=dry_run,
                        ops=self.ops,
                    )
        for reports in (report.blocks, report.data, report.checkpoints):
            for r in reports.values():
                temp += r.pending_removed
        kept = [
            t.path
            for e in [*self.list(), None]
            for t in self.temp_files(e, older_than_s=pending_age_s, now=current)
            if not t.stale
        ]
        removed: list[Path] = []
        for sub in (STAGING_DIR, TRASH_DIR):
            with contextlib.suppress(FileNotFoundError):
                for leftover in os.scandir(self.root / sub):
                    st = leftover.stat(follow_symlinks=False)
                    if current - st.st_mtime >= grace_period_s:
                        removed.append(Path(leftover.path))
                        if not dry_run:
                            shutil.rmtree(leftover.path, ignore_errors=True)
        return replace(
            report,
            staging_removed=tuple(sorted(removed)),
            temp_removed=tuple(sorted(set(temp))),
            temp_kept=tuple(sorted(kept)),
        )
