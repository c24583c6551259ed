"""The picker across a gRPC channel (`kinference serve`, one long-lived channel per gateway).

Each gRPC call costs grpc.aio a fraction of a millisecond of CPU on each side, so requests
make none of their own where the picker allows: a body of known length up to
`SESSION_BODY_MAX` bytes goes over the gateway's one PickerSession stream (kinference's own
service, session.proto), which brings back the pick and a body of up to that size inline,
and carries the reports as frames (kinference.gateway.session_reports). Other bodies, and
every body when the picker does not serve PickerSession, make as few calls as the
extensions in metadata (kinference.api.extensions) allow: one PushBody that also picks
(`kinference-pick-bin`) and brings back a body of up to `INLINE_BODY_MAX` bytes (no
PullBody), and one ReportFinalToken that carries the first token's report too
(kinference.gateway.reports); a picker without the extensions gets the plain five calls.
Reports and Aborts never hold up the response; `/v1/models` reads the policy file the
picker reads, when the gateway is given it (the spec has no RPC that lists models).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kinference.api.extensions import usable_path
from kinference.client import PickerClient, pick_request
from kinference.config import PolicyError, load_policy
from kinference.gateway.port import BodyChunks, PickAsk, Picked, Reports
from kinference.gateway.reports import Reporter, RequestReports
from kinference.gateway.session_link import SessionLink
from kinference.gateway.session_reports import SessionReports, send_unary
from kinference.v1 import session_pb2 as spb

PICKER_SERVICE = "kinference.v1.Picker"
_POLICY_CHECK_S = 1.0  # how often (seconds) the policy file's mtime is looked at, at most
# Bodies up to this many bytes come back inline in the pick's metadata (base64 on the wire,
# within the channel's metadata limit below); larger ones are pulled with PullBody.
INLINE_BODY_MAX = 16 * 1024
CHANNEL_OPTIONS: list[tuple[str, int]] = [("grpc.max_metadata_size", 64 * 1024)]
# Bodies of a known length up to this many bytes go over the PickerSession stream, and come
# back inline on it; larger ones (and chunked uploads) take PushBody and PullBody of their
# own, so no large body holds up the stream every other request shares.
SESSION_BODY_MAX = 256 * 1024


class PolicyModels:
    """Model names and aliases of a policy file, re-read when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._names: tuple[str, ...] = ()
        self._mtime: float | None = None
        self._checked = 0.0

    def names(self) -> tuple[str, ...]:
        now = time.monotonic()
        if now - self._checked >= _POLICY_CHECK_S:
            self._checked = now
            self._reload()
        return self._names

    def _reload(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return  # keep what we had; the picker keeps its last good policy too
        if mtime == self._mtime:
            return
        try:
            self._names = load_policy(self.path).model_names
        except PolicyError:
            return
        self._mtime = mtime


class RemotePicker:
    """`PickerPort` over a `PickerClient`."""

    def __init__(
        self, client: PickerClient, *, rpc_timeout_s: float, models: PolicyModels | None
    ) -> None:
        self.client = client
        self.reporter = Reporter(client, rpc_timeout_s)
        self._rpc_timeout_s = rpc_timeout_s
        self._models = models
        self._health = health_pb2_grpc.HealthStub(client.channel)
        self.sessions = SessionLink(client.channel, self._unsent)
        # Set once the picker has picked on a push: it knows kinference's extensions, so
        # first-token reports may ride on the final ones.
        self._extended = False

    async def push_and_pick(
        self,
        chunks: BodyChunks,
        *,
        declared_length: int | None,
        request_path: str,
        ask: PickAsk,
    ) -> tuple[int, Picked | None]:
        request = pick_request(0, ask.tenant, ask.qos, ask.pool, ask.client_request_id)
        if declared_length is not None and declared_length <= SESSION_BODY_MAX:
            session = await self.sessions.get()
            if session is not None:
                start = spb.Start(
                    declared_length=declared_length,
                    client_request_id=ask.client_request_id,
                    request_path=request_path if usable_path(request_path) else "",
                    pick=request,
                    inline_body_max=SESSION_BODY_MAX,
                )
                return 0, await session.push_and_pick(streamed(chunks), start)
        pushed, picked = await self.client.push_and_pick(
            streamed(chunks),
            request,
            declared_length=declared_length,
            client_request_id=ask.client_request_id,
            request_path=request_path,
            inline_body_max=INLINE_BODY_MAX,
        )
        if picked is not None:
            self._extended = True
        return pushed.stream_id, picked

    async def pick(self, stream_id: int, ask: PickAsk) -> Picked:
        return await self.client.pick_with_extras(
            stream_id,
            tenant=ask.tenant,
            qos=ask.qos,
            pool=ask.pool,
            client_request_id=ask.client_request_id,
            inline_body_max=INLINE_BODY_MAX,
        )

    def pull(self, response_id: int) -> AsyncIterator[bytes]:
        return self.client.pull(response_id)

    def reports(self, response_id: int) -> Reports:
        session = self.sessions.current()
        if session is not None:
            return SessionReports(session, response_id, self.reporter)
        return RequestReports(self.reporter, response_id, merge_first=self._extended)

    def _unsent(self, frames: list[spb.ClientFrame]) -> None:
        """Reports queued on a stream that broke: sent as the Picker service's calls."""
        send_unary(self.reporter, frames)

    async def serving(self) -> bool:
        check = health_pb2.HealthCheckRequest(service=PICKER_SERVICE)
        try:
            answer = await self._health.Check(check, timeout=self._rpc_timeout_s)
        except grpc.aio.AioRpcError:
            return False
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)

    def model_names(self) -> tuple[str, ...] | None:
        return self._models.names() if self._models is not None else None

    async def aclose(self) -> None:
        await self.sessions.aclose(self._rpc_timeout_s)
        await self.reporter.aclose()
        await self.client.close()


def streamed(chunks: BodyChunks) -> AsyncIterator[bytes]:
    """`chunks` as the request stream a call takes (a body at hand, one chunk at a time)."""
    if isinstance(chunks, list):
        return _each(chunks)
    return chunks


async def _each(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
