"""Fixtures of the S3 backend's tests: one real SeaweedFS server per session, fresh prefixes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.s3.client import S3Client, connect
from storage.s3.url import S3Location
from tests.storage.s3.seaweed import SeaweedServer, start_seaweed


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """A ``weed mini`` on free loopback ports, its credentials in the AWS environment."""
    server = start_seaweed(tmp_path_factory.mktemp("seaweed"))
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_location(seaweed: SeaweedServer) -> S3Location:
    """A prefix no other test uses, in the server's bucket."""
    return S3Location(seaweed.endpoint, seaweed.bucket, f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def s3_client(s3_location: S3Location) -> S3Client:
    """A client of the server's bucket (credentials from the environment)."""
    return connect(s3_location)


def disk_root(tmp_path: Path) -> Path:
    """Where the disk backend's stores live in a test."""
    return tmp_path / "ds"
