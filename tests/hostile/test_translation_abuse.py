"""A big Anthropic Messages body routed to an OpenAI-chat pool (issue 15, item 1): its
translation parses every large value and serialises the result; done on the loop, a body of
a few MiB of small content blocks held it for hundreds of milliseconds. It is done in the
parse worker now: the loop's CPU between two wake-ups stays bounded as for the parse
(tests/hostile/test_body_abuse.py), and the pulled body is byte for byte what the loop's own
translation makes."""

from __future__ import annotations

import asyncio
import gc
import json

from kinference.bodies import Body
from kinference.heap import freeze_startup_heap
from kinference.requests import RewritePlan, Shape, parse_request, rewrite
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body, wait_nothing_held
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.hostile.test_body_abuse import (
    LOOP_CPU_LIMIT_S,
    LagProbe,
    MiB,
    chunks_of,
    process_cpu_s,
)

ANTHROPIC_PATH = "/v1/messages"
BLOCKS = 60_000  # text blocks of one message: ~2 MiB, dense to parse, translate and dump
WORKER_CPU_MIN_S = 0.3  # the three translations, and their parses, take seconds of CPU


def hostile_anthropic_body(blocks: int = BLOCKS) -> bytes:
    """A valid Anthropic Messages request whose one message has `blocks` tiny text blocks."""
    content = [{"type": "text", "text": f"w{index % 10}"} for index in range(blocks)]
    doc = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": content}]}
    return json.dumps(doc).encode()


def translated_on_the_loop(data: bytes) -> bytes:
    """The body the loop's own translation makes (`rewrite` with nothing computed ahead)."""
    body = Body([data], reserved=0)
    request = parse_request(body, path=ANTHROPIC_PATH)
    rewritten = rewrite(body, request, RewritePlan(model=MODEL, sent_shape=Shape.CHAT))
    return b"".join(bytes(piece) for piece in rewritten.pieces)


async def test_big_translations_never_hold_the_event_loop(start_picker: PickerFactory) -> None:
    picker = await start_picker(max_buffered_bytes=512 * MiB, max_body_bytes=16 * MiB)
    freeze_startup_heap()  # as `kinference serve` does once it is up
    try:
        await _translations_beside_polite(picker)
    finally:
        gc.unfreeze()


async def _translations_beside_polite(picker: RunningPicker) -> None:
    client = picker.client
    hostile = hostile_anthropic_body()
    probe = LagProbe()
    served: list[int] = []

    async def hostile_caller() -> bytes:
        pushed = await client.push(
            chunks_of(hostile, MiB), declared_length=len(hostile), request_path=ANTHROPIC_PATH
        )
        pick, extras = await client.pick_with_extras(pushed.stream_id)
        assert pick.outcome == pb.PickResponse.OK, pick.reason
        assert extras.translated == (Shape.ANTHROPIC_MESSAGES, Shape.CHAT)
        pulled = await client.pull_all(pick.response_id)
        await client.abort(pick.response_id)
        return pulled

    async def polite_caller(stop: asyncio.Event) -> None:
        body = chat_body()
        while not stop.is_set():
            pick = await client.pick((await client.push([body])).stream_id)
            await client.abort(pick.response_id)
            served.append(pick.outcome)

    stop = asyncio.Event()
    polite = [asyncio.create_task(polite_caller(stop)) for _ in range(4)]
    pulled = await asyncio.gather(*(hostile_caller() for _ in range(3)))
    stop.set()
    await asyncio.gather(*polite)
    worst, worst_cpu = await probe.stop()
    print(f"worst loop lag {worst * 1000:.1f} ms (loop CPU {worst_cpu * 1000:.1f} ms), "
          f"polite picks {len(served)}")  # fmt: skip
    worker = picker.app.service.offload.worker_pid
    assert worker is not None, "the translations never reached the parse worker"
    worker_cpu = process_cpu_s(worker)
    print(f"parse worker CPU {worker_cpu:.1f} s")
    assert worst_cpu < LOOP_CPU_LIMIT_S, f"the loop itself worked {worst_cpu * 1000:.0f} ms"
    assert worker_cpu > WORKER_CPU_MIN_S, f"the worker did {worker_cpu:.2f} s of the work"
    assert served and all(outcome == pb.PickResponse.OK for outcome in served)
    expected = translated_on_the_loop(hostile)
    assert all(body == expected for body in pulled)
    assert json.loads(expected)["messages"][0]["role"] == "user"  # a chat request indeed
    await wait_nothing_held(picker)
