"""h188 scratch: a recorded mocker history (`record.py`) replayed through this checkout's
`PoolCaches`, call by call; the decision's calls (`extend`, `surviving`, `room`) timed with
`time.thread_time` and their answers checked against the recorded ones.

    PYTHONPATH=<checkout> python docs/h188/replay.py HIST.pkl [rounds]

Prints one JSON line per round: decision CPU ms per Pick (Picks: `sent` calls), surviving's
CPU ms per Pick, the number of answers that differ from the recording (must be 0).
"""

import gc
import json
import pickle
import sys
import time

from kinference.kvcache.pool import PoolCaches

DECISION = ("extend", "surviving", "room")


def run(log: list[bytes]) -> dict:
    calls = [pickle.loads(raw) for raw in log]
    calls = [(p, bs, n, pickle.loads(a), r, t) for p, bs, n, a, r, t in calls]
    now = [0.0]
    pools: dict[int, PoolCaches] = {}
    spent = {n: 0.0 for n in DECISION}
    picks = differ = 0
    clock = time.thread_time
    gc.collect()
    gc.disable()
    try:
        for pool, size, name, args, result, at in calls:
            caches = pools.get(pool)
            if caches is None:
                caches = pools[pool] = PoolCaches("p", size, clock=lambda: now[0])
            now[0] = at
            method = getattr(caches, name)
            if name in spent:
                start = clock()
                got = method(*args)
                spent[name] += clock() - start
                differ += got != result
            else:
                method(*args)
                picks += name == "sent"
    finally:
        gc.enable()
    total = sum(spent.values())
    return {
        "picks": picks,
        "decision_ms_per_pick": 1e3 * total / picks,
        "surviving_ms_per_pick": 1e3 * spent["surviving"] / picks,
        "differ": differ,
    }


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        log = pickle.load(f)
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1):
        print(json.dumps(run(log)), flush=True)


if __name__ == "__main__":
    main()
