"""A backlog of batches is applied one per event-loop step, so that Picks waiting for the
loop run between them (a socket whose messages are already queued is read without
waiting)."""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Any

import zmq

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.steps import Steps
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust
from tests.kvevents import vllm_format as vllm


class QueuedSocket:
    """A plain SUB socket whose messages are all queued: ZMQ says one waits while any
    does, and `recv_multipart` takes it at once; its descriptor never signals."""

    def __init__(self, messages: list[list[bytes]]) -> None:
        self.messages = deque(messages)
        self.flags: list[int] = []  # each receive's
        self.closed = False
        self._pipe = os.pipe()  # a descriptor nothing is written to

    def setsockopt(self, *args: Any) -> None: ...

    def connect(self, address: str) -> None: ...

    def close(self, linger: int = 0) -> None:
        self.closed = True
        for fd in self._pipe:
            os.close(fd)

    def get_monitor_socket(self, events: int) -> SilentMonitor:
        return SilentMonitor()

    def disable_monitor(self) -> None: ...

    def get(self, option: int) -> int:
        if option == zmq.FD:
            return self._pipe[0]
        return zmq.POLLIN if self.messages else 0

    def recv_multipart(self, flags: int = 0, copy: bool = True) -> list[Any]:
        self.flags.append(flags)
        if not self.messages:
            raise zmq.Again()
        message = self.messages.popleft()
        return message if copy else [zmq.Frame(part) for part in message]


class SilentMonitor:
    """A monitor socket that says nothing (its receive waits until cancelled)."""

    def recv_multipart(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def close(self, linger: int = 0) -> None: ...


class QueuedContext:
    def __init__(self, socket: QueuedSocket) -> None:
        self._socket = socket

    def socket(self, kind: int, socket_class: object = None) -> QueuedSocket:
        return self._socket

    def destroy(self, linger: int = 0) -> None: ...


class Recording(EventSubscriber):
    def __init__(self, ticks: list[int], expected: int) -> None:
        super().__init__(lambda: 0.0)
        self.ticks = ticks
        self.seen: list[int] = []  # the loop steps counted at each batch
        self.expected, self.all_seen = expected, asyncio.Event()

    def steps(self, feed: Feed, parts: list[bytes], caught_up: bool) -> Steps[None]:
        self.seen.append(self.ticks[0])
        yield from super().steps(feed, parts, caught_up)
        if len(self.seen) == self.expected:
            self.all_seen.set()


async def test_a_backlog_is_applied_one_batch_per_loop_step() -> None:
    batches = [
        vllm.encode([vllm.stored([10 * n + 1], list(range(4 * n, 4 * n + 4)), block_size=4)])
        for n in range(6)
    ]
    socket = QueuedSocket([[b"", vllm.seq_bytes(n), batch] for n, batch in enumerate(batches)])
    ticks = [0]
    subscriber = Recording(ticks, len(batches))
    subscriber._context.destroy(linger=0)
    subscriber._context = QueuedContext(socket)  # type: ignore[assignment]

    async def ticker() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    counting = asyncio.get_running_loop().create_task(ticker())
    pool = PoolCaches("p", 4)
    pool.trust[0] = WorkerTrust(5.0, 10.0)
    feed = Feed(pool, 0, "e0", "tcp://unused", None, b"", pool.trust[0])
    subscriber.add(feed)
    await asyncio.wait_for(subscriber.all_seen.wait(), timeout=30)
    counting.cancel()
    await subscriber.aclose()
    assert feed.batches == len(batches) and pool.index.blocks(0) == len(batches)
    assert all(b > a for a, b in zip(subscriber.seen, subscriber.seen[1:], strict=False))
    # Each taken without a wait (ZMQ said one waited), the others queued behind the first
    # taken off the socket at once (`Link.drain`); none asked for once ZMQ said none waits.
    assert socket.flags == [zmq.NOBLOCK] * len(batches)
