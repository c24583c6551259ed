"""A Pick's held + record on one slot, pure-Python store: one 750-block document again and
again (its deepest block 749 blocks old each time), and two in turn (1,499)."""

import json, random, time
from kinference.routing.prefix_store import PyPrefixStore

clock = time.perf_counter_ns
rng = random.Random(3)
docs = [tuple(rng.getrandbits(64) for _ in range(750)) for _ in range(2)]
out = {}
for name, cycle in (("pick_same_doc", [0]), ("pick_two_docs_in_turn", [0, 1])):
    s = PyPrefixStore()
    for i in range(40):
        s.record(0, docs[i % 2], 50_000)
    best = float("inf")
    for _ in range(3):
        t0 = clock()
        for i in range(300):
            h = docs[cycle[i % len(cycle)]]
            s.held(0, h, len(h))
            s.record(0, h, 50_000)
        best = min(best, (clock() - t0) / 300 / 1000)
    out[name] = best
print(json.dumps(out))
