"""h204 scratch: cProfile of `PromptPreparer.prepare` alone (the Pick's tokenization on the
loop) over the Dynamo workload (`loadtest.precise_dynamo`).

    python docs/h204/prof.py [SORT] [N]
"""

import asyncio
import cProfile
import pstats
import sys

from loadtest import precise_dynamo as pd

profile = cProfile.Profile()
base = pd.Clocks.timed


async def timed(self, kind, part, work):  # type: ignore[no-untyped-def]
    if part != "at Pick":
        return await base(self, kind, part, work)
    profile.enable()
    try:
        return await base(self, kind, part, work)
    finally:
        profile.disable()


pd.Clocks.timed = timed
for seed in (1, 2):
    asyncio.run(pd.replay(pd.bodies(seed, 3.0, 90), pd.MODEL_DIR, pd.Clocks()))
sort = sys.argv[1] if len(sys.argv) > 1 else "tottime"
pstats.Stats(profile).sort_stats(sort).print_stats(int(sys.argv[2]) if len(sys.argv) > 2 else 45)
