"""The rules of `engine.s3io` that need no Spark: when S3 I/O is on, what executors get,
how a request's slices are named on S3, how a stateful query is refused."""

from __future__ import annotations

import pytest

from engine.errors import EngineConfigError, EngineInternalError
from engine.s3io.remote import on_s3
from engine.s3io.settings import (
    STAGING_CONF,
    STAGING_ENV,
    parse_staging,
    session_conf,
    stateful_refused,
)
from engine.spark import SparkSettings
from fbs.did import DatasetId
from fbs.model.engine import TransformRequest, TransformRequestInput
from fbs.model.events import DatasetVocabulary, OffsetInterval
from fbs.model.source import TransformSql
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from storage.s3.url import parse_s3_url

STAGING = "s3+http://127.0.0.1:8333/odf/staging"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (STAGING_ENV, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_no_staging_adds_nothing() -> None:
    assert session_conf({}) == {}
    assert STAGING_CONF not in SparkSettings().conf()


def test_staging_hands_the_engine_credentials_to_executors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    conf = SparkSettings(extra_conf=((STAGING_CONF, STAGING),)).conf()
    assert conf[STAGING_CONF] == STAGING
    assert conf["spark.executorEnv.AWS_ACCESS_KEY_ID"] == "key"
    assert conf["spark.executorEnv.AWS_SECRET_ACCESS_KEY"] == "secret"
    assert "spark.executorEnv.AWS_SESSION_TOKEN" not in conf
    assert conf["spark.pyspark.python"]


def test_staging_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STAGING_ENV, STAGING)
    assert SparkSettings().conf()[STAGING_CONF] == STAGING


def test_explicit_executor_settings_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    extra = ((STAGING_CONF, STAGING), ("spark.executorEnv.AWS_ACCESS_KEY_ID", "other"))
    assert SparkSettings(extra_conf=extra).conf()["spark.executorEnv.AWS_ACCESS_KEY_ID"] == "other"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1/odf/x", "s3+http://127.0.0.1:8333/odf", "s3://odf", "s3://B/x"]
)
def test_bad_staging_is_a_config_error(url: str) -> None:
    with pytest.raises(EngineConfigError, match=STAGING_CONF):
        parse_staging(url)
    with pytest.raises(EngineConfigError):
        SparkSettings(extra_conf=((STAGING_CONF, url),)).conf()


def _request(paths: tuple[str, ...], did: DatasetId) -> TransformRequest:
    return TransformRequest(
        dataset_id=DatasetId.new_seeded(b"out"),
        dataset_alias="out",
        system_time=Timestamp(0),
        vocab=DatasetVocabulary(),
        transform=TransformSql(engine="spark", query="SELECT * FROM i"),
        query_inputs=(
            TransformRequestInput(
                dataset_id=did,
                dataset_alias="root",
                query_alias="i",
                vocab=DatasetVocabulary(),
                offset_interval=OffsetInterval(start=0, end=9),
                data_paths=paths,
                schema_file="/ws/schema.parquet",
                explicit_watermarks=(),
            ),
        ),
        next_offset=0,
        new_checkpoint_path="/ws/run/checkpoint",
        new_data_path="/ws/run/data",
    )


def test_slices_are_named_by_their_keys_on_s3() -> None:
    did = DatasetId.new_seeded(b"root")
    h = Multihash.sha3_256(b"slice")
    request = _request((f"/ws/.odf/datasets/root/data/{h.to_multibase()}",), did)
    location = parse_s3_url("s3+http://127.0.0.1:8333/odf/repo/root")
    moved = on_s3(request, {did: location})
    assert moved.query_inputs[0].data_paths == (
        f"s3+http://127.0.0.1:8333/odf/repo/root/data/{h.to_multibase()}",
    )
    assert on_s3(request, {}) == request


def test_a_slice_not_named_by_its_hash_is_refused() -> None:
    did = DatasetId.new_seeded(b"root")
    request = _request(("/ws/slice.parquet",), did)
    with pytest.raises(EngineInternalError, match="not named by its hash"):
        on_s3(request, {did: parse_s3_url("s3://odf/repo/root")})


def test_a_stateful_query_is_refused_by_name() -> None:
    refused = stateful_refused(
        state=False, windows=True, temporal_joins=False, nodes=["Join", "Aggregate", "Join"]
    )
    assert refused.message.startswith("stateful query (windows, Aggregate, Join)")
    assert STAGING_CONF in refused.message
