"""Integrity verification of a stored dataset (fsck).

`verify_integrity` checks, from the head back to the Seed:

1. every block: present, bytes hash to its name, decodes, sequence numbers link;
2. the whole chain against every append rule (`storage.chain.replay`);
3. every data and checkpoint object a block names: present, physical hash and size
   as declared; for data slices the logical hash is recomputed from the Parquet file.

Objects are checked on a thread per core (SHA3 and Parquet decoding release the GIL)
and a data slice is read once: its physical hash, logical hash and offsets all come from
those bytes. The logical hash and offsets are functions of the bytes alone, so a slice
found sound is remembered by its physical hash (``.odf/cache/sound-slices/<did>.json``,
see `_SoundSlices`): a later verify re-reads and re-hashes it but does not decode it.
Problems are collected in block order, so the report is the same on any number of
threads.

It never raises for a damaged dataset: every defect becomes a `VerifyProblem` in the
returned `VerifyReport`, which names the first (oldest) bad block. Unreadable files
(permission denied, I/O errors) are problems too (``unreadable``), not exceptions.

A missing ``refs/head`` is a problem (``head-missing``) when blocks are stored (the
chain exists but its head is lost, so every reader would see an empty dataset) or when
the caller says the dataset must have one (``require_head``: every dataset registered
in a workspace has a Seed; see `storage.workspace.Workspace._open`).

Temporary ``.pending-*`` files left by a writer that died before its rename are not
problems (they are invisible to readers and never referenced, so the dataset is sound)
but are listed in ``report.warnings``: ``stale temporary file`` when older than the
stale age (no live writer; ``odf gc`` removes them), ``temporary file`` when younger
(a running writer's, or a crash less than an hour ago; ``odf gc`` leaves them until
they are stale). See `storage.gc` for why age, not a lock, decides.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import functools
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fbs.codec import decode_block
from fbs.errors import FbsError, MalformedBlock
from fbs.model import Checkpoint, DataSlice, MetadataBlock, SetVocab
from fbs.multiformats import Multihash
from fbs.rules import new_checkpoint, new_data
from storage.chain import ChainState, validate_append
from storage.dataset import Dataset
from storage.errors import (
    ChainRuleViolation,
    InvalidAppend,
    ObjectNotFound,
    StorageError,
)
from storage.fsutil import DEFAULT_STALE_PENDING_AGE_S
from storage.gc import find_temp_files
from storage.object_store import DiskObjectStore

__all__ = [
    "DEFAULT_MAX_PROBLEMS",
    "ProblemKind",
    "VerifyProblem",
    "VerifyReport",
    "VerifyWarning",
    "verify_datasets",
    "verify_integrity",
]

#: Stop collecting after this many problems (a wrecked dataset needs no full list).
DEFAULT_MAX_PROBLEMS: Final = 1000


class ProblemKind(enum.StrEnum):
    """What is wrong."""

    HEAD_INVALID = "head-invalid"
    HEAD_MISSING = "head-missing"
    UNREADABLE = "unreadable"
    BLOCK_MISSING = "block-missing"
    BLOCK_CORRUPT = "block-corrupt"
    BLOCK_MALFORMED = "block-malformed"
    BROKEN_LINK = "broken-link"
    CHAIN_RULE = "chain-rule"
    DATA_MISSING = "data-missing"
    DATA_CORRUPT = "data-corrupt"
    DATA_SIZE = "data-size"
    LOGICAL_HASH = "logical-hash"
    DATA_OFFSETS = "data-offsets"
    CHECKPOINT_MISSING = "checkpoint-missing"
    CHECKPOINT_CORRUPT = "checkpoint-corrupt"
    CHECKPOINT_SIZE = "checkpoint-size"


@dataclass(frozen=True, slots=True)
class VerifyProblem:
    """One defect.

    Attributes:
        kind: the category.
        message: human-readable detail.
        block_hash: the block concerned (if any).
        sequence_number: its sequence number (if known).
        object_hash: the data/checkpoint object concerned (if any).
        rule: the broken chain rule number (``CHAIN_RULE`` only).
    """

    kind: ProblemKind
    message: str
    block_hash: Multihash | None = None
    sequence_number: int | None = None
    object_hash: Multihash | None = None
    rule: int | None = None


@dataclass(frozen=True, slots=True)
class VerifyWarning:
    """Something worth cleaning up that does not make the dataset unsound.

    Attributes:
        kind: ``stale-temp-file`` or ``temp-file``.
        message: human-readable detail (names the path and ``odf gc``).
        path: the file concerned.
    """

    kind: str
    message: str
    path: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Result of `verify_integrity`.

    Attributes:
        head: the head verified (``None``: empty dataset or unreadable ref).
        blocks_checked: blocks read and hash-checked.
        objects_checked: data/checkpoint objects checked.
        problems: every defect found, in discovery order.
        state: chain state at the head if the whole chain replayed cleanly.
        warnings: leftovers that do not affect ``ok`` (temporary files).
    """

    head: Multihash | None
    blocks_checked: int
    objects_checked: int
    problems: tuple[VerifyProblem, ...]
    state: ChainState | None = None
    warnings: tuple[VerifyWarning, ...] = ()

    @property
    def ok(self) -> bool:
        """True if no problem was found."""
        return not self.problems

    @property
    def first_bad_block(self) -> VerifyProblem | None:
        """The problem of the oldest bad block (lowest sequence number), if any."""
        with_seq = [p for p in self.problems if p.sequence_number is not None]
        if with_seq:
            return min(with_seq, key=lambda p: p.sequence_number or 0)
        return next((p for p in self.problems if p.block_hash is not None), None)


class _Collector:
    def __init__(self, limit: int) -> None:
        self.problems: list[VerifyProblem] = []
        self.limit = limit

    def add(self, problem: VerifyProblem) -> None:
        if len(self.problems) < self.limit:
            self.problems.append(problem)


def _walk(
    ds: Dataset, head: Multihash, out: _Collector
) -> tuple[list[tuple[Multihash, MetadataBlock]], bool]:
    """Blocks from head to Seed (newest first); the flag is False if the walk broke off."""
    blocks: list[tuple[Multihash, MetadataBlock]] = []
    h: Multihash | None = head
    expected: int | None = None
    while h is not None:
        try:
            raw = ds.layout.blocks.get(h)
        except ObjectNotFound:
            out.add(VerifyProblem(ProblemKind.BLOCK_MISSING, f"block {h} is missing", h, expected))
            return blocks, False
        except StorageError as e:  # CorruptObject, UnsafePath
            out.add(VerifyProblem(ProblemKind.BLOCK_CORRUPT, f"block {h}: {e}", h, expected))
            return blocks, False
        except OSError as e:
            out.add(
                VerifyProblem(ProblemKind.UNREADABLE, f"block {h}: {_os_error(e)}", h, expected)
            )
            return blocks, False
        try:
            block = decode_block(raw, ds.limits)
        except MalformedBlock as e:
            out.add(VerifyProblem(ProblemKind.BLOCK_MALFORMED, f"block {h}: {e}", h, expected))
            return blocks, False
        if expected is not None and block.sequence_number != expected:
            out.add(
                VerifyProblem(
                    ProblemKind.BROKEN_LINK,
                    f"block {h} has sequence number {block.sequence_number}, expected {expected}",
                    h,
                    expected,
                )
            )
            return blocks, False
        blocks.append((h, block))
        if block.prev_block_hash is not None and block.sequence_number == 0:
            out.add(
                VerifyProblem(
                    ProblemKind.BROKEN_LINK, f"block {h} has sequence 0 but a parent", h, 0
                )
            )
            return blocks, False
        expected = block.sequence_number - 1
        h = block.prev_block_hash
    return blocks, True


def _check_object(
    store: DiskObjectStore,
    h: Multihash,
    size: int,
    kinds: tuple[ProblemKind, ProblemKind, ProblemKind],
    where: tuple[Multihash, int],
    out: _Collector,
) -> bool:
    wrong_size = kinds[2]
    block_h, seq = where
    try:
        actual = store.size(h)
        if actual != size:
            out.add(
                VerifyProblem(
                    wrong_size, f"object {h} has {actual} bytes, block says {size}", block_h, seq, h
                )
            )
            return False
        store.check(h)
    except (StorageError, OSError) as e:
        out.add(_read_problem(e, h, kinds, where))
        return False
    return True


def _read_problem(
    e: StorageError | OSError,
    h: Multihash,
    kinds: tuple[ProblemKind, ProblemKind, ProblemKind],
    where: tuple[Multihash, int],
) -> VerifyProblem:
    """The problem a failed read of object ``h`` is: missing, corrupt or unreadable."""
    missing, corrupt, _wrong_size = kinds
    if isinstance(e, ObjectNotFound):
        return VerifyProblem(missing, f"object {h} is missing", *where, h)
    if isinstance(e, StorageError):
        return VerifyProblem(corrupt, f"object {h}: {e}", *where, h)
    return VerifyProblem(ProblemKind.UNREADABLE, f"object {h}: {_os_error(e)}", *where, h)


def _os_error(e: OSError) -> str:
    return f"cannot read {e.filename or 'file'}: {e.strerror or e}"


def _temp_warnings(
    dataset: Dataset, pending_age_s: float, now: float | None
) -> tuple[VerifyWarning, ...]:
    layout = dataset.layout
    dirs = (
        layout.refs_dir,
        layout.blocks_dir,
        layout.data_dir,
        layout.checkpoints_dir,
        layout.info_dir,
    )
    return tuple(
        temp_file_warning(t.path, t.age_s, t.stale)
        for t in find_temp_files(dirs, older_than_s=pending_age_s, now=now)
    )


def temp_file_warning(path: object, age_s: float, stale: bool) -> VerifyWarning:
    """The warning for one ``.pending-*`` file (shared with the workspace-level check)."""
    if stale:
        return VerifyWarning(
            "stale-temp-file",
            f"stale temporary file {path} ({age_s / 3600:.1f} h old, left by a writer that "
            "died before committing); `odf gc` removes it",
            str(path),
        )
    return VerifyWarning(
        "temp-file",
        f"temporary file {path} ({age_s:.0f} s old: a running writer's, or left by a crash); "
        "`odf gc` removes it once it is an hour old",
        str(path),
    )


#: A data object up to this size is read into memory once and every check (physical
#: hash, logical hash, offsets) runs on those bytes; a larger one is streamed per check.
MAX_IN_MEMORY_OBJECT: Final = 256 * 2**20

_Job = Callable[[], list[VerifyProblem]]

#: Directory under ``.odf/cache/`` of the per-dataset records of `_SoundSlices`.
SOUND_SLICES_DIR: Final = "sound-slices"
_SOUND_FORMAT: Final = 1


class _SoundSlices:
    """Slices whose logical hash and offsets a verify computed and found as their block
    declares, by physical hash: ``{physical: [logical, offset column, start, end]}``.

    Both checks are functions of the slice's bytes alone, and every verify re-hashes
    those bytes (SHA3) before looking here: a slice whose bytes still hash to its name
    needs neither decoded again. So a repeated ``odf verify --integrity`` costs a read
    and a SHA3 of each object, not a Parquet decode. The record is self-checking (SHA3 of
    its body, like the chain-state cache); a damaged or foreign one is ignored, and
    losing it only costs a recomputation. ``path`` None: remembered in memory only.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._known = self._read() if path is not None else {}
        self._dirty = False

    def _read(self) -> dict[str, list[object]]:
        assert self.path is not None
        try:
            outer = json.loads(self.path.read_bytes())
            text = outer["body"]
            if outer.get("format") != _SOUND_FORMAT:
                return {}
            if hashlib.sha3_256(text.encode()).hexdigest() != outer["sha3"]:
                return {}
            body = json.loads(text)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}
        return body if isinstance(body, dict) else {}

    @staticmethod
    def _entry(d: DataSlice, column: str) -> list[object]:
        interval = d.offset_interval
        return [d.logical_hash.to_multibase(), column, interval.start, interval.end]

    def known(self, d: DataSlice, column: str) -> bool:
        """Whether ``d`` (whose bytes were just checked) was found sound before."""
        with self._lock:
            return self._known.get(d.physical_hash.to_multibase()) == self._entry(d, column)

    def add(self, d: DataSlice, column: str) -> None:
        """Remember that ``d``'s logical hash and offsets are as its block declares."""
        with self._lock:
            self._known[d.physical_hash.to_multibase()] = self._entry(d, column)
            self._dirty = True

    def save(self) -> None:
        """Write the record (temp + rename, no fsync: it is a cache; best effort)."""
        if self.path is None or not self._dirty:
            return
        text = json.dumps(self._known, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha3_256(text.encode()).hexdigest()
        data = json.dumps({"format": _SOUND_FORMAT, "sha3": digest, "body": text})
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(data)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def _sound_slices_path(dataset: Dataset) -> Path | None:
    """The record next to the dataset's chain-state cache (None: not in a workspace)."""
    cache = dataset.state_cache
    return None if cache is None else cache.parent.parent / SOUND_SLICES_DIR / cache.name


def _object_jobs(
    dataset: Dataset,
    newest_first: list[tuple[Multihash, MetadataBlock]],
    offset_column: str,
    check_logical_hashes: bool,
    sound: _SoundSlices,
) -> list[_Job]:
    """One check per data or checkpoint object, oldest block first."""
    layout = dataset.layout
    jobs: list[_Job] = []
    for h, block in reversed(newest_first):
        where = (h, block.sequence_number)
        d = new_data(block.event)
        if d is not None:
            jobs.append(
                functools.partial(
                    _data_problems,
                    layout.data,
                    d,
                    where,
                    offset_column,
                    sound if check_logical_hashes else None,
                )
            )
        c = new_checkpoint(block.event)
        if c is not None:
            jobs.append(functools.partial(_checkpoint_problems, layout.checkpoints, c, where))
    return jobs


def _run_jobs(jobs: list[_Job], workers: int | None) -> Iterator[list[VerifyProblem]]:
    """Each job's problems, in job order; jobs run on up to ``workers`` threads (hashing
    and Parquet decoding release the GIL, so objects are checked on every core)."""
    n = min(len(jobs), workers or os.cpu_count() or 1)
    if n <= 1:
        yield from (job() for job in jobs)
        return
    with ThreadPoolExecutor(n, thread_name_prefix="odf-verify") as pool:
        # Bounded look-ahead: at most 2n objects in flight (each may hold its bytes).
        pending: collections.deque[Future[list[VerifyProblem]]] = collections.deque()
        for job in jobs:
            pending.append(pool.submit(job))
            if len(pending) >= 2 * n:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _checkpoint_problems(
    store: DiskObjectStore, c: Checkpoint, where: tuple[Multihash, int]
) -> list[VerifyProblem]:
    out = _Collector(DEFAULT_MAX_PROBLEMS)
    kinds = (
        ProblemKind.CHECKPOINT_MISSING,
        ProblemKind.CHECKPOINT_CORRUPT,
        ProblemKind.CHECKPOINT_SIZE,
    )
    _check_object(store, c.physical_hash, c.size, kinds, where, out)
    return out.problems


def _data_problems(
    store: DiskObjectStore,
    d: DataSlice,
    where: tuple[Multihash, int],
    offset_column: str,
    sound: _SoundSlices | None,
) -> list[VerifyProblem]:
    """Every problem of one data slice: presence, size, physical hash, and (with
    ``sound``: logical hashes are checked) logical hash and offsets, all from one read of
    the file when it fits in memory; the last two only if not known sound already."""
    out = _Collector(DEFAULT_MAX_PROBLEMS)
    kinds = (ProblemKind.DATA_MISSING, ProblemKind.DATA_CORRUPT, ProblemKind.DATA_SIZE)
    h = d.physical_hash
    if d.size > min(MAX_IN_MEMORY_OBJECT, store.max_object_size):
        if not _check_object(store, h, d.size, kinds, where, out):
            return out.problems
        data = None
    else:
        data = _read_object(store, h, d.size, kinds, where, out)
        if data is None:
            return out.problems
    if sound is None or sound.known(d, offset_column):
        return out.problems

    def source() -> Any:
        if data is None:
            return store.open(h)
        import pyarrow as pa

        return contextlib.nullcontext(pa.BufferReader(data))

    offsets = _OffsetsCheck(offset_column, d.offset_interval.start, d.offset_interval.end)
    try:
        with source() as f:
            # One decode: the offsets are checked on the batches the logical hash reads.
            actual: Multihash | None = _logical_hash(f, offsets.feed)
    except (FbsError, StorageError, OSError, ValueError, TypeError) as e:
        out.add(VerifyProblem(ProblemKind.LOGICAL_HASH, f"cannot hash data {h}: {e}", *where, h))
        actual = None
    if actual is not None:
        why = offsets.problem()
        if why is not None:
            out.add(VerifyProblem(ProblemKind.DATA_OFFSETS, f"data {h}: {why}", *where, h))
    if actual is not None and actual == d.logical_hash and not out.problems:
        sound.add(d, offset_column)
    if actual is not None and actual != d.logical_hash:
        out.add(
            VerifyProblem(
                ProblemKind.LOGICAL_HASH,
                f"data {h} hashes logically to {actual}, block says {d.logical_hash}",
                *where,
                h,
            )
        )
    return out.problems


def _read_object(
    store: DiskObjectStore,
    h: Multihash,
    size: int,
    kinds: tuple[ProblemKind, ProblemKind, ProblemKind],
    where: tuple[Multihash, int],
    out: _Collector,
) -> bytes | None:
    """`_check_object` that keeps the bytes it hashed (``None``: a problem was added)."""
    wrong_size = kinds[2]
    block_h, seq = where
    try:
        actual = store.size(h)
        if actual != size:
            message = f"object {h} has {actual} bytes, block says {size}"
            out.add(VerifyProblem(wrong_size, message, block_h, seq, h))
            return None
        with store.open(h) as f:
            data = f.read(size + 1)
    except (StorageError, OSError) as e:
        out.add(_read_problem(e, h, kinds, where))
        return None
    if len(data) != size:  # changed since the size was read
        message = f"object {h} has {len(data)} bytes, block says {size}"
        out.add(VerifyProblem(wrong_size, message, block_h, seq, h))
        return None
    if hashlib.sha3_256(data).digest() != h.digest:  # releases the GIL on large buffers
        message = f"object {h}: stored object {h} does not match its hash"
        out.add(VerifyProblem(kinds[1], message, block_h, seq, h))
        return None
    return data


def _logical_hash(source: Any, observe: Callable[[Any], None]) -> Multihash:
    """`storage.hashing.logical_hash_parquet`, imported on first use: a verify whose
    slices are all known sound never decodes one, so it spares the import (through the
    logical hash, pyarrow imports pandas)."""
    from storage.hashing import logical_hash_parquet

    return logical_hash_parquet(source, observe)


class _OffsetsCheck:
    """Whether a slice's offset column is exactly ``start..end`` in order, from the
    batches the logical hash decodes (`feed`, in row order; never raises).

    ODF slices are stored ordered by offset with contiguous offsets; the engine relies on
    it when it reads inputs without sorting them.
    """

    def __init__(self, column: str, start: int, end: int) -> None:
        self.column = column
        self.start = start
        self.end = end
        self.rows = 0
        self.nulls = 0
        self.first: int | None = None
        self.last: int | None = None
        self.in_order = True
        self.error: str | None = None

    def feed(self, batch: Any) -> None:
        """Take the offsets of the next batch of the slice."""
        if self.error is not None:
            return
        try:
            self._feed(batch)
        # Arrow's errors subclass these: an offset column of a type that does not subtract.
        except (ArithmeticError, LookupError, NotImplementedError, TypeError, ValueError) as e:
            self.error = f"cannot read offsets: {e}"

    def _feed(self, batch: Any) -> None:
        import pyarrow.compute as pc

        from fbs.arrow_values import int_scalar

        index = batch.schema.get_field_index(self.column)
        if index < 0:
            self.error = f"cannot read offsets: no column {self.column!r}"
            return
        col = batch.column(index)
        self.rows += len(col)
        self.nulls += col.null_count
        if self.nulls or not len(col):
            return
        first, last = col[0].as_py(), col[len(col) - 1].as_py()
        if self.first is None:
            self.first = first
        elif self.last is None or first - self.last != 1:
            self.in_order = False
        self.last = last
        if self.in_order and len(col) > 1:
            steps = pc.subtract(col.slice(1), col.slice(0, len(col) - 1))
            # A scalar built from a buffer: pyarrow would import pandas to convert a 1.
            self.in_order = bool(pc.all(pc.equal(steps, int_scalar(1, steps.type))).as_py())

    def problem(self) -> str | None:
        """Why the offsets are not ``start..end`` in order (None: they are)."""
        if self.error is not None:
            return self.error
        expected = self.end - self.start + 1
        if self.rows != expected:
            interval = f"[{self.start}, {self.end}]"
            return f"{self.rows} records, offset interval {interval} says {expected}"
        if self.nulls:
            return "null offsets"
        if self.rows == 0:
            return None
        if self.first != self.start or self.last != self.end:
            return f"offsets run {self.first}..{self.last}, not {self.start}..{self.end}"
        if not self.in_order:
            return "offsets are not contiguous and ascending (rows out of order)"
        return None


def verify_integrity(
    dataset: Dataset,
    *,
    check_objects: bool = True,
    check_logical_hashes: bool = True,
    max_problems: int = DEFAULT_MAX_PROBLEMS,
    require_head: bool = False,
    pending_age_s: float = DEFAULT_STALE_PENDING_AGE_S,
    now: float | None = None,
    workers: int | None = None,
) -> VerifyReport:
    """Verify blocks, chain rules and objects of ``dataset`` (see the module docstring).

    Args:
        dataset: the dataset to check.
        check_objects: also check data and checkpoint objects.
        check_logical_hashes: also recompute logical hashes of data files (Parquet).
        max_problems: stop recording after this many problems.
        require_head: a missing ``refs/head`` is a problem even with no block stored
            (a dataset registered in a workspace always has one).
        pending_age_s: temporary files older than this are reported as stale.
        now: the current time for temp file ages (tests pass a fixed value).
        workers: threads checking objects (default: one per core; 1: on this thread).
            The report is the same whatever the number: problems are collected in
            block order.

    Returns:
        A `VerifyReport`; ``report.ok`` is True for a sound dataset.
    """
    (report,) = verify_datasets(
        [dataset],
        check_objects=check_objects,
        check_logical_hashes=check_logical_hashes,
        max_problems=max_problems,
        require_head=require_head,
        pending_age_s=pending_age_s,
        now=now,
        workers=workers,
    )
    return report


def verify_datasets(
    datasets: Sequence[Dataset],
    *,
    check_objects: bool = True,
    check_logical_hashes: bool = True,
    max_problems: int = DEFAULT_MAX_PROBLEMS,
    require_head: bool = False,
    pending_age_s: float = DEFAULT_STALE_PENDING_AGE_S,
    now: float | None = None,
    workers: int | None = None,
) -> list[VerifyReport]:
    """`verify_integrity` of each dataset, their objects checked on one pool of threads.

    A workspace of many small datasets keeps every core busy too (each dataset on its
    own pool would check a one-slice dataset on one thread). The arguments are those of
    `verify_integrity` and apply to every dataset; ``max_problems`` is per dataset.

    Returns:
        One report per dataset, in order, each the one `verify_integrity` gives.
    """
    checks: list[_Check] = []
    jobs: list[tuple[_Check, _Job]] = []
    for ds in datasets:
        check = _Check(ds, max_problems, require_head, pending_age_s, now, check_objects)
        checks.append(check)
        jobs += [(check, job) for job in check.object_jobs(check_logical_hashes)]
    results = _run_jobs([job for _check, job in jobs], workers)
    for (check, _job), problems in zip(jobs, results, strict=True):
        for problem in problems:
            check.out.add(problem)
    for check in checks:
        if check.sound is not None:
            check.sound.save()
    return [check.report() for check in checks]


class _Check:
    """One dataset's verification: blocks and chain rules checked on construction
    (this thread), object problems added by `verify_datasets`, then `report`."""

    def __init__(
        self,
        dataset: Dataset,
        max_problems: int,
        require_head: bool,
        pending_age_s: float,
        now: float | None,
        check_objects: bool,
    ) -> None:
        self.dataset = dataset
        self.out = _Collector(max_problems)
        self.warnings = _temp_warnings(dataset, pending_age_s, now)
        self.head: Multihash | None = None
        self.blocks: list[tuple[Multihash, MetadataBlock]] = []
        self.state: ChainState | None = None
        self.blocks_checked = 0
        self.objects = 0
        self.sound: _SoundSlices | None = None
        self.objects_to_check = self._check_chain(require_head) and check_objects
        self.offset_column = next(
            (
                b.event.offset_column
                for _h, b in self.blocks
                if isinstance(b.event, SetVocab) and b.event.offset_column
            ),
            "offset",
        )

    def object_jobs(self, check_logical_hashes: bool) -> list[_Job]:
        """The checks of the objects the chain names (none if none is to be checked).

        The decoded blocks are let go: the jobs keep only what they check, so several
        datasets verified together hold one dataset's blocks at a time, as one does.
        """
        if not self.objects_to_check:
            return []
        self.sound = _SoundSlices(_sound_slices_path(self.dataset))
        jobs = _object_jobs(
            self.dataset, self.blocks, self.offset_column, check_logical_hashes, self.sound
        )
        self.objects = len(jobs)
        self.blocks = []
        return jobs

    def report(self) -> VerifyReport:
        """The report of everything found so far."""
        problems = tuple(self.out.problems)
        if self.head is None:
            return VerifyReport(None, 0, 0, problems, warnings=self.warnings)
        return VerifyReport(
            self.head, self.blocks_checked, self.objects, problems, self.state, self.warnings
        )

    def _check_chain(self, require_head: bool) -> bool:
        """Read the head, walk and validate the chain; False: no object to check."""
        dataset, out = self.dataset, self.out
        try:
            head = dataset.head()
        except StorageError as e:
            out.add(VerifyProblem(ProblemKind.HEAD_INVALID, f"refs/head: {e}"))
            return False
        except OSError as e:
            out.add(VerifyProblem(ProblemKind.UNREADABLE, f"refs/head: {_os_error(e)}"))
            return False
        if head is None:
            self._no_head(require_head)
            return False
        self.head = head
        self.blocks, complete = _walk(dataset, head, out)
        self.blocks_checked = len(self.blocks)
        if complete:
            self.state = _replay(self.blocks, out)
        return True

    def _no_head(self, require_head: bool) -> None:
        try:
            stored = sum(1 for _ in self.dataset.layout.blocks.iter_hashes())
        except OSError as e:
            self.out.add(VerifyProblem(ProblemKind.UNREADABLE, f"blocks/: {_os_error(e)}"))
            stored = 0
        if stored or require_head:
            self.out.add(
                VerifyProblem(
                    ProblemKind.HEAD_MISSING,
                    f"refs/head is missing but {stored} block(s) are stored: the chain's head "
                    "is lost and readers see an empty dataset"
                    if stored
                    else "refs/head is missing (a registered dataset always has a Seed block)",
                )
            )


def _replay(
    newest_first: list[tuple[Multihash, MetadataBlock]], out: _Collector
) -> ChainState | None:
    """The chain state at the head, or None after adding the first broken rule."""
    state: ChainState | None = None
    for h, block in reversed(newest_first):
        try:
            state = validate_append(state, block, h)
        except InvalidAppend as e:
            out.add(
                VerifyProblem(
                    ProblemKind.CHAIN_RULE,
                    f"block {h} (#{block.sequence_number}): {e}",
                    h,
                    block.sequence_number,
                    rule=e.rule if isinstance(e, ChainRuleViolation) else None,
                )
            )
            return None  # later rules depend on a state we no longer have
    return state
