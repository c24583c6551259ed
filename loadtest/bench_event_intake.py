"""The KV-event intake's CPU per batch, in process: recorded engine batches through the
subscriber's real path (seq and payload decoded, the worker's trust, the block-size check,
the pool's index and eviction order, the message counted in the metrics), no sockets.

    python -m loadtest.bench_event_intake BATCHES [--rounds 30] [--repeat 4] [--profile N]

BATCHES: a msgpack list of `[seq, payload]` as an engine published them (recorded from
Dynamo's mocker by docs/h201/record.py). A round feeds them all, `--repeat` times over
(renumbered, so that the stream has no gap), into a fresh pool of one worker, and takes
the thread CPU time of the whole; printed as one JSON line: CPU microseconds per batch,
the median and the lowest of the rounds. `--profile N`: cProfile of N rounds instead,
the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import msgpack
from prometheus_client import CollectorRegistry

from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.subscriber import EventSubscriber, Feed
from kinference.kvevents.telemetry import PreciseMetrics
from kinference.kvevents.trust import WorkerTrust
from kinference.kvevents.wire import encode_seq

POOL = "pool-a"


def messages(path: Path, repeat: int) -> list[list[bytes]]:
    """The recorded payloads as `(topic, seq, payload)` messages, numbered from 0."""
    recorded = msgpack.unpackb(path.read_bytes())
    payloads = [payload for _, payload in recorded] * repeat
    return [[b"", encode_seq(seq), payload] for seq, payload in enumerate(payloads)]


def block_size(path: Path) -> int:
    for _, payload in msgpack.unpackb(path.read_bytes()):
        batch = msgpack.unpackb(payload, strict_map_key=False)
        events = batch["events"] if isinstance(batch, dict) else batch[1]
        for event in events:
            if isinstance(event, dict) and event.get("type") == "BlockStored":
                return int(event["block_size"])
            if isinstance(event, list) and event[0] == "BlockStored":
                return int(event[4])
    raise SystemExit("no BlockStored in the recording")


def one_round(parts: list[list[bytes]], size: int) -> tuple[float, int]:
    """Thread CPU seconds to take every message, and the blocks the worker holds after."""
    caches = PreciseCaches()
    pool = caches.pools[POOL] = PoolCaches(POOL, size, clock=caches.clock)
    metrics = PreciseMetrics(CollectorRegistry(), caches)
    subscriber = EventSubscriber(caches.clock, metrics.message, on_reopen=metrics.reopen)
    trust = pool.trust[0] = WorkerTrust(10.0, 5.0, max_lag_s=1.0)
    pool.endpoints[0] = "engine-0"
    feed = Feed(pool, 0, "engine-0", "tcp://127.0.0.1:1", None, b"", trust)
    try:
        gc.collect()
        start = time.thread_time()
        for message in parts:
            subscriber.receive(feed, message)
        spent = time.thread_time() - start
    finally:
        subscriber._context.destroy(linger=0)
    assert feed.batches == len(parts), (feed.batches, len(parts))
    return spent, pool.index.blocks(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("batches", type=Path)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    parts, size = messages(args.batches, args.repeat), block_size(args.batches)
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.profile):
            one_round(parts, size)
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(40)
        return
    one_round(parts, size)  # warm: imports, caches
    rounds = [one_round(parts, size) for _ in range(args.rounds)]
    per_batch = [spent / len(parts) * 1e6 for spent, _ in rounds]
    print(
        json.dumps(
            {
                "tag": args.tag,
                "batches": len(parts),
                "held_after": rounds[-1][1],
                "median_us": round(statistics.median(per_batch), 2),
                "min_us": round(min(per_batch), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
