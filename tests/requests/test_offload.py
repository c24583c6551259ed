"""The parse thread: work runs with the collector paused and a short switch interval,
and both are restored afterwards, also when the work raises."""

from __future__ import annotations

import gc
import sys

import pytest

from kinference.requests.offload import WORKING_SWITCH_INTERVAL_S, Offload


async def test_work_runs_with_gc_paused_and_a_short_switch_interval() -> None:
    offload = Offload()
    before = sys.getswitchinterval()
    try:
        seen = await offload.run(lambda: (gc.isenabled(), sys.getswitchinterval()))
    finally:
        offload.close()
    assert seen[0] is False
    assert seen[1] == pytest.approx(min(before, WORKING_SWITCH_INTERVAL_S))
    assert sys.getswitchinterval() == before and gc.isenabled()


async def test_both_are_restored_when_the_work_raises() -> None:
    offload = Offload()
    before = sys.getswitchinterval()

    def failing() -> None:
        raise ValueError("boom")

    try:
        with pytest.raises(ValueError):
            await offload.run(failing)
    finally:
        offload.close()
    assert sys.getswitchinterval() == before and gc.isenabled()
