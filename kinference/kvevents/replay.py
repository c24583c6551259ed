"""Asking an engine's replay socket for batches again (vLLM's protocol: a DEALER sends the
first seq wanted, 8 bytes big-endian; the ROUTER answers `(seq, payload)` for every batch it
still buffers from there, in order, then `seq = -1`). Each answer comes after empty
delimiter frames: one from vLLM's `ZmqEventPublisher`, two from Dynamo's mocker
(`--zmq-replay-ports`, which echoes the request's delimiter); any other leading frame is a
malformed answer.

What one replay may cost the replica is bounded (`ReplayLimits`, from the process settings):
answers and bytes received (whether kept or not: an endless or repeating answer ends at the
limit, not at the deadline), the silence between two answers, the whole replay's time, and
every frame's size (ZMQ drops a peer sending a larger one, before it is buffered whole).
Answers are kept as received, undecoded: bytes, what the byte limit counts (decoded, a
batch holds 2-4 times as much, in objects the cyclic collector walks), decoded where they
are applied, a bounded slice at a time (`kvevents.steps`). The loop takes a turn every
`ANSWERS_PER_TURN` answers: ZMQ hands over queued answers without it. A replay ends with
an `Outcome`: only `COMPLETE` means every batch asked for came (or the whole buffer).
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

import zmq
import zmq.asyncio

from kinference.kvevents.steps import WORK_PER_STEP
from kinference.kvevents.wire import (
    END_OF_REPLAY,
    FRAMING_BYTES,
    MAX_PAYLOAD_BYTES,
    MalformedBatch,
    decode_seq,
    encode_seq,
)
from kinference.settings import Settings

# A replay's work between two turns of the loop: a quarter of a live batch's (~0.3-1 ms).
# Its answers come queued, thousands at once, while Picks and the live feeds wait behind.
REPLAY_WORK_PER_STEP = WORK_PER_STEP // 4
ANSWERS_PER_TURN = 64  # answers received between two turns (~10 us each)


class Outcome(enum.Enum):
    """How a replay ended; the value is the code logged."""

    COMPLETE = "complete"  # the end marker, or every batch asked for
    PAST = "past"  # an answer beyond those asked for: the rest is not buffered any more
    LIMIT = "limit"  # the answers or bytes received reached the replay's limit
    TIMEOUT = "timeout"  # silent for `timeout_s`, or not done within `deadline_s`
    MALFORMED = "malformed"  # an answer that is not one
    FAILED = "failed"  # the socket failed


@dataclass(frozen=True)
class ReplayLimits:
    """What one replay may cost (`Settings.kv_replay_*`)."""

    max_batches: int
    max_bytes: int
    timeout_s: float
    deadline_s: float
    concurrency: int  # replays run at once by one subscriber

    @classmethod
    def of(cls, settings: Settings | None = None) -> ReplayLimits:
        """The settings' limits (their defaults without `settings`)."""
        s = settings if settings is not None else Settings.model_construct()
        return cls(
            s.kv_replay_max_batches,
            s.kv_replay_max_bytes,
            s.kv_replay_timeout_s,
            s.kv_replay_deadline_s,
            s.kv_replay_concurrency,
        )


async def fetch(
    context: zmq.asyncio.Context,
    address: str,
    start: int,
    until: int | None,
    *,
    got: dict[int, bytes],
    limits: ReplayLimits,
) -> Outcome:
    """Into `got`, the payloads of the batches [start, until) the replay socket answers
    (None: from `start` on, until its end marker), within `limits`."""
    socket: zmq.asyncio.Socket | None = None
    try:  # made inside: ZMQ may refuse a socket (out of descriptors), a failed replay
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.IPV6, 1)  # an IPv6 endpoint's replay (IPv4 still reached)
        socket.setsockopt(zmq.MAXMSGSIZE, min(limits.max_bytes, MAX_PAYLOAD_BYTES) + FRAMING_BYTES)
        # Every answer a replay may take is queued as it comes: the engine's ROUTER drops
        # what would exceed its own and our high-water marks (vLLM's is ZMQ's 1,000).
        socket.setsockopt(zmq.RCVHWM, limits.max_batches + 1)
        socket.connect(address)
        await socket.send_multipart([b"", encode_seq(start)])
        async with asyncio.timeout(limits.deadline_s):
            return await _answers(socket, start, until, got, limits)
    except TimeoutError:
        return Outcome.TIMEOUT
    except MalformedBatch:
        return Outcome.MALFORMED
    except zmq.ZMQError:
        return Outcome.FAILED
    finally:
        if socket is not None:
            socket.close(linger=0)


async def _answers(
    socket: zmq.asyncio.Socket,
    start: int,
    until: int | None,
    got: dict[int, bytes],
    limits: ReplayLimits,
) -> Outcome:
    answers, received = 0, 0
    while True:
        async with asyncio.timeout(limits.timeout_s):
            parts = await socket.recv_multipart()
        seq_frame, payload = _answer(parts)
        seq = decode_seq(seq_frame)
        if seq == END_OF_REPLAY:
            return Outcome.COMPLETE
        answers += 1
        received += sum(map(len, parts))
        if answers > limits.max_batches or received > limits.max_bytes:
            return Outcome.LIMIT
        if until is not None and seq >= until:  # answers come in order: none asked for follows
            return Outcome.PAST
        if seq >= start:
            got[seq] = payload
            if until is not None and len(got) == until - start:
                return Outcome.COMPLETE
        if answers % ANSWERS_PER_TURN == 0:
            await asyncio.sleep(0)


def _answer(parts: list[bytes]) -> tuple[bytes, bytes]:
    """An answer's (seq, payload), after its empty delimiter frames (one or two)."""
    if not 3 <= len(parts) <= 4 or any(parts[:-2]):
        raise MalformedBatch(f"replay answer of {len(parts)} frames")
    return parts[-2], parts[-1]
