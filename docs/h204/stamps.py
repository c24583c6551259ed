"""h204 scratch: thread CPU of named steps inside the Pick's tokenization (`prepare`) on the
Dynamo workload (`loadtest.precise_dynamo`), ms per Pick; h153's wrappers (adds overhead).

    python docs/h204/stamps.py
"""

import asyncio
import collections
import importlib.util
import sys
import time
from pathlib import Path

from kinference.tokenize import prepare, stand_in, template
from loadtest import precise_dynamo as pd

spec = importlib.util.spec_from_file_location("mb", Path(__file__).parent.parent / "h153/mb.py")
mb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mb)
mb.install_stamps()
mb.wrap(prepare.PromptPreparer, "_here", "_here")
mb.wrap(prepare.PromptPreparer, "_refusal", "_refusal")
mb.wrap(prepare.PromptPreparer, "_advance", "_advance")
mb.wrap(template, "holds_long", "holds_long")
mb.wrap(template, "_flatten", "_flatten")
mb.wrap(template.ChatTemplate, "_stood_in", "_stood_in")
TOTAL: collections.defaultdict[str, float] = collections.defaultdict(float)
base = pd.Clocks.timed
PICKS: collections.Counter[str] = collections.Counter()


async def timed(self, kind, part, work):  # type: ignore[no-untyped-def]
    if part != "at Pick":
        return await base(self, kind, part, work)
    mb.STAMPS.clear()
    started = time.thread_time()
    try:
        return await base(self, kind, part, work)
    finally:
        for name in ("all", kind):
            TOTAL[name, "prepare (all)"] += time.thread_time() - started
            for k, v in mb.STAMPS.items():
                TOTAL[name, k] += v
            PICKS[name] += 1


pd.Clocks.timed = timed
for seed in (1, 2):
    asyncio.run(pd.replay(pd.bodies(seed, 3.0, 90), pd.MODEL_DIR, pd.Clocks()))
steps = sorted({k for _, k in TOTAL}, key=lambda k: -TOTAL["all", k])
kinds = sorted(PICKS)
print(f"{'ms/Pick':28s}" + "".join(f"{k:>11s}" for k in kinds))
print(f"{'Picks':28s}" + "".join(f"{PICKS[k]:>11d}" for k in kinds))
for step in steps:
    print(f"{step:28s}" + "".join(f"{TOTAL[k, step] * 1e3 / PICKS[k]:11.3f}" for k in kinds))
