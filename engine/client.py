"""A small synchronous client of the engine gRPC service (ours or kamu's adapters).

`EngineClient.execute_transform` / `execute_raw_query` send one request, read the response
stream until its terminal message (Progress messages are skipped) and return that
variant: Success, InvalidQuery or InternalError. Transport problems raise typed errors
(`EngineUnavailable`, `EngineTimeout`, `EngineProtocolError`). `raise_for_result` turns an
error variant into `InvalidQuery` / `EngineInternalError` for callers that prefer
exceptions.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Final, overload

import grpc

from engine.errors import (
    EngineInternalError,
    EngineProtocolError,
    EngineTimeout,
    EngineUnavailable,
    InvalidQuery,
)
from engine.proto import engine_pb2 as pb
from engine.proto import engine_pb2_grpc as pb_grpc
from engine.raw_query import RawQueryResult
from engine.server import GRPC_OPTIONS
from engine.transform import TransformResult
from fbs.codec import decode_table, encode_table
from fbs.errors import FbsError
from fbs.model.engine import (
    RawQueryRequest,
    RawQueryResponseInternalError,
    RawQueryResponseInvalidQuery,
    RawQueryResponseProgress,
    RawQueryResponseRoot,
    RawQueryResponseSuccess,
    TransformRequest,
    TransformResponseInternalError,
    TransformResponseInvalidQuery,
    TransformResponseProgress,
    TransformResponseRoot,
    TransformResponseSuccess,
)

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "MAX_PROGRESS_MESSAGES",
    "EngineClient",
    "raise_for_result",
]

#: Deadline of one transform / raw query call, in seconds.
DEFAULT_CALL_TIMEOUT: Final = 3600.0
#: Deadline of `EngineClient.wait_ready`, in seconds.
DEFAULT_CONNECT_TIMEOUT: Final = 30.0
#: Most Progress messages accepted before a terminal one (guards against a looping peer).
MAX_PROGRESS_MESSAGES: Final = 100_000


class EngineClient:
    """Client of one engine at ``address`` (``host:port``). Thread-safe; close when done."""

    def __init__(self, address: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address, options=list(GRPC_OPTIONS))
        self._stub = pb_grpc.EngineStub(self._channel)

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel (calls in flight are cancelled)."""
        self._channel.close()

    def wait_ready(self, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        """Block until the channel connects.

        Raises:
            EngineTimeout: if no connection is made within ``timeout`` seconds.
        """
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise EngineTimeout(f"engine at {self.address} not reachable in {timeout} s") from None

    def execute_transform(
        self, request: TransformRequest, *, timeout: float | None = None
    ) -> TransformResult:
        """Run a transform; returns its Success / InvalidQuery / InternalError response.

        Raises:
            EngineUnavailable: nothing answers at the address.
            EngineTimeout: no terminal message before the deadline.
            EngineProtocolError: undecodable message or a stream without a terminal one.
            fbs.errors.InvalidValue: ``request`` cannot be encoded.
        """
        call = self._stub.ExecuteTransform(
            pb.TransformRequest(flatbuffer=encode_table(request)),
            timeout=self.timeout if timeout is None else timeout,
        )
        value = self._read_terminal(call, TransformResponseRoot, TransformResponseProgress)
        if not isinstance(
            value,
            TransformResponseSuccess
            | TransformResponseInvalidQuery
            | TransformResponseInternalError,
        ):
            raise EngineProtocolError(f"unexpected transform response {type(value).__name__}")
        return value

    def execute_raw_query(
        self, request: RawQueryRequest, *, timeout: float | None = None
    ) -> RawQueryResult:
        """Run a raw query; returns its Success / InvalidQuery / InternalError response.

        Raises:
            EngineUnavailable: nothing answers at the address.
            EngineTimeout: no terminal message before the deadline.
            EngineProtocolError: undecodable message or a stream without a terminal one.
            fbs.errors.InvalidValue: ``request`` cannot be encoded.
        """
        call = self._stub.ExecuteRawQuery(
            pb.RawQueryRequest(flatbuffer=encode_table(request)),
            timeout=self.timeout if timeout is None else timeout,
        )
        value = self._read_terminal(call, RawQueryResponseRoot, RawQueryResponseProgress)
        if not isinstance(
            value,
            RawQueryResponseSuccess | RawQueryResponseInvalidQuery | RawQueryResponseInternalError,
        ):
            raise EngineProtocolError(f"unexpected raw query response {type(value).__name__}")
        return value

    def _read_terminal(self, call: Any, root_cls: type[Any], progress_cls: type[Any]) -> object:
        try:
            for count, message in enumerate(call):
                if count > MAX_PROGRESS_MESSAGES:
                    raise EngineProtocolError("engine sent too many progress messages")
                try:
                    value = decode_table(root_cls, message.flatbuffer).value
                except FbsError as e:
                    raise EngineProtocolError(f"undecodable engine response: {e}") from None
                if not isinstance(value, progress_cls):
                    return value
        except grpc.RpcError as e:
            raise _map_rpc_error(e, self.address) from None
        finally:
            call.cancel()
        raise EngineProtocolError("engine closed the stream without a result")


def _map_rpc_error(e: grpc.RpcError, address: str) -> Exception:
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    if code == grpc.StatusCode.UNAVAILABLE:
        return EngineUnavailable(f"engine at {address} unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return EngineTimeout(f"engine call to {address} timed out")
    return EngineProtocolError(f"engine call to {address} failed: {code}: {details}")


@overload
def raise_for_result(result: TransformResult) -> TransformResponseSuccess: ...
@overload
def raise_for_result(result: RawQueryResult) -> RawQueryResponseSuccess: ...
def raise_for_result(
    result: TransformResult | RawQueryResult,
) -> TransformResponseSuccess | RawQueryResponseSuccess:
    """Return a Success response; raise the typed error of an error response.

    Raises:
        InvalidQuery: for an InvalidQuery response.
        EngineInternalError: for an InternalError response.
        EngineProtocolError: for anything else.
    """
    value: object = result  # callers may pass anything at runtime
    if isinstance(value, TransformResponseSuccess | RawQueryResponseSuccess):
        return value
    if isinstance(value, TransformResponseInvalidQuery | RawQueryResponseInvalidQuery):
        raise InvalidQuery(value.message)
    if isinstance(value, TransformResponseInternalError | RawQueryResponseInternalError):
        raise EngineInternalError(value.message, value.backtrace)
    raise EngineProtocolError(f"not an engine response: {type(value).__name__}")
