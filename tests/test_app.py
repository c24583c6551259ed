"""The picker's composition root: its close does not hold the event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tests.conftest import PickerFactory


async def test_closing_stops_the_metrics_server_without_holding_the_loop(
    start_picker: PickerFactory,
) -> None:
    """prometheus_client's server stops at its serving thread's next poll (up to 0.5 s),
    and `shutdown` waits for that: run on the loop it held every other task (another
    replica's, in-process) as long. Here its stop waits for a loop callback scheduled
    from inside it, which cannot run while the loop is held."""
    picker = await start_picker(metrics_listen="127.0.0.1:0")
    server: Any = picker.app._metrics_server
    loop, ran = asyncio.get_running_loop(), threading.Event()
    stop = server.shutdown

    def shutdown() -> None:
        loop.call_soon_threadsafe(ran.set)
        ran.wait(5.0)  # held: only once the 5 s are up
        stop()

    server.shutdown = shutdown
    await picker.app.close()
    assert ran.is_set()
    assert picker.app._metrics_server is None
