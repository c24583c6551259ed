"""Stopping background tasks (kinference.tasks): cancelled, waited for, errors not hidden."""

from __future__ import annotations

import asyncio

import pytest

from kinference.tasks import cancel_and_wait


async def test_the_tasks_are_cancelled_and_ended_and_none_is_skipped() -> None:
    tasks = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(3)]
    await cancel_and_wait(tasks[0], None, *tasks[1:])
    assert all(task.cancelled() for task in tasks)


async def test_a_task_that_swallows_a_cancel_is_cancelled_again() -> None:
    """As a loop whose step turns the cancel into an error and retries (the cluster loops)."""
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 1:
                    continue  # the first cancel lost
                raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await cancel_and_wait(task, recancel_s=0.001)
    assert task.cancelled() and swallowed == 2


async def test_an_error_of_a_task_is_raised() -> None:
    async def failing_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(failing_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)
