"""The spec's error model under a crowd: sixteen PushBody calls failing at once, beside
well-behaved ones, each get their own status and leave nothing held."""

from __future__ import annotations

import asyncio

from tests.api.helpers import (
    Code,
    KiB,
    MiB,
    assert_code,
    chunked,
    held_push,
    push,
    push_metadata,
    sized_chat_body,
    wait_nothing_held,
    wait_until,
)
from tests.api.test_crowd import CROWD, bodies, outcomes, together
from tests.conftest import PickerFactory, RunningPicker


async def drop(picker: RunningPicker, stream_ids: list[int]) -> None:
    """Pick and abort each pushed body, then wait until nothing is held. A Pick whose parse
    the full budget cannot hold is RESOURCE_EXHAUSTED with its body released (by design:
    tests/hostile/test_parse_budget.py)."""
    picks = await together([picker.client.pick(stream_id) for stream_id in stream_ids])
    assert set(outcomes(picks)) <= {"ok", "RESOURCE_EXHAUSTED"}
    placed = [p for p in picks if not isinstance(p, BaseException)]
    await together([picker.client.abort(p.response_id) for p in placed])
    await wait_nothing_held(picker)


async def test_a_crowd_over_the_server_wide_budget(start_picker: PickerFactory) -> None:
    """Sixteen declared 200 KiB uploads held open under a 1 MiB budget: as many as fit are
    kept, the others RESOURCE_EXHAUSTED; the budget is never overdrawn."""
    size, limit = 200 * KiB, MiB
    picker = await start_picker(max_body_bytes=256 * KiB, max_buffered_bytes=limit)
    store = picker.app.store
    release = asyncio.Event()
    sent = bodies(size)
    uploads = [
        held_push(picker, chunked(body, 50 * KiB), push_metadata(size), release=release)
        for body in sent
    ]

    def settled() -> bool:
        done = sum(upload.call.done() for upload in uploads)
        return done + store.budget.used // size == CROWD and store.budget.used % size == 0

    await wait_until(settled, what="every upload kept or refused")
    kept = store.budget.used // size
    assert 1 <= kept <= limit // size
    release.set()
    results = await together([upload.call for upload in uploads])
    assert outcomes(results) == {"ok": kept, "RESOURCE_EXHAUSTED": CROWD - kept}
    assert store.budget.used == kept * size
    await drop(picker, [r.stream_id for r in results if not isinstance(r, BaseException)])


async def test_a_crowd_of_idle_uploads_beside_steady_ones(start_picker: PickerFactory) -> None:
    """Sixteen uploads that go silent: DEADLINE_EXCEEDED each; sixteen steady ones beside
    them complete."""
    picker = await start_picker(body_idle_timeout_s=0.3)
    sent = bodies(8 * KiB)
    idle = [held_push(picker, [body[:100]], push_metadata(len(body))) for body in sent]
    steady = await together([push(picker, body) for body in sent])
    assert outcomes(steady) == {"ok": CROWD}
    for upload in idle:
        assert_code(await upload.error(), Code.DEADLINE_EXCEEDED)
    await drop(picker, [p.stream_id for p in steady])


async def test_a_crowd_of_length_mismatches(picker: RunningPicker) -> None:
    """Bodies shorter than declared (clean half-close) and longer (excess held open), sixteen
    of each at once: INVALID_ARGUMENT for every one, nothing kept."""
    sent = bodies(4 * KiB)
    short = [picker.client.push(chunked(b, KiB), declared_length=len(b) + 1) for b in sent]
    long = [held_push(picker, chunked(b, KiB), push_metadata(len(b) - 1)) for b in sent]
    assert outcomes(await together(short)) == {"INVALID_ARGUMENT": CROWD}
    for upload in long:
        assert_code(await upload.error(), Code.INVALID_ARGUMENT)
    await wait_nothing_held(picker)


async def test_a_crowd_of_oversized_chunks_beside_1_mib_ones(picker: RunningPicker) -> None:
    """One chunk over 1 MiB fails its push with RESOURCE_EXHAUSTED even within budget, for
    each of sixteen at once; pushes of exactly 1 MiB chunks beside them are kept."""
    over = sized_chat_body(MiB + 1)
    oversized = [held_push(picker, [over], push_metadata(len(over))) for _ in range(CROWD)]
    exact = [sized_chat_body(2 * MiB, tag=f"exact {i} ") for i in range(CROWD // 2)]
    kept = await together([push(picker, body, chunk_size=MiB) for body in exact])
    assert outcomes(kept) == {"ok": CROWD // 2}
    for upload in oversized:
        assert_code(await upload.error(), Code.RESOURCE_EXHAUSTED)
    await drop(picker, [p.stream_id for p in kept])
