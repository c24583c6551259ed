"""`kinference serve` settles its heap (kinference.heap) before it reports SERVING."""

from __future__ import annotations

import gc

import pytest
from prometheus_client import CollectorRegistry

from kinference import heap
from kinference.app import App
from kinference.config import parse_policy
from tests.conftest import TEST_POLICY, make_settings


async def test_the_picker_freezes_its_startup_heap_before_it_reports_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: frozen after `start` returned, when callers waiting for SERVING were already
    sending, so their first calls waited for the full collection."""
    app = App(make_settings(), parse_policy(TEST_POLICY), CollectorRegistry())
    events: list[str] = []
    real_set = app.health.set

    async def recorded_set(service: str, status: object) -> None:
        events.append(f"serving {service!r}")
        await real_set(service, status)  # type: ignore[arg-type]

    def freeze() -> None:
        events.append("heap frozen")

    monkeypatch.setattr(app.health, "set", recorded_set)
    monkeypatch.setattr(heap, "fix_mmap_threshold", lambda nbytes=heap.MMAP_THRESHOLD_BYTES: True)
    monkeypatch.setattr(heap, "freeze_startup_heap", freeze)
    monkeypatch.setattr(heap, "cache_large_blocks", lambda: bool(events.append("blocks kept")))
    try:
        await heap.start_serving(app.start)
    finally:
        await app.server.stop(None)
        await app.close()
    assert events == [
        "blocks kept",
        "heap frozen",
        "serving ''",
        "serving 'kinference.v1.Picker'",
    ]


def test_the_startup_heap_is_frozen_for_real() -> None:
    gc.unfreeze()
    try:
        heap.freeze_startup_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
