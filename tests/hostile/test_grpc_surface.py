"""Hostile callers over a real channel to a real server.

Raw bytes that may not be protobuf at all for every method, garbage PushBody metadata, ids
0, 2^64-1 and random ones, unknown enum values and oversized strings. Every call must end
in a status of the spec's error model (or succeed); never INTERNAL or UNKNOWN, never a dead
server; and afterwards the server holds no body byte.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence

import grpc
import pytest

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    CORE_TRANSPORT_LOST,
    HOLD_S,
    KiB,
    MiB,
    chat_body,
    held_push,
    push_errors_sent,
    push_metadata,
    status_of,
    status_sent_since,
    wait_nothing_held,
)
from tests.conftest import RunningPicker

SERVICE = "/kinference.v1.Picker/"
UNARY = ("Pick", "ReportFirstToken", "ReportFinalToken", "Abort")
# The spec's error model, plus OK; INTERNAL and UNKNOWN would mean an unhandled exception.
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
MAX_ID = (1 << 64) - 1
CALL_S = HOLD_S  # bound on one call; a server that hangs fails the test here


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def valid_messages() -> dict[str, list[bytes]]:
    """Well-formed requests per method, to be mutated."""
    return {
        "Pick": [
            pb.PickRequest(body_stream_id=5, tenant="t", client_request_id="r").SerializeToString(),
            pb.PickRequest(
                body_stream_id=MAX_ID, qos_class=pb.PickRequest.BATCH
            ).SerializeToString(),
        ],
        "PullBody": [pb.PullBodyRequest(response_id=9).SerializeToString()],
        "ReportFirstToken": [
            pb.ReportFirstTokenRequest(
                response_id=3, observed_ttft_ms=4, upstream_status=-1
            ).SerializeToString()
        ],
        "ReportFinalToken": [
            pb.ReportFinalTokenRequest(
                response_id=3, model="m", itl_bucket_counts=[1] * 15, itl_bucket_layout=1
            ).SerializeToString()
        ],
        "Abort": [
            pb.AbortRequest(response_id=3, reason=4, detail="d").SerializeToString(),
        ],
    }


# Hand-made wire forms that decoders get wrong: wrong wire types, over-long varints,
# lengths past the end, deep groups, unknown fields, a 2^64-1 id, a negative enum.
TRICKY: list[bytes] = [
    b"",
    b"\x08",  # field 1 varint, value missing
    b"\x08" + b"\xff" * 10 + b"\x01",  # varint longer than 10 bytes
    b"\x08" + b"\xff" * 9 + b"\x01",  # 2^64-1
    b"\x0a\x05abc",  # length past the end
    b"\x0a" + varint(1 << 40),  # a huge declared length
    b"\x0a\x03abc",  # field 1 as bytes where it is a uint64
    b"\x0b" * 200 + b"\x0c" * 200,  # nested start-group / end-group
    b"\x0b" * 5000,  # unterminated groups, deep
    b"\x20" + varint(MAX_ID),  # qos_class / reason of 2^64-1 (negative as int32)
    b"\x20\x07",  # unknown qos_class / reason 7
    b"\xf8\xff\xff\xff\x0f\x01",  # field 2^29-1 (largest), varint
    b"\x00\x01",  # field number 0
    b"\x2a" + varint(100 * KiB) + b"x" * (100 * KiB),  # a 100 KiB string in field 5
    b"\x12\x02\xc3\x28",  # invalid UTF-8 in a string field (client_request_id / model)
    b"\x12\x03\xed\xa0\x80",  # a UTF-16 surrogate encoded in UTF-8
    b"\x1a\x04\x0a\x02\xff\xfe",  # nested message with an invalid UTF-8 string
]


def garbage(rng: random.Random, seeds: Sequence[bytes], count: int) -> Iterator[bytes]:
    """Random bytes, and valid messages with bytes flipped, cut, inserted or repeated."""
    for i in range(count):
        if i % 3 == 0 or not seeds:
            yield rng.randbytes(rng.randrange(0, 48))
            continue
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(data) + 1)
            action = rng.randrange(4)
            if action == 0 and at < len(data):
                data[at] = rng.randrange(256)
            elif action == 1:
                del data[at:]
            elif action == 2:
                data[at:at] = rng.randbytes(rng.randrange(1, 6))
            else:
                data.extend(bytes(data))
        yield bytes(data)


async def unary_status(picker: RunningPicker, method: str, request: bytes) -> grpc.StatusCode:
    call = picker.client.channel.unary_unary(SERVICE + method)
    try:
        await call(request, timeout=CALL_S)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def pull_status(picker: RunningPicker, request: bytes) -> grpc.StatusCode:
    call = picker.client.channel.unary_stream(SERVICE + "PullBody")
    try:
        async for _ in call(request, timeout=CALL_S):
            pass
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def raw_push_status(
    picker: RunningPicker,
    messages: Sequence[bytes],
    metadata: Sequence[tuple[str, str | bytes]] = (),
) -> grpc.StatusCode:
    """The status of a raw PushBody: the one the server sent, even when transport lost it.

    A call the server fails on its metadata may still be writing its messages; grpc.aio then
    reports INTERNAL (grpc/grpc#36066), and the server's own count says what it sent.
    """
    call = picker.client.channel.stream_unary(SERVICE + "PushBody")
    before = push_errors_sent(picker)
    try:
        await call(iter(messages), metadata=list(metadata), timeout=CALL_S)
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.INTERNAL and CORE_TRANSPORT_LOST in str(error.details()):
            return status_sent_since(picker, before)
        return error.code()
    return grpc.StatusCode.OK


def check(seen: dict[str, set[grpc.StatusCode]]) -> None:
    bad = {method: codes - ALLOWED for method, codes in seen.items() if codes - ALLOWED}
    assert not bad, f"statuses outside the error model: {bad}"


async def test_malformed_protobuf_for_every_method(picker: RunningPicker) -> None:
    rng = random.Random(7)
    seeds = valid_messages()
    seen: dict[str, set[grpc.StatusCode]] = {}
    for method in UNARY:
        for request in [*TRICKY, *garbage(rng, seeds[method], 120)]:
            seen.setdefault(method, set()).add(await unary_status(picker, method, request))
    for request in [*TRICKY, *garbage(rng, seeds["PullBody"], 120)]:
        seen.setdefault("PullBody", set()).add(await pull_status(picker, request))
    for messages in ([m] for m in [*TRICKY, *garbage(rng, [b"\x0a\x02{}"], 120)]):
        seen.setdefault("PushBody", set()).add(await raw_push_status(picker, messages))
    check(seen)
    await _release_pending(picker)  # mutated chunks may still form a (non-request) body
    await wait_nothing_held(picker)


async def test_server_still_serves_after_the_fuzz(picker: RunningPicker) -> None:
    rng = random.Random(11)
    for request in garbage(rng, valid_messages()["Pick"], 60):
        assert await unary_status(picker, "Pick", request) in ALLOWED
    body = chat_body()
    pushed = await picker.client.push([body], declared_length=len(body))
    pick = await picker.client.pick(pushed.stream_id)
    assert pick.outcome == pb.PickResponse.OK
    assert await picker.client.pull_all(pick.response_id) == body
    await picker.client.final_token(pick.response_id)
    await wait_nothing_held(picker)


@pytest.mark.parametrize(
    ("metadata", "wanted"),
    [
        ([("kinference-declared-length", "abc")], grpc.StatusCode.INVALID_ARGUMENT),
        ([("kinference-declared-length", "-1")], grpc.StatusCode.INVALID_ARGUMENT),
        ([("kinference-declared-length", "1e3")], grpc.StatusCode.INVALID_ARGUMENT),
        ([("kinference-declared-length", "0x10")], grpc.StatusCode.INVALID_ARGUMENT),
        ([("kinference-declared-length", "")], grpc.StatusCode.INVALID_ARGUMENT),
        ([("kinference-declared-length", "9" * 30)], grpc.StatusCode.RESOURCE_EXHAUSTED),
        ([("kinference-declared-length", "9" * 4000)], grpc.StatusCode.RESOURCE_EXHAUSTED),
        ([("kinference-declared-length", str(MAX_ID))], grpc.StatusCode.RESOURCE_EXHAUSTED),
        ([("kinference-declared-length", "0")], grpc.StatusCode.INVALID_ARGUMENT),
        ([("kinference-declared-length", "2")] * 2, None),  # repeated, agreeing
        (
            [("kinference-declared-length", "3"), ("kinference-declared-length", "4")],
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ([("kinference-declared-length", "3,3")], grpc.StatusCode.INVALID_ARGUMENT),
        ([("kinference-client-request-id", "r" * 6000)], None),
        ([("kinference-client-request-id", "")], None),
        ([("kinference-declared-length-bin", b"\x00\xff")], None),
        ([("x-unknown", "1")] * 50, None),
    ],
)
async def test_garbage_push_metadata(
    picker: RunningPicker, metadata: list[tuple[str, str | bytes]], wanted: grpc.StatusCode | None
) -> None:
    """Declared lengths the 2-byte body `{}` cannot meet fail as the spec says; metadata
    that means nothing to the server is ignored (wanted None: the push succeeds)."""
    if wanted is None:
        status = await raw_push_status(picker, [b"\x0a\x02{}"], metadata)
        assert status == grpc.StatusCode.OK
    else:
        error = await held_push(picker, [b"{}"], metadata).error()
        assert error.code() == wanted, error.details()
    await _release_pending(picker)
    await wait_nothing_held(picker)


async def _release_pending(picker: RunningPicker) -> None:
    """Pick every pushed body (none is an inference request, so each Pick releases it)."""
    store = picker.app.store
    for stream_id in list(store._pending):  # tests reach in to clean up
        pick = await picker.client.pick(stream_id)
        assert pick.outcome == pb.PickResponse.BAD_REQUEST


@pytest.mark.parametrize("stream_id", [0, 1, MAX_ID, 0x8000_0000_0000_0000, 12345678901234567])
async def test_ids_that_name_nothing_in_every_method(picker: RunningPicker, stream_id: int) -> None:
    body = chat_body()
    held = await picker.client.push([body], declared_length=len(body))  # one real body
    if stream_id:
        error = await _unary_error(picker, "Pick", pb.PickRequest(body_stream_id=stream_id))
        assert error == grpc.StatusCode.NOT_FOUND
    else:
        error = await _unary_error(picker, "Pick", pb.PickRequest(body_stream_id=0))
        assert error == grpc.StatusCode.INVALID_ARGUMENT
    request = pb.PullBodyRequest(response_id=stream_id).SerializeToString()
    assert await pull_status(picker, request) == grpc.StatusCode.NOT_FOUND
    first = await picker.client.first_token(stream_id, 5, 500)
    final = await picker.client.final_token(stream_id, prompt_tokens=1, completion_tokens=1)
    assert not first.acknowledged and not final.acknowledged
    abort = pb.AbortRequest(response_id=stream_id, reason=pb.AbortRequest.PULL_FAILED)
    assert await unary_status(picker, "Abort", abort.SerializeToString()) in {
        grpc.StatusCode.OK,
        grpc.StatusCode.NOT_FOUND,
    }
    pick = await picker.client.pick(held.stream_id)  # the real body is untouched
    assert pick.outcome == pb.PickResponse.OK
    await picker.client.abort(pick.response_id)
    await wait_nothing_held(picker)


async def _unary_error(picker: RunningPicker, method: str, request: pb.PickRequest) -> object:
    return await unary_status(picker, method, request.SerializeToString())


@pytest.mark.parametrize("qos", [3, 7, 1000, -1, 2**31 - 1])
async def test_unknown_qos_is_invalid_argument_and_releases_nothing(
    picker: RunningPicker, qos: int
) -> None:
    body = chat_body()
    pushed = await picker.client.push([body], declared_length=len(body))
    request = pb.PickRequest(body_stream_id=pushed.stream_id)
    request.qos_class = qos  # type: ignore[assignment]  # open enum: any int32 goes on the wire
    assert await unary_status(picker, "Pick", request.SerializeToString()) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    pick = await picker.client.pick(pushed.stream_id)  # the body waits for a valid Pick
    assert pick.outcome == pb.PickResponse.OK
    await picker.client.abort(pick.response_id)
    await wait_nothing_held(picker)


async def test_oversized_strings_are_accepted_and_cut(picker: RunningPicker) -> None:
    body = chat_body()
    pushed = await picker.client.push(
        [body], declared_length=len(body), client_request_id="c" * 7000
    )
    big = "t" * (400 * KiB)  # two of them fit in one 1 MiB message
    # A tenant becomes Redis keys and metric labels: longer than 256 bytes is refused, and
    # the body waits for a valid Pick.
    error = await status_of(picker.client.pick(pushed.stream_id, tenant=big))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 256 bytes" in (error.details() or "")
    pick = await picker.client.pick(pushed.stream_id, tenant="t" * 256, client_request_id=big)
    assert pick.outcome == pb.PickResponse.OK  # default_tenant_action allows unknown tenants
    abort = pb.AbortRequest(response_id=pick.response_id, detail=big, client_request_id=big)
    assert await unary_status(picker, "Abort", abort.SerializeToString()) == grpc.StatusCode.OK
    too_big = pb.PickRequest(body_stream_id=1, tenant="t" * (2 * MiB))
    assert await unary_status(picker, "Pick", too_big.SerializeToString()) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    await wait_nothing_held(picker)


async def test_random_pushes_with_random_metadata_leave_nothing(picker: RunningPicker) -> None:
    rng = random.Random(3)
    # (A tab or newline is refused by the client library itself: not a server matter.)
    values = ["", "0", "2", "-2", "abc", "1" * 25, " 2 ", str(MAX_ID)]
    for _ in range(60):
        chunks = [rng.randbytes(rng.randrange(0, 6)) for _ in range(rng.randrange(0, 4))]
        metadata = [
            (rng.choice(["kinference-declared-length", "kinference-client-request-id"]), v)
            for v in rng.sample(values, rng.randrange(0, 3))
        ]
        messages = [b"\x0a" + varint(len(c)) + c for c in chunks]
        assert await raw_push_status(picker, messages, push_metadata() + metadata) in ALLOWED
    await _release_pending(picker)
    await wait_nothing_held(picker)


@pytest.mark.parametrize("method", [*UNARY, "PullBody"])
async def test_an_undecodable_request_is_invalid_argument_and_logs_no_traceback(
    picker: RunningPicker, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    request = b"\x0a\x05abc"  # a length past the end of the message
    if method == "PullBody":
        status = await pull_status(picker, request)
    else:
        status = await unary_status(picker, method, request)
    assert status == grpc.StatusCode.INVALID_ARGUMENT
    labels = {"method": method, "code": "INVALID_ARGUMENT"}
    assert picker.metric("kinference_rpc_errors_total", labels) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
