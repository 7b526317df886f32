"""Uploads through presigned URLs: into ``quarantine/``, verified, then named.

A pusher gets a presigned ``PUT`` URL for a fresh key ``quarantine/<random>`` of the
dataset, never for ``data/<hash>``: S3 cannot check ODF's SHA3-256 names, so a URL
onto the final key would let anyone store any bytes under a valid-looking name.
`admit_upload` then moves the upload into its store, in this order:

1. copy it, server-side and create-only, to a private key beside it for which no URL
   was ever made (the pusher can keep writing to its own key until the URL expires;
   the private copy cannot change under the check);
2. read the private copy and hash it, size-capped, before anything else uses it;
3. only if it is the declared object: copy it create-only to ``data/<hash>`` (or
   ``checkpoints/<hash>``); an object already there is checked by size and refreshed;
4. delete the private copy and the upload.

Bytes that do not hash to their name never get a key outside ``quarantine/``; what a
killed node leaves there is removed by GC after the grace period (`storage.s3.gc`).
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from typing import Final, Literal

from fbs.multiformats import Multihash
from storage.errors import CorruptObject, HashMismatch, ObjectNotFound
from storage.object_store import check_digest
from storage.s3.errors import S3Error
from storage.s3.layout import QUARANTINE_DIR, S3DatasetLayout

#: Read size while hashing an upload.
CHUNK: Final = 1 << 20
#: Suffix of the private copy of an upload (no URL is ever made for it).
_PRIVATE: Final = ".verifying-"


def new_upload_key(layout: S3DatasetLayout) -> str:
    """A fresh key under the dataset's ``quarantine/`` for one upload."""
    return layout.location.key(f"{QUARANTINE_DIR}/{uuid.uuid4().hex}")


def _hash_key(layout: S3DatasetLayout, key: str, size: int) -> bytes:
    """The SHA3-256 of ``key``, which must hold exactly ``size`` bytes.

    Raises:
        ObjectNotFound: nothing at ``key``.
        HashMismatch: another size.
    """
    got = layout.client.open(key)
    if got is None:
        raise ObjectNotFound(f"no upload at {key}")
    reader, stored = got
    hasher = hashlib.sha3_256()
    with contextlib.closing(reader):
        if stored != size:
            raise HashMismatch(f"upload holds {stored} bytes, {size} declared")
        while chunk := reader.read(CHUNK):
            hasher.update(chunk)
    return hasher.digest()


def admit_upload(
    layout: S3DatasetLayout,
    kind: Literal["data", "checkpoint"],
    upload_key: str,
    expected: Multihash,
    size: int,
) -> bool:
    """Move the verified upload at ``upload_key`` to its name (see the module docstring).

    Returns:
        ``True`` if this call created the object, ``False`` if it was stored already.

    Raises:
        ObjectNotFound: nothing was uploaded.
        HashMismatch: the upload is not ``expected`` (it is deleted; nothing is named).
        CorruptObject: the stored object of that name has another size.
    """
    client = layout.client
    if not upload_key.startswith(layout.location.key(QUARANTINE_DIR) + "/"):
        raise ValueError(f"{upload_key} is not a quarantine key of {layout.location.to_url()}")
    private = f"{upload_key}{_PRIVATE}{uuid.uuid4().hex}"
    try:
        if client.stat(upload_key) is None:
            raise ObjectNotFound(f"no upload of {kind} object {expected}")
        if not client.copy_if_absent(upload_key, private):
            raise S3Error(f"{private} existed before its copy")
        check_digest(expected, _hash_key(layout, private, size))
        store = layout.data if kind == "data" else layout.checkpoints
        final = store.key_of(expected)
        if client.copy_if_absent(private, final):
            return True
        present = client.touch(final)
        if present is None or present.size != size:
            raise CorruptObject(f"stored {kind} object {expected} is not {size} bytes")
        return False
    finally:
        for key in (private, upload_key):
            with contextlib.suppress(S3Error):
                client.delete(key)
