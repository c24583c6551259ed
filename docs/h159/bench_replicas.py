"""The mixed workload of bench_age.py as one replica of R sees it: every Pick recorded (its own
and the others', `remote_picked`), `match` + `held` only on its own (1 in R). Prints the store's
CPU per Pick of the cluster, µs, for R = 1, 2, 4, 8 (one JSON line)."""

import json, random, time
from kinference.routing.prefix import PrefixIndex
from kinference.routing.prefix_store import PyPrefixStore

clock = time.perf_counter_ns
out = {}
for replicas in (1, 2, 4, 8):
    rng = random.Random(2)
    index = PrefixIndex(50_000, store=PyPrefixStore())
    documents = [tuple(rng.getrandbits(64) for _ in range(750)) for _ in range(24)]
    chats = [[rng.getrandbits(64) for _ in range(rng.randint(20, 200))] for _ in range(16)]
    total = picks = 0
    for step in range(1500):
        if rng.random() < 0.5:
            hashes = (*rng.choice(documents), *(rng.getrandbits(64) for _ in range(3)))
        else:
            chat = rng.choice(chats)
            chat.extend(rng.getrandbits(64) for _ in range(40))
            hashes = tuple(chat)
        own = step % replicas == 0
        t0 = clock()
        matched = index.match(hashes)  # (another replica's match: not timed)
        slot = max(matched, key=matched.get) if matched and rng.random() < 0.8 else rng.randrange(4)
        if own:
            index.held(slot, hashes)
        else:
            t0 = clock()
        index.record(slot, hashes)
        if step >= 300:
            total += clock() - t0
            picks += 1
    out[f"replicas{replicas}"] = total / picks / 1000
print(json.dumps(out))
