"""Errors of the S3 backend (all `StorageError` s: one typed line on the command line)."""

from __future__ import annotations

from fbs.errors import ExitCategory
from storage.errors import StorageError


class S3Error(StorageError):
    """An S3 request failed for a reason other than a lost compare-and-swap."""


class InvalidS3Url(S3Error, ValueError):
    """A URL that is not ``s3://bucket/prefix`` or ``s3+http(s)://host[:port]/bucket/prefix``."""


class ConditionalWritesUnsupported(S3Error):
    """The store ignores ``If-None-Match`` / ``If-Match``: writing to it could lose updates."""


class S3Unavailable(S3Error):
    """The endpoint cannot be reached, or refused the credentials."""

    exit_category = ExitCategory.UNAVAILABLE
