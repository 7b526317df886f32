"""The engine gRPC server: `engine.Engine` over a long-lived SparkSession.

Server model: a synchronous ``grpc.server`` with a small thread pool. Spark work is
blocking JVM calls through py4j, so threads are the natural fit (an asyncio server
would only push the same calls into a thread pool). At most `DEFAULT_MAX_CONCURRENT`
requests run Spark jobs at once; further requests wait for a slot (their streams have
already received a Progress message). Every request runs in its own child session
(`engine.spark.request_session`), so temp views never leak between requests.

Each call streams one ``Progress`` message, then exactly one terminal message
(``Success`` / ``InvalidQuery`` / ``InternalError``). A request that does not decode is
answered with ``InternalError`` (the protocol has no "bad request" variant).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import grpc

from engine.errors import EngineConfigError
from engine.proto import engine_pb2 as pb
from engine.proto import engine_pb2_grpc as pb_grpc
from engine.raw_query import RawQueryResult, execute_raw_query
from engine.transform import TransformResult, execute_transform
from fbs.codec import decode_table, encode_table
from fbs.errors import FbsError
from fbs.model.engine import (
    RawQueryRequest,
    RawQueryResponseInternalError,
    RawQueryResponseProgress,
    RawQueryResponseRoot,
    TransformRequest,
    TransformResponseInternalError,
    TransformResponseProgress,
    TransformResponseRoot,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from engine.spark import SparkSettings

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_CONCURRENT",
    "DEFAULT_MAX_WORKERS",
    "DEFAULT_PORT",
    "GRPC_OPTIONS",
    "MAX_ERROR_CHARS",
    "MAX_MESSAGE_BYTES",
    "EngineServer",
    "EngineServicer",
    "run_engine",
]

log = logging.getLogger("odf.engine")

#: The ODF spec's engine port. kamu's adapters listen on 2884 inside their containers
#: (``--port 2884`` reproduces that); the coordinator's on-demand engine takes a free port.
DEFAULT_PORT: Final = 5544
#: Loopback by default: the engine reads and writes local paths named by the caller.
DEFAULT_HOST: Final = "127.0.0.1"
#: gRPC worker threads (requests beyond the Spark slots wait in their thread).
DEFAULT_MAX_WORKERS: Final = 8
#: Requests running Spark jobs at the same time.
DEFAULT_MAX_CONCURRENT: Final = 2
#: Largest gRPC message either way (requests with many input files exceed gRPC's 4 MiB).
MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
#: Longest error message / backtrace sent back (Spark messages can embed whole plans).
MAX_ERROR_CHARS: Final = 64 * 1024
#: Seconds in-flight calls get to finish when the server stops.
DEFAULT_STOP_GRACE: Final = 10.0

GRPC_OPTIONS: Final = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    return text[:MAX_ERROR_CHARS] + "\n... (truncated)"


class _Activity:
    """Touches a file when a request starts and when it ends: the idle clock of whoever
    supervises the engine (a request is use, even from a client that holds no lease)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path

    def touch(self) -> None:
        if self._path is not None:
            with contextlib.suppress(OSError):
                os.utime(self._path)  # an absent file (owner gone) is not re-created

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        self.touch()
        try:
            yield
        finally:
            self.touch()


class EngineServicer(pb_grpc.EngineServicer):
    """Implements ``engine.Engine`` on top of a root SparkSession."""

    def __init__(
        self,
        session: SparkSession,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        activity_path: Path | None = None,
    ):
        if max_concurrent < 1:
            raise EngineConfigError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self._session = session
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._activity = _Activity(activity_path)

    def ExecuteTransform(
        self, request: pb.TransformRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.TransformResponse]:
        """Stream Progress, then the transform's terminal response."""
        yield self._transform_message(TransformResponseProgress())
        started = time.monotonic()
        result: TransformResult
        try:
            req = decode_table(TransformRequest, request.flatbuffer)
        except FbsError as e:
            result = TransformResponseInternalError(message=f"malformed TransformRequest: {e}")
        else:
            with self._activity.request(), self._slots:
                result = execute_transform(self._session, req)
            if isinstance(result, TransformResponseInternalError):
                result = TransformResponseInternalError(
                    message=_clip(result.message) or "", backtrace=_clip(result.backtrace)
                )
        log.info("transform: %s in %.2f s", type(result).__name__, time.monotonic() - started)
        yield self._transform_message(result)

    def ExecuteRawQuery(
        self, request: pb.RawQueryRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.RawQueryResponse]:
        """Stream Progress, then the raw query's terminal response."""
        yield self._raw_message(RawQueryResponseProgress())
        started = time.monotonic()
        result: RawQueryResult
        try:
            req = decode_table(RawQueryRequest, request.flatbuffer)
        except FbsError as e:
            result = RawQueryResponseInternalError(message=f"malformed RawQueryRequest: {e}")
        else:
            with self._activity.request(), self._slots:
                result = execute_raw_query(self._session, req)
            if isinstance(result, RawQueryResponseInternalError):
                result = RawQueryResponseInternalError(
                    message=_clip(result.message) or "", backtrace=_clip(result.backtrace)
                )
        log.info("raw query: %s in %.2f s", type(result).__name__, time.monotonic() - started)
        yield self._raw_message(result)

    @staticmethod
    def _transform_message(value: Any) -> pb.TransformResponse:
        return pb.TransformResponse(flatbuffer=encode_table(TransformResponseRoot(value=value)))

    @staticmethod
    def _raw_message(value: Any) -> pb.RawQueryResponse:
        return pb.RawQueryResponse(flatbuffer=encode_table(RawQueryResponseRoot(value=value)))


class EngineServer:
    """A started gRPC server bound to ``host:port`` (port 0 picks a free port)."""

    def __init__(
        self,
        session: SparkSession,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        max_workers: int = DEFAULT_MAX_WORKERS,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        activity_path: Path | None = None,
    ) -> None:
        """Bind and start serving (``activity_path``: see `run_engine`).

        Raises:
            EngineConfigError: for a bad port or worker count, or if the address cannot
                be bound (e.g. the port is taken).
        """
        if not (0 <= port <= 65535):
            raise EngineConfigError(f"port out of range: {port}")
        if max_workers < 1:
            raise EngineConfigError(f"max_workers must be >= 1, got {max_workers}")
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="engine"),
            options=list(GRPC_OPTIONS),
        )
        servicer = EngineServicer(session, max_concurrent, activity_path)
        pb_grpc.add_EngineServicer_to_server(servicer, self._server)
        try:
            bound = self._server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as e:
            raise EngineConfigError(f"cannot listen on {host}:{port}: {e}") from None
        if bound == 0:
            raise EngineConfigError(f"cannot listen on {host}:{port}")
        self.host = host
        self.port: int = bound
        self._server.start()

    @property
    def address(self) -> str:
        """``host:port`` to give to `engine.client.EngineClient`."""
        return f"{self.host}:{self.port}"

    def stop(self, grace: float = DEFAULT_STOP_GRACE) -> None:
        """Stop accepting calls and wait up to ``grace`` seconds for running ones."""
        self._server.stop(grace).wait()


def run_engine(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    master: str | None = None,
    *,
    settings: SparkSettings | None = None,
    warmup: bool = True,
    max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    activity_path: Path | None = None,
) -> None:
    """Start Spark and the gRPC server; block until SIGTERM/SIGINT, then shut down cleanly.

    The port is bound only after Spark is up (and warmed up), so "the port accepts
    connections" means "the engine is ready", as kamu assumes.

    Args:
        host: address to listen on.
        port: TCP port (0 = any free port; the chosen one is logged).
        master: Spark master URL; overrides ``settings.master``.
        settings: full Spark settings (defaults: `engine.spark.SparkSettings`).
        warmup: run a tiny transform first so the first real request is fast.
        max_concurrent: requests running Spark jobs at once.
        activity_path: an existing file touched when each request starts and ends (the
            supervisor of a shared engine reads its time as the last use).

    Raises:
        EngineConfigError: for invalid settings or an address that cannot be bound.
    """
    import dataclasses

    from engine.spark import SparkSettings, create_session, engine_identity
    from engine.warmup import warm_up

    settings = settings or SparkSettings()
    if master is not None:
        settings = dataclasses.replace(settings, master=master)
    stop = threading.Event()
    in_main = threading.current_thread() is threading.main_thread()
    previous: dict[signal.Signals, Any] = {}
    if in_main:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    session = create_session(settings)
    try:
        if warmup and not stop.is_set():
            started = time.monotonic()
            warm_up(session)
            log.info("warm-up done in %.2f s", time.monotonic() - started)
        if stop.is_set():
            return
        server = EngineServer(
            session, host, port, max_concurrent=max_concurrent, activity_path=activity_path
        )
        log.info("%s listening on %s", engine_identity(session), server.address)
        try:
            while not stop.wait(0.5):
                pass
        finally:
            log.info("stopping")
            server.stop()
    finally:
        session.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
