"""Per-call CPU of the pure-Python prefix store's `held` (the age) and `record`, and a Pick's
store work (match + held + record) on a mixed workload; prints one JSON line."""

import json, random, sys, time
from kinference.routing.prefix import PrefixIndex
from kinference.routing.prefix_store import PyPrefixStore

clock = time.perf_counter_ns


def docs(rng, n, blocks):
    return [tuple(rng.getrandbits(64) for _ in range(blocks)) for _ in range(n)]


def per_call(fn, reps):
    best = float("inf")
    for _ in range(3):
        t0 = clock()
        for _ in range(reps):
            fn()
        best = min(best, (clock() - t0) / reps / 1000)
    return best


out = {}
rng = random.Random(1)
prompts = docs(rng, 40, 750)
s = PyPrefixStore()
for i in range(60):
    s.record(0, prompts[i % 40], 50_000)
for name, i in (("held_rank749", 19), ("held_rank2999", 16), ("held_past_walk", 20)):
    h = prompts[i]
    out[name] = per_call(lambda: s.held(0, h, len(h)), 200)
# record of a 750-block prompt all held (refreshes) and all new
h = prompts[19]
out["record_held750"] = per_call(lambda: s.record(0, h, 50_000), 200)
fresh = docs(rng, 200, 750)
it = iter(fresh * 3)
out["record_new750"] = per_call(lambda: s.record(1, next(it), 50_000), 200)

# A mixed workload on 4 workers: 24 documents asked about again and again, 16 chats
# growing a turn (~40 blocks) at a time; each Pick: match, held on the chosen, record.
rng = random.Random(2)
index = PrefixIndex(50_000, store=PyPrefixStore())
documents = docs(rng, 24, 750)
chats = [[rng.getrandbits(64) for _ in range(rng.randint(20, 200))] for _ in range(16)]
held_ns = total_ns = picks = 0
for step in range(1500):
    if rng.random() < 0.5:
        hashes = (*rng.choice(documents), *(rng.getrandbits(64) for _ in range(3)))
    else:
        chat = rng.choice(chats)
        chat.extend(rng.getrandbits(64) for _ in range(40))
        hashes = tuple(chat)
    t0 = clock()
    matched = index.match(hashes)
    slot = max(matched, key=matched.get) if matched and rng.random() < 0.8 else rng.randrange(4)
    t1 = clock()
    index.held(slot, hashes)
    t2 = clock()
    index.record(slot, hashes)
    t3 = clock()
    if step >= 300:
        held_ns += t2 - t1
        total_ns += t3 - t0
        picks += 1
out["mixed_held"] = held_ns / picks / 1000
out["mixed_pick_store"] = total_ns / picks / 1000
print(json.dumps(out))
