"""One feed's live SUB socket, and whether ZMQ still holds its connection.

Every frame is capped (`MAXMSGSIZE`, the largest payload decoded plus framing): a broken or
hostile engine's 1 GiB frame is refused as it comes in, not queued and decoded. But libzmq
(4.3.5) takes a frame over the cap for a protocol error: it ends the session and does not
reconnect, so the socket would hear nothing again, its worker still precise. When the
peer merely goes away (the engine restarted, the network dropped) ZMQ reconnects by
itself, and says so as it says the connection ended: `EVENT_DISCONNECTED` then, at once,
`EVENT_CONNECT_RETRIED` (measured: the same millisecond). A monitor socket watches for
that: a disconnect with no retry within `RETRY_GRACE_S` was the end, and the feed reopens
its socket after a `Backoff` (`kvevents.subscriber`), its worker not precise meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import cast

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from kinference.kvevents.feed import Feed
from kinference.kvevents.wire import FRAMING_BYTES, MAX_PAYLOAD_BYTES, MalformedBatch, decode_seq

log = logging.getLogger(__name__)

RECEIVE_HWM = 100_000  # batches queued in the socket before ZMQ drops (a gap we detect)
# ... which bounds messages, not bytes: waiting ones are taken off the socket as the feed
# goes (`drain`), at most DRAINED_AT_ONCE a turn, and kept up to this many bytes (the rest
# dropped unread: a gap). A flood of 5 MiB batches held 2.2 GB in ZMQ's queue after 6 s.
MAX_QUEUED_BYTES = 64 * 1024 * 1024
DRAINED_AT_ONCE = 64
MAX_FRAME_BYTES = MAX_PAYLOAD_BYTES + FRAMING_BYTES
RETRY_GRACE_S = 0.5  # after a disconnect, for ZMQ's reconnect to be announced
REOPEN_FIRST_S = 0.1  # the first wait before reopening; doubled while drops come quickly
REOPEN_MAX_S = 10.0  # and at most this; a socket open this long starts again from the first
_WATCHED = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED


class Link:
    """A feed's SUB socket, connected, and the task watching it (`lost`: done once ZMQ
    ended the connection without reconnecting). Made on the loop; `close` when done."""

    def __init__(self, context: zmq.asyncio.Context, feed: Feed) -> None:
        socket, monitor = context.socket(zmq.SUB), None
        try:
            socket.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
            socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.IPV6, 1)  # `[fd00::5]:8000`'s events (IPv4 still reached)
            socket.setsockopt(zmq.SUBSCRIBE, feed.topic)
            monitor = socket.get_monitor_socket(_WATCHED)
            socket.connect(feed.address)
        except BaseException:
            if monitor is not None:
                socket.disable_monitor()
                monitor.close(linger=0)
            socket.close(linger=0)
            raise
        self.socket, self._monitor = socket, monitor
        self._endpoint = feed.endpoint
        self._receiving: asyncio.Future[list[bytes]] | None = None
        self.queued: deque[list[zmq.Frame]] = deque()  # taken off the socket, not applied
        self.queued_bytes = 0
        self._overflowing = False  # dropped since the queue was last empty (logged once)
        self.lost = asyncio.get_running_loop().create_task(_watch(monitor, feed))
        self.lost.add_done_callback(self._interrupt)

    async def take(self, wait: bool) -> list[bytes] | None:
        """The next message: the oldest one `drain` took off the socket, else `receive`'s."""
        if not self.queued:
            return await self.receive(wait)
        frames = self.queued.popleft()
        self.queued_bytes -= _size(frames)
        return [frame.bytes for frame in frames]  # copied now, as `receive` copies

    def drain(self) -> list[int | None]:
        """Messages waiting in the socket taken off it (at most `DRAINED_AT_ONCE`), kept
        while their bytes stay within `MAX_QUEUED_BYTES`; the sequence numbers of those
        dropped unread (None: a message without one, malformed)."""
        dropped: list[int | None] = []
        for _ in range(DRAINED_AT_ONCE):
            if self.lost.done() or not cast(int, self.socket.get(zmq.EVENTS)) & zmq.POLLIN:
                break
            try:  # not copied (a dropped one never is); done at once (NOBLOCK)
                received = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
                parts = cast("asyncio.Future[list[zmq.Frame]]", received).result()
            except zmq.Again:
                break
            size = _size(parts)
            if self.queued_bytes + size > MAX_QUEUED_BYTES:
                dropped.append(_seq(parts))
                continue
            self.queued.append(parts)
            self.queued_bytes += size
        if dropped and not self._overflowing:
            log.warning(
                "kv events from %s: over %d bytes wait to be applied; dropping what comes",
                self._endpoint,
                MAX_QUEUED_BYTES,
            )
        self._overflowing = (self._overflowing or bool(dropped)) and bool(self.queued)
        return dropped

    async def receive(self, wait: bool) -> list[bytes] | None:
        """The next message, None once the connection is lost for good. `wait` False: one
        is known to be queued, taken without a wait registered (NOBLOCK: ~10 µs instead of
        ~25-50 µs a message, as a long prompt's steps come)."""
        flags = 0 if wait else zmq.NOBLOCK
        received = cast("asyncio.Future[list[bytes]]", self.socket.recv_multipart(flags))
        if received.done():
            return received.result()
        if self.lost.done():
            received.cancel()
            return None
        self._receiving = received  # cancelled by `_interrupt` if the connection is lost
        try:
            return await received
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.lost.done() and (task is None or not task.cancelling()):
                return None
            raise  # the feed is stopped
        finally:
            self._receiving = None

    def _interrupt(self, _: object) -> None:
        if self._receiving is not None:
            self._receiving.cancel()

    def caught_up(self) -> bool:
        """No message waits (behind the one just taken), taken off the socket or in it."""
        return not self.queued and not cast(int, self.socket.get(zmq.EVENTS)) & zmq.POLLIN

    def close(self) -> None:
        self.lost.cancel()
        self.socket.disable_monitor()
        self._monitor.close(linger=0)
        self.socket.close(linger=0)


def opened(context: zmq.asyncio.Context, feed: Feed) -> Link | zmq.ZMQError:
    """A feed's link, or ZMQ's refusal to make or connect its socket (out of file
    descriptors, an ipc path over the kernel's limit)."""
    try:
        return Link(context, feed)
    except zmq.ZMQError as exc:
        return exc


def _size(frames: list[zmq.Frame]) -> int:
    return sum(len(frame) for frame in frames)


def _seq(frames: list[zmq.Frame]) -> int | None:
    """A message's sequence number (its second frame), None when it has none (a message
    the subscriber would take for malformed: a negative one too)."""
    try:
        seq = decode_seq(frames[1].bytes) if len(frames) == 3 else -1
    except MalformedBatch:
        return None
    return seq if seq >= 0 else None


async def _watch(monitor: zmq.asyncio.Socket, feed: Feed) -> None:
    """Returns once a disconnect is not followed by ZMQ's reconnect; counts those that are
    (`feed.reconnects`)."""
    while True:
        if await _event(monitor) != zmq.EVENT_DISCONNECTED:
            continue
        try:
            async with asyncio.timeout(RETRY_GRACE_S):
                while await _event(monitor) != zmq.EVENT_CONNECT_RETRIED:
                    pass
        except TimeoutError:
            return
        feed.reconnects += 1


async def _event(monitor: zmq.asyncio.Socket) -> int:
    return int(parse_monitor_message(await monitor.recv_multipart())["event"])


class Backoff:
    """The wait before reopening a socket ZMQ gave up on: `REOPEN_FIRST_S`, doubled at each
    drop of a socket open less than `REOPEN_MAX_S`, at most that (an engine that sends an
    oversized frame on every connection costs a reopen, and a log line, every 10 s)."""

    def __init__(self, endpoint: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._endpoint = endpoint
        self._clock = clock
        self._opened = clock()
        self._delay = 0.0

    def delay(self) -> float:
        """The wait before the next open (the socket opened last was just dropped)."""
        now = self._clock()
        quick = now - self._opened < REOPEN_MAX_S and self._delay > 0
        self._delay = min(REOPEN_MAX_S, 2 * self._delay) if quick else REOPEN_FIRST_S
        self._opened = now + self._delay
        return self._delay

    async def wait(self, refused: zmq.ZMQError | None = None) -> None:
        """`refused`: ZMQ would not open the socket (else the connection ended)."""
        delay = self.delay()
        if refused is not None:
            why = f"socket not opened ({refused})"
        else:
            why = (
                f"connection ended, not resumed (a frame over {MAX_FRAME_BYTES} bytes, "
                "or a protocol error)"
            )
        log.warning("kv events from %s: %s; reopening in %.1f s", self._endpoint, why, delay)
        await asyncio.sleep(delay)
