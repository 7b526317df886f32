"""A derivative over a root held on S3, run by a Spark cluster whose worker cannot read the
node's files: the same output as the local engine's, committed by the node.

Real processes throughout: SeaweedFS, a Spark standalone master and a worker in its own
user and mount namespaces (`tests.engine.spark_cluster`), two engine servers (one local,
one on the cluster with an S3 staging location).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.client import EngineClient
from engine.errors import EngineInternalError, InvalidQuery
from engine.process import start_engine_process
from engine.s3io.remote import S3InputsClient
from engine.s3io.settings import STAGING_CONF
from fbs.timestamp import Timestamp
from node.transform import TransformOutput, commit_transform, plan_transform, run_transform
from node.transform import transform_work_dir as work_dir
from p2p.s3.push import push_to_s3
from storage.s3.client import connect
from storage.s3.url import S3Location, parse_s3_url
from storage.workspace import Workspace
from tests.engine.spark_cluster import SparkCluster, namespaces_available, start_cluster
from tests.node.conftest import RootWriter, add_derivative, read_records
from tests.storage.s3.seaweed import SeaweedServer, start_seaweed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QUERY = "SELECT event_time, city, population * 2 AS p FROM root WHERE population % 3 <> 0"
#: Modest memory for the engines on a shared 2-core machine.
ENGINE_CONF = {"spark.executor.memory": "1g", "spark.executor.cores": "2"}


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    reason = namespaces_available()
    if reason is not None:
        pytest.skip(f"no sandboxed Spark worker here: {reason}")
    started = start_cluster(tmp_path_factory.mktemp("cluster"), [ROOT.parent])
    try:
        yield started
    finally:
        started.stop()


def _root_on_s3(
    ws: Workspace, make_root: Callable[[str], RootWriter], seaweed: SeaweedServer
) -> S3Location:
    root = make_root("root")
    root.append([(f"city{i % 7}", i) for i in range(3000)])
    root.append([(f"city{i % 5}", 10_000 + i) for i in range(2000)])
    location = parse_s3_url(seaweed.url(f"repo-{uuid.uuid4().hex[:8]}/root"))
    push_to_s3(ws.get("root"), location)
    return location


def _local_run(ws: Workspace, alias: str, system_time: Timestamp) -> TransformOutput:
    plan = plan_transform(ws, alias, system_time=system_time)
    with start_engine_process(master="local[1]", warmup=False) as engine:
        return run_transform(plan, EngineClient(engine.address), work_dir(ws))


def test_derivative_over_root_on_s3_matches_local_run(
    ws: Workspace,
    make_root: Callable[[str], RootWriter],
    seaweed: SeaweedServer,
    cluster: SparkCluster,
) -> None:
    location = _root_on_s3(ws, make_root, seaweed)
    add_derivative(ws, "der", ["root"], QUERY)
    add_derivative(
        ws, "counts", ["root"], "SELECT max(event_time) AS event_time, count(*) AS n FROM root"
    )
    # One system time for both runs: it is a column of the output, so of its logical hash.
    system_time = plan_transform(ws, "der").system_time
    local = _local_run(ws, "der", system_time)
    staging = seaweed.url("staging")
    root_id = ws.resolve("root").id
    conf = {**ENGINE_CONF, STAGING_CONF: staging}
    with start_engine_process(master=cluster.master_url, extra_conf=conf) as engine:
        client = S3InputsClient(engine.address, {root_id: location})
        plan = plan_transform(ws, "der", system_time=system_time)
        remote = run_transform(plan, client, work_dir(ws))
        with pytest.raises(InvalidQuery, match=r"stateful query \(Aggregate\).*spark.odf.s3"):
            run_transform(plan_transform(ws, "counts"), client, work_dir(ws))
    assert local.event.new_data is not None and remote.event.new_data is not None
    assert remote.event.new_data.logical_hash == local.event.new_data.logical_hash
    assert remote.event.new_data.offset_interval == local.event.new_data.offset_interval
    commit_transform(ws, remote)
    assert read_records(ws.get("der")).num_rows == remote.num_records
    # The staging prefix is left empty, and the worker never saw the workspace.
    assert list(connect(parse_s3_url(staging)).list_keys(parse_s3_url(staging).prefix)) == []
    assert not os.path.exists(f"/proc/{cluster.worker_pid}/root{ws.root}")
    assert os.path.exists(ws.root)


def _replace_slices(location: S3Location) -> None:
    """Overwrite every slice of the dataset at ``location`` with other Parquet bytes."""
    client = connect(location)
    for key, stat in list(client.list_keys(location.key("data/"))):
        got = client.get(key, stat.size)
        assert got is not None
        table = pq.read_table(pa.BufferReader(got[0]))
        sink = pa.BufferOutputStream()
        pq.write_table(table.slice(1), sink)
        client.raw.put_object(Bucket=location.bucket, Key=key, Body=sink.getvalue().to_pybytes())


def test_a_slice_replaced_on_s3_is_refused_by_the_executors(
    ws: Workspace,
    make_root: Callable[[str], RootWriter],
    seaweed: SeaweedServer,
    cluster: SparkCluster,
) -> None:
    location = _root_on_s3(ws, make_root, seaweed)
    add_derivative(ws, "der", ["root"], QUERY)
    add_derivative(ws, "der2", ["root"], QUERY)
    conf = {**ENGINE_CONF, STAGING_CONF: seaweed.url("staging")}
    with start_engine_process(master=cluster.master_url, extra_conf=conf, warmup=False) as engine:
        client = S3InputsClient(engine.address, {ws.resolve("root").id: location})
        # The driver checked the slices and keeps their footers: only executors read them now.
        run_transform(plan_transform(ws, "der"), client, work_dir(ws))
        _replace_slices(location)
        with pytest.raises(EngineInternalError, match="does not match its hash"):
            run_transform(plan_transform(ws, "der2"), client, work_dir(ws))
    state = ws.get("der2").state()
    assert state is not None and state.data_schema is None  # nothing was committed
