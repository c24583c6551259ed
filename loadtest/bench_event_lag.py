"""The event loop's worst lag while one replica's subscriber takes KV-event batches.

    python -m loadtest.bench_event_lag [--kinds removed,stored,ordinary] [--ordinary 2000]

A real PUB socket on a free port publishes prepared payloads to an `EventSubscriber` on this
process's loop, while a probe task sleeps 1 ms at a time and records how much later than
asked it woke (`kinference.loop_lag`'s measure, at a finer interval). Kinds: `removed` (one
hostile batch at the 16 MiB payload bound: 16M one-byte hashes removed), `stored` (8M
one-token blocks on a 1-block prefix, under one-byte hashes that repeat), `ordinary`
(`--ordinary` batches of one scheduler step each: 32 blocks of 16 tokens stored, the
oldest 32 removed), reported as the worst and p99 lag and, for `ordinary`, batches
applied per second. Runs on any branch's
code (only the subscriber's long-standing API is used), so base and branch compare as is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import msgpack
import zmq
import zmq.asyncio

from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.trust import WorkerTrust

LIMIT = 16 * 1024 * 1024
PROBE_S = 0.001


def payloads(kind: str, ordinary: int) -> list[bytes]:
    def batch(events: list[object]) -> bytes:
        return bytes(msgpack.packb([time.time(), events, None]))

    if kind == "removed":
        return [batch([["BlockRemoved", [1] * (LIMIT - 64), None]])]
    if kind == "stored":
        n = (LIMIT - 64) // 2 - 8
        first = ["BlockStored", [0], None, [0], 1, None, None]
        hashes = [1 + i % 127 for i in range(n)]  # one byte each, repeated: the slow path
        return [batch([first, ["BlockStored", hashes, 0, [7] * n, 1, None, None]])]
    out, base = [], 1
    for _ in range(ordinary):
        stored = list(range(base, base + 32))
        tokens = [h % 50_000 for h in stored for _ in range(16)]
        events: list[object] = [["BlockStored", stored, None, tokens, 16, None, None]]
        if base > 32:
            events.append(["BlockRemoved", list(range(base - 32, base)), None])
        out.append(batch(events))
        base += 32
    return out


async def run(kind: str, ordinary: int) -> dict[str, float]:
    messages = payloads(kind, ordinary)
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    applied = asyncio.Event()
    counts = {"applied": 0}

    def message(pool: str, outcome: str) -> None:
        counts[outcome] = counts.get(outcome, 0) + 1
        if counts["applied"] == len(messages):
            applied.set()

    subscriber = EventSubscriber(time.monotonic, message)
    pool = PoolCaches("p", 1 if kind == "stored" else 16)
    trust = pool.trust[0] = WorkerTrust(60.0, 60.0)
    feed = Feed(pool, 0, "e0", f"tcp://127.0.0.1:{port}", None, b"", trust)
    subscriber.add(feed)
    while (await pub.recv())[:1] != b"\x01":
        pass
    lags: list[float] = []
    done = asyncio.Event()
    probing = asyncio.get_running_loop().create_task(probe(lags, done))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    for seq, payload in enumerate(messages):
        await pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
    await applied.wait()
    elapsed = time.perf_counter() - started
    done.set()
    await probing
    await subscriber.aclose()
    context.destroy(linger=0)
    lags.sort()
    return {
        "worst_lag_ms": round(lags[-1] * 1e3, 1),
        "p99_lag_ms": round(lags[int(len(lags) * 0.99)] * 1e3, 2),
        "seconds": round(elapsed, 3),
        "batches_per_s": round(len(messages) / elapsed),
    }


async def probe(lags: list[float], done: asyncio.Event, cpu: list[float] | None = None) -> None:
    """Until `done`: sleeps `PROBE_S` at a time, appending how much later than asked it woke
    (and to `cpu`, the CPU time the loop's thread spent meanwhile: its own work, collector
    included, apart from time the machine gave other threads and processes)."""
    while not done.is_set():
        asked, held = time.perf_counter(), time.thread_time()
        await asyncio.sleep(PROBE_S)
        lags.append(max(time.perf_counter() - asked - PROBE_S, 0.0))
        if cpu is not None:
            cpu.append(time.thread_time() - held)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--kinds", default="removed,stored,ordinary")
    cli.add_argument("--ordinary", type=int, default=2000)
    args = cli.parse_args()
    for kind in args.kinds.split(","):
        result = asyncio.run(run(kind, args.ordinary))
        print(json.dumps({"kind": kind, **result}), flush=True)


if __name__ == "__main__":
    main()
