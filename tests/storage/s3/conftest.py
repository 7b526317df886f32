"""Fixtures of the S3 backend's tests: one real SeaweedFS server per session, fresh prefixes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.s3.client import S3Client, connect
from storage.s3.url import S3Location
from tests.storage.s3.seaweed import SeaweedServer
from tests.storage.s3.shared import SHARED


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """A ``weed mini`` on free loopback ports, its credentials in the AWS environment.

    One server for the whole session, also for the modules that import this fixture.
    """
    with SHARED.hold(lambda: tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture(scope="session")
def seaweed_client(seaweed: SeaweedServer) -> S3Client:
    """One client of the server's bucket for the session (making one costs ~0.5 s)."""
    return connect(S3Location(seaweed.endpoint, seaweed.bucket, ""))


@pytest.fixture
def s3_location(seaweed: SeaweedServer) -> S3Location:
    """A prefix no other test uses, in the server's bucket."""
    return S3Location(seaweed.endpoint, seaweed.bucket, f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def s3_client(s3_location: S3Location, seaweed_client: S3Client) -> S3Client:
    """A client of the server's bucket (credentials from the environment)."""
    return seaweed_client


def disk_root(tmp_path: Path) -> Path:
    """Where the disk backend's stores live in a test."""
    return tmp_path / "ds"


#: Where the moto tests keep their dataset (a fresh, empty bucket for each test).
MOTO_LOCATION = S3Location(None, "odf-unit", "repo/ds")


@pytest.fixture(scope="module")
def moto_module_client() -> Iterator[tuple[object, S3Client]]:
    """moto for one module, one client of `MOTO_LOCATION`'s bucket (a client costs ~0.5 s)."""
    from moto import mock_aws

    with pytest.MonkeyPatch.context() as mp:
        for k, v in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            mp.setenv(k, v)
        with mock_aws() as mock:
            yield mock, connect(MOTO_LOCATION)


@pytest.fixture
def moto_client(moto_module_client: tuple[object, S3Client]) -> S3Client:
    """The module's moto client; every bucket emptied, `MOTO_LOCATION`'s created afresh."""
    mock, client = moto_module_client
    mock.reset()  # type: ignore[attr-defined]
    client.raw.create_bucket(Bucket=MOTO_LOCATION.bucket)
    return client
