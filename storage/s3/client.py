"""A small typed S3 client: the requests the backend makes, conditional outcomes as values.

Built on boto3 (`connect`): path-style addressing (S3-compatible servers), checksums
only when an operation requires them (boto3 >= 1.36 otherwise sends CRC headers that
some servers refuse), credentials and region from the standard AWS environment
variables and config files. A precondition that does not hold is an answer here, not
an error: ``put_if_absent`` / ``put_if_match`` return ``False`` on 412, and on 404
for ``If-Match`` on a missing key (AWS and moto answer 404, SeaweedFS 412). Every
other failure is an `S3Error`.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Final

from storage.errors import ObjectTooLarge
from storage.s3.errors import S3Error, S3Unavailable
from storage.s3.url import S3Location

if TYPE_CHECKING:
    from botocore.client import BaseClient

#: Region used for an S3-compatible endpoint when none is configured (signing needs one).
DEFAULT_REGION: Final = "us-east-1"
#: Attempts of a write answered 409 ConditionalRequestConflict (AWS: "retry").
CONFLICT_ATTEMPTS: Final = 5
#: Largest object one ``CopyObject`` request copies (S3's limit).
MAX_COPY_SIZE: Final = 5 * 2**30
#: Parallel connections per client (object uploads run in threads).
MAX_POOL_CONNECTIONS: Final = 16
_NOT_FOUND: Final = frozenset({"404", "NoSuchKey", "NotFound"})
_PRECONDITION: Final = frozenset({"412", "PreconditionFailed"})
_CONFLICT: Final = frozenset({"409", "ConditionalRequestConflict", "OperationAborted"})
_DENIED: Final = frozenset(
    {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"}
)


@dataclass(frozen=True, slots=True)
class KeyStat:
    """What ``HEAD`` says about a key: size, ETag (an opaque version token), mtime."""

    size: int
    etag: str
    mtime: float


def error_code(error: Exception) -> str:
    """The S3 error code of a botocore error (its HTTP status when the code is numeric)."""
    response: dict[str, Any] = getattr(error, "response", {}) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return code if code and not code.isdigit() else status


def error_kind(error: Exception) -> str:
    """``missing``, ``precondition``, ``conflict``, ``denied`` or ``other``."""
    code = error_code(error)
    for kind, codes in (
        ("missing", _NOT_FOUND),
        ("precondition", _PRECONDITION),
        ("conflict", _CONFLICT),
        ("denied", _DENIED),
    ):
        if code in codes:
            return kind
    return "other"


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn botocore's connection and credential failures into typed errors."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
    )

    try:
        yield
    except NoCredentialsError:
        raise S3Unavailable(
            f"{what}: no AWS credentials (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
            "or a profile in ~/.aws/credentials)"
        ) from None
    except EndpointConnectionError as e:
        raise S3Unavailable(f"{what}: cannot connect: {e}") from None
    except ClientError as e:
        if error_kind(e) == "denied":
            raise S3Unavailable(f"{what}: access denied ({error_code(e)})") from None
        raise
    except BotoCoreError as e:
        raise S3Error(f"{what}: {e}") from None


def unexpected(what: str, error: Exception) -> S3Error:
    """An `S3Error` naming the request and the answer."""
    return S3Error(f"{what}: S3 answered {error_code(error) or type(error).__name__}")


class S3Client:
    """The requests of the S3 backend against one bucket (thread-safe).

    Args:
        client: a boto3 S3 client (see `connect`).
        bucket: the bucket every key lives in.
    """

    def __init__(self, client: BaseClient, bucket: str) -> None:
        self._c: Any = client
        self.bucket = bucket

    def __repr__(self) -> str:
        return f"S3Client({self._c.meta.endpoint_url!r}, {self.bucket!r})"

    @property
    def raw(self) -> Any:
        """The boto3 client (for multipart uploads and tests)."""
        return self._c

    def stat(self, key: str) -> KeyStat | None:
        """``HEAD`` of ``key``; ``None`` when absent."""
        from botocore.exceptions import ClientError

        with translate_errors(f"HEAD {key}"):
            try:
                r = self._c.head_object(Bucket=self.bucket, Key=key)
            except ClientError as e:
                if error_kind(e) == "missing":
                    return None
                raise unexpected(f"HEAD {key}", e) from None
        return KeyStat(int(r["ContentLength"]), str(r["ETag"]), r["LastModified"].timestamp())

    def get(self, key: str, limit: int) -> tuple[bytes, str] | None:
        """The bytes and ETag of ``key`` (``None`` when absent).

        Raises:
            ObjectTooLarge: the object is larger than ``limit`` bytes.
        """
        body = self._get(key, None)
        if body is None:
            return None
        stream, etag, size = body
        with contextlib.closing(stream):
            if size > limit:
                raise ObjectTooLarge(f"{key} holds {size} bytes, more than the {limit} expected")
            with translate_errors(f"GET {key}"):
                return stream.read(), etag

    def open(self, key: str) -> tuple[BinaryIO, int] | None:
        """A streaming reader over ``key`` and its size (``None`` when absent)."""
        body = self._get(key, None)
        return None if body is None else (body[0], body[2])

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        """``length`` bytes of ``key`` from ``start`` (fewer at its end; ``None``: absent)."""
        if length <= 0:
            return b"" if self.stat(key) is not None else None
        body = self._get(key, f"bytes={start}-{start + length - 1}")
        if body is None:
            return None
        with contextlib.closing(body[0]), translate_errors(f"GET {key}"):
            return body[0].read()

    def _get(self, key: str, byte_range: str | None) -> tuple[BinaryIO, str, int] | None:
        from botocore.exceptions import ClientError

        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if byte_range is not None:
            args["Range"] = byte_range
        with translate_errors(f"GET {key}"):
            try:
                r = self._c.get_object(**args)
            except ClientError as e:
                if error_kind(e) == "missing":
                    return None
                if error_code(e) in ("416", "InvalidRange"):
                    return io.BytesIO(b""), "", 0
                raise unexpected(f"GET {key}", e) from None
        return r["Body"], str(r["ETag"]), int(r["ContentLength"])

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` unless it exists (``If-None-Match: *``).

        Returns:
            ``True`` if this call created it, ``False`` if the key existed.
        """
        return self._put(key, data, IfNoneMatch="*")

    def put_if_match(self, key: str, data: bytes, etag: str) -> bool:
        """Replace ``key`` if its ETag is still ``etag`` (``If-Match``).

        Returns:
            ``True`` if replaced, ``False`` if the key changed or is gone.
        """
        return self._put(key, data, IfMatch=etag)

    def _put(self, key: str, data: bytes, **condition: str) -> bool:
        from botocore.exceptions import ClientError

        for attempt in range(CONFLICT_ATTEMPTS):
            with translate_errors(f"PUT {key}"):
                try:
                    self._c.put_object(Bucket=self.bucket, Key=key, Body=data, **condition)
                    return True
                except ClientError as e:
                    kind = error_kind(e)
                    if kind == "precondition" or (kind == "missing" and "IfMatch" in condition):
                        return False
                    if kind != "conflict":
                        raise unexpected(f"PUT {key}", e) from None
            time.sleep(0.05 * 2**attempt)
        raise S3Error(f"PUT {key}: still conflicting after {CONFLICT_ATTEMPTS} attempts")

    def delete(self, key: str, *, etag: str | None = None) -> bool:
        """Delete ``key`` (only if its ETag is ``etag``, when given).

        Returns:
            ``False`` if the ETag no longer matched or the key was gone; else ``True``.
        """
        from botocore.exceptions import ClientError

        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if etag is not None:
            args["IfMatch"] = etag
        with translate_errors(f"DELETE {key}"):
            try:
                self._c.delete_object(**args)
            except ClientError as e:
                if error_kind(e) in ("precondition", "missing"):
                    return False
                raise unexpected(f"DELETE {key}", e) from None
        return True

    def touch(self, key: str) -> KeyStat | None:
        """Restart ``key``'s modification time by copying it onto itself; ``None`` if absent.

        S3 has no ``touch``: a copy in place with replaced metadata keeps the bytes and
        sets ``LastModified`` to the server's time (see `storage.s3.gc`). An object over
        `MAX_COPY_SIZE` cannot be copied by one request and keeps its time.
        """
        from botocore.exceptions import ClientError

        stat = self.stat(key)
        if stat is None or stat.size > MAX_COPY_SIZE:
            return stat
        source = {"Bucket": self.bucket, "Key": key}
        with translate_errors(f"COPY {key}"):
            try:
                self._c.copy_object(
                    Bucket=self.bucket,
                    Key=key,
                    CopySource=source,
                    MetadataDirective="REPLACE",
                    Metadata={"odf-touched": "1"},
                )
            except ClientError as e:
                if error_kind(e) == "missing":
                    return None
                raise unexpected(f"COPY {key}", e) from None
        return stat

    def copy_if_absent(self, source: str, key: str) -> bool:
        """Copy ``source`` to ``key`` inside the bucket unless ``key`` exists.

        Returns:
            ``True`` if this call created ``key``, ``False`` if it existed.

        Raises:
            S3Error: ``source`` is missing, or the request failed.
        """
        from botocore.exceptions import ClientError

        with translate_errors(f"COPY {source} -> {key}"):
            try:
                self._c.copy_object(
                    Bucket=self.bucket,
                    Key=key,
                    CopySource={"Bucket": self.bucket, "Key": source},
                    IfNoneMatch="*",
                )
            except ClientError as e:
                if error_kind(e) == "precondition":
                    return False
                raise unexpected(f"COPY {source} -> {key}", e) from None
        return True

    def server_time(self) -> float:
        """The server's clock (the ``Date`` of a ``HEAD`` of the bucket; local time if absent).

        Ages of objects are ``server_time() - LastModified``: both from the server's
        clock, so a skewed local clock does not shorten a grace period.
        """
        from email.utils import parsedate_to_datetime

        with translate_errors(f"HEAD bucket {self.bucket}"):
            r = self._c.head_bucket(Bucket=self.bucket)
        date = r.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        if not date:
            return time.time()
        try:
            return parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return time.time()

    def list_keys(self, prefix: str, *, page_size: int = 1000) -> Iterator[tuple[str, KeyStat]]:
        """Every key under ``prefix`` (ListObjectsV2, page by page) with its size and ETag."""
        from botocore.exceptions import ClientError

        paginator = self._c.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": page_size}
        )
        with translate_errors(f"LIST {prefix}"):
            try:
                for page in pages:
                    for obj in page.get("Contents", []):
                        stat = KeyStat(
                            int(obj["Size"]),
                            str(obj.get("ETag", "")),
                            obj["LastModified"].timestamp(),
                        )
                        yield str(obj["Key"]), stat
            except ClientError as e:
                raise unexpected(f"LIST {prefix}", e) from None


def connect(location: S3Location) -> S3Client:
    """A client for ``location``'s endpoint and bucket.

    Credentials and region come from boto3's standard chain: ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
    ``~/.aws/credentials`` and ``~/.aws/config``. An S3-compatible endpoint with no
    region configured is signed for `DEFAULT_REGION`.
    """
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    region = session.region_name or (DEFAULT_REGION if location.endpoint else None)
    config = Config(
        s3={"addressing_style": "path" if location.endpoint else "auto"},
        signature_version="s3v4",  # presigned URLs too (boto3 presigns SigV2 otherwise)
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"max_attempts": 3, "mode": "standard"},
        max_pool_connections=MAX_POOL_CONNECTIONS,
    )
    client = session.client("s3", endpoint_url=location.endpoint, region_name=region, config=config)
    return S3Client(client, location.bucket)
