import asyncio, pickle, sys
import loadtest.bench_pick_replay as bp
from kinference.routing import blocks

calls = []
orig = blocks.PrefixHasher.hashes


def hashes(self, model, segments, *, block_bytes, max_blocks):
    calls.append((model, tuple(segments), block_bytes, max_blocks))
    return orig(self, model, segments, block_bytes=block_bytes, max_blocks=max_blocks)


blocks.PrefixHasher.hashes = hashes
asyncio.run(bp.replay(bp.bodies(600, 1), 100))
pickle.dump(calls, open("/tmp/h113/calls.pkl", "wb"))
print(len(calls), sum(len(c[1]) for c in calls) / len(calls))
