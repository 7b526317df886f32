"""Presigned URLs: a bearer of one may ``GET`` (or ``PUT``) one key until it expires.

SigV4 query-string signatures, made locally from the configured credentials (no
request to the server). The server checks them: a URL used after its expiry, or with
any signed part changed, is answered 403 (SeaweedFS and AWS; moto checks nothing).
A ``PUT`` URL is only ever made for a key under ``quarantine/`` (`storage.s3.quarantine`):
S3 cannot check ODF's hashes, so whatever arrives there is verified before it gets a
name. No conditional header is signed into a URL (SeaweedFS refuses such signatures);
the upload's ``Content-Length`` is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from storage.s3.client import S3Client, translate_errors

#: Lifetime of a URL handed out: one hour, as kamu's (the GC grace period is no shorter).
DEFAULT_URL_EXPIRY_S: Final = 3600


@dataclass(frozen=True, slots=True)
class PresignedUrl:
    """A URL and when it stops working (RFC 3339, UTC)."""

    url: str
    expires_at: str


def _presign(client: S3Client, method: str, params: dict[str, Any], expires_s: int) -> PresignedUrl:
    expires = datetime.fromtimestamp(time.time() + expires_s, UTC)
    with translate_errors(f"presign {params['Key']}"):
        url = client.raw.generate_presigned_url(
            method, Params={"Bucket": client.bucket, **params}, ExpiresIn=expires_s
        )
    return PresignedUrl(str(url), expires.strftime("%Y-%m-%dT%H:%M:%SZ"))


def presign_get(
    client: S3Client, key: str, *, expires_s: int = DEFAULT_URL_EXPIRY_S
) -> PresignedUrl:
    """A URL that reads ``key``."""
    return _presign(client, "get_object", {"Key": key}, expires_s)


def presign_put(
    client: S3Client, key: str, size: int, *, expires_s: int = DEFAULT_URL_EXPIRY_S
) -> PresignedUrl:
    """A URL that writes exactly ``size`` bytes to ``key`` (only ever a quarantine key).

    ``Content-Length`` is signed into the URL: S3 refuses (403) an upload of another
    size, so a URL cannot be used to store more than the object declared.
    """
    return _presign(client, "put_object", {"Key": key, "ContentLength": size}, expires_s)
