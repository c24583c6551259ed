"""A stand-in engine's KV-event publisher for benchmarks: vLLM's wire format (an XPUB socket
sending `(topic, seq, payload)`, the batch `[ts, events, rank]`, events as tagged maps).
Payloads are prepared before a measurement, so the stand-in costs the picker's loop nothing
but the send."""

from __future__ import annotations

import itertools
import time

import msgpack
import zmq
import zmq.asyncio

from kinference.kvcache.blocks import identities


class KvPublisher:
    """Publishes prepared `BlockStored` payloads (`payload`), numbered as an engine does."""

    def __init__(self, topic: bytes = b"") -> None:
        self.topic = topic
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.XPUB)
        self.port = self._socket.bind_to_random_port("tcp://127.0.0.1")
        self._seq = itertools.count()

    async def subscribed(self) -> None:
        while (await self._socket.recv())[:1] != b"\x01":
            pass

    async def send(self, payload: bytes) -> None:
        seq = next(self._seq).to_bytes(8, "big")
        await self._socket.send_multipart([self.topic, seq, payload], copy=False)

    def close(self) -> None:
        self._context.destroy(linger=0)


STEP_BLOCKS = 128  # blocks per batch: an engine publishes per scheduler step (2k tokens)


def payloads(tokens: list[int], block_size: int, salt: int = 0x5EED) -> list[bytes]:
    """Every full block of `tokens` stored, in batches of `STEP_BLOCKS` chained by their
    parent hashes: what an engine that has just run this prompt announces, step by step.
    Block hashes follow from the tokens (and `salt`, the engine's seed), so payloads can be
    prepared before a measurement."""
    full = len(tokens) // block_size * block_size
    hashes = [(h ^ salt) & ((1 << 64) - 1) for h in identities(tokens[:full], block_size)]
    result = []
    for start in range(0, len(hashes), STEP_BLOCKS):
        step = hashes[start : start + STEP_BLOCKS]
        event = {"type": "BlockStored", "block_hashes": step,
                 "parent_block_hash": hashes[start - 1] if start else None,
                 "token_ids": tokens[start * block_size : (start + len(step)) * block_size],
                 "block_size": block_size, "lora_id": None, "medium": "GPU"}  # fmt: skip
        result.append(msgpack.packb([time.time(), [event], 0]))
    return result
