"""The KV-event intake's CPU per batch through a real socket: recorded engine batches
published on a PUB socket by another process, taken by the subscriber's live path
(`EventSubscriber.add`: the SUB socket and its link, the loop's wakeups and turns, the
decode, the worker's trust, the pool's index, the message counted in the metrics), on
uvloop as the gateway runs it. `loadtest.bench_event_intake` measures the same path
without the socket side.

    python -m loadtest.bench_event_socket BATCHES [--rounds 10] [--gap-ms 2] [--profile N]

BATCHES: as for `bench_event_intake` (`[seq, payload]` pairs recorded from an engine). A
round: the publisher (a child process: its CPU is not counted) binds a fresh socket, the
subscriber's feed connects to it, and once subscribed the batches go out `--gap-ms` apart
(an engine's come ~36 ms apart, each alone: one wakeup a batch; 0: all at once, a burst
taken a drain at a time), into a fresh pool of one worker. Measured from the first batch
sent to the last applied: this process's CPU (the loop's thread and ZMQ's I/O thread) and
the loop thread's, per batch; printed as one JSON line, the median and lowest of the rounds.
`--profile N`: cProfile of the loop's thread over N rounds instead.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import msgpack

PUBLISH = "--publish"


def publish(path: Path) -> None:
    """The child: per round, on `bind` a fresh XPUB socket (its address on stdout), `ready`
    once the subscriber subscribed, the batches sent on `go GAP_MS`, `done` after."""
    import zmq

    recorded = msgpack.unpackb(path.read_bytes())
    payloads = [payload for _, payload in recorded]
    context = zmq.Context()
    socket = None
    for line in sys.stdin:
        command, *args = line.split()
        if command == "bind":
            if socket is not None:
                socket.close(linger=0)
            socket = context.socket(zmq.XPUB)
            socket.setsockopt(zmq.SNDHWM, 0)
            socket.bind("tcp://127.0.0.1:0")
            print(socket.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
            socket.recv()  # the subscription
            print("ready", flush=True)
        elif command == "go" and socket is not None:
            gap = float(args[0]) / 1000
            for seq, payload in enumerate(payloads):
                socket.send_multipart([b"", seq.to_bytes(8, "big", signed=True), payload])
                if gap:
                    time.sleep(gap)
            print("done", flush=True)
    context.destroy(linger=0)


class Rounds:
    """The subscriber's side: rounds against one publisher child."""

    def __init__(self, path: Path, size: int, count: int) -> None:
        self.path, self.size, self.count = path, size, count
        self.child: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Rounds:
        self.child = await asyncio.create_subprocess_exec(
            sys.executable, __file__, PUBLISH, str(self.path),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.child is not None and self.child.stdin is not None
        self.child.stdin.close()
        await self.child.wait()

    async def _ask(self, command: str) -> str:
        assert self.child is not None and self.child.stdin is not None
        self.child.stdin.write(command.encode() + b"\n")
        await self.child.stdin.drain()
        return await self._answer()

    async def _answer(self) -> str:
        assert self.child is not None and self.child.stdout is not None
        return (await self.child.stdout.readline()).decode().strip()

    async def one(
        self, gap_ms: float, profile: cProfile.Profile | None
    ) -> tuple[float, float, int]:
        """Process and loop-thread CPU seconds to take every batch of the recording, and
        the blocks the worker holds after."""
        from prometheus_client import CollectorRegistry

        from kinference.kvcache.pool import PoolCaches
        from kinference.kvcache.precise import PreciseCaches
        from kinference.kvevents.subscriber import EventSubscriber, Feed
        from kinference.kvevents.telemetry import PreciseMetrics
        from kinference.kvevents.trust import WorkerTrust

        caches = PreciseCaches()
        pool = caches.pools["pool-a"] = PoolCaches("pool-a", self.size, clock=caches.clock)
        metrics = PreciseMetrics(CollectorRegistry(), caches)
        done = asyncio.get_running_loop().create_future()
        applied = [0]

        def on_message(ref: str, outcome: str) -> None:
            metrics.message(ref, outcome)
            if outcome == "applied":
                applied[0] += 1
                if applied[0] == self.count:
                    done.set_result(None)

        subscriber = EventSubscriber(caches.clock, on_message, on_reopen=metrics.reopen)
        trust = pool.trust[0] = WorkerTrust(10.0, 5.0, max_lag_s=1.0)
        pool.endpoints[0] = "engine-0"
        address = await self._ask("bind")
        subscriber.add(Feed(pool, 0, "engine-0", address, None, b"", trust))
        assert await self._answer() == "ready"
        try:
            gc.collect()
            cpu, thread = time.process_time(), time.thread_time()
            if profile is not None:
                profile.enable()
            assert self.child is not None and self.child.stdin is not None
            self.child.stdin.write(f"go {gap_ms}\n".encode())
            await done
            cpu, thread = time.process_time() - cpu, time.thread_time() - thread
            if profile is not None:
                profile.disable()
            assert await self._answer() == "done"
        finally:
            await subscriber.aclose()
        return cpu, thread, pool.index.blocks(0)


async def run(args: argparse.Namespace) -> None:
    from loadtest.bench_event_intake import block_size

    count = len(msgpack.unpackb(args.batches.read_bytes()))
    async with Rounds(args.batches, block_size(args.batches), count) as rounds:
        if args.profile:
            profile = cProfile.Profile()
            for _ in range(args.profile):
                await rounds.one(args.gap_ms, profile)
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(45)
            return
        await rounds.one(args.gap_ms, None)  # warm: imports, caches
        spent = [await rounds.one(args.gap_ms, None) for _ in range(args.rounds)]
    cpu = [c / count * 1e6 for c, _, _ in spent]
    thread = [t / count * 1e6 for _, t, _ in spent]
    print(
        json.dumps(
            {
                "tag": args.tag,
                "batches": count,
                "held_after": spent[-1][2],
                "gap_ms": args.gap_ms,
                "median_us": round(statistics.median(cpu), 2),
                "min_us": round(min(cpu), 2),
                "thread_median_us": round(statistics.median(thread), 2),
                "thread_min_us": round(min(thread), 2),
            }
        )
    )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == PUBLISH:
        publish(Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("batches", type=Path)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--tag", default="")
    import uvloop

    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
