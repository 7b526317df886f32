"""Start an engine server as a child process and wait until it is ready.

The coordinator starts one engine on demand and reuses it for every transform: the JVM
start (~7-13 s) and warm-up are paid once. Readiness is "the port accepts TCP
connections" (the server binds only after Spark is up and warmed up). The child's
stdout/stderr go to a log file, whose tail is put into the error if the engine dies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Final

from engine.errors import EngineTimeout, EngineUnavailable
from engine.server import DEFAULT_HOST

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_STOP_TIMEOUT",
    "EngineProcess",
    "free_port",
    "start_engine_process",
    "wait_for_port",
]

#: Seconds to wait for the engine's port (JVM start + warm-up on a busy machine).
DEFAULT_STARTUP_TIMEOUT: Final = 180.0
#: Seconds to wait after SIGTERM before killing the engine.
DEFAULT_STOP_TIMEOUT: Final = 30.0
#: Bytes of the log shown in errors.
LOG_TAIL_BYTES: Final = 4096
_POLL_INTERVAL: Final = 0.2

_PROJECT_ROOT: Final = Path(__file__).resolve().parents[1]


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _log_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class EngineProcess:
    """A running engine child process; a context manager that stops it on exit."""

    def __init__(
        self, process: subprocess.Popen[bytes], host: str, port: int, log_path: Path
    ) -> None:
        self.process = process
        self.host = host
        self.port = port
        self.log_path = log_path

    @property
    def address(self) -> str:
        """``host:port`` for `engine.client.EngineClient`."""
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        """True while the child process runs."""
        return self.process.poll() is None

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int:
        """SIGTERM the engine (clean shutdown), SIGKILL it after ``timeout``; returns its code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for_port(
    host: str,
    port: int,
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    abort: Callable[[], bool] | None = None,
) -> None:
    """Poll until ``host:port`` accepts connections.

    Raises:
        EngineUnavailable: if ``process`` exits first, or ``abort()`` turns true (the
            owner of a booting engine went away or asked it to stop).
        EngineTimeout: if the port is not open within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise EngineUnavailable(f"engine exited with code {process.returncode} while starting")
        if abort is not None and abort():
            raise EngineUnavailable("engine start aborted")
        if _port_open(host, port):
            return
        if time.monotonic() >= deadline:
            raise EngineTimeout(f"engine port {host}:{port} not open after {timeout} s")
        time.sleep(_POLL_INTERVAL)


def start_engine_process(
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    master: str | None = None,
    driver_memory: str | None = None,
    warmup: bool = True,
    extra_conf: Mapping[str, str] | None = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    log_path: str | os.PathLike[str] | None = None,
    python: str = sys.executable,
    activity_path: str | os.PathLike[str] | None = None,
    on_spawn: Callable[[EngineProcess], None] | None = None,
    abort: Callable[[], bool] | None = None,
) -> EngineProcess:
    """Start ``python -m engine`` on ``host:port`` (0 = a free port) and wait until ready.

    ``extra_conf`` holds further ``spark.*`` settings of the engine's session.
    ``activity_path``: a file the engine touches at the start and end of every request
    (its owner's idle clock). ``on_spawn`` is called with the booting engine as soon as
    its process exists (before it is ready: a supervisor records it as starting);
    ``abort`` is polled while it boots and stops the start when it turns true.

    Raises:
        EngineUnavailable: if the engine exits while starting (the error holds its log
            tail) or the start is aborted (the engine is stopped).
        EngineTimeout: if it is not ready within ``startup_timeout`` seconds (it is killed).
    """
    port = port or free_port(host)
    args = [python, "-m", "engine", "--host", host, "--port", str(port)]
    if master is not None:
        args += ["--master", master]
    if driver_memory is not None:
        args += ["--driver-memory", driver_memory]
    if not warmup:
        args.append("--no-warmup")
    for key, value in (extra_conf or {}).items():
        args += ["--conf", f"{key}={value}"]
    if activity_path is not None:
        args += ["--activity-file", str(activity_path)]
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="odf-engine-", suffix=".log")
        os.close(fd)
        log = Path(name)
    else:
        log = Path(log_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    # Spark's Python workers (the driver's planner of a Python data source, executors)
    # run this interpreter, not whichever ``python3`` comes first on PATH.
    env.setdefault("PYSPARK_PYTHON", python)
    log_file: IO[bytes]
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    engine = EngineProcess(process, host, port, log)
    try:
        if on_spawn is not None:
            on_spawn(engine)
        wait_for_port(host, port, startup_timeout, process, abort)
    except EngineUnavailable as e:
        with contextlib.suppress(OSError):
            engine.stop(timeout=5.0)
        raise type(e)(f"{e}; log {log}:\n{_log_tail(log)}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            engine.stop(timeout=5.0)
        raise
    return engine
