"""S3 dataset URLs as kamu spells them (pure parsing, no server)."""

from __future__ import annotations

import pytest

from storage.s3.errors import InvalidS3Url
from storage.s3.url import S3Location, is_s3_url, parse_s3_url


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("s3://bucket/odf/my.dataset", S3Location(None, "bucket", "odf/my.dataset")),
        ("s3://my-bucket.example.org/", S3Location(None, "my-bucket.example.org", "")),
        (
            "s3+http://127.0.0.1:9000/bucket/repo/ds",
            S3Location("http://127.0.0.1:9000", "bucket", "repo/ds"),
        ),
        ("s3+https://example.org/data", S3Location("https://example.org", "data", "")),
        ("S3+HTTP://[::1]:5000/bkt/a//b/", S3Location("http://[::1]:5000", "bkt", "a/b")),
    ],
)
def test_parse(url: str, want: S3Location) -> None:
    assert is_s3_url(url)
    assert parse_s3_url(url) == want


@pytest.mark.parametrize(
    "url",
    [
        "http://host/bucket",
        "s3://",
        "s3://UPPER/x",
        "s3://b/x",  # bucket too short
        "s3://bucket/../escape",
        "s3://bucket/./x",
        "s3+http://host:99999/bucket",
        "s3+http:///bucket",
        "s3://bucket/x?versionId=1",
        "s3+http://user:secret@host/bucket",
        "s3://bucket/a\x00b",
    ],
)
def test_refused(url: str) -> None:
    with pytest.raises(InvalidS3Url):
        parse_s3_url(url)


def test_keys_and_round_trip() -> None:
    loc = parse_s3_url("s3+http://127.0.0.1:9000/bucket/repo")
    assert loc.child("ds").key("refs/head") == "repo/ds/refs/head"
    assert S3Location(None, "bucket", "").key("refs/head") == "refs/head"
    assert parse_s3_url(loc.child("ds").to_url()) == loc.child("ds")
    assert parse_s3_url("s3://bucket/x").to_url() == "s3://bucket/x"
