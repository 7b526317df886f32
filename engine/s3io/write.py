"""The output written by executors as parts under a staging prefix, then joined here.

Each run gets its own prefix under the staging location (``run-<uuid>``). The write
tasks put one Parquet part each there and the job commit lists them, in partition order,
in the run's manifest (`engine.s3io.executor`). The driver then fetches every part,
checks it against the digest and size its task reported before parsing it, and
`engine.parquet_merge.write_merged` joins the parts into the one output file as it joins
Spark's own; the run's prefix is deleted whatever happens.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from engine.collected_output import SPARK_ROOT_NAME
from engine.errors import EngineInternalError
from engine.parquet_merge import SequenceColumn, write_merged

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from storage.s3.client import S3Client
    from storage.s3.url import S3Location

__all__ = ["MAX_MANIFEST_BYTES", "write_s3_output"]

#: Largest manifest read back.
MAX_MANIFEST_BYTES: Final = 16 * 1024 * 1024
_CHUNK: Final = 1 << 20


def write_s3_output(
    df: DataFrame,
    target: str | os.PathLike[str],
    columns: Sequence[SequenceColumn | int],
    *,
    spark_schema: StructType,
    staging: S3Location,
) -> int:
    """Write ``df`` through ``staging`` as the one output file ``target``; return its rows.

    Raises:
        EngineInternalError: a part or the manifest missing or not matching what its task
            reported, or the merge failing.
    """
    from storage.s3.client import connect

    run = staging.child(f"run-{uuid.uuid4().hex}")
    client = connect(run)

    def write_parts(tmp_dir: Path) -> list[Path]:
        tmp_dir.mkdir()
        _run_write(df, run)
        return _fetch_parts(client, run, tmp_dir)

    try:
        return write_merged(
            target, write_parts, columns, spark_schema_json=spark_schema.json(),
            root_name=SPARK_ROOT_NAME,
        )  # fmt: skip
    finally:
        for key, _stat in list(client.list_keys(run.prefix + "/")):
            client.delete(key)


def _run_write(df: DataFrame, run: S3Location) -> None:
    from engine.s3io.register import active, register_source

    session: Any = df.sparkSession
    source = register_source(session)
    version = str(session.sparkContext._jvm.org.apache.spark.package.SPARK_VERSION_SHORT())
    with active(session):
        (
            df.write.format(source)
            .mode("append")
            .option("endpoint", run.endpoint or "")
            .option("bucket", run.bucket)
            .option("prefix", run.prefix)
            .option("spark_version", version)
            .save()
        )


def _manifest(client: S3Client, run: S3Location) -> list[list[Any]]:
    from engine.s3io.executor import MANIFEST_NAME
    from storage.errors import ObjectTooLarge

    key = run.key(MANIFEST_NAME)
    try:
        got = client.get(key, MAX_MANIFEST_BYTES)
        if got is None:
            raise EngineInternalError(f"the output's manifest {key} is missing")
        parts = json.loads(got[0])["parts"]
    except (ObjectTooLarge, ValueError, KeyError, TypeError) as e:
        raise EngineInternalError(f"the output's manifest {key} is unreadable: {e}") from None
    if not isinstance(parts, list):
        raise EngineInternalError(f"the output's manifest {key} lists no parts")
    return parts


def _fetch_parts(client: S3Client, run: S3Location, tmp_dir: Path) -> list[Path]:
    """Every part of the manifest, checked, in partition order (empty parts dropped,
    but one is kept when all are empty: it carries the schema)."""
    parts = _manifest(client, run)
    kept = [p for p in parts if p[4] > 0] or parts[:1]
    if not kept:
        raise EngineInternalError("the output's write wrote no part")
    paths = []
    for i, (_partition, key, digest, size, _rows) in enumerate(kept):
        if not str(key).startswith(run.prefix + "/"):
            raise EngineInternalError(f"the output's manifest names a part {key!r} outside the run")
        path = tmp_dir / f"part-{i:05d}.parquet"
        _fetch_checked(client, str(key), str(digest), int(size), path)
        paths.append(path)
    return paths


def _fetch_checked(client: S3Client, key: str, digest: str, size: int, path: Path) -> None:
    got = client.open(key)
    if got is None:
        raise EngineInternalError(f"output part {key} is missing")
    body, stored = got
    h = hashlib.sha3_256()
    with body, path.open("wb") as out:
        if stored != size:
            raise EngineInternalError(f"output part {key} has {stored} bytes, {size} reported")
        while chunk := body.read(_CHUNK):
            h.update(chunk)
            out.write(chunk)
    if h.hexdigest() != digest:
        path.unlink()
        raise EngineInternalError(f"output part {key} does not match the hash its task reported")
