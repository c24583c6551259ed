"""A live batch with none behind it, from a worker where a request routed by this replica
awaits its first token, is held until that token is reported or `FIRST_TOKEN_WAIT_S` passed
(`kvevents.feed`); a backlog is not held, the batches stay in order, none is lost, and a
sequence gap is seen as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import zmq

from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.queue import EngineQueue, Queued
from kinference.kvevents import feed as feeds
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import Distrust, WorkerTrust
from tests.api.helpers import wait_until
from tests.kvevents import vllm_format as vllm
from tests.kvevents.test_subscriber_steps import QueuedContext, QueuedSocket

REQUEST = 7  # the key of the request awaiting its first token


class LiveSocket(QueuedSocket):
    """Messages queued now, and pushed later to a receive that waits for one."""

    def __init__(self) -> None:
        super().__init__([])
        self.waiting: asyncio.Future[list[bytes]] | None = None

    def recv_multipart(self, flags: int = 0, copy: bool = True) -> asyncio.Future[list[bytes]]:
        if self.messages or flags & zmq.NOBLOCK:
            return super().recv_multipart(flags, copy)
        self.waiting = asyncio.get_running_loop().create_future()
        return self.waiting

    def push(self, *messages: list[bytes]) -> None:
        self.messages.extend(messages)
        if self.waiting is not None and not self.waiting.done() and self.messages:
            self.waiting.set_result(self.messages.popleft())
            self.waiting = None


class Engine:
    """One worker's feed over a `LiveSocket`, a request routed there awaiting its token."""

    def __init__(self) -> None:
        self.socket = LiveSocket()
        self.outcomes: list[str] = []
        self.subscriber = EventSubscriber(lambda: 0.0, lambda pool, o: self.outcomes.append(o))
        self.subscriber._context.destroy(linger=0)
        self.subscriber._context = QueuedContext(self.socket)  # type: ignore[assignment]
        self.pool = PoolCaches("p", 4)
        self.pool.trust[0] = WorkerTrust(5.0, 10.0)
        self.pool.queues[0] = EngineQueue()
        self.pool.queues[0].add(REQUEST, Queued((), 0, 0, 0.0))
        self.feed = Feed(self.pool, 0, "e0", "tcp://unused", None, b"", self.pool.trust[0])
        self.subscriber.add(self.feed)

    def send(self, *batches: tuple[int, bytes]) -> None:
        self.socket.push(*[[b"", vllm.seq_bytes(seq), payload] for seq, payload in batches])


def _stored(block: int) -> bytes:
    return vllm.encode([vllm.stored([block], [block, 0, 0, 0], block_size=4)])


def _removed(block: int) -> bytes:
    return vllm.encode([vllm.BlockRemoved([block], "GPU")])


@pytest.fixture
async def engine(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Engine]:
    monkeypatch.setattr(feeds, "FIRST_TOKEN_WAIT_S", 30.0)  # unless a test bounds it
    running = Engine()
    yield running
    await running.subscriber.aclose()


async def test_a_batch_waits_for_the_first_token_its_worker_owes(engine: Engine) -> None:
    engine.send((0, _stored(1)))
    await asyncio.sleep(0.2)
    assert engine.feed.batches == 0  # held (applied at once before)
    engine.pool.started(0, REQUEST)  # the caller read the token
    await wait_until(lambda: engine.feed.batches == 1, 2.0, "the batch applied after it")
    assert engine.pool.index.blocks(0) == 1 and engine.outcomes == ["applied"]


async def test_a_request_that_leaves_without_a_token_ends_the_wait(engine: Engine) -> None:
    engine.send((0, _stored(1)))
    await asyncio.sleep(0.1)
    engine.pool.finished(0, REQUEST)  # aborted before its first token
    await wait_until(lambda: engine.feed.batches == 1, 2.0, "the batch applied")


async def test_the_wait_is_bounded(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feeds, "FIRST_TOKEN_WAIT_S", 0.05)
    loop = asyncio.get_running_loop()
    start = loop.time()
    engine.send((0, _stored(1)))
    await wait_until(lambda: engine.feed.batches == 1, 2.0, "the batch applied, no token")
    assert loop.time() - start >= 0.045
    assert engine.feed.trust.trusted(0.0)


async def test_no_wait_when_no_request_awaits_a_token(engine: Engine) -> None:
    engine.pool.started(0, REQUEST)  # running: its token came
    engine.send((0, _stored(1)))
    await wait_until(lambda: engine.feed.batches == 1, 2.0, "the batch applied at once")


async def test_a_backlog_does_not_wait_and_stays_in_order(engine: Engine) -> None:
    engine.send((0, _stored(1)), (1, _removed(1)), (2, _stored(2)), (3, _removed(2)))
    await wait_until(lambda: engine.feed.batches == 3, 2.0, "all but the last, unheld")
    assert engine.pool.index.blocks(0) == 1  # block 2 stored; its removal is the last
    await asyncio.sleep(0.1)
    assert engine.feed.batches == 3  # the last had none behind it: held
    engine.pool.started(0, REQUEST)
    await wait_until(lambda: engine.feed.batches == 4, 2.0, "the last applied")
    assert engine.pool.index.blocks(0) == 0  # in order: both stores removed
    assert engine.outcomes == ["applied"] * 4 and engine.feed.trust.trusted(0.0)


async def test_a_gap_behind_a_waiting_batch_is_seen(engine: Engine) -> None:
    engine.send((0, _stored(1)))
    await asyncio.sleep(0.1)
    engine.send((2, _stored(2)))  # 1 lost, sent while 0 is held
    await asyncio.sleep(0.1)
    assert engine.feed.batches == 0
    engine.pool.started(0, REQUEST)
    await wait_until(lambda: engine.feed.trust.distrust is Distrust.GAP, 2.0, "the gap")
    assert engine.feed.batches >= 1 and "gap" in engine.outcomes
    assert not engine.feed.trust.trusted(0.0)
