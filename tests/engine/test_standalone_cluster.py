"""The engine on a real Spark standalone cluster (master + one worker) on loopback.

The master and the worker are started with pyspark's bundled ``bin/spark-class``, each in
its own process group so teardown can kill the JVM that the launcher script execs (and
anything it forked). The engine driver connects with ``spark://127.0.0.1:PORT``; its
single executor runs in a separate JVM launched by the worker, so the transform's Parquet
is read and written by another process than the driver: paths are local to this machine
(tmp_path), which is enough for a one-machine cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow.parquet as pq
import pytest

from engine.client import EngineClient
from engine.process import free_port, start_engine_process
from fbs.model.engine import TransformResponseSuccess
from fbs.model.events import OffsetInterval
from tests.engine.helpers import BASE_MS, make_input, make_request, ts, write_input, write_schema

LOOPBACK: Final = "127.0.0.1"
#: Seconds for the master's web UI to answer and for the worker to register.
CLUSTER_START_TIMEOUT: Final = 60.0
#: Seconds for the engine (driver JVM) to start on the cluster.
ENGINE_START_TIMEOUT: Final = 90.0
#: Seconds for one transform (the first one also waits for the executor JVM).
TRANSFORM_TIMEOUT: Final = 120.0
#: Seconds to wait for a daemon to exit after SIGTERM before SIGKILL.
STOP_TIMEOUT: Final = 10.0
#: Heap of the master and worker daemons (Spark's default is 1g each).
DAEMON_MEMORY: Final = "256m"
#: Executor heap; the worker offers 1g, the default executor asks for all of it.
EXECUTOR_MEMORY: Final = "512m"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None, reason="Java is not installed"),
]


@dataclass(frozen=True, slots=True)
class Cluster:
    """A running standalone master with one registered worker."""

    master_url: str
    master_ui: str


def _spark_env(tmp: Path) -> dict[str, str]:
    from pyspark.find_spark_home import _find_spark_home

    env = dict(os.environ)
    conf_dir = tmp / "conf"
    conf_dir.mkdir()
    env.update(
        SPARK_HOME=_find_spark_home(),
        SPARK_LOCAL_IP=LOOPBACK,
        # An empty conf dir: no spark-env.sh / spark-defaults.conf from the host.
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_WORKER_DIR=str(tmp / "work"),
        SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
    )
    return env


def _launch(env: dict[str, str], args: list[str], log: Path) -> subprocess.Popen[bytes]:
    spark_class = Path(env["SPARK_HOME"]) / "bin" / "spark-class"
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(spark_class), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(STOP_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            continue


def _master_state(ui: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=2.0) as resp:
            state: dict[str, Any] = json.load(resp)
            return state
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text("utf-8", "replace")[-size:]
    except OSError:
        return "<no log>"


def _wait_for_worker(
    ui: str, procs: dict[str, tuple[subprocess.Popen[bytes], Path]]
) -> dict[str, Any]:
    deadline = time.monotonic() + CLUSTER_START_TIMEOUT
    state: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        for name, (proc, log) in procs.items():
            if proc.poll() is not None:
                pytest.fail(f"spark {name} exited with {proc.returncode}:\n{_tail(log)}")
        state = _master_state(ui)
        if state is not None and any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
            return state
        time.sleep(0.5)
    logs = "\n".join(f"--- {name}:\n{_tail(log)}" for name, (_, log) in procs.items())
    pytest.fail(f"no worker registered in {CLUSTER_START_TIMEOUT} s (state {state}):\n{logs}")


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A standalone master and one 1-core worker on loopback, stopped afterwards."""
    env = _spark_env(tmp_path)
    port, ui_port, worker_ui_port = free_port(LOOPBACK), free_port(LOOPBACK), free_port(LOOPBACK)
    master_url = f"spark://{LOOPBACK}:{port}"
    ui = f"http://{LOOPBACK}:{ui_port}"
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        master_log = tmp_path / "master.log"
        master = _launch(
            env,
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)),
            ],
            master_log,
        )
        procs["master"] = (master, master_log)
        worker_log = tmp_path / "worker.log"
        worker = _launch(
            env,
            [
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                *("--host", LOOPBACK, "--cores", "1", "--memory", "1g"),
                *("--webui-port", str(worker_ui_port), "--work-dir", env["SPARK_WORKER_DIR"]),
            ],
            worker_log,
        )
        procs["worker"] = (worker, worker_log)
        state = _wait_for_worker(ui, procs)
        assert state["status"] == "ALIVE"
        yield Cluster(master_url=master_url, master_ui=ui)
    finally:
        # Worker first: it kills its executors when it stops.
        for proc, _ in reversed(list(procs.values())):
            _stop(proc)


def test_transform_on_a_standalone_cluster(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SparkContext reads SPARK_EXECUTOR_MEMORY; the engine process inherits our environment.
    monkeypatch.setenv("SPARK_EXECUTOR_MEMORY", EXECUTOR_MEMORY)
    monkeypatch.setenv("SPARK_LOCAL_IP", LOOPBACK)
    cities = ["a", "b", "c", "d", "e", "f", "g", "h"]
    table = write_input(
        tmp_path / "in", start_offset=0, cities=cities, populations=[10 * (i + 1) for i in range(8)]
    )
    write_schema(tmp_path / "schema", table)
    inp = make_input(
        seed=b"cluster-cities",
        alias="cities",
        paths=[tmp_path / "in"],
        schema_file=tmp_path / "schema",
        interval=(1, 6),
        watermarks_ms=[BASE_MS + 4000],
    )
    req = make_request(
        tmp_path / "out",
        [inp],
        query="SELECT event_time, upper(city) AS city, population + 1 AS p FROM cities "
        "WHERE population % 20 = 0",
        next_offset=7,
    )

    engine_log = tmp_path / "engine.log"
    with (
        start_engine_process(
            master=cluster.master_url,
            driver_memory="512m",
            warmup=False,
            startup_timeout=ENGINE_START_TIMEOUT,
            log_path=engine_log,
        ) as proc,
        EngineClient(proc.address, timeout=TRANSFORM_TIMEOUT) as client,
    ):
        res = client.execute_transform(req)
        assert isinstance(res, TransformResponseSuccess), f"{res}\n{_tail(engine_log)}"
        # The job really ran on the cluster: the master lists the engine as a running app
        # and the worker launched an executor for it.
        state = _master_state(cluster.master_ui)
        assert state is not None
        apps = state["activeapps"]
        assert [a["name"] for a in apps] == ["odf-engine-spark"]
        assert any((tmp_path / "work").glob("app-*/*/stderr")), "no executor ran on the worker"
        code = proc.stop()
    assert code == 0, _tail(engine_log)

    assert res.new_offset_interval == OffsetInterval(start=7, end=9)
    assert res.new_watermark == ts(BASE_MS + 4000)
    out = pq.read_table(tmp_path / "out" / "data")
    assert out.column_names == ["offset", "op", "system_time", "event_time", "city", "p"]
    rows = [(r["offset"], r["op"], r["city"], r["p"]) for r in out.to_pylist()]
    # Offsets 1..6 are cities b..g with populations 20..70; the even tens pass.
    assert rows == [(7, 0, "B", 21), (8, 0, "D", 41), (9, 0, "F", 61)]
    # No temp output directories left next to the data file.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checkpoint", "data"]
