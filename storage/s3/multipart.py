"""Streaming an object into S3 so that it appears under its name only once verified.

An object that fits in one part is read, hashed, then written with one create-only
``PUT``. A larger one goes up as a multipart upload: every part is hashed as it is
sent, and ``CompleteMultipartUpload`` (create-only too) is sent only when the whole
stream hashed to the expected name; otherwise the upload is aborted and nothing
becomes visible. Parts are uploaded one at a time: memory stays at one part.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Final

from fbs.multiformats import Multihash
from storage.object_store import Readable, check_digest, check_size
from storage.s3.client import S3Client, error_kind, translate_errors, unexpected

#: Size of one multipart part (S3 needs >= 5 MiB for every part but the last).
PART_SIZE: Final = 8 * 2**20


def read_full(src: Readable, n: int) -> bytes:
    """Up to ``n`` bytes of ``src``: fewer only at its end."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = src.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def upload_verified(
    client: S3Client,
    key: str,
    src: Readable,
    expected: Multihash,
    limit: int,
    *,
    part_size: int = PART_SIZE,
) -> bool:
    """Copy ``src`` to ``key`` create-only, if it hashes to ``expected``.

    Returns:
        ``True`` if this call created ``key``; ``False`` if it existed already.

    Raises:
        ObjectTooLarge: more than ``limit`` bytes (the upload is aborted).
        HashMismatch: the content is not ``expected``'s (the upload is aborted).
    """
    first = read_full(src, part_size)
    check_size(len(first), limit)
    if len(first) < part_size:
        check_digest(expected, hashlib.sha3_256(first).digest())
        return client.put_if_absent(key, first)
    with translate_errors(f"multipart upload {key}"):
        upload_id = client.raw.create_multipart_upload(Bucket=client.bucket, Key=key)["UploadId"]
    try:
        parts = _upload_parts(client, key, upload_id, first, src, expected, limit, part_size)
        return _complete(client, key, upload_id, parts)
    except BaseException:
        with contextlib.suppress(Exception):
            client.raw.abort_multipart_upload(Bucket=client.bucket, Key=key, UploadId=upload_id)
        raise


def _upload_parts(
    client: S3Client,
    key: str,
    upload_id: str,
    first: bytes,
    src: Readable,
    expected: Multihash,
    limit: int,
    part_size: int,
) -> list[dict[str, Any]]:
    """Send every part, hashing; raises unless the whole stream is ``expected``."""
    hasher = hashlib.sha3_256()
    parts: list[dict[str, Any]] = []
    total = 0
    chunk = first
    while chunk:
        total += len(chunk)
        check_size(total, limit)
        hasher.update(chunk)
        number = len(parts) + 1
        with translate_errors(f"upload part {number} of {key}"):
            r = client.raw.upload_part(
                Bucket=client.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk
            )
        parts.append({"PartNumber": number, "ETag": r["ETag"]})
        chunk = read_full(src, part_size)
    check_digest(expected, hasher.digest())
    return parts


def _complete(client: S3Client, key: str, upload_id: str, parts: list[dict[str, Any]]) -> bool:
    from botocore.exceptions import ClientError

    with translate_errors(f"complete upload of {key}"):
        try:
            client.raw.complete_multipart_upload(
                Bucket=client.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
        except ClientError as e:
            if error_kind(e) == "precondition":
                with contextlib.suppress(Exception):
                    client.raw.abort_multipart_upload(
                        Bucket=client.bucket, Key=key, UploadId=upload_id
                    )
                return False
            raise unexpected(f"complete upload of {key}", e) from None
    return True
