"""The spec's conformance section done by a crowd at once: what callers MAY do ("servers MUST
tolerate"), sixteen callers doing it together on one connection, against the real server."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from typing import Any

import grpc

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    Code,
    KiB,
    MiB,
    bodies_held,
    chat_body,
    chunked,
    held_push,
    pick_ok,
    push,
    push_metadata,
    sized_chat_body,
    wait_nothing_held,
    wait_until,
)
from tests.api.test_pull import open_pull, read_all
from tests.conftest import MODEL, PickerFactory, RunningPicker

CROWD = 16


def outcomes(results: list[Any]) -> Counter[str]:
    """Each call's end: "ok", or the name of the status it failed with."""
    names: list[str] = []
    for result in results:
        if isinstance(result, grpc.aio.AioRpcError):
            names.append(result.code().name)
        elif isinstance(result, BaseException):
            raise result
        else:
            names.append("ok")
    return Counter(names)


async def together(calls: list[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


def bodies(size: int) -> list[bytes]:
    """CROWD distinct chat bodies of `size` bytes, so a body handed to another is seen."""
    return [sized_chat_body(size, tag=f"caller {i} ") for i in range(CROWD)]


async def test_a_crowd_aborting_one_response_releases_it_once(picker: RunningPicker) -> None:
    """Abort several times at once: one release, the rest NOT_FOUND (already released)."""
    picks = [await pick_ok(picker, body) for body in bodies(64 * KiB)]
    results = await together([picker.client.abort(p.response_id) for p in picks for _ in range(4)])
    assert outcomes(results) == {"ok": CROWD, "NOT_FOUND": 3 * CROWD}
    assert all(r.released for r in results if isinstance(r, pb.AbortResponse))
    await wait_nothing_held(picker)
    late = await together([picker.client.pull_all(p.response_id) for p in picks])
    assert outcomes(late) == {"NOT_FOUND": CROWD}


async def test_two_pulls_at_once_stream_each_body_once(picker: RunningPicker) -> None:
    """PullBody is single-shot: of two at once, one streams every byte, the other NOT_FOUND."""
    sent = bodies(256 * KiB)
    picks = [await pick_ok(picker, body) for body in sent]
    results = await together([picker.client.pull_all(p.response_id) for p in picks for _ in (0, 1)])
    assert outcomes(results) == {"ok": CROWD, "NOT_FOUND": CROWD}
    for i, pick in enumerate(picks):
        pulled = [r for r in results[2 * i : 2 * i + 2] if isinstance(r, bytes)]
        assert pulled == [sent[i]]
        assert len(pulled[0]) == pick.body_total_bytes
    assert bodies_held(picker)
    await together([picker.client.abort(p.response_id) for p in picks])
    await wait_nothing_held(picker)


async def test_abort_racing_pulls_never_cuts_a_body_short(picker: RunningPicker) -> None:
    """Aborts land before, at and mid-pull: a pull ends with every byte or a status, never
    with fewer bytes than body_total_bytes; everything is released."""
    sent = bodies(3 * MiB)
    picks = [await pick_ok(picker, body) for body in sent]
    client = picker.client

    async def mid_pull(index: int) -> bytes:
        call = open_pull(client, picks[index].response_id)
        head = await call.read()
        assert head is not grpc.aio.EOF
        await together([client.abort(picks[index].response_id) for _ in range(3)])
        # A status error propagates: a failed pull is allowed, a short one is not.
        return head.chunk + b"".join(await read_all(call))

    async def raced(index: int) -> bytes:
        rid = picks[index].response_id
        pulled, *_ = await together([client.pull_all(rid), client.abort(rid), client.abort(rid)])
        if isinstance(pulled, BaseException):
            raise pulled
        assert isinstance(pulled, bytes)
        return pulled

    results = await together([(mid_pull if i % 2 else raced)(i) for i in range(CROWD)])
    for i, result in enumerate(results):
        if isinstance(result, grpc.aio.AioRpcError):
            assert result.code() in (Code.NOT_FOUND, Code.CANCELLED), result
        else:
            assert result == sent[i], f"pull {i}: {len(result)} of {len(sent[i])} bytes"
    assert outcomes(results)["ok"] >= CROWD // 2  # the mid-pull ones had started streaming
    await wait_nothing_held(picker)


async def test_calls_after_the_bodies_expired_are_not_found(start_picker: PickerFactory) -> None:
    """Pick, PullBody and Abort after the TTL reclaimed the bodies: NOT_FOUND for each, at
    once; late reports are answered (not acknowledged) rather than failed."""
    picker = await start_picker(body_ttl_s=0.3)
    client = picker.client
    pushed = await together([push(picker, body) for body in bodies(32 * KiB)])
    picks = [await pick_ok(picker, body) for body in bodies(32 * KiB)]
    await wait_nothing_held(picker)
    calls: list[Awaitable[Any]] = [client.pick(p.stream_id) for p in pushed]
    calls += [client.pull_all(p.response_id) for p in picks]
    calls += [client.abort(p.response_id) for p in picks]
    assert outcomes(await together(calls)) == {"NOT_FOUND": 3 * CROWD}
    reports = await together(
        [client.first_token(p.response_id, 5) for p in picks]
        + [client.final_token(p.response_id, model=MODEL, prompt_tokens=1) for p in picks]
    )
    assert outcomes(reports) == {"ok": 2 * CROWD}
    assert not any(r.acknowledged for r in reports)
    await wait_nothing_held(picker)


async def test_ids_reused_after_their_request_ended(picker: RunningPicker) -> None:
    """A finished request's ids named again, by all at once: the stream id was consumed
    (FAILED_PRECONDITION), the response id names nothing (NOT_FOUND, reports unacknowledged)."""
    client = picker.client
    done = []
    for body in bodies(8 * KiB):
        pushed = await push(picker, body)
        pick = await client.pick(pushed.stream_id)
        assert await client.pull_all(pick.response_id) == body
        final = await client.final_token(pick.response_id, model=MODEL, prompt_tokens=3)
        assert final.acknowledged
        done.append((pushed.stream_id, pick.response_id))
    await wait_nothing_held(picker)
    calls: list[Awaitable[Any]] = [client.pick(stream_id) for stream_id, _ in done]
    calls += [client.pull_all(rid) for _, rid in done] + [client.abort(rid) for _, rid in done]
    assert outcomes(await together(calls)) == {"FAILED_PRECONDITION": CROWD, "NOT_FOUND": 2 * CROWD}
    again = await together([client.final_token(rid, model=MODEL) for _, rid in done])
    assert not any(r.acknowledged for r in again)
    await wait_nothing_held(picker)


async def test_a_crowd_of_resets_after_every_declared_byte_keeps_nothing(
    picker: RunningPicker,
) -> None:
    """Resets that can read as clean half-closes, sixteen at once, beside clean pushes: no
    reset body is kept or picked, and every clean one is."""
    store = picker.app.store
    reset_bodies = [chat_body(content=f"reset {i} " + "r" * 5000) for i in range(CROWD)]
    uploads = [held_push(picker, chunked(b, 1000), push_metadata(len(b))) for b in reset_bodies]
    clean = asyncio.ensure_future(together([push(picker, body) for body in bodies(6 * KiB)]))
    total = sum(map(len, reset_bodies))
    await wait_until(lambda: store.budget.used >= total, what="every reset body's bytes")
    await together([upload.reset() for upload in uploads])
    pushed = await clean
    assert outcomes(pushed) == {"ok": CROWD}
    picks = await together([picker.client.pick(p.stream_id) for p in pushed])
    assert all(p.outcome == pb.PickResponse.OK for p in picks)
    await together([picker.client.abort(p.response_id) for p in picks])
    await wait_nothing_held(picker)
    assert picker.metric("kinference_picks_total", {"outcome": "ok"}) == CROWD


async def test_calls_sent_to_another_instance_are_not_found(start_picker: PickerFactory) -> None:
    """stream_id and response_id are process-local: Pick, PullBody and Abort sent to another
    instance answer NOT_FOUND and leave the first instance's requests intact."""
    home, other = await start_picker(), await start_picker()
    sent = bodies(16 * KiB)
    pushed = await together([push(home, body) for body in sent])
    picked = [await pick_ok(home, body) for body in sent]
    calls: list[Awaitable[Any]] = [other.client.pick(p.stream_id) for p in pushed]
    calls += [other.client.pull_all(p.response_id) for p in picked]
    calls += [other.client.abort(p.response_id) for p in picked]
    assert outcomes(await together(calls)) == {"NOT_FOUND": 3 * CROWD}
    assert await together([home.client.pull_all(p.response_id) for p in picked]) == sent
    picks = await together([home.client.pick(p.stream_id) for p in pushed])
    assert all(p.outcome == pb.PickResponse.OK for p in picks)
    await together([home.client.abort(p.response_id) for p in picks + picked])
    await wait_nothing_held(home)
    await wait_nothing_held(other)


async def test_stalled_pulls_do_not_hold_up_other_requests(picker: RunningPicker) -> None:
    """Sixteen pulls that read one chunk and then stop reading entirely (backpressure), on
    the shared connection: other requests on it still run start to end; once the stalled
    callers go away, everything is released."""
    stalled = [await pick_ok(picker, body) for body in bodies(8 * MiB)]
    calls = [open_pull(picker.client, p.response_id) for p in stalled]
    heads = await together([call.read() for call in calls])
    assert all(h is not grpc.aio.EOF for h in heads)
    assert picker.app.store.held_bodies == CROWD
    for body in bodies(300 * KiB)[:4]:
        pick = await pick_ok(picker, body)
        assert await picker.client.pull_all(pick.response_id) == body
        assert (await picker.client.abort(pick.response_id)).released
    for call in calls:
        call.cancel()
    await wait_until(lambda: bodies_held(picker), what="the stalled pulls' bodies released")
    await together([picker.client.abort(p.response_id) for p in stalled])
    await wait_nothing_held(picker)


async def test_a_crowd_of_slow_uploads_outlasting_the_ttl_and_idle_budget(
    start_picker: PickerFactory,
) -> None:
    """Sixteen uploads at once, each taking longer than the body TTL and the inter-chunk
    budget in all (but never idle that long): every one is kept and picked."""
    picker = await start_picker(body_ttl_s=0.4, body_idle_timeout_s=0.4)
    sent = bodies(6 * KiB)

    async def paced(body: bytes) -> Any:
        for chunk in chunked(body, KiB):
            yield chunk
            await asyncio.sleep(0.1)  # the upload's pace, not a wait for state

    loop = asyncio.get_running_loop()
    started = loop.time()
    pushed = await together([picker.client.push(paced(b), declared_length=len(b)) for b in sent])
    assert outcomes(pushed) == {"ok": CROWD}
    assert loop.time() - started > 0.4
    picks = await together([picker.client.pick(p.stream_id) for p in pushed])
    assert [await picker.client.pull_all(p.response_id) for p in picks] == sent
    await together([picker.client.abort(p.response_id) for p in picks])
    await wait_nothing_held(picker)


async def test_a_crowd_of_connections_lost_after_every_declared_byte_keeps_nothing(
    picker: RunningPicker,
) -> None:
    """Sixteen callers each send every declared byte on their own connection, which then
    goes away with no half-close: no body is kept for any of them."""
    store = picker.app.store
    sent = [chat_body(content=f"lost {i} " + "l" * 5000) for i in range(CROWD)]
    clients = [PickerClient(picker.target) for _ in sent]
    uploads = [
        held_push(picker, chunked(body, 1000), push_metadata(len(body)), client=client)
        for body, client in zip(sent, clients, strict=True)
    ]
    await wait_until(lambda: store.budget.used == sum(map(len, sent)), what="every byte held")
    await together([client.close() for client in clients])
    ends = await together([upload.call for upload in uploads])
    assert not any(isinstance(end, pb.PushBodyResponse) for end in ends), ends
    await wait_until(lambda: bodies_held(picker), what="the lost uploads to be discarded")
    assert picker.metric("kinference_picks_total", {"outcome": "ok"}) == 0
