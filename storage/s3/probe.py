"""The start-up probe: does this store honour conditional writes?

Compare-and-swap on S3 rests on the server refusing ``If-None-Match: *`` on an
existing key and ``If-Match`` with a stale ETag (412). Some S3-compatible servers
ignore both headers and overwrite (rclone ``serve s3``, older gateways): on those,
two writers would silently lose each other's commits. `require_conditional_writes`
finds out with a throw-away key beside the datasets, before anything of a dataset is
written, and refuses such a store with `ConditionalWritesUnsupported`.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Final

from storage.s3.client import S3Client
from storage.s3.errors import ConditionalWritesUnsupported, S3Error
from storage.s3.url import S3Location

#: Key of the probe object, beside (not inside) the dataset's layout.
PROBE_PREFIX: Final = ".odf-cas-probe-"


def require_conditional_writes(client: S3Client, location: S3Location) -> None:
    """Raise unless the store refuses a second create and a stale ``If-Match``.

    Raises:
        ConditionalWritesUnsupported: the store overwrote instead of refusing.
        S3Error: the probe itself failed (no access, no bucket).
    """
    key = location.key(f"{PROBE_PREFIX}{uuid.uuid4().hex}")
    where = location.to_url()
    try:
        if not client.put_if_absent(key, b"1"):
            raise S3Error(f"{where}: a fresh probe key already existed")
        if client.put_if_absent(key, b"2"):
            raise ConditionalWritesUnsupported(
                f"{where}: the store ignores If-None-Match (it overwrote an existing key), "
                "so concurrent writers could lose commits; refusing to write to it"
            )
        stat = client.stat(key)
        stale = '"00000000000000000000000000000000"'
        if stat is None or stat.etag == stale or client.put_if_match(key, b"3", stale):
            raise ConditionalWritesUnsupported(
                f"{where}: the store ignores If-Match (it accepted a stale ETag), "
                "so concurrent writers could lose commits; refusing to write to it"
            )
    finally:
        with contextlib.suppress(S3Error):
            client.delete(key)
