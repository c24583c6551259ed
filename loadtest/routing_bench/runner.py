"""One run: fresh engines, one router in front of them, the conversations replayed.

The engines' counters are read just before and after the replay, so the cross-check
(engine hit rate, requests per engine) covers exactly the measured requests, not the
peers' readiness probes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from tqdm import tqdm

from loadtest.routing_bench.console import log
from loadtest.routing_bench.drivers import Driver
from loadtest.routing_bench.engines import counter_deltas, read_counters
from loadtest.routing_bench.fleets import Fleet
from loadtest.routing_bench.replay import Replay, Sample
from loadtest.routing_bench.replicas import Bench
from loadtest.routing_bench.routers import Router, driving
from loadtest.routing_bench.stats import RunStats, summarise
from loadtest.routing_bench.workload import MODEL, Conversation


@dataclass(frozen=True)
class RunPlan:
    router: Router
    rate: float
    conversations: list[Conversation]
    window_s: float | None = None  # no request sent after it (None: every turn)
    requests_out: Path | None = None  # each request's figures appended here, a JSON line each
    measured_s: float = 0.0  # output tokens counted up to it (`throughput.py`; 0: window_s)

    @property
    def requests(self) -> int:
        return sum(len(conversation.turns) for conversation in self.conversations)


def _progress(plan: RunPlan) -> tuple[tqdm[None], Callable[[Sample], None]]:
    bar: tqdm[None] = tqdm(
        total=plan.requests,
        desc=f"{plan.router.key} @ {plan.rate:g}/s",
        unit="req",
        file=sys.stderr,
        leave=False,
        mininterval=1.0,
    )

    def done(sample: Sample) -> None:
        bar.update(1)
        if sample.error:
            bar.set_postfix_str("errors!", refresh=False)

    return bar, done


WARMUP_REQUESTS = 4


async def warm_up(driver: Driver) -> None:
    """A few tiny requests through the router first (connections, imports, first picks),
    each with its own prompt so that no cache learns anything the workload uses."""
    for index in range(WARMUP_REQUESTS):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"warm-up {index}"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 2,
        }
        await driver.send(json.dumps(body).encode())


async def run(plan: RunPlan, fleet: Fleet, bench: Bench) -> RunStats:
    async with (
        fleet.running(plan.router.arrangement, bench.log_dir) as engines,
        driving(plan.router, engines, bench) as driver,
        httpx.AsyncClient(trust_env=False, timeout=5.0) as http,
    ):
        await warm_up(driver)
        before = await read_counters(http, engines.metrics_urls, engines.counters)
        bar, done = _progress(plan)
        try:
            replay = Replay(driver, done, plan.window_s)
            seconds = await replay.run(plan.conversations)
        finally:
            bar.close()
        after = await read_counters(http, engines.metrics_urls, engines.counters)
    stats = summarise(
        plan.router.label, plan.rate, replay.samples, counter_deltas(before, after), seconds,
        window_s=plan.measured_s or plan.window_s or 0.0,
    )  # fmt: skip
    if plan.requests_out is not None:
        with plan.requests_out.open("a") as out:
            out.writelines(
                s.line(plan.router.key, plan.rate, bench.seed) + "\n" for s in replay.samples
            )
    # The 1-minute load average as the run ends: about the run, on a shared machine.
    load = os.getloadavg()[0]
    stats = dataclasses.replace(stats, key=plan.router.key, load=load, seed=bench.seed)
    log(
        f"{plan.router.label} @ {plan.rate:g}/s, seed {bench.seed}: "
        f"{stats.requests} ok, {stats.errors} failed, "
        f"hit {stats.hit_rate:.3f}, "
        f"TTFT p50 {stats.ttft_p50_ms:.0f} ms p90 {stats.ttft_p90_ms:.0f} ms, "
        f"route p50 {stats.route_p50_ms:.0f} p90 {stats.route_p90_ms:.0f} ms, "
        f"imbalance {stats.imbalance:.2f}, {seconds:.1f} s, load {stats.load:.1f}"
    )
    if stats.first_error:
        log(f"  first error: {stats.first_error}")
    return stats
