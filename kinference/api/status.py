"""Domain errors to gRPC status, in one place, and the RPC error counter beside it."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc

from kinference.api.extensions import error_metadata
from kinference.errors import (
    AlreadyConsumed,
    IdleTimeout,
    InvalidArgument,
    NotFound,
    PickerError,
    ResourceExhausted,
    Unavailable,
)
from kinference.metrics import Metrics

_CODES: dict[type[PickerError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyConsumed: grpc.StatusCode.FAILED_PRECONDITION,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    IdleTimeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}


def status_code(error: PickerError) -> grpc.StatusCode:
    """The gRPC status a domain error is reported as."""
    for kind in type(error).__mro__:
        code = _CODES.get(kind)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


H = TypeVar("H", bound=Callable[..., Awaitable[Any]])


class MalformedMessage:
    """What a request that is not a valid protobuf message of its type decodes to."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def grpc_errors(method: str) -> Callable[[H], H]:
    """Turn a handler's domain errors into its gRPC status, and count every failed RPC; a
    request that did not decode (`MalformedMessage`) is answered INVALID_ARGUMENT, the
    spec's "malformed request", without calling the handler (one wrapper for both: a
    coroutine layer less on every call).

    The handler's own `finally` blocks have run (and released their bytes) by the time the
    error reaches here, which matters because `context.abort` waits for the status to go out.
    """

    def decorate(handler: H) -> H:
        @functools.wraps(handler)
        async def wrapper(
            self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            metrics: Metrics = self.metrics
            try:
                if isinstance(request, MalformedMessage):
                    raise InvalidArgument(request.reason)
                return await handler(self, request, context)
            except PickerError as error:
                code = status_code(error)
                metrics.rpc_errors.labels(method, code.name).inc()
                await context.abort(code, str(error), tuple(error_metadata(error)))
            except asyncio.CancelledError:
                metrics.rpc_errors.labels(method, "CANCELLED").inc()
                raise

        return cast(H, wrapper)

    return decorate
