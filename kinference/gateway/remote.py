"""The picker across a gRPC channel (`kinference serve`, one long-lived channel per gateway).

Reports and Aborts run as tracked background tasks (kinference.gateway.reports), so the
response never waits on them; `/v1/models` reads the policy file the picker reads, when the
gateway is given it (the spec has no RPC that lists models).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kinference.api.extensions import PickExtras
from kinference.client import PickerClient
from kinference.config import PolicyError, load_policy
from kinference.gateway.port import QosClass
from kinference.gateway.reports import Reporter, RequestReports
from kinference.v1 import picker_pb2 as pb

PICKER_SERVICE = "kinference.v1.Picker"
_POLICY_CHECK_S = 1.0  # how often (seconds) the policy file's mtime is looked at, at most


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

    async def push(
        self,
        chunks: AsyncIterator[bytes],
        *,
        declared_length: int | None,
        client_request_id: str,
        request_path: str = "",
    ) -> int:
        pushed = await self.client.push(
            chunks,
            declared_length=declared_length,
            client_request_id=client_request_id,
            request_path=request_path,
        )
        return pushed.stream_id

    async def pick(
        self,
        stream_id: int,
        *,
        tenant: str,
        qos: QosClass,
        pool: tuple[str, str] | None,
        client_request_id: str,
    ) -> tuple[pb.PickResponse, PickExtras]:
        return await self.client.pick_with_extras(
            stream_id, tenant=tenant, qos=qos, pool=pool, client_request_id=client_request_id
        )

    def pull(self, response_id: int) -> AsyncIterator[bytes]:
        return self.client.pull(response_id)

    def reports(self, response_id: int) -> RequestReports:
        return RequestReports(self.reporter, response_id)

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
        await self.reporter.aclose()
        await self.client.close()
