# Historical (h154, 2026-12-07): ran on main `0eb9c46` (its branch `be297af`). The probes here patch
# functions that have since changed or gone; kept as the record of docs/benchmarks.md's
# `## h154` section, not maintained (run on `0eb9c46`).
"""bench_event_lag's `ordinary` flood (2000 batches) on this copy's code; with `held` (branch
only): every caught-up batch's worker has a request awaiting a token that never comes (the
worst case: each such batch held the full HOLD_S)."""

import asyncio, json, sys, time
from loadtest import bench_event_lag as B

mode = sys.argv[1]
if mode == "held":
    from kinference.kvevents import hold as H
    from kinference.kvcache.queue import Queued

    H.awaiting = lambda pool, slot: [(0, Queued((), 0, 0, 0.0))]
    H.came = lambda pool, slot, waiting: False
    from kinference.kvevents import subscriber as S

    n = [0]
    of = H.hold

    async def counted(pool, slot, limit_s=None):
        w = await of(pool, slot, limit_s)
        n[0] += w > 0
        return w

    S.hold = counted
for rep in range(int(sys.argv[2])):
    r = asyncio.run(B.run("ordinary", 2000))
    if mode == "held":
        r["held"] = n[0]
        n[0] = 0
    print(json.dumps({"mode": mode, **r}), flush=True)
