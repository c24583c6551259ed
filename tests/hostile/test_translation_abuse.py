"""A big Anthropic Messages body routed to an OpenAI-chat pool (issue 15, item 1): its
translation parses every large value and serialises the result; done on the loop, a body of
a few MiB of small content blocks held it for hundreds of milliseconds. It is done in the
parse worker now: the loop's CPU between two wake-ups stays bounded as for the parse
(tests/hostile/test_body_abuse.py), and the pulled body is byte for byte what the loop's own
translation makes."""

from __future__ import annotations

import json

from kinference.bodies import Body
from kinference.client import PickerClient
from kinference.requests import RewritePlan, Shape, parse_request, rewrite
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import wait_nothing_held
from tests.conftest import MODEL, PickerFactory
from tests.hostile.beside_polite import MiB, beside_polite, chunks_of

ANTHROPIC_PATH = "/v1/messages"
BLOCKS = 60_000  # text blocks of one message: ~2 MiB, dense to parse, translate and dump
# One image, over gRPC's default 4 MiB receive limit: the translated member is one piece,
# which PullBody must still send as messages of at most 1 MiB.
IMAGE_BYTES = 6 * MiB
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


async def translated_round_trip(client: PickerClient, chunks: list[bytes], size: int) -> bytes:
    """Push an Anthropic body, Pick it (translated to chat), pull it whole, abort it."""
    pushed = await client.push(chunks, declared_length=size, request_path=ANTHROPIC_PATH)
    pick, extras = await client.pick_with_extras(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK, pick.reason
    assert extras.translated == (Shape.ANTHROPIC_MESSAGES, Shape.CHAT)
    pulled = await client.pull_all(pick.response_id)
    await client.abort(pick.response_id)
    return pulled


async def test_big_translations_never_hold_the_event_loop(start_picker: PickerFactory) -> None:
    picker = await start_picker(
        max_buffered_bytes=512 * MiB, max_body_bytes=16 * MiB, own_parse_worker=True
    )
    client = picker.client
    hostile = hostile_anthropic_body()

    async def hostile_caller() -> bytes:
        return await translated_round_trip(client, chunks_of(hostile, MiB), len(hostile))

    outcome = await beside_polite(picker, hostile_caller, WORKER_CPU_MIN_S)
    served = outcome.polite_outcomes
    assert served and all(result == pb.PickResponse.OK for result in served)
    expected = translated_on_the_loop(hostile)
    assert all(body == expected for body in outcome.hostile)
    assert json.loads(expected)["messages"][0]["role"] == "user"  # a chat request indeed
    await wait_nothing_held(picker)


def image_anthropic_body(image_bytes: int) -> bytes:
    """A valid Anthropic Messages request holding one base64 image of `image_bytes`."""
    image = {"type": "base64", "media_type": "image/png", "data": "A" * image_bytes}
    content = [{"type": "image", "source": image}, {"type": "text", "text": "what is it?"}]
    doc = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": content}]}
    return json.dumps(doc).encode()


async def test_a_big_translated_image_comes_back_without_holding_the_loop(
    start_picker: PickerFactory,
) -> None:
    picker = await start_picker(max_buffered_bytes=512 * MiB, max_body_bytes=64 * MiB)
    client = picker.client
    hostile = image_anthropic_body(IMAGE_BYTES)
    chunks = chunks_of(hostile, MiB)  # cut once: the copy is the test's own loop work

    async def hostile_caller() -> bytes:
        return await translated_round_trip(client, chunks, len(hostile))

    outcome = await beside_polite(picker, hostile_caller, 0.0)
    assert all(result == pb.PickResponse.OK for result in outcome.polite_outcomes)
    for pulled in outcome.hostile:  # checked once the loop is no longer watched
        sent = json.loads(pulled)["messages"][0]["content"][0]
        assert sent["image_url"]["url"] == "data:image/png;base64," + "A" * IMAGE_BYTES
    await wait_nothing_held(picker)
