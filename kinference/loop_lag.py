"""Event-loop lag: how late the loop runs a callback it was asked to run on time.

Every body chunk, Pick and report of this process shares one asyncio loop, so a blocked
loop (a long synchronous parse, a GC pause, CPU starvation) delays every request at once.
A small task sleeps a fixed interval and records how much later than asked it woke up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram

from kinference.tasks import cancel_and_wait

# Seconds. A healthy loop wakes within a millisecond; tens of milliseconds show up directly
# in Pick latency; a second means the process was starved or stuck.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
PROBE_INTERVAL_S = 0.1  # seconds between probes: ten wake-ups a second cost nothing


class LoopLagMonitor:
    """Records the event loop's lag in `kinference_event_loop_lag_seconds` while running."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        interval_s: float = PROBE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self.histogram = Histogram(
            "kinference_event_loop_lag_seconds",
            "How much later than scheduled the event loop ran a periodic probe.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._probe_forever(), name="kinference-loop-lag")

    async def _probe_forever(self) -> None:
        while True:
            asked = self._clock()
            await asyncio.sleep(self.interval_s)
            self.histogram.observe(max(self._clock() - asked - self.interval_s, 0.0))

    async def aclose(self) -> None:
        """Stop probing (idempotent)."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
