"""S3 dataset URLs as kamu spells them.

``s3://bucket/prefix`` uses the AWS endpoint of the configured region;
``s3+http://host:port/bucket/prefix`` and ``s3+https://…`` name an S3-compatible
endpoint, with the bucket as the first path segment (path-style addressing).
Credentials never come from the URL: the standard AWS environment variables and
config files supply them (`storage.s3.client.connect`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from storage.s3.errors import InvalidS3Url

#: URL schemes this module parses.
SCHEMES: Final = ("s3", "s3+http", "s3+https")
#: Bucket names S3 accepts (3-63 of lowercase letters, digits, dots and hyphens).
_BUCKET_RE: Final = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
#: Prefix segments: no empty, ``.`` or ``..`` segment, no control characters.
_SEGMENT_RE: Final = re.compile(r"[^\x00-\x1f\x7f/]+")


@dataclass(frozen=True, slots=True)
class S3Location:
    """Where a dataset (or a repository of datasets) lives on S3.

    Attributes:
        endpoint: ``http(s)://host[:port]`` of an S3-compatible server, or ``None``
            for AWS.
        bucket: the bucket.
        prefix: the key prefix without leading or trailing ``/`` (may be empty).
    """

    endpoint: str | None
    bucket: str
    prefix: str

    def key(self, rel: str) -> str:
        """The object key of ``rel`` (e.g. ``refs/head``) under the prefix."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def child(self, name: str) -> S3Location:
        """The location of ``name`` under this one (a dataset in a repository)."""
        return S3Location(self.endpoint, self.bucket, self.key(name.strip("/")))

    def to_url(self) -> str:
        """The URL back, in the form it was given."""
        base = f"s3+{self.endpoint}/{self.bucket}" if self.endpoint else f"s3://{self.bucket}"
        return f"{base}/{self.prefix}" if self.prefix else base


def is_s3_url(text: str) -> bool:
    """Whether ``text`` starts with one of the `SCHEMES`."""
    return text.lower().startswith(tuple(f"{s}://" for s in SCHEMES))


def _split_prefix(path: str, url: str) -> tuple[str, str]:
    segments = [s for s in path.split("/") if s]
    if not segments:
        raise InvalidS3Url(f"no bucket in {url!r}")
    bucket, rest = segments[0], segments[1:]
    if not _BUCKET_RE.fullmatch(bucket):
        raise InvalidS3Url(f"invalid bucket name {bucket!r} in {url!r}")
    for seg in rest:
        if seg in (".", "..") or not _SEGMENT_RE.fullmatch(seg):
            raise InvalidS3Url(f"invalid path segment {seg!r} in {url!r}")
    return bucket, "/".join(rest)


def parse_s3_url(url: str) -> S3Location:
    """Parse an S3 dataset URL (see the module docstring).

    Raises:
        InvalidS3Url: another scheme, no bucket, a bad bucket name or path segment, a
            query, fragment or credentials in the URL.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidS3Url(f"not an s3:// or s3+http(s):// URL: {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidS3Url(f"an S3 URL takes no query, fragment or credentials: {url!r}")
    if scheme == "s3":
        bucket, prefix = _split_prefix(f"/{parts.netloc}{parts.path}", url)
        return S3Location(None, bucket, prefix)
    if not parts.hostname:
        raise InvalidS3Url(f"no host in {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise InvalidS3Url(f"invalid port in {url!r}") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    endpoint = f"{scheme[3:]}://{host}" + (f":{port}" if port is not None else "")
    bucket, prefix = _split_prefix(parts.path, url)
    return S3Location(endpoint, bucket, prefix)
