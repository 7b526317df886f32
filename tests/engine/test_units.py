"""Engine pieces that need no Spark: checkpoints, query steps, settings, client errors."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.checkpoint import (
    MAX_CHECKPOINT_BYTES,
    MAX_WATERMARK_FILE_BYTES,
    read_watermarks,
    write_checkpoint,
)
from engine.client import EngineClient, raise_for_result
from engine.errors import (
    CheckpointError,
    EngineConfigError,
    EngineInternalError,
    EngineProtocolError,
    EngineTimeout,
    EngineUnavailable,
    InvalidQuery,
)
from engine.process import free_port, start_engine_process
from engine.server import EngineServer
from engine.spark import DEFAULT_JIT_THRESHOLD_SCALING, SparkSettings, engine_identity
from engine.sql import MAX_QUERY_STEPS, query_steps, quote_identifier
from engine.transform import compute_watermarks
from fbs.did import DatasetId
from fbs.model.engine import (
    RawQueryResponseInternalError,
    RawQueryResponseSuccess,
    TransformResponseInternalError,
    TransformResponseSuccess,
)
from fbs.model.source import SqlQueryStep, TransformSql
from fbs.timestamp import Timestamp
from tests.engine.helpers import make_input, make_request

# -- checkpoints ---------------------------------------------------------------------------

_timestamps = st.integers(min_value=-(10**18), max_value=10**18).map(
    lambda n: Timestamp(n - n % 1000)  # chrono/Java print sub-ms as micro/nano groups too
)


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.binary(min_size=1, max_size=8), _timestamps, max_size=5))
def test_checkpoint_round_trip(
    tmp_path_factory: pytest.TempPathFactory, wms: dict[bytes, Timestamp]
) -> None:
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint"
    keyed = {DatasetId.new_seeded(k).as_multibase(): v for k, v in wms.items()}
    write_checkpoint(path, keyed)
    assert read_watermarks(path) == keyed


def test_checkpoint_bytes_are_deterministic(tmp_path: Path) -> None:
    wms = {"fb": Timestamp(5_000_000), "fa": Timestamp(0)}
    write_checkpoint(tmp_path / "c1", wms)
    write_checkpoint(tmp_path / "c2", dict(reversed(list(wms.items()))))
    assert (tmp_path / "c1").read_bytes() == (tmp_path / "c2").read_bytes()
    with tarfile.open(tmp_path / "c1") as tar:
        assert tar.getnames() == ["fa.watermark", "fb.watermark"]
        f = tar.extractfile("fb.watermark")
        assert f is not None and f.read() == b"1970-01-01T00:00:00.005Z\n"


def _tar(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_checkpoint_reads_kamu_style_entries(tmp_path: Path) -> None:
    # "./" prefixes, other files and compressed archives are accepted.
    path = tmp_path / "c"
    path.write_bytes(_tar({"./fabc.watermark": b"2020-01-01T00:00:00Z\n", "./notes.txt": b"x"}))
    assert read_watermarks(path) == {"fabc": Timestamp.from_ymd_hms(2020, 1, 1)}


@pytest.mark.parametrize(
    "content",
    [
        b"not a tar at all" * 100,
        _tar({"f1.watermark": b"yesterday\n"}),
        _tar({"f1.watermark": b"\xff\xfe"}),
        _tar({"f1.watermark": b"2020-01-01T00:00:00Z" + b" " * MAX_WATERMARK_FILE_BYTES}),
    ],
)
def test_bad_checkpoints_are_typed_errors(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c"
    path.write_bytes(content)
    with pytest.raises(CheckpointError):
        read_watermarks(path)


def test_checkpoint_limits(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        read_watermarks(tmp_path / "missing")
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.truncate(MAX_CHECKPOINT_BYTES + 1)
    with pytest.raises(CheckpointError, match="limit"):
        read_watermarks(big)
    with pytest.raises(CheckpointError):
        write_checkpoint(tmp_path / "x", {"a/b": Timestamp(0)})


def test_compute_watermarks(tmp_path: Path) -> None:
    schema = tmp_path / "s"
    a = make_input(
        seed=b"a",
        alias="a",
        paths=[],
        schema_file=schema,
        interval=None,
        watermarks_ms=[3000, 1000],
    )
    b = make_input(seed=b"b", alias="b", paths=[], schema_file=schema, interval=None)
    per_input, wm = compute_watermarks((a, b), None)
    assert per_input == {a.dataset_id.as_multibase(): Timestamp(3_000_000_000)}
    assert wm is None
    write_checkpoint(tmp_path / "c", {b.dataset_id.as_multibase(): Timestamp(2_000_000_000)})
    per_input, wm = compute_watermarks((a, b), str(tmp_path / "c"))
    assert wm == Timestamp(2_000_000_000)
    assert len(per_input) == 2


# -- query steps ---------------------------------------------------------------------------


def test_query_steps() -> None:
    assert query_steps(TransformSql(engine="Spark", query="SELECT 1")) == [
        SqlQueryStep(alias=None, query="SELECT 1")
    ]
    steps = (SqlQueryStep(alias="a", query="q1"), SqlQueryStep(alias=None, query="q2"))
    assert query_steps(TransformSql(engine="spark", queries=steps)) == list(steps)


@pytest.mark.parametrize(
    "transform",
    [
        TransformSql(engine="datafusion", query="SELECT 1"),
        TransformSql(engine="spark"),
        TransformSql(engine="spark", queries=()),
        TransformSql(engine="spark", query="q", queries=(SqlQueryStep(alias=None, query="q"),)),
        TransformSql(engine="spark", queries=(SqlQueryStep(alias="out", query="q"),)),
        TransformSql(
            engine="spark",
            queries=(SqlQueryStep(alias=None, query="q"), SqlQueryStep(alias=None, query="q")),
        ),
        TransformSql(
            engine="spark",
            queries=(
                *(SqlQueryStep(alias=f"a{i}", query="q") for i in range(MAX_QUERY_STEPS)),
                SqlQueryStep(alias=None, query="q"),
            ),
        ),
    ],
)
def test_query_steps_refused(transform: TransformSql) -> None:
    with pytest.raises(InvalidQuery):
        query_steps(transform)


def test_quote_identifier() -> None:
    assert quote_identifier("a.b") == "`a.b`"
    assert quote_identifier("we`ird") == "`we``ird`"


# -- settings ------------------------------------------------------------------------------


def test_spark_settings() -> None:
    conf = SparkSettings(master="spark://127.0.0.1:7077").conf()
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.sql.ansi.enabled"] == "true"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MILLIS"
    assert conf["spark.ui.enabled"] == "false"
    bads: list[dict[str, Any]] = [
        {"master": "local[x]"},
        {"master": "http://x"},
        {"driver_memory": "lots"},
        {"shuffle_partitions": 0},
        {"jit_threshold_scaling": 0.0},
        {"jit_threshold_scaling": 1e6},
        {"extra_conf": (("not.spark", "1"),)},
    ]
    for bad in bads:
        with pytest.raises(EngineConfigError):
            SparkSettings(**bad)
    assert engine_identity().startswith("spark (odf-node ")


def test_spark_settings_jit_scaling(tmp_path: Path) -> None:
    """The driver JVM gets the JIT threshold scaling (default and chosen) with its GC."""
    log = tmp_path / "log4j2.properties"
    default = SparkSettings().conf(log)["spark.driver.extraJavaOptions"].split()
    assert "-XX:+UseSerialGC" in default
    assert DEFAULT_JIT_THRESHOLD_SCALING == 1.0  # the JVM's own thresholds: no flag
    assert not any(o.startswith("-XX:CompileThresholdScaling") for o in default)
    chosen = SparkSettings(jit_threshold_scaling=1.5).conf(log)["spark.driver.extraJavaOptions"]
    assert "-XX:CompileThresholdScaling=1.5" in chosen.split()


# -- client / server / process errors ------------------------------------------------------


def test_client_unavailable(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    req = make_request(tmp_path, [], query="SELECT 1")
    with EngineClient(address, timeout=10) as client:
        with pytest.raises(EngineUnavailable):
            client.execute_transform(req)
        with pytest.raises(EngineTimeout):
            client.wait_ready(timeout=0.2)


def test_raise_for_result() -> None:
    ok = TransformResponseSuccess()
    assert raise_for_result(ok) is ok
    assert raise_for_result(RawQueryResponseSuccess(num_records=3)).num_records == 3
    with pytest.raises(EngineInternalError) as e:
        raise_for_result(TransformResponseInternalError(message="boom", backtrace="tb"))
    assert e.value.backtrace == "tb"
    with pytest.raises(EngineInternalError):
        raise_for_result(RawQueryResponseInternalError(message="boom"))
    with pytest.raises(EngineProtocolError):
        raise_for_result("nonsense")  # type: ignore[call-overload]


def test_server_rejects_bad_port() -> None:
    with pytest.raises(EngineConfigError):
        EngineServer(None, port=70000)  # type: ignore[arg-type]


def test_engine_process_start_failure_is_typed(tmp_path: Path) -> None:
    # An invalid master is refused before any JVM starts; the error carries the log tail.
    with pytest.raises(EngineUnavailable, match="invalid Spark master"):
        start_engine_process(master="bogus://", log_path=tmp_path / "log", startup_timeout=60)
