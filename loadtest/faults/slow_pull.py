"""Scenario "slow-pull": a 64 MiB body pulled at a crawl while other requests flow.

The big body is pushed and picked, then pulled one message at a time with a pause after
each (0.25 s per MiB: 16 s for 64 MiB; --quick: 16 MiB at 0.1 s per MiB). Meanwhile
callers loop over the whole flow with small bodies. Targets: none of them fails; their
Pick latency p99 stays within 4x (or 250 ms) of the p99 measured just before, without the
slow pull; the budget counts only what is unsent (buffered bytes never exceed the body
size minus what the consumer already received, plus 1 MiB for the small bodies); the
whole body arrives; and after it the replica holds nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from loadtest.faults.harness import Fleet, MiB, Replica, ScenarioFailed, kinference_env
from loadtest.faults.load import SteadyLoad, Tally, push, report, warm_up
from loadtest.faults.report import Row, settle_memory
from loadtest.flows import big_chat_body, chat_body

SMALL_SLACK = 1 * MiB  # the small bodies in flight at a scrape, counted in the same gauge
P99_FACTOR = 4.0
P99_FLOOR_S = 0.25  # below this, a p99 is noise on a shared 2-core machine
SCRAPE_EVERY = 4  # messages received between two looks at the budget


async def _crawl(replica: Replica, size: int, per_mib_s: float, row: Row, tally: Tally) -> None:
    """Push, pick and slowly pull the big body, checking the budget as it drains."""
    body = big_chat_body(size)
    pick = await replica.client.pick(await push(replica.client, body))
    tally.requests += 1
    before = (await replica.scrape()).value("kinference_buffered_bytes")
    if before < size:
        row.problems.append(f"{before:.0f} bytes counted for a parked {size}-byte body")
    received = worst = 0.0
    messages = 0
    async for chunk in replica.client.pull(pick.response_id):
        received += len(chunk)
        messages += 1
        if messages % SCRAPE_EVERY == 0:
            held = (await replica.scrape()).value("kinference_buffered_bytes")
            worst = max(worst, held - (pick.body_total_bytes - received))
        await asyncio.sleep(per_mib_s * len(chunk) / MiB)  # the consumer's crawl
    if received != pick.body_total_bytes:
        tally.fail(f"pulled {received:.0f} of {pick.body_total_bytes} bytes")
    elif not await report(replica.client, pick.response_id):
        tally.fail("reports for the big body not acknowledged")
    else:
        tally.completed += 1
    if worst > SMALL_SLACK:
        row.problems.append(f"budget held {worst:.0f} bytes more than the unsent part")
    row.notes.append(
        f"{size >> 20} MiB pulled in {messages} messages; budget over the unsent part at most "
        f"{max(worst, 0) / 1024:.0f} KiB"
    )


async def _load_for(replica: Replica, seconds_or_task: float | asyncio.Task[None]) -> Tally:
    load = SteadyLoad([replica.client], chat_body(4096), workers=4)
    if isinstance(seconds_or_task, asyncio.Task):
        await seconds_or_task
    else:
        done = load.tally.completed
        await asyncio.sleep(seconds_or_task)  # a reference window of steady traffic
        if load.tally.completed == done:
            raise ScenarioFailed("no request completed in the reference window")
    return await load.stop()


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("slow-pull")
    size, per_mib_s = (16 * MiB, 0.1) if quick else (64 * MiB, 0.25)
    fleet = Fleet(workdir, kinference_env(max_body_bytes=64 * MiB))
    try:
        replica = await fleet.start("r")
        await warm_up(replica.client, chat_body(4096), 30 if quick else 200)
        baseline = replica.rss_mib()
        reference = await _load_for(replica, 1.5 if quick else 5.0)
        big = Tally()
        crawl = asyncio.create_task(_crawl(replica, size, per_mib_s, row, big))
        during = await _load_for(replica, crawl)
        row.tally = during
        row.tally.requests += reference.requests + big.requests
        row.tally.failed += reference.failed + big.failed
        row.tally.examples += reference.examples + big.examples
        ref_p99, p99 = reference.pick_quantile(0.99), during.pick_quantile(0.99)
        row.notes.append(
            f"small-body Pick p50/p99 {1000 * reference.pick_quantile(0.5):.1f}/"
            f"{1000 * ref_p99:.1f} ms before, {1000 * during.pick_quantile(0.5):.1f}/"
            f"{1000 * p99:.1f} ms during the crawl ({during.completed} requests)"
        )
        if p99 > max(P99_FACTOR * ref_p99, P99_FLOOR_S):
            row.problems.append(f"Pick p99 {1000 * p99:.1f} ms during the slow pull")
        await settle_memory(row, [replica], [baseline], 10.0)
        return row
    finally:
        await fleet.close()
