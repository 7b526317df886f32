"""Fixtures shared by every test package: one engine (one Spark JVM) per test session.

`engine_process` / `engine` start lazily, on the first test that needs them, and serve
every package (tests/engine, tests/node). A package-level conftest must not define
fixtures of the same names, or a second JVM would run next to this one.

`engine_run_dir`: the user's shared engine (`node.engine_manager`) of any test that
starts one runs in a run folder of this session's, deleted at its end: such an engine
stops within seconds then, instead of outliving the test run by its idle timeout.

`anyio_backend`: the ``pytest.mark.anyio`` tests run on asyncio, the daemon's loop (the
libp2p host runs trio in its own thread, see `p2p.libp2p.bridge`).

Parallel runs (`scripts/test`: pytest-xdist, ``-n 2 --dist loadfile
--no-loadscope-reorder``): each worker process is a session of its own, with its own
engine JVM, run folder and ``tmp_path`` base, and runs whole test files. A worker hands
out the files holding a ``slow`` test first (`pytest_collection_modifyitems`), so that
the long files run side by side from the start instead of one of them last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from engine.client import EngineClient
from engine.inputs import PARALLEL_MIN_BYTES_CONF
from engine.process import EngineProcess, start_engine_process


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the files that hold a ``slow`` test come first (each file's
    tests keep their order, and so do the files within each of the two sets).

    Every worker collects the same order, from which ``--dist loadfile
    --no-loadscope-reorder`` hands out whole files in turn; a run in one process keeps
    the plain collection order.
    """
    if not hasattr(config, "workerinput"):
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(scope="session", autouse=True)
def engine_run_dir() -> Iterator[str]:
    """``$ODF_ENGINE_RUN_DIR`` for the session (child processes inherit it)."""
    from node.engine_manager import ENGINE_RUN_DIR_ENV

    path = tempfile.mkdtemp(prefix="odf-test-engine-run-")
    previous = os.environ.get(ENGINE_RUN_DIR_ENV)
    os.environ[ENGINE_RUN_DIR_ENV] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(ENGINE_RUN_DIR_ENV, None)
        else:
            os.environ[ENGINE_RUN_DIR_ENV] = previous
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def engine_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """A real engine server subprocess on a free loopback port (local[2], 1 GiB driver).

    Every input is read split across partitions (however small), and files are split
    every 64 KiB, so the tests' small inputs take the parallel read + merge path that
    production takes for inputs of 32 MiB and more; wide queries still take the
    one-partition path.
    """
    log = tmp_path_factory.mktemp("engine-log") / "engine.log"
    proc = start_engine_process(
        master="local[2]",
        driver_memory="1g",
        log_path=log,
        extra_conf={
            PARALLEL_MIN_BYTES_CONF: "0",
            "spark.sql.files.maxPartitionBytes": str(64 * 1024),
        },
    )
    try:
        yield proc
    finally:
        code = proc.stop()
    assert code == 0, f"engine did not shut down cleanly (exit {code}); log: {log}"


@pytest.fixture(scope="session")
def engine(engine_process: EngineProcess) -> Iterator[EngineClient]:
    """A client of the shared engine."""
    with EngineClient(engine_process.address, timeout=300.0) as client:
        yield client


@pytest.fixture
def anyio_backend() -> str:
    """Run ``pytest.mark.anyio`` tests on asyncio only."""
    return "asyncio"
