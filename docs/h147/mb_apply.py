# Historical (h147, 2026-12-07): ran on main `0069989`. The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h147` section, not maintained (run on `0069989`).
"""h147: one engine step's BlockStored batch (a 5.4k-token document: 336 blocks of 16 tokens;
and a 2.2k-token prompt: 137 blocks), decoded (`kvevents.wire.decode_steps`) and applied to a
PoolCaches (`kvcache.pool.apply`), timed apart; fresh pool per round (what a cold prompt is)."""

import sys, time, statistics as st, msgpack, random
from kinference.kvevents.steps import Budget, finish
from kinference.kvevents.wire import decode_steps
from kinference.kvcache.pool import PoolCaches
from kinference.kvevents.trust import WorkerTrust


def payload(blocks, seed):
    rng = random.Random(seed)
    hashes = [rng.getrandbits(63) for _ in range(blocks)]
    tokens = [rng.randrange(50_000) for _ in range(blocks * 16)]
    return bytes(
        msgpack.packb([time.time(), [["BlockStored", hashes, None, tokens, 16, None, None]], None])
    )


for blocks in (336, 137):
    dec, app = [], []
    for r in range(200):
        p = payload(blocks, r)
        pool = PoolCaches("p", 16)
        for s in range(4):
            pool.trust[s] = WorkerTrust(60.0, 60.0)
        # some history: 3 other workers hold other prompts
        t0 = time.perf_counter()
        batch = finish(decode_steps(p, Budget()))
        t1 = time.perf_counter()
        pool.apply(0, batch.events)
        t2 = time.perf_counter()
        dec.append((t1 - t0) * 1e3)
        app.append((t2 - t1) * 1e3)
    print(
        f"{blocks} blocks, {len(p)} bytes: decode p50 {st.median(dec):.3f} ms, apply p50 {st.median(app):.3f} ms (min {min(dec):.3f} / {min(app):.3f})"
    )
