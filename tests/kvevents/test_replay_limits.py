"""What one replay may cost (`kinference.kvevents.replay.ReplayLimits`), against a real
replay ROUTER that misbehaves: an answer that never ends, answers not asked for, too many
bytes, a frame over the limit, silence, garbage; a gap replay stops at the first answer
past the batches it asked for (the rest is not buffered any more)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import zmq
import zmq.asyncio

from kinference.kvevents.replay import Outcome, ReplayLimits, fetch
from tests.kvevents import vllm_format as vllm

Answer = Callable[[zmq.asyncio.Socket, bytes], Awaitable[None]]


def _batch(n: int, tokens: int = 4) -> bytes:
    blocks = tokens // 4
    return vllm.encode([vllm.stored(list(range(n * 1000, n * 1000 + blocks)), [n] * tokens)])


def _limits(**changes: float) -> ReplayLimits:
    return dataclasses.replace(ReplayLimits.of(), **changes)


@contextlib.asynccontextmanager
async def _replay_socket(answer: Answer | None) -> AsyncIterator[tuple[zmq.asyncio.Context, str]]:
    """A ROUTER on a free port whose every request `answer(router, client)` serves (None:
    it never answers); yields a context for the DEALER and the address."""
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    async def serve() -> None:
        while True:
            client, *_ = await router.recv_multipart()
            if answer is not None:
                await answer(router, client)

    serving = asyncio.get_running_loop().create_task(serve())
    try:
        yield context, f"tcp://127.0.0.1:{port}"
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        context.destroy(linger=0)


async def _fetch(
    answer: Answer | None, limits: ReplayLimits, start: int = 0, until: int | None = None
) -> tuple[Outcome, dict[int, bytes]]:
    got: dict[int, bytes] = {}
    async with _replay_socket(answer) as (context, address):
        outcome = await fetch(context, address, start, until, got=got, limits=limits)
        assert not [s for s in context._sockets if not s.closed and s.type == zmq.DEALER]
    return outcome, got


async def _send(router: zmq.asyncio.Socket, client: bytes, seq: int, payload: bytes) -> None:
    await router.send_multipart([client, b"", vllm.seq_bytes(seq), payload])
    await asyncio.sleep(0)  # a send that does not block does not yield: endless ones would


async def test_an_answer_that_never_ends_stops_at_the_batch_limit() -> None:
    async def endless(router: zmq.asyncio.Socket, client: bytes) -> None:
        seq = 0
        while True:
            await _send(router, client, seq, _batch(seq))
            seq += 1

    outcome, got = await _fetch(endless, _limits(max_batches=50, deadline_s=60.0))
    assert outcome is Outcome.LIMIT and sorted(got) == list(range(50))


async def test_answers_not_asked_for_count_toward_the_limit() -> None:
    """Batch 0 again and again, while 5.. was asked for: ended by the limit, not the
    deadline (the test would time out at 60 s)."""

    async def repeating(router: zmq.asyncio.Socket, client: bytes) -> None:
        while True:
            await _send(router, client, 0, _batch(0))

    outcome, got = await _fetch(repeating, _limits(max_batches=1000, deadline_s=60.0), start=5)
    assert outcome is Outcome.LIMIT and got == {}


async def test_bytes_received_are_bounded() -> None:
    payload = _batch(1, tokens=4096)  # ~4 KB of token ids

    async def large(router: zmq.asyncio.Socket, client: bytes) -> None:
        for seq in range(40):
            await _send(router, client, seq, payload)
        await _send(router, client, -1, b"")

    outcome, got = await _fetch(large, _limits(max_bytes=16 * len(payload)))
    assert outcome is Outcome.LIMIT and len(got) < 16


async def test_a_frame_over_the_limit_never_reaches_the_replica() -> None:
    """ZMQ drops the peer on a frame larger than the replay may take, before holding it
    whole: the end marker after it never comes."""

    async def huge(router: zmq.asyncio.Socket, client: bytes) -> None:
        await _send(router, client, 0, b"\x00" * (2 << 20))
        await _send(router, client, -1, b"")

    outcome, got = await _fetch(huge, _limits(max_bytes=1 << 20, timeout_s=0.5))
    assert outcome is Outcome.TIMEOUT and got == {}


@pytest.mark.parametrize("listening", [True, False], ids=["silent", "nobody-there"])
async def test_a_socket_that_never_answers_times_out(listening: bool) -> None:
    limits = _limits(timeout_s=0.2)
    if listening:
        outcome, _ = await _fetch(None, limits)
    else:
        context = zmq.asyncio.Context()
        try:
            outcome = await fetch(context, "tcp://127.0.0.1:9", 0, None, got={}, limits=limits)
        finally:
            context.destroy(linger=0)
    assert outcome is Outcome.TIMEOUT


@pytest.mark.parametrize(
    "frames",
    [[b"", b"\x00\x01", _batch(0)], [b"x", b"y"]],
    ids=["short-seq", "two-frames"],
)
async def test_garbage_is_malformed(frames: list[bytes]) -> None:
    async def garbage(router: zmq.asyncio.Socket, client: bytes) -> None:
        await router.send_multipart([client, *frames])

    outcome, _ = await _fetch(garbage, _limits())
    assert outcome is Outcome.MALFORMED


async def test_a_gap_replay_stops_at_the_first_answer_past_it() -> None:
    """[3, 5) asked for, the buffer starts at 7 (trimmed): nothing more is read (vLLM
    would send its whole buffer, and the replica used to read it to the end)."""

    async def trimmed(router: zmq.asyncio.Socket, client: bytes) -> None:
        seq = 7
        while True:
            await _send(router, client, seq, _batch(seq))
            seq += 1

    outcome, got = await _fetch(trimmed, _limits(deadline_s=60.0), start=3, until=5)
    assert outcome is Outcome.PAST and got == {}


class _NoSockets(zmq.asyncio.Context):
    """A context out of file descriptors: every socket refused."""

    def socket(self, *args: object, **kwargs: object) -> zmq.asyncio.Socket:  # type: ignore[override]
        raise zmq.ZMQError(errno.EMFILE)


async def test_a_replay_socket_zmq_will_not_make_is_a_failed_replay() -> None:
    """Not an exception out of the replay's task: that left its feed replaying for ever
    (every live batch held, then dropped; the worker never precise again)."""
    context = _NoSockets()
    try:
        got: dict[int, bytes] = {}
        outcome = await fetch(context, "tcp://127.0.0.1:9", 0, None, got=got, limits=_limits())
        assert outcome is Outcome.FAILED and got == {}
    finally:
        context.destroy(linger=0)
