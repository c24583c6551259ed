"""Per-call CPU of what the pass-on term touches on a Pick, in process: the table's
add_inflight (a pick's count) and the TTFT scorer's score on 4 candidates (the C small
form), min over repeats of the mean of 20,000 calls. Run with PYTHONPATH=<copy>.

python docs/h183/pickcpu.py"""

import time

from kinference.routing.rates import Rates
from kinference.routing.scorers.ttft import TtftScorer
from kinference.routing.scorers.ttft_config import TtftConfig
from kinference.routing.table import WorkerTable
from tests.routing.plugin_helpers import MODEL, context


def per_call(call, count=20_000, repeats=7):
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(count):
            call()
        best = min(best, (time.process_time() - start) / count)
    return best * 1e6


table, rates = WorkerTable(), Rates()
ctx = context(4, prompt_tokens=2_000, cached=[1_000, 0, 0, 500], table=table)
for _ in range(20):
    rates.observe_busy(MODEL, 2.0, 20.0)
scorer = TtftScorer(TtftConfig(), rates)
slot = int(ctx.slots[0])
pair = per_call(lambda: (table.add_inflight(slot, 1), table.add_inflight(slot, -1)))
print(f"add_inflight +1/-1 pair: {pair:.2f} us")
print(f"score, 4 candidates (C): {per_call(lambda: scorer.score(ctx)):.2f} us")
