"""The gateway over its connection cap, end to end (kinference.gateway.capacity, .refusals):
a burst of clients far past the cap each get a served answer or a 503 with `Retry-After`
and the JSON error, never a reset or a hang; a slow client does not hold its place for
ever; every server is capped, however it is built."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest

from kinference.config import parse_policy
from kinference.gateway import refusals
from kinference.gateway.capacity import ConnectionCap
from kinference.gateway.server import GatewayServer
from kinference.gateway.settings import GatewaySettings
from loadtest.sim_engine import SimEngine
from tests.api.helpers import wait_until
from tests.conftest import MODEL, PickerFactory
from tests.gateway.conftest import POOL_ENGINE, GatewayFactory, free_port, policy_text

CAP = 4
CLIENTS = 100  # at once, far past the cap
BIG_EVERY = 10  # every tenth client sends a large body
WAIT_S = 20.0  # the longest a client waits for its whole answer (then: a hang)
HANG = -1  # no whole answer in WAIT_S
RESET = 0  # closed without an answer, or reset


def chat(content_bytes: int = 0) -> bytes:
    body = json.dumps(
        {
            "model": MODEL,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi " + "x" * content_bytes}],
        }
    ).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json"
        b"\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )


HEALTH = b"GET /health HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n\r\n"


async def answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes | None
) -> tuple[int, dict[str, str], bytes]:
    """Send `request` (None: nothing), read the answer to the end: status, headers, body."""
    try:
        async with asyncio.timeout(WAIT_S):
            if request is not None:
                writer.write(request)
                await writer.drain()
            data = await reader.read()
    except TimeoutError:
        return HANG, {}, b""
    except ConnectionError:
        return RESET, {}, b""
    finally:
        writer.close()
    if not data:
        return RESET, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), headers, body


async def ask(port: int, request: bytes | None = HEALTH) -> int:
    return (await answer(*await asyncio.open_connection("127.0.0.1", port), request))[0]


@pytest.fixture
async def engine() -> AsyncIterator[SimEngine]:
    engine = SimEngine(POOL_ENGINE)
    await engine.start(host="127.0.0.1", port=0)
    yield engine
    await engine.stop()


@pytest.fixture
async def gateway(
    engine: SimEngine, start_picker: PickerFactory, start_gateway: GatewayFactory
) -> Callable[..., AsyncIterator[GatewayServer]]:
    async def start(**overrides: object) -> GatewayServer:
        dead = f"127.0.0.1:{free_port()}"
        policy = policy_text([f"127.0.0.1:{engine.port}"], dead, dead)
        picker = await start_picker(parse_policy(policy))
        overrides.setdefault("max_client_connections", CAP)
        return await start_gateway(picker.target, **overrides)

    return start  # type: ignore[return-value]


def refused(server: GatewayServer) -> dict[str, float]:
    """`kinference_gateway_connections_refused_total` by its `reason` label."""
    registry = server.server.config.app.registry
    return {
        sample.labels["reason"]: sample.value
        for metric in registry.collect()
        if metric.name == "kinference_gateway_connections_refused"
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


async def burst(
    port: int, clients: int, *, in_step: bool
) -> list[tuple[int, dict[str, str], bytes]]:
    """`clients` at once, each on its own connection; `in_step`: all connected before any
    sends (so exactly the cap's worth are served)."""
    connected = asyncio.Event()
    opened = 0

    async def one(i: int) -> tuple[int, dict[str, str], bytes]:
        nonlocal opened
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        opened += 1
        if opened == clients:
            connected.set()
        if in_step:
            await connected.wait()
        return await answer(reader, writer, chat(256 * 1024 if i % BIG_EVERY == 0 else 0))

    return await asyncio.gather(*(one(i) for i in range(clients)))


def check_refusal(headers: dict[str, str], body: bytes) -> None:
    assert headers["retry-after"] == "1" and headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == "too_many_connections" and error["type"], error


@pytest.mark.parametrize("in_step", [True, False], ids=["in-step", "as-they-come"])
async def test_a_burst_far_past_the_cap_is_served_or_refused_with_a_503(
    gateway: Callable[..., AsyncIterator[GatewayServer]], in_step: bool
) -> None:
    """Before: with the cap's worth of refusals lingering, the rest (here 92 of 96 in step)
    were closed without an answer (a reset, or an empty read)."""
    server: GatewayServer = await gateway()  # type: ignore[misc]
    answers = await burst(server.port, CLIENTS, in_step=in_step)
    statuses = Counter(status for status, _, _ in answers)
    assert set(statuses) <= {200, 503}, statuses  # no reset, no hang
    assert statuses[200] + statuses[503] == CLIENTS and statuses[200] >= 1
    if in_step:
        assert statuses == {200: CAP, 503: CLIENTS - CAP}
    for status, headers, body in answers:
        if status == 503:
            check_refusal(headers, body)
        else:
            assert json.loads(body)["usage"]["completion_tokens"] == 4
    assert refused(server) == {"max_client_connections": statuses[503]}  # one bounded label
    await wait_until(lambda: server.cap.open == 0 and server.refusals.lingering == 0, WAIT_S)
    assert [await ask(server.port, chat()) for _ in range(CAP)] == [200] * CAP


async def test_a_refusal_found_as_the_connection_is_made_is_answered_alike(
    gateway: Callable[..., AsyncIterator[GatewayServer]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap seen free as a connection is accepted, full as it is made (a burst accepted
    in one loop turn): its serving protocol hands the connection to a refusal."""
    monkeypatch.setattr(ConnectionCap, "full", property(lambda _cap: False))
    server: GatewayServer = await gateway()  # type: ignore[misc]
    answers = await burst(server.port, 3 * CAP, in_step=True)
    assert Counter(status for status, _, _ in answers) == {200: CAP, 503: 2 * CAP}
    for status, headers, body in answers:
        if status == 503:
            check_refusal(headers, body)


async def test_past_the_descriptor_bound_a_refusal_is_still_answered(
    gateway: Callable[..., AsyncIterator[GatewayServer]],
) -> None:
    """No room to linger: answered and closed at once (before: closed without an answer)."""
    server: GatewayServer = await gateway()  # type: ignore[misc]
    server.cap.linger_max = 0
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(CAP)]
    await wait_until(lambda: server.cap.open == CAP, WAIT_S)
    assert [await ask(server.port, None) for _ in range(CAP)] == [503] * CAP
    assert server.refusals.lingering == 0
    for _reader, writer in idle:
        writer.close()


async def test_a_refused_client_that_never_closes_is_let_go(
    gateway: Callable[..., AsyncIterator[GatewayServer]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(refusals, "LINGER_S", 0.2)
    server: GatewayServer = await gateway(max_client_connections=1)  # type: ignore[misc]
    _idle = await asyncio.open_connection("127.0.0.1", server.port)
    await wait_until(lambda: server.cap.open == 1, WAIT_S)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert (await reader.read()).startswith(b"HTTP/1.1 503 ")  # then its end: not closed here
    await wait_until(lambda: server.refusals.lingering == 0, WAIT_S)
    writer.close()
    _idle[1].close()


async def test_clients_resetting_as_they_connect_are_refused_quietly(
    gateway: Callable[..., AsyncIterator[GatewayServer]], caplog: pytest.LogCaptureFixture
) -> None:
    server: GatewayServer = await gateway(max_client_connections=1)  # type: ignore[misc]
    _idle = await asyncio.open_connection("127.0.0.1", server.port)
    await wait_until(lambda: server.cap.open == 1, WAIT_S)
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, at once
    await wait_until(lambda: refused(server) == {"max_client_connections": 20}, WAIT_S)
    assert await ask(server.port) == 503
    await wait_until(lambda: server.refusals.lingering == 0, WAIT_S)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    _idle[1].close()


async def test_slow_clients_do_not_hold_the_cap_past_the_client_timeout(
    gateway: Callable[..., AsyncIterator[GatewayServer]],
) -> None:
    """A head sent half-way and a connection that says nothing hold the cap's 2 places;
    meanwhile others get 503; at the client timeout both are let go and the gateway serves."""
    server: GatewayServer = await gateway(max_client_connections=2, client_timeout_s=0.5)  # type: ignore[misc]
    half = await asyncio.open_connection("127.0.0.1", server.port)
    half[1].write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n")
    silent = await asyncio.open_connection("127.0.0.1", server.port)
    await wait_until(lambda: server.cap.open == 2, WAIT_S)
    assert await ask(server.port) == 503
    assert (await answer(*half, None))[0] == 408
    assert (await answer(*silent, None))[0] == RESET  # closed without a word, as it came
    await wait_until(lambda: server.cap.open == 0, WAIT_S)
    assert await ask(server.port, chat()) == 200


def test_every_server_is_capped_however_it_is_built() -> None:
    """Before: a GatewayServer built without `cap=` served any number of connections (and
    without `client_timeout_s=`, waited for a head for ever)."""

    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("not served")

    server = GatewayServer(app, "127.0.0.1:0")
    try:
        assert server.cap.limit == GatewaySettings.model_fields["max_client_connections"].default
        assert server.cap.linger_max >= server.cap.limit
    finally:
        server._sock.close()
