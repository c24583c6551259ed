"""TLS and mTLS on the gRPC listener, certificate rotation, and their settings.

Certificates come from a throwaway CA in a temporary directory (`tests/hostile/certs.py`).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kinference.client import PickerClient
from kinference.settings import SettingsError, load_settings
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body
from tests.conftest import PickerFactory, RunningPicker
from tests.hostile.certs import Authority, Issued

_CALL_S = 10.0  # bound on one call; a refused handshake fails well before it


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return Authority(tmp_path)


def channel_credentials(roots: Path, identity: Issued | None) -> grpc.ChannelCredentials:
    key, chain = (
        (identity.key.read_bytes(), identity.cert.read_bytes()) if identity else (None,) * 2
    )
    return grpc.ssl_channel_credentials(roots.read_bytes(), key, chain)


@asynccontextmanager
async def tls_client(
    picker: RunningPicker, roots: Path, identity: Issued | None = None
) -> AsyncIterator[PickerClient]:
    credentials = channel_credentials(roots, identity)
    channel = grpc.aio.secure_channel(f"localhost:{picker.app.port}", credentials)
    async with PickerClient("", channel=channel) as client:
        yield client


async def flow_works(client: PickerClient) -> None:
    """A whole push, pick and pull over `client`, and a health check on its channel."""
    body = chat_body()
    pushed = await client.push([body], declared_length=len(body))
    pick = await client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert await client.pull_all(pick.response_id) == body
    health = health_pb2_grpc.HealthStub(client.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=_CALL_S)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def refused(client: PickerClient) -> grpc.StatusCode:
    """The status a health check fails with (the handshake is refused, so no RPC runs)."""
    health = health_pb2_grpc.HealthStub(client.channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await health.Check(health_pb2.HealthCheckRequest(), timeout=_CALL_S)
    return info.value.code()


async def test_tls_serves_the_flow_and_health_and_refuses_plaintext(
    start_picker: PickerFactory, ca: Authority
) -> None:
    server = ca.issue("server")
    picker = await start_picker(tls_cert_file=server.cert, tls_key_file=server.key)
    async with tls_client(picker, ca.cert) as client:
        await flow_works(client)
    # The fixture's own client speaks plaintext: the TLS listener drops it at the handshake.
    assert await refused(picker.client) == grpc.StatusCode.UNAVAILABLE


async def test_a_client_trusting_another_ca_is_refused(
    start_picker: PickerFactory, ca: Authority, tmp_path: Path
) -> None:
    server = ca.issue("server")
    picker = await start_picker(tls_cert_file=server.cert, tls_key_file=server.key)
    other = Authority(tmp_path, "other-ca")
    async with tls_client(picker, other.cert) as client:
        assert await refused(client) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_requires_a_client_certificate_from_the_client_ca(
    start_picker: PickerFactory, ca: Authority, tmp_path: Path
) -> None:
    server = ca.issue("server")
    picker = await start_picker(
        tls_cert_file=server.cert, tls_key_file=server.key, tls_client_ca_file=ca.cert
    )
    async with tls_client(picker, ca.cert) as anonymous:
        assert await refused(anonymous) == grpc.StatusCode.UNAVAILABLE
    stranger = Authority(tmp_path, "stranger-ca").issue("stranger", client=True)
    async with tls_client(picker, ca.cert, stranger) as impostor:
        assert await refused(impostor) == grpc.StatusCode.UNAVAILABLE
    async with tls_client(picker, ca.cert, ca.issue("gateway", client=True)) as gateway:
        await flow_works(gateway)


async def test_rotated_certificate_files_serve_new_connections(
    start_picker: PickerFactory, ca: Authority, tmp_path: Path
) -> None:
    server = ca.issue("server")
    picker = await start_picker(tls_cert_file=server.cert, tls_key_file=server.key)
    async with tls_client(picker, ca.cert) as before:
        await flow_works(before)
        # Rotate as a Secret volume does: new files renamed over the old ones.
        renewed_ca = Authority(tmp_path, "renewed-ca")
        renewed = renewed_ca.issue("server-renewed")
        os.replace(renewed.cert, server.cert)
        os.replace(renewed.key, server.key)
        async with tls_client(picker, renewed_ca.cert) as after:
            await flow_works(after)
        await flow_works(before)  # an open connection keeps its session
    async with tls_client(picker, ca.cert) as stale:
        assert await refused(stale) == grpc.StatusCode.UNAVAILABLE


def test_tls_settings_are_checked(ca: Authority, tmp_path: Path) -> None:
    server = ca.issue("server")
    with pytest.raises(SettingsError, match="KINFERENCE_TLS_CERT_FILE and KINFERENCE_TLS_KEY"):
        load_settings({"tls_cert_file": str(server.cert)})
    with pytest.raises(SettingsError, match="KINFERENCE_TLS_CLIENT_CA_FILE needs"):
        load_settings({"tls_client_ca_file": str(ca.cert)})
    with pytest.raises(SettingsError, match=r"^KINFERENCE_TLS_KEY_FILE: .*file"):
        load_settings({"tls_cert_file": str(server.cert), "tls_key_file": str(tmp_path / "no")})
    with pytest.raises(SettingsError, match="need a rediss:// KINFERENCE_REDIS_URL"):
        load_settings({"redis_url": "redis://127.0.0.1:1", "redis_tls_ca_file": str(ca.cert)})
    settings = load_settings(
        {"tls_cert_file": "", "tls_key_file": "", "redis_url": "rediss://127.0.0.1:1"}
    )
    assert settings.tls_cert_file is None
    assert settings.redis_tls().options() == {}
