"""The most client connections the gateway serves at once (kinference.gateway.capacity): a
crowd past the cap is refused cheaply (503, Retry-After, counted, one log line), and once
it is gone the gateway serves as before."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from kinference.config import parse_policy
from kinference.gateway import capacity
from kinference.gateway.capacity import LOG_EVERY_S, ConnectionCap
from kinference.gateway.server import GatewayServer
from tests.api.helpers import wait_until
from tests.conftest import PickerFactory
from tests.gateway.conftest import GatewayFactory, free_port, policy_text

CAP = 12  # the gateway's most client connections here
WAVES = 4  # waves of CAP connections past it, one after another
BURST = 5 * CAP  # connections past it, all at once
WAIT_S = 10.0  # the longest a test waits for the gateway to act
HEALTH = b"GET /health HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n\r\n"


async def _gateway(start_picker: PickerFactory, start_gateway: GatewayFactory) -> GatewayServer:
    dead = f"127.0.0.1:{free_port()}"
    picker = await start_picker(parse_policy(policy_text([dead], dead, dead)))
    # The client timeout is long: the idle connections below stay until the test lets go.
    return await start_gateway(picker.target, client_timeout_s=60, max_client_connections=CAP)


async def _ask(port: int, request: bytes = HEALTH) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the answer on a fresh connection, read to its end (status
    0: closed without an answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        async with asyncio.timeout(WAIT_S):
            data = await reader.read()
    except ConnectionError:
        data = b""
    finally:
        writer.close()
    if not data:
        return 0, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), headers, body


def _refused(server: GatewayServer) -> float:
    registry = server.server.config.app.registry
    value = registry.get_sample_value(
        "kinference_gateway_connections_refused_total", {"reason": "max_client_connections"}
    )
    return value or 0.0


async def test_a_crowd_past_the_cap_is_refused_then_the_gateway_serves_again(
    start_picker: PickerFactory, start_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: every connection was served, however many (idle ones held a descriptor each
    until the client timeout), and the over-cap ones here got 200."""
    caplog.set_level(logging.WARNING, logger="kinference.gateway.capacity")
    server = await _gateway(start_picker, start_gateway)
    cap = server.cap
    assert cap is not None
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(CAP)]
    await wait_until(lambda: cap.open == CAP, WAIT_S)
    began = time.monotonic()

    # Waves of as many as the cap at once: each one answered 503 and let go.
    for _ in range(WAVES):
        answers = await asyncio.gather(*(_ask(server.port) for _ in range(CAP)))
        for status, headers, body in answers:
            assert status == 503
            assert headers["retry-after"] == "1" and headers["connection"] == "close"
            assert json.loads(body)["error"]["code"] == "too_many_connections"
        await wait_until(lambda: server.refusals.lingering == 0, WAIT_S)
    # A burst past that, all at once: every one answered 503 too (before, as many as the cap
    # were, and the rest closed without an answer).
    answers = await asyncio.gather(*(_ask(server.port) for _ in range(BURST)))
    assert [status for status, _, _ in answers] == [503] * BURST
    refused = WAVES * CAP + BURST
    assert _refused(server) == refused
    lines = [r.getMessage() for r in caplog.records if r.name == "kinference.gateway.capacity"]
    assert 1 <= len(lines) <= 1 + (time.monotonic() - began) / LOG_EVERY_S, lines
    assert "at the cap (12" in lines[0]

    for _reader, writer in idle:
        writer.close()
    await wait_until(lambda: cap.open == 0 and server.refusals.lingering == 0, WAIT_S)
    # Served again, up to the cap at once.
    answers = await asyncio.gather(*(_ask(server.port) for _ in range(CAP)))
    assert [status for status, _, _ in answers] == [200] * CAP
    assert _refused(server) == refused


async def test_connections_served_and_closed_free_their_place(
    start_picker: PickerFactory, start_gateway: GatewayFactory
) -> None:
    """Many connections one after another, each under the cap: none refused."""
    server = await _gateway(start_picker, start_gateway)
    for _ in range(3 * CAP):
        status, _headers, _body = await _ask(server.port)
        assert status == 200
    assert _refused(server) == 0


def test_refusals_are_logged_once_per_period_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kinference.gateway.capacity")
    counted: list[int] = []
    cap = ConnectionCap(1, lambda: counted.append(1))
    assert cap.admit() and not cap.admit()
    for now, lingering in ((100.0, 0), (101.0, 1), (102.0, 1), (100.0 + LOG_EVERY_S, 0)):
        cap.refuse(now, lingering=lingering)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "1 refused" in lines[0] and "(0 closed at once, past 1 lingering)" in lines[0]
    assert "3 refused" in lines[1] and "(2 closed at once" in lines[1]
    assert len(counted) == 4


def test_past_the_lingering_bound_a_refusal_is_closed_at_once() -> None:
    cap = ConnectionCap(3, linger_max=5)
    assert all(cap.refuse(0.0, lingering=n) for n in range(5))
    assert not cap.refuse(0.0, lingering=5)
    assert ConnectionCap(3).linger_max == 3


def test_refused_connections_linger_in_the_descriptors_the_served_ones_leave() -> None:
    # 3 per served connection (its own, its upstream's, one lingering) and 1024 spare.
    assert capacity.linger_room(1000, 1000 * 3 + 1024) == 1000
    assert capacity.linger_room(64, 20_000) == 20_000 - 2 * 64 - 1024
    assert capacity.linger_room(1000, 1024) == 1000  # at least as many as served
    assert capacity.linger_room(10, capacity.resource.RLIM_INFINITY) >= 1 << 20


def test_the_open_files_limit_is_raised_towards_what_the_cap_wants(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(capacity.resource, "getrlimit", lambda _which: (1024, 8192))
    monkeypatch.setattr(
        capacity.resource, "setrlimit", lambda _which, limits: set_to.append(limits)
    )
    assert capacity.fit_open_files(1000) == 1000 * 3 + 1024
    assert set_to == [(1000 * 3 + 1024, 8192)] and not caplog.records
    caplog.set_level(logging.WARNING)
    assert capacity.fit_open_files(10_000) == 8192  # the hard limit: raised to it, and told
    assert "open files limited to 8192" in caplog.records[-1].getMessage()
