"""Garbage collection of one dataset on S3: unreferenced objects older than a grace period.

A writer uploads its objects first and moves ``refs/head`` last, so between the two an
object is needed and unreferenced; a writer killed in between leaves it so for good.
GC tells the two apart only by age: it deletes an unreferenced object (``blocks/``,
``data/``, ``checkpoints/``) or a leftover upload (``quarantine/``) only once it is
older than the grace period (`storage.gc.DEFAULT_GC_GRACE_S`, one hour).

Ages come from the server alone: ``LastModified`` of the key against the ``Date`` the
server answers (`S3Client.server_time`), so the local clock does not matter. S3 does
not refresh ``LastModified`` on a read, so a writer that re-uses an object it finds
present restarts it by copying the object onto itself (`S3ObjectStore.refresh`; the
disk store touches the file the same way). A writer therefore has the grace period,
counted from its last upload or re-use, to move the head. An object over 5 GiB
(`MAX_COPY_SIZE`: one request cannot copy it) keeps its time when re-used, so its
period runs from its upload.

Order of a run, which makes a commit that lands during it safe:

1. list every key of the stores with its ``LastModified`` (the candidates);
2. then read the head and walk the whole chain (each block hashed before it is parsed),
   collecting what it references;
3. for an unreferenced candidate older than the grace period, ``HEAD`` it again and
   delete it only if its ``LastModified`` did not change since the listing.

An object old at step 1 was last uploaded or re-used more than a grace period before,
so a writer that needed it moved the head before step 2 and the object is referenced.
What remains is a writer that re-uses exactly such an object between the ``HEAD`` and
the ``DELETE`` of step 3 (one round trip); the head it then moves names an object that
is gone, which ``odf verify`` reports and a push of the dataset restores.

A ``trash/`` prefix (objects moved aside, deleted one grace period later, restored if
referenced) would close that round trip, but a referenced object could then sit in
``trash/`` where kamu and other readers of the layout do not look; the layout stays
kamu's. A dataset whose head or chain cannot be read is refused whole: nothing is
deleted that is not proven unreferenced.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from fbs.codec import decode_block
from fbs.multiformats import Multihash
from fbs.rules import referenced_objects
from storage.errors import DatasetNotFound, MissingObject, ObjectNotFound
from storage.gc import DEFAULT_GC_GRACE_S
from storage.object_store import parse_object_name
from storage.s3.client import KeyStat
from storage.s3.layout import QUARANTINE_DIR, S3DatasetLayout

#: The stores of a dataset GC cleans, by their prefix under the dataset's.
STORES: Final = ("blocks", "data", "checkpoints")


@dataclass(frozen=True, slots=True)
class S3GcReport:
    """What one run removed (or, in a dry run, would remove); keys sorted.

    Attributes:
        deleted: keys removed (would be removed, if ``dry_run``).
        kept_recent: unreferenced keys kept because they are inside the grace period
            (or were re-used during the run).
        referenced: stored objects the chain references.
        bytes_freed: total size of ``deleted``.
        server_time: the server's clock the ages were measured against.
        dry_run: whether nothing was removed.
    """

    deleted: tuple[str, ...]
    kept_recent: tuple[str, ...]
    referenced: int
    bytes_freed: int
    server_time: float
    dry_run: bool


def _candidates(layout: S3DatasetLayout) -> Iterator[tuple[str, Multihash | None, KeyStat]]:
    """Every object key of the stores (with its hash) and every quarantine key (``None``)."""
    for store in STORES:
        prefix = layout.location.key(store) + "/"
        for key, stat in layout.client.list_keys(prefix):
            h = parse_object_name(key[len(prefix) :])
            if h is not None:
                yield key, h, stat
    for key, stat in layout.client.list_keys(layout.location.key(QUARANTINE_DIR) + "/"):
        yield key, None, stat


def referenced_keys(layout: S3DatasetLayout) -> set[str]:
    """The keys of every block of the chain and every object those blocks name.

    Raises:
        DatasetNotFound: no ``refs/head`` under the prefix.
        MissingObject: a block of the chain is gone.
        CorruptObject: a block does not match its hash.
    """
    head = layout.refs.get_or_none("head")
    if head is None:
        raise DatasetNotFound(f"no dataset at {layout.location.to_url()} (no refs/head)")
    blocks, data, checkpoints = layout.blocks, layout.data, layout.checkpoints
    keys: set[str] = set()
    h: Multihash | None = head
    while h is not None:
        try:
            block = decode_block(blocks.get(h))  # hashed before it is parsed
        except ObjectNotFound:
            raise MissingObject(f"block {h} of {layout.location.to_url()} is gone") from None
        keys.add(blocks.key_of(h))
        for obj in referenced_objects(block.event):
            store = data if obj.kind == "data" else checkpoints
            keys.add(store.key_of(obj.physical_hash))
        h = block.prev_block_hash
    return keys


def collect_s3_garbage(
    layout: S3DatasetLayout,
    *,
    grace_period_s: float = DEFAULT_GC_GRACE_S,
    dry_run: bool = False,
    now: float | None = None,
) -> S3GcReport:
    """Delete what the dataset at ``layout`` does not reference (see the module docstring).

    Args:
        layout: the dataset's prefix.
        grace_period_s: unreferenced keys younger than this (server time) are kept.
        dry_run: report without deleting.
        now: the server time to measure ages against (default: asked from the server).

    Raises:
        DatasetNotFound: no dataset under the prefix.
        MissingObject, CorruptObject: the chain cannot be read whole (nothing deleted).
        S3Error: a request failed.
    """
    client = layout.client
    current = client.server_time() if now is None else now
    listed = list(_candidates(layout))
    keep = referenced_keys(layout)
    deleted: list[str] = []
    recent: list[str] = []
    freed = 0
    for key, _h, stat in listed:
        if key in keep:
            continue
        if current - stat.mtime < grace_period_s:
            recent.append(key)
            continue
        again = client.stat(key)
        if again is None:
            continue  # removed meanwhile
        if again.mtime != stat.mtime:
            recent.append(key)  # re-used by a writer since the listing
            continue
        if not dry_run and not client.delete(key):
            continue
        deleted.append(key)
        freed += stat.size
    return S3GcReport(
        deleted=tuple(sorted(deleted)),
        kept_recent=tuple(sorted(recent)),
        referenced=sum(1 for key, _h, _s in listed if key in keep),
        bytes_freed=freed,
        server_time=current,
        dry_run=dry_run,
    )
