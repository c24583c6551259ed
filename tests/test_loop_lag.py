"""The event-loop lag probe records a blocked loop, and stops cleanly."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from kinference.loop_lag import LoopLagMonitor
from tests.api.helpers import wait_until

NAME = "kinference_event_loop_lag_seconds"


async def test_a_blocked_loop_shows_up_as_lag() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(registry, interval_s=0.01)
    monitor.start()
    try:
        await wait_until(lambda: (registry.get_sample_value(f"{NAME}_count") or 0) >= 3)
        time.sleep(0.06)  # noqa: ASYNC251 (blocking the loop is the fault being measured)
        blocked = registry.get_sample_value(f"{NAME}_count") or 0
        await wait_until(lambda: (registry.get_sample_value(f"{NAME}_count") or 0) > blocked)
        # The probe that spanned the block woke at least 50 ms late.
        over_50ms = registry.get_sample_value(f"{NAME}_count")
        under_50ms = registry.get_sample_value(f"{NAME}_bucket", {"le": "0.05"})
        assert over_50ms is not None and under_50ms is not None
        assert over_50ms - under_50ms >= 1
    finally:
        await monitor.aclose()
        await monitor.aclose()  # idempotent
    assert monitor._task is None


async def test_the_probe_does_not_run_before_start() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(registry)
    await asyncio.sleep(0)
    assert registry.get_sample_value(f"{NAME}_count") == 0
    await monitor.aclose()
