"""Records a Dynamo mocker's KV-event messages (topic, seq, payload) as the picker receives
them, for `loadtest/bench_event_intake.py`. One mocker of 512 blocks of 16 tokens (small
enough to evict), chat requests on four shared system prompts with multi-turn histories,
4 at once, as the routing bench sends them. Writes a msgpack list of [seq, payload].

    .venv/bin/python docs/h201/record.py docs/h201/mocker_batches.msgpack [requests]
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

import httpx
import msgpack
import zmq
import zmq.asyncio

from loadtest.mocker_engines import MockerSetup, mockers

MODEL = "mock-model"
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()  # noqa: SIM905


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def record(out: Path, requests: int) -> None:
    setup = MockerSetup(
        Path("/tmp/dynamo-venv"), Path("/tmp/dynamo-model"), MODEL, count=1, gpu_blocks=512
    )
    rng = random.Random(1)
    systems = [text(rng, 200 + 100 * i) for i in range(4)]
    got: list[list[object]] = []
    with mockers(setup) as engines:
        engine = engines[0]
        context = zmq.asyncio.Context()
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://{engine.host}:{engine.events_port}")
        await asyncio.sleep(1.0)  # the subscription reaches the PUB socket

        async def reader() -> None:
            while True:
                parts = await sub.recv_multipart()
                got.append([int.from_bytes(parts[1], "big", signed=True), parts[2]])

        task = asyncio.create_task(reader())
        chats: list[list[dict[str, str]]] = [[] for _ in range(12)]
        gate = asyncio.Semaphore(4)
        async with httpx.AsyncClient(timeout=60) as http:

            async def one(i: int) -> None:
                chat = chats[i % len(chats)]
                if not chat:
                    chat.append({"role": "system", "content": systems[i % 4]})
                chat.append({"role": "user", "content": text(rng, rng.randint(20, 150))})
                body = {"model": MODEL, "messages": list(chat), "max_tokens": rng.randint(16, 96)}
                async with gate:
                    reply = await http.post(
                        f"http://{engine.endpoint}/v1/chat/completions", json=body
                    )
                if reply.status_code != 200:  # over the engine's cache: not recorded
                    chat.clear()
                    return
                answer = reply.json()["choices"][0]["message"]["content"] or ""
                chat.append({"role": "assistant", "content": answer})

            for wave in range(0, requests, 12):
                await asyncio.gather(*(one(i) for i in range(wave, min(wave + 12, requests))))
        await asyncio.sleep(1.0)
        task.cancel()
        context.destroy(linger=0)
    out.write_bytes(msgpack.packb(got))  # noqa: ASYNC240 (once, at the end)
    sizes = sorted(len(p) for _, p in got)  # type: ignore[arg-type]
    print(f"{len(got)} batches, median {sizes[len(sizes) // 2]} bytes, max {sizes[-1]}")


if __name__ == "__main__":
    asyncio.run(record(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 72))
