"""Asking an engine's replay socket for batches again (vLLM's protocol: a DEALER sends the
first seq wanted, 8 bytes big-endian; the ROUTER answers `(seq, payload)` for every batch it
still buffers from there, then `seq = -1`). Each answer comes after empty delimiter frames:
one from vLLM's `ZmqEventPublisher`, two from Dynamo's mocker (`--zmq-replay-ports`, which
echoes the request's delimiter); any other leading frame is a malformed answer."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from kinference.kvevents.events import EventBatch
from kinference.kvevents.steps import Budget, finish_async
from kinference.kvevents.wire import (
    END_OF_REPLAY,
    MalformedBatch,
    decode_seq,
    decode_steps,
    encode_seq,
)

REPLAY_TIMEOUT_S = 2.0  # a replay socket that says nothing for this long has failed
MAX_PENDING = 10_000  # batches fetched, or held while a replay runs: more are not kept


async def fetch(
    context: zmq.asyncio.Context,
    address: str,
    start: int,
    until: int | None,
    got: dict[int, EventBatch],
) -> None:
    """Into `got`, the batches [start, until) the replay socket answers (None: from
    `start` on), until they are all there, its end marker, or `MAX_PENDING` of them."""
    socket = context.socket(zmq.DEALER)
    try:
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(address)
        await socket.send_multipart([b"", encode_seq(start)])
        while True:
            async with asyncio.timeout(REPLAY_TIMEOUT_S):
                parts = await socket.recv_multipart()
            seq_frame, payload = _answer(parts)
            seq = decode_seq(seq_frame)
            if seq == END_OF_REPLAY:
                return
            if start <= seq and (until is None or seq < until):
                got[seq] = await finish_async(decode_steps(payload, Budget()))
                if len(got) >= MAX_PENDING or (until is not None and len(got) == until - start):
                    return
    finally:
        socket.close(linger=0)


def _answer(parts: list[bytes]) -> tuple[bytes, bytes]:
    """An answer's (seq, payload), after its empty delimiter frames (one or two)."""
    if not 3 <= len(parts) <= 4 or any(parts[:-2]):
        raise MalformedBatch(f"replay answer of {len(parts)} frames")
    return parts[-2], parts[-1]
