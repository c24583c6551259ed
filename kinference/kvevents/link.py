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
from typing import Any, cast

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
# Plain ints: pyzmq's enums cost a Python call each time one is combined or converted.
_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)


class Link:
    """A feed's SUB socket, connected, and the task watching it (`lost`: done once ZMQ
    ended the connection without reconnecting). Made on the loop; `close` when done.

    The socket is a plain one read without blocking, woken by the loop's reader on its
    file descriptor (`zmq.asyncio`'s futures asked ZMQ for its events ~6 times a batch, a
    system call each). ZMQ signals the descriptor when its events may have changed since
    they were last asked for; each answer is kept (`_ready`): a message is taken only when
    ZMQ said one waits, and after each the events are asked once, which says both whether
    another waits and, once none does, that the descriptor will signal the next."""

    def __init__(self, context: zmq.asyncio.Context, feed: Feed) -> None:
        # A plain socket (its monitor, made by the context, an asyncio one)
        made = context.socket(zmq.SUB, socket_class=cast(Any, zmq.Socket))
        socket: zmq.Socket[bytes] = cast("zmq.Socket[bytes]", made)
        monitor: zmq.asyncio.Socket | None = None
        try:
            socket.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
            socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.IPV6, 1)  # `[fd00::5]:8000`'s events (IPv4 still reached)
            socket.setsockopt(zmq.SUBSCRIBE, feed.topic)
            monitor = cast(zmq.asyncio.Socket, socket.get_monitor_socket(_WATCHED))
            socket.connect(feed.address)
        except BaseException:
            if monitor is not None:
                socket.disable_monitor()
                monitor.close(linger=0)
            socket.close(linger=0)
            raise
        self.socket, self._monitor = socket, monitor
        self._endpoint = feed.endpoint
        self._ready = False  # ZMQ said a message waits (as last asked)
        self._waiting: asyncio.Future[None] | None = None  # `take` waits for the reader
        self.queued: deque[list[zmq.Frame]] = deque()  # taken off the socket, not applied
        self.queued_bytes = 0
        self._overflowing = False  # dropped since the queue was last empty (logged once)
        self._loop = asyncio.get_running_loop()
        self._fd = cast(int, socket.get(zmq.FD))
        self._loop.add_reader(self._fd, self._signalled)
        self._ask()  # the descriptor signals changes only once the events were asked for
        self.lost = self._loop.create_task(_watch(monitor, feed))
        self.lost.add_done_callback(self._interrupt)

    async def take(self) -> list[bytes] | None:
        """The next message (the oldest one `drain` took off the socket, else the
        socket's, waited for), None once the connection is lost for good."""
        while True:
            if self.queued:
                frames = self.queued.popleft()
                self.queued_bytes -= _size(frames)
                return [frame.bytes for frame in frames]  # copied now
            if self.lost.done():
                return None
            if self._ready:  # a whole message waits (NOBLOCK: done at once)
                parts = self.socket.recv_multipart(_NOBLOCK)
                self._ask()
                return parts
            self._waiting = self._loop.create_future()
            try:
                await self._waiting
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not self.lost.done() or (task is not None and task.cancelling()):
                    raise  # the feed is stopped
            finally:
                self._waiting = None

    def drain(self) -> list[int | None]:
        """Messages waiting in the socket taken off it (at most `DRAINED_AT_ONCE`), kept
        while their bytes stay within `MAX_QUEUED_BYTES`; the sequence numbers of those
        dropped unread (None: a message without one, malformed)."""
        dropped: list[int | None] = []
        for _ in range(DRAINED_AT_ONCE):
            if self.lost.done() or not self._ready:
                break
            parts = self.socket.recv_multipart(_NOBLOCK, copy=False)  # a dropped one not copied
            self._ask()
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

    def _ask(self) -> None:
        """Whether a message waits, from ZMQ (which resets the descriptor's signal)."""
        self._ready = bool(cast(int, self.socket.get(_EVENTS)) & _POLLIN)

    def _signalled(self) -> None:
        """The descriptor signalled: ZMQ's events may have changed."""
        if self.socket.closed:
            return
        self._ask()
        if self._ready and self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(None)

    def _interrupt(self, _: object) -> None:
        if self._waiting is not None and not self._waiting.done():
            self._waiting.cancel()

    def caught_up(self) -> bool:
        """No message waits (behind the one just taken), taken off the socket or in it
        (as ZMQ last said: after the last message taken)."""
        return not self.queued and not self._ready

    def close(self) -> None:
        self.lost.cancel()
        self._loop.remove_reader(self._fd)
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
