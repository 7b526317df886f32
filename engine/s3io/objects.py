"""Input slices on S3, named by URL: ``s3+http(s)://host:port/bucket/<prefix>/<hash>``.

The key's last segment is the object's multihash (as every ODF object store names it).
Before anything reads a footer of it, the driver fetches the object and checks its
SHA3-256 hash (`storage.s3.objects.S3ObjectStore.get`); the footer of a checked object is
kept by its URL, which holds its hash, so later requests over the same slice read nothing.
Executors check the hash again before they parse what they read (`engine.s3io.executor`).
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from engine.errors import EngineInternalError
from engine.s3io.executor import MAX_OBJECT_BYTES

if TYPE_CHECKING:
    from storage.s3.client import S3Client

__all__ = ["InputObject", "input_object", "is_s3_path", "max_op", "offset_bounds"]

#: Footers kept by URL.
FOOTER_CACHE_SIZE: Final = 1024
_FOOTERS: collections.OrderedDict[str, InputObject] = collections.OrderedDict()
_CLIENTS: dict[tuple[str | None, str], S3Client] = {}
_LOCK: Final = threading.Lock()


@dataclass(frozen=True, slots=True)
class InputObject:
    """An input slice on S3, checked against its hash, and its Parquet footer."""

    url: str
    endpoint: str | None
    bucket: str
    key: str
    digest_hex: str
    size: int
    metadata: Any  # pyarrow.parquet.FileMetaData


def is_s3_path(path: str) -> bool:
    """Whether an engine request's data path names an object on S3."""
    from storage.s3.url import is_s3_url

    return is_s3_url(path)


def _client(endpoint: str | None, bucket: str) -> S3Client:
    from storage.s3.client import connect
    from storage.s3.url import S3Location

    with _LOCK:
        client = _CLIENTS.get((endpoint, bucket))
        if client is None:
            client = _CLIENTS[(endpoint, bucket)] = connect(S3Location(endpoint, bucket, ""))
        return client


def input_object(url: str) -> InputObject:
    """The object ``url`` names, hash-checked, with its footer.

    Raises:
        EngineInternalError: a URL that names no hash, an object that is absent, does not
            match its hash or is no Parquet file, a store that cannot be read.
    """
    with _LOCK:
        cached = _FOOTERS.get(url)
        if cached is not None:
            _FOOTERS.move_to_end(url)
            return cached
    found = _fetch(url)
    with _LOCK:
        _FOOTERS[url] = found
        while len(_FOOTERS) > FOOTER_CACHE_SIZE:
            _FOOTERS.popitem(last=False)
    return found


def _fetch(url: str) -> InputObject:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fbs.errors import OdfError
    from fbs.multiformats import SHA3_256, parse_hash
    from storage.errors import CorruptObject, ObjectNotFound
    from storage.s3.objects import S3ObjectStore
    from storage.s3.url import parse_s3_url

    try:
        where = parse_s3_url(url)
        parent, _, name = where.prefix.rpartition("/")
        h = parse_hash(name, code=SHA3_256)
        store = S3ObjectStore(
            _client(where.endpoint, where.bucket), parent, max_object_size=MAX_OBJECT_BYTES
        )
        data = store.get(h)
        metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    except ObjectNotFound:
        raise EngineInternalError(f"input slice {url} is not on the store") from None
    except CorruptObject:
        raise EngineInternalError(f"input slice {url} does not match its hash") from None
    except (OdfError, pa.ArrowException, OSError) as e:
        raise EngineInternalError(f"cannot read input slice {url}: {e}") from None
    digest = h.digest.hex()
    return InputObject(url, where.endpoint, where.bucket, where.prefix, digest, len(data), metadata)


def _column_stats(metadata: Any, column: str) -> list[tuple[int, int]] | None:
    """Min and max of ``column`` per row group (``None``: a group without statistics)."""
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if column not in names:
        return None
    index = names.index(column)
    out = []
    for g in range(metadata.num_row_groups):
        stats = metadata.row_group(g).column(index).statistics
        if stats is None or not stats.has_min_max:
            return None
        out.append((int(stats.min), int(stats.max)))
    return out


def offset_bounds(obj: InputObject, offset_column: str) -> tuple[int, int] | None:
    """The object's smallest and largest offset (``None``: unknown or empty)."""
    stats = _column_stats(obj.metadata, offset_column)
    if not stats:
        return None
    return min(lo for lo, _ in stats), max(hi for _, hi in stats)


def max_op(obj: InputObject, op_column: str) -> int | None:
    """The largest operation type of the object (0 without the column; ``None``: unknown)."""
    names = [obj.metadata.schema.column(i).path for i in range(obj.metadata.num_columns)]
    if op_column not in names:
        return 0
    stats = _column_stats(obj.metadata, op_column)
    if stats is None:
        return None
    return max((max(hi, abs(lo)) for lo, hi in stats), default=0)
