"""Pick conformance: protocol errors, routing outcomes, pools, least in-flight choice."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import grpc
import pytest

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    ALL_ENDPOINTS,
    ENDPOINT_BIG,
    ENDPOINTS_CHAT,
    POOL_BIG,
    POOL_CHAT,
    Code,
    KiB,
    assert_code,
    bodies_held,
    chat_body,
    pick_ok,
    pull_status,
    push,
    push_and_pick,
    sized_chat_body,
    status_of,
    wait_nothing_held,
    wait_until,
)
from tests.api.test_push import assert_random_ids
from tests.conftest import MODEL, OTHER_MODEL, PickerFactory, RunningPicker

OK = pb.PickResponse.OK
BIG = 300 * KiB  # above the size from which the server scans bodies as they arrive


async def test_response_ids_are_random_and_never_zero(picker: RunningPicker) -> None:
    ids = [(await pick_ok(picker)).response_id for _ in range(200)]
    assert_random_ids(ids)
    for response_id in ids:
        assert (await picker.client.abort(response_id)).released
    await wait_nothing_held(picker)


async def test_pick_on_stream_id_zero_is_invalid_argument(picker: RunningPicker) -> None:
    await push(picker, chat_body())  # a body exists; 0 must still name none
    error = await status_of(picker.client.pick(0))
    assert_code(error, Code.INVALID_ARGUMENT)
    assert picker.app.store.held_bodies == 1


@pytest.mark.parametrize("stream_id", [1, 12345, (1 << 64) - 1])
async def test_pick_on_unknown_stream_is_not_found(picker: RunningPicker, stream_id: int) -> None:
    error = await status_of(picker.client.pick(stream_id))
    assert_code(error, Code.NOT_FOUND)


@pytest.mark.parametrize("body", [chat_body(), b"not json"], ids=["dispatched", "bad_request"])
async def test_second_pick_on_a_stream_is_failed_precondition(
    picker: RunningPicker, body: bytes
) -> None:
    pushed = await push(picker, body)
    first = await picker.client.pick(pushed.stream_id)
    assert first.outcome in (OK, pb.PickResponse.BAD_REQUEST)
    for _ in range(2):
        error = await status_of(picker.client.pick(pushed.stream_id))
        assert_code(error, Code.FAILED_PRECONDITION)
    # The first Pick's result is untouched by the refused ones.
    if first.outcome == OK:
        assert await picker.client.pull_all(first.response_id) == body


def _big_json(head: str, pad_field: str = "padding") -> bytes:
    """`head` (an object's opening members) followed by a large padding member."""
    return (head + f'"{pad_field}": "' + "p" * BIG + '"}').encode()


BAD_BODIES = {
    "not_json": b"hello, world",
    "empty": b"",
    "not_object_array": b'[{"model": "m"}]',
    "not_object_string": json.dumps(MODEL).encode(),
    "not_object_number": b"42",
    "missing_model": json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(),
    "null_model": chat_body(model=None),
    "number_model": chat_body(model=7),
    "object_model": chat_body(model={"name": MODEL}),
    "list_model": chat_body(model=[MODEL]),
    "truncated": chat_body()[:-3],
    "truncated_mid_string": chat_body()[:15],
    "trailing_garbage": chat_body() + b"}",
    "big_truncated": sized_chat_body(BIG)[:-10],
    "big_not_json": b"x" * BIG,
    "big_not_object": b"[" + b'"' + b"p" * BIG + b'"]',
    "big_missing_model": _big_json('{"messages": [], '),
    "big_number_model": _big_json('{"model": 7, "messages": [], '),
    "big_trailing_garbage": sized_chat_body(BIG) + b" {}",
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
async def test_bad_request_has_a_reason_and_releases_the_body(
    picker: RunningPicker, body: bytes
) -> None:
    pushed = await push(picker, body)
    assert pushed.total_bytes == len(body)
    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.BAD_REQUEST, pick
    assert pick.reason, "BAD_REQUEST must say why"
    assert pick.response_id == 0
    assert pick.WhichOneof("destination") is None
    await wait_until(lambda: bodies_held(picker), what="the refused body to be released")
    assert len(picker.app.inflight) == 0


async def test_completions_and_big_bodies_are_inference_requests(picker: RunningPicker) -> None:
    completion = json.dumps({"model": MODEL, "prompt": "Once upon a time"}).encode()
    for body in (completion, sized_chat_body(BIG), sized_chat_body(3 * BIG)):
        pick = await pick_ok(picker, body)
        assert pick.requested_model == MODEL
        assert pick.body_total_bytes == len(body)
        assert await picker.client.pull_all(pick.response_id) == body


NO_WORKERS_CASES = {
    "unknown_model": ("no-such-model", None),
    "unknown_pool_name": (MODEL, ("default", "nope")),
    "unknown_pool_namespace": (MODEL, ("elsewhere", "chat")),
    "pool_without_the_model": (OTHER_MODEL, POOL_CHAT),
    "unknown_model_in_pool": ("no-such-model", POOL_BIG),
    # JSON's "\ud800": a str with no UTF-8 form, echoed in the answer (requested_model,
    # reason), which protobuf refused: the Pick failed UNKNOWN, its traceback logged.
    "model_with_a_lone_surrogate": ("\ud800", None),
    "model_with_a_lone_surrogate_in_pool": ("m\udfff", POOL_BIG),
}


@pytest.mark.parametrize(("model", "pool"), NO_WORKERS_CASES.values(), ids=NO_WORKERS_CASES.keys())
async def test_no_workers_has_a_reason_and_releases_the_body(
    picker: RunningPicker, model: str, pool: tuple[str, str] | None
) -> None:
    for body in (chat_body(model), sized_chat_body(BIG, model)):
        pick = await push_and_pick(picker, body, pool)
        assert pick.outcome == pb.PickResponse.NO_WORKERS, pick
        assert pick.reason, "NO_WORKERS must say why"
        assert pick.response_id == 0
        assert pick.WhichOneof("destination") is None
        await wait_until(lambda: bodies_held(picker), what="the body to be released")
        assert len(picker.app.inflight) == 0


async def test_named_pool_limits_the_choice(picker: RunningPicker) -> None:
    """Without releases, least in-flight would spread these over all pools; the pool rules."""
    big = [await pick_ok(picker, pool=POOL_BIG) for _ in range(9)]
    assert {p.local.endpoint for p in big} == {ENDPOINT_BIG}
    chat = [await pick_ok(picker, pool=POOL_CHAT) for _ in range(10)]
    assert Counter(p.local.endpoint for p in chat) == dict.fromkeys(ENDPOINTS_CHAT, 5)
    other = [await pick_ok(picker, chat_body(OTHER_MODEL), pool=POOL_BIG) for _ in range(3)]
    assert {p.local.endpoint for p in other} == {ENDPOINT_BIG}
    assert all(p.requested_model == OTHER_MODEL for p in other)
    for pick in big + chat + other:
        assert (await picker.client.abort(pick.response_id)).released
    await wait_nothing_held(picker)


async def test_absent_pool_means_every_pool(picker: RunningPicker) -> None:
    picks = [await pick_ok(picker) for _ in range(12)]
    assert Counter(p.local.endpoint for p in picks) == dict.fromkeys(ALL_ENDPOINTS, 4)
    # A model only one pool serves is found there without naming it.
    other = await pick_ok(picker, chat_body(OTHER_MODEL))
    assert other.local.endpoint == ENDPOINT_BIG


async def test_least_in_flight_avoids_a_busy_endpoint_until_released(
    picker: RunningPicker,
) -> None:
    busy = await pick_ok(picker, pool=POOL_CHAT)
    (idle,) = ENDPOINTS_CHAT - {busy.local.endpoint}
    for _ in range(10):
        pick = await pick_ok(picker, pool=POOL_CHAT)
        assert pick.local.endpoint == idle, "an endpoint with a request in flight was chosen"
        await picker.client.pull_all(pick.response_id)
        final = await picker.client.final_token(pick.response_id, model=MODEL)
        assert final.acknowledged
    assert (await picker.client.abort(busy.response_id)).released
    # Equal load again: both endpoints are used (random tie-break).
    seen = set()
    for _ in range(30):
        pick = await pick_ok(picker, pool=POOL_CHAT)
        seen.add(pick.local.endpoint)
        assert (await picker.client.abort(pick.response_id)).released
    assert seen == ENDPOINTS_CHAT
    await wait_nothing_held(picker)


async def test_picks_spread_evenly_over_endpoints(picker: RunningPicker) -> None:
    picks = [await pick_ok(picker) for _ in range(30)]
    counts = Counter(p.local.endpoint for p in picks)
    assert counts == dict.fromkeys(ALL_ENDPOINTS, 10)
    assert picker.app.inflight.per_endpoint() == dict.fromkeys(ALL_ENDPOINTS, 10)


RELEASES = ["final_token", "abort", "abort_after_pull", "request_ttl"]


@pytest.mark.parametrize("release", RELEASES)
async def test_in_flight_count_drops(start_picker: PickerFactory, release: str) -> None:
    # The reaper runs every body_ttl_s / 4 (at most every second).
    ttl = {"request_ttl_s": 1.0, "body_ttl_s": 2.0} if release == "request_ttl" else {}
    picker = await start_picker(**ttl)
    inflight = picker.app.inflight
    first = await pick_ok(picker, pool=POOL_CHAT)
    endpoint = first.local.endpoint
    assert inflight.load(endpoint) == 1
    assert picker.metric("kinference_inflight_requests", {"endpoint": endpoint}) == 1

    if release == "final_token":
        await picker.client.pull_all(first.response_id)
        final = await picker.client.final_token(first.response_id, model=MODEL)
        assert final.acknowledged
    elif release == "abort":
        assert (await picker.client.abort(first.response_id)).released
    elif release == "abort_after_pull":
        await picker.client.pull_all(first.response_id)
        assert (await picker.client.abort(first.response_id)).released
    else:
        await picker.client.pull_all(first.response_id)  # then never reports
    await wait_until(lambda: inflight.load(endpoint) == 0, what="the in-flight count to drop")
    assert picker.metric("kinference_inflight_requests", {"endpoint": endpoint}) == 0

    # With no load left anywhere in the pool, the released endpoint is chosen again: pick two
    # without releasing them and both endpoints must be used.
    two = {(await pick_ok(picker, pool=POOL_CHAT)).local.endpoint for _ in range(2)}
    assert two == ENDPOINTS_CHAT
    # The first request is gone for good: its body and its in-flight entry.
    assert (await pull_status(picker, first.response_id)).code() == Code.NOT_FOUND
    if release == "request_ttl":
        assert_code(await status_of(picker.client.abort(first.response_id)), Code.NOT_FOUND)


async def test_concurrent_picks_on_one_stream_dispatch_once(picker: RunningPicker) -> None:
    body = chat_body()
    pushed = await push(picker, body)
    results = await asyncio.gather(
        *(picker.client.pick(pushed.stream_id) for _ in range(5)), return_exceptions=True
    )
    picks = [r for r in results if isinstance(r, pb.PickResponse)]
    errors = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(picks) == 1
    assert picks[0].outcome == OK
    assert [e.code() for e in errors] == [Code.FAILED_PRECONDITION] * 4
    assert await picker.client.pull_all(picks[0].response_id) == body


@pytest.mark.parametrize("qos", pb.PickRequest.QosClass.values())
@pytest.mark.parametrize("tenant", ["", "team-a"])
async def test_every_qos_class_and_tenant_is_routed(
    picker: RunningPicker, qos: int, tenant: str
) -> None:
    pushed = await push(picker, chat_body())
    pick = await picker.client.pick(pushed.stream_id, qos=qos, tenant=tenant)
    assert pick.outcome == OK
    assert pick.local.endpoint in ALL_ENDPOINTS
