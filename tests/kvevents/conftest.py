"""Fixtures of the KV-event tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import zmq
import zmq.asyncio


@pytest.fixture
async def router() -> AsyncIterator[tuple[zmq.asyncio.Socket, str]]:
    """An engine's replay ROUTER (answered by the test) and its address."""
    context = zmq.asyncio.Context()
    socket = context.socket(zmq.ROUTER)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    yield socket, f"tcp://127.0.0.1:{port}"
    context.destroy(linger=0)
