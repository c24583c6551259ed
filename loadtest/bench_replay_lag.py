"""The event loop's worst lag while a replica joins engines that replay their buffers.

    python -m loadtest.bench_replay_lag [--engines 1] [--batches 10000] [--runs 1]
                                        [--concurrency N]

Stand-in engines in a child process (`--serve`, so their sending costs this loop nothing)
each hold `--batches` prepared batches in vLLM's replay format (a ROUTER answering
`[id, b"", seq, payload]` from the seq asked for, then seq -1) and publish nothing live
(`--router-hwm`: the ROUTER's send high-water mark, 0 by default so that no answer is
dropped; vLLM's is ZMQ's default, 1000). The replica side is one `EventSubscriber` on
this process's loop with a feed per engine whose pool sets a replay socket: every feed
asks for the whole buffer on joining. A probe task sleeps 1 ms at a time and records how
much later than asked it woke. Reported per run: the worst and p99 lag over 1 s before
the feeds start (the machine's own noise) and while they replay, the seconds until every
feed is done replaying, the most CPU time the loop's thread spent between two wakes of
the probe (its own work, the collector's included, apart from the machine's scheduling),
and the blocks each worker then holds (what was applied). `--concurrency`: the replays
run at once (`KINFERENCE_KV_REPLAY_CONCURRENCY`; the settings' default without it);
`--silent N`: the first N engines' replay sockets never answer (a dead engine). The
heap is frozen first, as a serving process's is (`heap.freeze_startup_heap`).
Batches are realistic scheduler steps: one in four a 2,048-token prefill chunk (128
blocks of 16, ~10 KB of msgpack), the rest decode steps completing 8 blocks; each
engine's blocks are its own, chained by parent, and it holds at most `--capacity` blocks
(32,768 of 16 tokens: 512k tokens, a large GPU's KV cache), evicting its oldest in the
step that overflows (0: never; a worker's index then grows to 380k blocks, and each
resize of its dicts takes one step of ~40 ms, as it would live).
Only the subscriber's long-standing API is used, so base and branch copies run it as is.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time

import msgpack
import zmq
import zmq.asyncio

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.replay import ReplayLimits
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust
from loadtest.bench_event_lag import probe

BLOCK = 16
IDLE_S = 1.0


def buffer(engine: int, batches: int, capacity: int) -> list[bytes]:
    """One engine's replay buffer: `batches` payloads of realistic scheduler steps, the
    oldest blocks evicted in the same step once it holds more than `capacity` (0: never)."""
    rng = random.Random(engine)
    out, parent, next_hash = [], None, (engine + 1) << 40
    held: collections.deque[int] = collections.deque()
    for n in range(batches):
        blocks = 128 if n % 4 == 0 else 8
        hashes = list(range(next_hash, next_hash + blocks))
        next_hash += blocks
        tokens = [rng.randrange(150_000) for _ in range(blocks * BLOCK)]
        events: list[object] = [
            {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
             "token_ids": tokens, "block_size": BLOCK, "medium": "GPU"}]  # fmt: skip
        held.extend(hashes)
        if capacity and len(held) > capacity:
            gone = [held.popleft() for _ in range(len(held) - capacity)]
            events.append({"type": "BlockRemoved", "block_hashes": gone, "medium": "GPU"})
        parent = hashes[-1]
        out.append(bytes(msgpack.packb([time.time(), events, 0])))
    return out


async def serve(engines: int, batches: int, hwm: int, capacity: int, silent: int = 0) -> None:
    """The stand-in engines: print their replay ports, then answer every request (but the
    first `silent` engines, whose replay sockets never answer)."""
    context = zmq.asyncio.Context()
    routers, buffers = [], []
    for engine in range(engines):
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.SNDHWM, hwm)  # 0: never drop an answer; vLLM keeps ZMQ's 1000
        routers.append((router, router.bind_to_random_port("tcp://127.0.0.1")))
        buffers.append(buffer(engine, batches, capacity))
    print(json.dumps([port for _, port in routers]), flush=True)

    async def answer(router: zmq.asyncio.Socket, payloads: list[bytes]) -> None:
        while True:
            client, *_, start = await router.recv_multipart()
            first = int.from_bytes(start, "big", signed=True)
            for seq in range(max(first, 0), len(payloads)):
                seq_frame = seq.to_bytes(8, "big", signed=True)
                await router.send_multipart([client, b"", seq_frame, payloads[seq]], copy=False)
            await router.send_multipart([client, b"", (-1).to_bytes(8, "big", signed=True), b""])

    answering = list(zip(routers, buffers, strict=True))[silent:]
    await asyncio.gather(*(answer(r, b) for (r, _), b in answering))


async def run(ports: list[int], concurrency: int | None) -> dict[str, float]:
    gc.collect()  # as a serving process does once started (`heap.freeze_startup_heap`)
    gc.freeze()
    limits = ReplayLimits.of()
    if concurrency is not None:
        limits = dataclasses.replace(limits, concurrency=concurrency)
    subscriber = EventSubscriber(time.monotonic, limits=limits)
    pool = PoolCaches("p", BLOCK)
    feeds = []
    for slot, port in enumerate(ports):
        trust = pool.trust[slot] = WorkerTrust(60.0, 60.0, can_replay=True)
        # No PUB there: nothing live, the join replay alone.
        feed = Feed(pool, slot, f"e{slot}", "tcp://127.0.0.1:9", f"tcp://127.0.0.1:{port}",
                    b"", trust)  # fmt: skip
        feeds.append(feed)
    lags: list[float] = []
    cpu: list[float] = []
    done = asyncio.Event()
    probing = asyncio.get_running_loop().create_task(probe(lags, done, cpu))
    await asyncio.sleep(IDLE_S)  # the machine's own noise: the loop with nothing to do
    idle, lags[:], cpu[:] = sorted(lags), [], []
    started = time.perf_counter()
    for feed in feeds:
        subscriber.add(feed)
    while any(f.replay is None or not f.replay.done() or f.replaying for f in feeds):  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    seconds = time.perf_counter() - started
    done.set()
    await probing
    blocks = [pool.index.blocks(slot) for slot in range(len(ports))]
    await subscriber.aclose()
    lags.sort()
    return {
        "idle_worst_ms": round(idle[-1] * 1e3, 2),
        "idle_p99_ms": round(idle[int(len(idle) * 0.99)] * 1e3, 2),
        "worst_ms": round(lags[-1] * 1e3, 2),
        "p99_ms": round(lags[int(len(lags) * 0.99)] * 1e3, 2),
        "worst_cpu_ms": round(max(cpu) * 1e3, 2),
        "replay_s": round(seconds, 2),
        "blocks_min": min(blocks),
        "blocks_max": max(blocks),
        "trusted": sum(f.trust.distrust is None for f in feeds),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", type=int, default=1)
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--router-hwm", type=int, default=0)
    parser.add_argument("--capacity", type=int, default=32_768)
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--silent", type=int, default=0)
    parser.add_argument("--serve", action="store_true")
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.engines, args.batches, args.router_hwm, args.capacity, args.silent))
        return
    command = [sys.executable, "-m", "loadtest.bench_replay_lag", "--serve",
               "--engines", str(args.engines), "--batches", str(args.batches),
               "--router-hwm", str(args.router_hwm), "--capacity", str(args.capacity),
               "--silent", str(args.silent)]  # fmt: skip
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert child.stdout is not None
        ports = json.loads(child.stdout.readline())
        results = [asyncio.run(run(ports, args.concurrency)) for _ in range(args.runs)]
    finally:
        child.kill()
        child.wait()
    for result in results:
        concurrency = args.concurrency or ReplayLimits.of().concurrency
        print(json.dumps({"engines": args.engines, "batches": args.batches,
                          "concurrency": concurrency, "silent": args.silent,
                          **result}))  # fmt: skip
    if len(results) > 1:
        worst = [r["worst_ms"] for r in results]
        print(json.dumps({"median_worst_ms": statistics.median(worst)}))


if __name__ == "__main__":
    main()
