"""`kinference gateway`'s serving entry point settles the heap as `kinference serve` does.

The default deployment hosts the picker in the gateway's process: its bodies, parses and
startup heap live there, so the fixed mmap threshold and the frozen startup heap
(kinference.heap) must apply there too. These tests fail if `serve_until_signalled` stops
going through `kinference.heap.start_serving`.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from prometheus_client import CollectorRegistry

from kinference import heap
from kinference.config import default_policy
from kinference.gateway.app import build_app
from kinference.gateway.backends import load_backends
from kinference.gateway.callers import load_api_keys
from kinference.gateway.embedded import picker_opener
from kinference.gateway.server import GatewayServer
from kinference.gateway.settings import GatewaySettings
from kinference.settings import Settings


def _in_process_gateway(events: list[str]) -> GatewayServer:
    """The gateway `kinference gateway` builds by default: the picker hosted in-process."""
    settings = GatewaySettings(listen="127.0.0.1:0", picker="")
    picker_settings = Settings(listen="127.0.0.1:0", metrics_listen="")
    registry = CollectorRegistry()
    opener = picker_opener(settings, picker_settings, default_policy(), registry)

    def recorded_opener() -> object:
        events.append("picker started")
        return opener()

    app = build_app(
        settings,
        load_backends(settings.backends_file),
        load_api_keys(settings.api_keys_file),
        picker=recorded_opener,  # type: ignore[arg-type]
        registry=registry,
    )
    return GatewayServer(app, settings.listen)


async def _serve_then_stop(server: GatewayServer) -> None:
    """Serve as the command line does, stop once it accepts connections."""
    serving = asyncio.create_task(server.serve_until_signalled())
    while not server.server.started:
        assert not serving.done(), "the gateway stopped while starting"
        await asyncio.sleep(0.01)
    await server.stop()
    await serving


async def test_the_gateway_fixes_the_threshold_before_and_freezes_after_the_picker_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []

    def fix(nbytes: int = heap.MMAP_THRESHOLD_BYTES) -> bool:
        events.append("threshold fixed")
        return True

    def freeze() -> None:
        events.append("heap frozen")

    monkeypatch.setattr(heap, "fix_mmap_threshold", fix)
    monkeypatch.setattr(heap, "freeze_startup_heap", freeze)
    await _serve_then_stop(_in_process_gateway(events))
    assert events == ["threshold fixed", "picker started", "heap frozen"]


async def test_the_gateway_freezes_the_startup_heap_for_real(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    real_freeze = heap.freeze_startup_heap

    def freeze() -> None:
        real_freeze()
        events.append("heap frozen")

    monkeypatch.setattr(heap, "fix_mmap_threshold", lambda nbytes=heap.MMAP_THRESHOLD_BYTES: True)
    monkeypatch.setattr(heap, "freeze_startup_heap", freeze)
    gc.unfreeze()
    try:
        await _serve_then_stop(_in_process_gateway(events))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # back under the collector: other tests' objects are not startup's


async def test_the_gateway_freezes_the_heap_before_it_accepts_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The collection before the freeze (28-74 ms measured) delays no request: it runs after
    the app's startup and before uvicorn accepts (before: once `started`, with clients
    that waited for readiness already being served)."""
    server = _in_process_gateway([])
    seen: list[tuple[bool, int]] = []

    def freeze() -> None:
        seen.append((server.server.started, len(getattr(server.server, "servers", []))))

    monkeypatch.setattr(heap, "fix_mmap_threshold", lambda nbytes=heap.MMAP_THRESHOLD_BYTES: True)
    monkeypatch.setattr(heap, "freeze_startup_heap", freeze)
    await _serve_then_stop(server)
    assert seen == [(False, 0)]
