"""The parse thread: work runs with the collector paused, restored afterwards, also when
the work raises."""

from __future__ import annotations

import gc

import pytest

from kinference.requests.offload import Offload


async def test_work_runs_with_gc_paused_and_it_is_restored() -> None:
    offload = Offload()
    try:
        assert await offload.run(gc.isenabled) is False
    finally:
        offload.close()
    assert gc.isenabled()


async def test_gc_is_restored_when_the_work_raises() -> None:
    offload = Offload()

    def failing() -> None:
        raise ValueError("boom")

    try:
        with pytest.raises(ValueError):
            await offload.run(failing)
    finally:
        offload.close()
    assert gc.isenabled()
