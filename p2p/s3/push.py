"""`push_to_s3`: publish a local dataset into an S3 repository, in kamu's layout.

The order makes the head move only when everything it names is durable on S3:

1. Refuse a store without conditional writes (`storage.s3.probe`), before any write.
2. Read the repository's head; the new blocks are the local chain above it (a head
   the local chain does not contain is refused: `NotDescendant`, pull first).
3. Upload the data slices and checkpoints those blocks name, then the blocks, each
   create-only and hashed on the way (an object already there is checked by size).
4. Move ``refs/head`` from the head read in 2 to the local head with ``If-Match``
   (``If-None-Match: *`` for a new dataset). A writer that moved it meanwhile wins;
   this push fails with `RefCASFailed` and leaves only unreferenced objects behind.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from fbs.model import MetadataBlock
from fbs.multiformats import Multihash
from p2p.errors import NotDescendant
from p2p.receive import ObjectJob, object_jobs
from storage.dataset import Dataset
from storage.errors import DatasetError
from storage.layout import DatasetLayout
from storage.s3.client import S3Client, connect
from storage.s3.layout import S3DatasetLayout
from storage.s3.probe import require_conditional_writes
from storage.s3.url import S3Location

__all__ = ["PARALLEL_UPLOADS", "S3PushResult", "push_to_s3"]

#: Objects uploaded at once (each holds at most one multipart part, 8 MiB, in memory).
PARALLEL_UPLOADS: Final = 8


@dataclass(frozen=True, slots=True)
class S3PushResult:
    """What a push did: heads before and after, blocks and objects sent."""

    location: S3Location
    old_head: Multihash | None
    new_head: Multihash
    blocks_pushed: int
    objects_pushed: int
    objects_present: int


def _blocks_since(
    ds: Dataset, stop_at: Multihash | None
) -> list[tuple[Multihash, bytes, MetadataBlock]]:
    """Raw blocks from the local head back to ``stop_at`` (excluded), newest first.

    Raises:
        NotDescendant: ``stop_at`` is not a block of the local chain.
    """
    out: list[tuple[Multihash, bytes, MetadataBlock]] = []
    for h, raw, block in ds.iter_blocks():
        if h == stop_at:
            return out
        out.append((h, raw, block))
    if stop_at is not None:
        raise NotDescendant(
            f"the repository's head {stop_at} is not in the local chain "
            "(it has blocks this workspace lacks: pull first)"
        )
    return out


def _upload(
    local: DatasetLayout, remote: S3DatasetLayout, job: ObjectJob, listed: frozenset[Multihash]
) -> bool:
    """Send one object unless it was listed as present; whether it was sent.

    The listing only saves uploads: the write itself is create-only, and an object
    that appeared since is checked by size (`S3ObjectStore.put_file`). A listed object
    is re-used: its modification time is restarted so that a garbage collector keeps
    it until the head names it (it may be an orphan of a push that died).
    """
    store = remote.data if job.kind == "data" else remote.checkpoints
    if job.hash in listed and store.refresh(job.hash):
        return False
    source = local.data if job.kind == "data" else local.checkpoints
    store.put_file(job.hash, source.path_of(job.hash))
    return True


def push_to_s3(
    ds: Dataset,
    location: S3Location,
    *,
    alias: str | None = None,
    client: S3Client | None = None,
) -> S3PushResult:
    """Publish ``ds`` at ``location`` (a dataset's prefix); see the module docstring.

    Args:
        ds: the local dataset.
        location: where it goes, e.g. ``parse_s3_url("s3://bucket/repo/my.dataset")``.
        alias: written to ``info/alias`` when the repository has none.
        client: a client to reuse (default: `connect`, credentials from the AWS chain).

    Raises:
        ConditionalWritesUnsupported: the store cannot do compare-and-swap.
        NotDescendant: the repository's head is not in the local chain.
        RefCASFailed: another writer moved the repository's head during the push.
        S3Error: a request failed.
    """
    client = client if client is not None else connect(location)
    require_conditional_writes(client, location)
    remote = S3DatasetLayout(client, location)
    old_head = remote.refs.get_or_none("head")
    new_head = ds.head()
    if new_head is None:
        raise DatasetError(f"{ds!r} has no blocks to push")
    new_blocks = _blocks_since(ds, old_head)
    jobs = object_jobs(block for _h, _raw, block in new_blocks)
    # One listing per store (1,000 keys a request) instead of a HEAD per object.
    listed = frozenset(remote.data.iter_hashes()) | frozenset(remote.checkpoints.iter_hashes())
    with ThreadPoolExecutor(PARALLEL_UPLOADS) as pool:
        sent = list(pool.map(lambda job: _upload(ds.layout, remote, job, listed), jobs))
    remote.blocks.put_many((h, raw) for h, raw, _block in new_blocks)
    if new_blocks:
        remote.refs.set_if_equals("head", old_head, new_head)
    if alias is not None:
        remote.write_alias(alias)
    return S3PushResult(
        location, old_head, new_head, len(new_blocks), sum(sent), len(sent) - sum(sent)
    )
