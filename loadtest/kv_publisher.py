"""A stand-in engine's KV-event publisher for benchmarks: vLLM's wire format (an XPUB socket
sending `(topic, seq, payload)`, the batch `[ts, events, rank]`, events as tagged maps).
Payloads are prepared before a measurement, so the stand-in costs the picker's loop nothing
but the send."""

from __future__ import annotations

import itertools
import struct
import time

import msgpack
import zmq
import zmq.asyncio

from kinference.kvcache.blocks import identities

_STAMPED = b"\x93\xcb"  # msgpack: an array of 3, then a float64 (the batch's ts)


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
        """Sends a prepared batch stamped now, as an engine stamps a step's batch when it
        publishes it (the picker measures how late it applies batches by their stamps)."""
        if payload[:2] == _STAMPED:  # [ts, ...] with ts a float64: re-stamped in place
            payload = _STAMPED + struct.pack(">d", time.time()) + payload[10:]
        seq = next(self._seq).to_bytes(8, "big")
        await self._socket.send_multipart([self.topic, seq, payload], copy=False)

    def close(self) -> None:
        self._context.destroy(linger=0)


STEP_BLOCKS = 128  # blocks per batch: an engine publishes per scheduler step (2k tokens)


class EngineBlocks:
    """A prompt's blocks as one stand-in engine names them, and the `BlockStored` payloads
    announcing them from a given block on (in steps of `STEP_BLOCKS`, chained by their
    parent hashes). Block hashes follow from the tokens (and `salt`, the engine's seed), so
    payloads can be prepared before a measurement."""

    def __init__(self, tokens: list[int], block_size: int, salt: int = 0x5EED) -> None:
        full = len(tokens) // block_size * block_size
        self.tokens = tokens[:full]
        self.block_size = block_size
        self.hashes = [(h ^ salt) & ((1 << 64) - 1) for h in identities(self.tokens, block_size)]
        self.whole = self._build(0)  # the usual case: an engine that held none of it

    def payloads(self, start: int) -> list[bytes]:
        """What an engine that held the first `start` blocks announces once it ran it."""
        return self.whole if start == 0 else self._build(start)

    def _build(self, start: int) -> list[bytes]:
        result, size = [], self.block_size
        for first in range(start, len(self.hashes), STEP_BLOCKS):
            step = self.hashes[first : first + STEP_BLOCKS]
            event = {"type": "BlockStored", "block_hashes": step,
                     "parent_block_hash": self.hashes[first - 1] if first else None,
                     "token_ids": self.tokens[first * size : (first + len(step)) * size],
                     "block_size": size, "lora_id": None, "medium": "GPU"}  # fmt: skip
            result.append(msgpack.packb([time.time(), [event], 0]))
        return result


class HeldBlocks:
    """What one stand-in engine holds (it never evicts): it announces only the blocks of a
    prompt it did not hold, as an engine stores only what it computed."""

    def __init__(self) -> None:
        self._held: set[int] = set()

    def run(self, prompt: EngineBlocks) -> list[bytes]:
        start = 0
        while start < len(prompt.hashes) and prompt.hashes[start] in self._held:
            start += 1
        self._held.update(prompt.hashes[start:])
        return prompt.payloads(start)


def payloads(tokens: list[int], block_size: int, salt: int = 0x5EED) -> list[bytes]:
    """Every full block of `tokens` stored: what an engine that has just run this prompt,
    holding none of it before, announces step by step."""
    return EngineBlocks(tokens, block_size, salt).whole
