"""The engine's warm-up on an engine with S3 I/O: its input slice read from S3 too.

Executors elsewhere cannot read the warm-up's local slice; uploaded under a fresh
``warmup-<uuid>/`` prefix of the staging location (named by its hash, as in a dataset's
store), the warm-up starts the executors and their Python workers before the first
request, and the prefix is deleted afterwards.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from fbs.model.engine import TransformRequest
from storage.hashing import physical_hash_file
from storage.layout import DATA_DIR
from storage.s3.client import connect
from storage.s3.objects import S3ObjectStore
from storage.s3.url import S3Location

__all__ = ["through_staging"]


@contextlib.contextmanager
def through_staging(request: TransformRequest, staging: S3Location) -> Iterator[TransformRequest]:
    """``request`` with its input slices on S3 under a fresh prefix of ``staging``."""
    run = staging.child(f"warmup-{uuid.uuid4().hex}")
    client = connect(run)
    store = S3ObjectStore(client, run.key(DATA_DIR))
    inputs = []
    try:
        for inp in request.query_inputs:
            urls = []
            for path in inp.data_paths:
                h, _size = physical_hash_file(path)
                store.put_file(h, Path(path))
                urls.append(run.child(f"{DATA_DIR}/{h.to_multibase()}").to_url())
            inputs.append(inp.replace(data_paths=tuple(urls)))
        yield request.replace(query_inputs=tuple(inputs))
    finally:
        for key, _stat in list(client.list_keys(run.prefix + "/")):
            client.delete(key)
