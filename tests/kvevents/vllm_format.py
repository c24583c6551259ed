"""KV events encoded the way vLLM encodes them: msgspec structs declared as in
vllm/distributed/kv_events.py (both layouts vLLM has shipped), a PUB socket sending
`(topic, seq, payload)` as `ZmqEventPublisher` does, and its replay ROUTER."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
import zmq
import zmq.asyncio

ExternalBlockHash = bytes | int


# Newer vLLM: the batch is positional, events are tagged maps ("type": class name).
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):  # type: ignore[call-arg]
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None
    group_idx: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


# vLLM up to 0.10 (and SGLang): events are tagged arrays too.
class OldEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    pass


class OldBlockStored(OldEvent, tag="BlockStored"):  # type: ignore[call-arg]
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None = None


class OldBlockRemoved(OldEvent, tag="BlockRemoved"):  # type: ignore[call-arg]
    block_hashes: list[int]
    medium: str | None = None


_ENCODER = msgspec.msgpack.Encoder()


def stored(
    hashes: list[ExternalBlockHash],
    tokens: list[int],
    parent: ExternalBlockHash | None = None,
    block_size: int = 4,
    medium: str | None = "GPU",
) -> BlockStored:
    return BlockStored(hashes, parent, tokens, block_size, None, medium)


def encode(events: list[Any], ts: float = 1.0, rank: int | None = 0) -> bytes:
    return _ENCODER.encode(EventBatch(ts, events, rank))


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


class Publisher:
    """An engine's PUB socket (and optional replay ROUTER) on free loopback ports."""

    def __init__(self, topic: bytes = b"", replay: bool = False) -> None:
        self.context = zmq.asyncio.Context()
        # XPUB sends as PUB does and also says when a subscriber has joined (ZMQ drops what
        # is published before that: the "slow joiner").
        self.pub = self.context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, repeats included
        self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.topic = topic
        self.seq = 0
        self.sent: list[tuple[int, bytes]] = []
        self.router: zmq.asyncio.Socket | None = None
        self.replay_port = 0
        self._replaying: asyncio.Task[None] | None = None
        self._answered = asyncio.Event()  # a replay request was answered (to its end marker)
        if replay:  # on the next port, so that `{port+1}` finds it
            self.router = self.context.socket(zmq.ROUTER)
            while True:
                try:
                    self.router.bind(f"tcp://127.0.0.1:{self.port + 1}")
                    break
                except zmq.ZMQError:
                    self.pub.close(linger=0)
                    self.pub = self.context.socket(zmq.XPUB)
                    self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
                    self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
            self.replay_port = self.port + 1
            self._replaying = asyncio.get_running_loop().create_task(self._serve_replay())

    async def subscribed(self) -> None:
        """Wait for a subscriber to join."""
        while True:
            message = await self.pub.recv()
            if message[:1] == b"\x01":
                return

    async def publish(self, payload: bytes, *, seq: int | None = None, drop: bool = False) -> int:
        """Send one batch under the next seq (or `seq`); `drop` records it without sending,
        as if the subscriber lost it."""
        number = self.seq if seq is None else seq
        self.seq = number + 1
        self.sent.append((number, payload))
        if not drop:
            await self.pub.send_multipart([self.topic, seq_bytes(number), payload])
        return number

    async def _serve_replay(self) -> None:
        assert self.router is not None
        while True:
            client, _, start = await self.router.recv_multipart()
            first = int.from_bytes(start, "big")
            for number, payload in self.sent:
                if number >= first:
                    await self.router.send_multipart([client, b"", seq_bytes(number), payload])
            await self.router.send_multipart([client, b"", seq_bytes(-1), b""])
            self._answered.set()

    async def replay_answered(self) -> None:
        """Wait for a subscriber's replay request to have been answered: a replica asks for
        everything buffered when it joins, and a batch published before that answer went out
        comes in the answer, not as a live batch whose loss would be a gap."""
        await self._answered.wait()

    async def close(self) -> None:
        if self._replaying is not None:
            self._replaying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replaying
        self.context.destroy(linger=0)
