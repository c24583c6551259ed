"""The upstream client under a crowd: many requests at once, `aclose` racing requests and
spares, many origins; sockets counted on the server's side."""

from __future__ import annotations

import asyncio

import pytest

from kinference.gateway import http1, http1_conn
from kinference.gateway.http1 import ConnectFailed, HttpClient
from tests.gateway.counting_upstream import Clock, Upstream, body

LENGTH0 = [("content-length", "0")]


def spare_client() -> HttpClient:
    return HttpClient(connect_timeout_s=2.0, read_timeout_s=10.0, keep_spare=True)


async def fetch(http: HttpClient, url: str) -> bytes:
    response = await http.request("POST", url, LENGTH0, body())
    try:
        return await response.read()
    finally:
        response.close()


def idle(http: HttpClient) -> int:
    return sum(len(conns) for conns in http._idle.values())


async def test_a_crowd_completes_and_leaves_a_bounded_pool_then_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 requests held until all arrived: 200 connections; afterwards at most 64 idle (+1
    spare), the server sees the rest closed, the sweep closes the others, aclose the spare."""
    monkeypatch.setattr(http1, "_IDLE_S", 0.3)
    crowd = 200
    async with Upstream() as upstream:
        upstream.gate.clear()
        http = spare_client()
        try:
            calls = [asyncio.ensure_future(fetch(http, upstream.url)) for _ in range(crowd)]
            await upstream.until(lambda: upstream.requests == crowd)
            upstream.gate.set()
            assert await asyncio.gather(*calls) == [b"ok"] * crowd
            assert upstream.accepted >= crowd
            assert idle(http) <= http1._MAX_IDLE_PER_ORIGIN + 1
            await upstream.until(lambda: upstream.open <= http1._MAX_IDLE_PER_ORIGIN + 1)
            await upstream.until(lambda: upstream.open == 0)  # the sweep
            assert not http._idle and not http._spares
        finally:
            await http.aclose()
        assert not http._spares and http._sweep is None


async def test_a_request_answered_after_aclose_is_not_pooled() -> None:
    async with Upstream() as upstream:
        upstream.gate.clear()
        http = spare_client()
        call = asyncio.ensure_future(fetch(http, upstream.url))
        await upstream.until(lambda: upstream.requests == 1)
        await http.aclose()
        upstream.gate.set()
        assert await call == b"ok"
        assert not http._idle and not http._spares and http._sweep is None
        await upstream.until(lambda: upstream.open == 0, timeout_s=2)  # it and the spare


async def test_a_request_connecting_during_aclose_opens_no_spare_after_it() -> None:
    async with Upstream() as upstream:
        http = spare_client()
        call = asyncio.ensure_future(fetch(http, upstream.url))
        await asyncio.sleep(0)  # the request is connecting
        await http.aclose()
        assert await call == b"ok"  # under way before aclose: it finishes
        assert not http._spares and not http._idle and http._sweep is None
        await upstream.until(lambda: upstream.open == 0, timeout_s=2)


async def test_a_request_after_aclose_fails_without_connecting() -> None:
    async with Upstream() as upstream:
        http = spare_client()
        await http.aclose()
        with pytest.raises(ConnectFailed, match="closed"):
            await fetch(http, upstream.url)
        assert upstream.accepted == 0 and not http._spares


async def test_aclose_while_spares_connect_leaves_no_socket_or_task() -> None:
    async with Upstream() as upstream:
        upstream.gate.clear()
        http = spare_client()
        calls = [asyncio.ensure_future(fetch(http, upstream.url)) for _ in range(20)]
        await upstream.until(lambda: upstream.requests == 20)
        assert http._spares or idle(http)  # a spare on its way or ready
        await http.aclose()
        upstream.gate.set()
        await asyncio.gather(*calls, return_exceptions=True)
        assert not http._spares and not http._idle and http._sweep is None
        await upstream.until(lambda: upstream.open == 0, timeout_s=2)


async def test_many_origins_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """Engines scaled away: per-origin state does not outlive the origin's connections."""
    monkeypatch.setattr(http1, "_IDLE_S", 0.1)
    http = spare_client()
    upstreams = [Upstream() for _ in range(30)]
    try:
        for upstream in upstreams:
            await upstream.__aenter__()
            assert await fetch(http, upstream.url) == b"ok"
        assert len(http._idle) >= 1
        for upstream in upstreams:
            await upstream.until(lambda u=upstream: u.open == 0)  # type: ignore[misc]
        assert not http._idle and not http._spares
    finally:
        await http.aclose()
        for upstream in upstreams:
            await upstream.__aexit__()


async def test_an_origin_asked_less_often_than_the_idle_limit_gets_no_spare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spare there would be closed unused before the next request: one connect a request,
    not two (before: 40 connections for 20 requests; a TLS handshake each for a provider)."""
    clock = Clock()
    monkeypatch.setattr(http1, "time", clock)
    monkeypatch.setattr(http1_conn, "time", clock)
    async with Upstream() as upstream:
        http = spare_client()
        try:
            for _ in range(20):
                assert await fetch(http, upstream.url) == b"ok"
                await asyncio.gather(*http._spares.values())
                clock.now += http1._IDLE_S + 1.0
            assert upstream.accepted == 20
        finally:
            await http.aclose()
        await upstream.until(lambda: upstream.open == 0)


async def test_a_busy_origin_has_a_spare_ready_for_the_climb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked within the idle limit: each request that leaves the pool empty opens a spare,
    so requests piling up find a connection ready; the record of when it was asked is
    swept with the idle pool."""
    monkeypatch.setattr(http1, "_IDLE_S", 0.3)
    async with Upstream() as upstream:
        http = spare_client()
        try:
            assert await fetch(http, upstream.url) == b"ok"
            upstream.gate.clear()
            calls = []
            for n in range(1, 6):
                calls.append(asyncio.ensure_future(fetch(http, upstream.url)))
                await upstream.until(lambda n=n: upstream.requests == 1 + n)  # type: ignore[misc]
                await asyncio.gather(*http._spares.values())
                assert upstream.accepted == 1 + n  # each in flight went out on a spare ...
                assert idle(http) == 1  # ... and left a new one ready
            upstream.gate.set()
            assert await asyncio.gather(*calls) == [b"ok"] * 5
            await upstream.until(lambda: upstream.open == 0)  # the sweep
            assert not http._idle and not http._asked and not http._spares
        finally:
            await http.aclose()
