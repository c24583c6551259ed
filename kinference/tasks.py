"""Stopping background tasks: cancel them, and wait for their end.

Every `aclose` of a component with tasks of its own (the policy watcher, the loop-lag probe,
discovery's watches, the KV-event feeds, the reaper, the cluster loops) does this.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(
    *tasks: asyncio.Task[Any] | None, recancel_s: float | None = None
) -> None:
    """Cancel `tasks` (None ones skipped), then wait for each to end. A task's cancellation
    is not raised here; another error of its is. With `recancel_s`, a task still running is
    cancelled again every `recancel_s` seconds: a cancel can be lost (one that lands as a
    timeout inside a retried step surfaces as TimeoutError, which the loop retries), and a
    plain wait then lasts forever (`kinference.cluster.node`)."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    if recancel_s is not None:
        pending = {task for task in running if not task.done()}
        while pending:
            _done, pending = await asyncio.wait(pending, timeout=recancel_s)
            for task in pending:
                task.cancel()
    for task in running:
        with contextlib.suppress(asyncio.CancelledError):
            await task
