"""When the engine reads and writes through S3, and what its executors are given.

The engine uses S3 I/O when its session has a staging location, ``spark.odf.s3.staging``
(``--conf`` of ``odf engine run`` / ``python -m engine``), else ``$ODF_ENGINE_S3_STAGING``
in the engine's environment (an engine the node starts inherits it): outputs are written
as parts under that prefix, and stateless transforms only. Input slices named by S3 URLs
are read from S3 whatever the setting. The executors get the engine's AWS credentials
(from its environment) as ``spark.executorEnv.*`` and the engine's own Python.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from engine.errors import EngineConfigError, InvalidQuery

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storage.s3.url import S3Location

__all__ = [
    "CREDENTIAL_ENV",
    "STAGING_CONF",
    "STAGING_ENV",
    "parse_staging",
    "session_conf",
    "staging_of",
    "stateful_refused",
]

#: The session setting naming the staging location of outputs.
STAGING_CONF: Final = "spark.odf.s3.staging"
#: The environment variable read when the setting is absent.
STAGING_ENV: Final = "ODF_ENGINE_S3_STAGING"
#: What the executors get of the engine's environment.
CREDENTIAL_ENV: Final = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


def parse_staging(url: str) -> S3Location:
    """The staging location ``url`` names.

    Raises:
        EngineConfigError: not an ``s3://`` or ``s3+http(s)://`` URL with a prefix.
    """
    from storage.s3.errors import InvalidS3Url
    from storage.s3.url import parse_s3_url

    try:
        location = parse_s3_url(url)
    except InvalidS3Url as e:
        raise EngineConfigError(f"{STAGING_CONF}: {e}") from None
    if not location.prefix:
        raise EngineConfigError(f"{STAGING_CONF}: {url!r} names no prefix under the bucket")
    return location


def session_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings S3 I/O adds to a session whose other settings are ``conf``.

    Raises:
        EngineConfigError: a staging URL that does not parse.
    """
    staging = conf.get(STAGING_CONF) or os.environ.get(STAGING_ENV)
    if not staging:
        return {}
    parse_staging(staging)
    added = {STAGING_CONF: staging}
    for name in CREDENTIAL_ENV:
        key = f"spark.executorEnv.{name}"
        if name in os.environ and key not in conf:
            added[key] = os.environ[name]
    if "spark.pyspark.python" not in conf:
        added["spark.pyspark.python"] = sys.executable
    return added


def staging_of(session: SparkSession) -> S3Location | None:
    """The session's staging location (``None``: outputs are written by Spark's writer)."""
    value = session.conf.get(STAGING_CONF, None)
    return parse_staging(value) if value else None


def stateful_refused(
    *, state: bool, windows: bool, temporal_joins: bool, nodes: list[str]
) -> InvalidQuery:
    """The refusal of a stateful query by an engine with S3 I/O, naming what makes it so."""
    what = [
        *(["the stream state of the previous checkpoint"] if state else []),
        *(["windows"] if windows else []),
        *(["temporal joins"] if temporal_joins else []),
        *sorted(set(nodes)),
    ]
    return InvalidQuery(
        f"stateful query ({', '.join(what)}): an engine with S3 I/O ({STAGING_CONF}) runs "
        "stateless transforms only (projections, filters, unions); run it on an engine "
        "without a staging location"
    )
