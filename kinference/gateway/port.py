"""What the gateway needs from a picker, whether it is across a gRPC channel or in-process.

`RemotePicker` (kinference.gateway.remote) calls a `kinference serve` instance over one
long-lived channel; `LocalPicker` (kinference.gateway.local) calls the picker hosted in the
gateway's own process, so a request pays no RPC at all. Both fail the same way: a picker
call that fails raises `grpc.aio.AioRpcError` with the status the gRPC service would have
answered (so the gateway's status mapping, kinference.gateway.errors, is one table), and
both report through `Reports`, whose calls never block the response path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from kinference.api.extensions import PickExtras
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.v1 import picker_pb2 as pb

AbortReason: TypeAlias = pb.AbortRequest.Reason.ValueType
QosClass: TypeAlias = pb.PickRequest.QosClass.ValueType
Picked: TypeAlias = tuple[pb.PickResponse, PickExtras]
# A request body for PushBody: as it arrives, or all of it already at hand (each chunk at
# most the spec's 1 MiB).
BodyChunks: TypeAlias = AsyncIterator[bytes] | list[bytes]


@dataclass(frozen=True, slots=True)
class PickAsk:
    """What a Pick of the gateway's says besides the stream id."""

    tenant: str
    qos: QosClass
    pool: tuple[str, str] | None
    client_request_id: str


class Reports(Protocol):
    """The reports of one picked request, sent in order, off the response path."""

    def first_token(self, ttft_ms: int, upstream_status: int) -> None: ...

    def final(self, usage: Usage, clock: TokenClock, fallback_model: str) -> None: ...

    def abort(self, reason: AbortReason, detail: str) -> None: ...


class PickerPort(Protocol):
    """PushBody, Pick, PullBody and the reports of the spec, as the gateway calls them."""

    async def push_and_pick(
        self,
        chunks: BodyChunks,
        *,
        declared_length: int | None,
        request_path: str,
        ask: PickAsk,
    ) -> tuple[int, Picked | None]:
        """The body in, as it arrives (`request_path` is the client's path: the
        `kinference-request-path` extension, Pick tells the shape from it); returns its
        stream id, and the pick of the body when the picker makes it at the half-close (the
        `kinference-pick-bin` extension: no Pick call); None: call `pick`."""
        ...

    async def pick(self, stream_id: int, ask: PickAsk) -> Picked:
        """The pick of a pushed body, and the extensions it carries (reason code,
        translation, ...)."""
        ...

    def pull(self, response_id: int) -> AsyncIterator[bytes | memoryview]:
        """The body to send upstream, chunk by chunk."""
        ...

    def reports(self, response_id: int) -> Reports: ...

    async def serving(self) -> bool:
        """Whether the picker answers and takes new requests."""
        ...

    def model_names(self) -> tuple[str, ...] | None:
        """Every model name and alias the policy serves; None when not known here."""
        ...

    async def aclose(self) -> None:
        """Wait for reports under way, then let go of the picker."""
        ...
