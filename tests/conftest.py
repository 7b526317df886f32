"""Fixtures shared by every test package: one engine (one Spark JVM) per test session.

`engine_process` / `engine` start lazily, on the first test that needs them, and serve
every package (tests/engine, tests/node). A package-level conftest must not define
fixtures of the same names, or a second JVM would run next to this one.

`anyio_backend`: the ``pytest.mark.anyio`` tests run on asyncio, the daemon's loop (the
libp2p host runs trio in its own thread, see `p2p.libp2p.bridge`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.client import EngineClient
from engine.inputs import PARALLEL_MIN_BYTES_CONF
from engine.process import EngineProcess, start_engine_process


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
