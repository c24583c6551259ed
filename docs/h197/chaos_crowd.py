"""h197 scratch: a random crowd against the real picker (Picker and PickerSession), checking
that every status is one the spec allows for that call, every pull streams exactly
body_total_bytes, and nothing is held at the end. Not part of the suite; to run it:

    cp docs/h197/chaos_crowd.py tests/test_chaos_h197.py
    SEED=1 N=10 CROWD=32 BUF=6 .venv/bin/python -m pytest tests/test_chaos_h197.py -q -s -p no:cacheprovider
"""

import asyncio
import json
import os
import random
from collections import Counter
from typing import Any

import grpc

from kinference.client import PickerClient
from kinference.api import extensions
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import KiB, MiB, chat_body, chunked, sized_chat_body, wait_nothing_held
from tests.conftest import MODEL, PickerFactory

C = grpc.StatusCode
SEEN: Counter[str] = Counter()
BAD: list[str] = []


def note(op: str, err: BaseException, allowed: set[C]) -> None:
    if isinstance(err, grpc.aio.AioRpcError):
        SEEN[f"{op}:{err.code().name}"] += 1
        if err.code() not in allowed:
            BAD.append(f"{op}: {err.code().name} {err.details()}")
    elif isinstance(err, asyncio.CancelledError):
        SEEN[f"{op}:cancelled"] += 1
    else:
        BAD.append(f"{op}: {type(err).__name__} {err}")


def dense(i: int) -> bytes:
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": f"w{i}{j}"} for j in range(3000)]}
    ]
    return json.dumps({"model": MODEL, "messages": msgs}).encode()


def a_body(rng: random.Random, i: int) -> bytes:
    kind = rng.random()
    if kind < 0.5:
        return chat_body(content=f"c{i} " + "y" * rng.randint(0, 3000))
    if kind < 0.65:
        return sized_chat_body(rng.choice([40 * KiB, 300 * KiB, 1 * MiB + 7]), tag=f"t{i} ")
    if kind < 0.72:
        return dense(i)
    if kind < 0.8:
        return b'{"model": "' + MODEL.encode() + b'", "messages": [' + b"[" * 5000
    if kind < 0.87:
        return chat_body(model="nope-" + str(i))
    if kind < 0.93:
        return chat_body(content="\ud800 lone", stream=True)
    return (
        b'{"model": "'
        + MODEL.encode()
        + b'", "model": "x", "messages": [{"role": "user", "content": "\xff\xfe"}]}'
    )


async def caller(client: PickerClient, rng: random.Random, n: int, idx: int) -> None:
    stub = client.stub
    for k in range(n):
        body = a_body(rng, idx * 1000 + k)
        size = rng.choice([1, 7, 1000, 64 * KiB, MiB])
        chunks = chunked(body, size) if len(body) // size < 20000 else chunked(body, 4096)
        declared = len(body) if rng.random() < 0.8 else None
        if rng.random() < 0.05 and declared is not None:
            declared += rng.choice([-1, 1])
        md: list[tuple[str, Any]] = []
        if declared is not None:
            md.append(("kinference-declared-length", str(declared)))
        pick_bin = rng.random() < 0.2
        if pick_bin:
            md.append(
                (
                    extensions.PICK,
                    pb.PickRequest(tenant=rng.choice(["", "a", "b"])).SerializeToString(),
                )
            )
        inline = rng.random() < 0.2
        if inline:
            md.append((extensions.INLINE_BODY_MAX, "32768"))

        async def gen() -> Any:
            for ch in chunks:
                yield pb.BodyChunk(chunk=ch)

        call = stub.PushBody(gen(), metadata=md)
        reset = rng.random() < 0.1
        try:
            if reset:
                await asyncio.sleep(rng.random() * 0.01)
                call.cancel()
            pushed = await call
        except BaseException as e:  # noqa
            note(
                "push",
                e,
                {C.INVALID_ARGUMENT, C.RESOURCE_EXHAUSTED, C.CANCELLED}
                if declared is not None and declared != len(body)
                else {C.RESOURCE_EXHAUSTED, C.CANCELLED, C.INTERNAL},
            )
            continue
        picked = None
        body_inline = None
        if pick_bin:
            trailing = await call.trailing_metadata()
            for key, value in trailing or ():
                if key == extensions.PICK:
                    picked = pb.PickResponse.FromString(value)
                if key == extensions.BODY:
                    body_inline = value
            assert picked is not None
            # a Pick on a consumed id: FAILED_PRECONDITION
            try:
                await stub.Pick(pb.PickRequest(body_stream_id=pushed.stream_id))
                BAD.append("pick after pick-bin succeeded")
            except grpc.aio.AioRpcError as e:
                note("pick-again", e, {C.FAILED_PRECONDITION})
        else:
            npicks = rng.choice([1, 1, 1, 2, 3])
            cancel_pick = rng.random() < 0.1
            picks = [
                stub.Pick(
                    pb.PickRequest(body_stream_id=pushed.stream_id, tenant=rng.choice(["", "a"])),
                    metadata=[(extensions.INLINE_BODY_MAX, "32768")] if inline else None,
                )
                for _ in range(npicks)
            ]
            if cancel_pick:
                await asyncio.sleep(rng.random() * 0.005)
                for p in picks:
                    p.cancel()
            res = await asyncio.gather(*picks, return_exceptions=True)
            oks = [r for r in res if isinstance(r, pb.PickResponse)]
            for r in res:
                if not isinstance(r, pb.PickResponse):
                    note("pick", r, {C.FAILED_PRECONDITION, C.RESOURCE_EXHAUSTED, C.UNAVAILABLE})
            if len(oks) > 1:
                BAD.append(f"{len(oks)} picks answered on one stream id")
            if not oks:
                continue
            picked = oks[0]
            if inline:
                i = res.index(picked)
                trailing = await picks[i].trailing_metadata()
                for key, value in trailing or ():
                    if key == extensions.BODY:
                        body_inline = value
        rid = picked.response_id
        if picked.outcome not in (pb.PickResponse.OK, pb.PickResponse.DEGRADED):
            if rid != 0:
                BAD.append(f"outcome {picked.outcome} with a response id")
            continue
        if body_inline is not None:
            if len(body_inline) != picked.body_total_bytes:
                BAD.append("inline body size mismatch")
        ops = []
        act = rng.random()

        async def pull_full() -> None:
            try:
                got = b"".join(
                    [m.chunk async for m in stub.PullBody(pb.PullBodyRequest(response_id=rid))]
                )
                if len(got) != picked.body_total_bytes:
                    BAD.append(f"pulled {len(got)} of {picked.body_total_bytes}")
            except grpc.aio.AioRpcError as e:
                note("pull", e, {C.NOT_FOUND})

        async def pull_part() -> None:
            c = stub.PullBody(pb.PullBodyRequest(response_id=rid))
            try:
                await c.read()
            except grpc.aio.AioRpcError as e:
                note("pullpart", e, {C.NOT_FOUND})
            c.cancel()

        async def abort() -> None:
            try:
                r = await stub.Abort(
                    pb.AbortRequest(response_id=rid, reason=rng.choice([0, 1, 2, 3, 4]))
                )
                assert r.released
            except grpc.aio.AioRpcError as e:
                note("abort", e, {C.NOT_FOUND})

        async def first() -> None:
            try:
                await stub.ReportFirstToken(
                    pb.ReportFirstTokenRequest(
                        response_id=rid,
                        observed_ttft_ms=rng.randint(0, 2**32 - 1),
                        upstream_status=rng.choice([200, 500, -1, 429]),
                    )
                )
            except grpc.aio.AioRpcError as e:
                note("first", e, set())

        async def final() -> None:
            md2 = (
                [(extensions.FIRST_TOKEN, f"{rng.randint(0, 99)}:200:{rng.randint(0, 50)}")]
                if rng.random() < 0.3
                else None
            )
            try:
                await stub.ReportFinalToken(
                    pb.ReportFinalTokenRequest(
                        response_id=rid,
                        model=MODEL,
                        prompt_tokens=rng.randint(0, 2**32 - 1),
                        completion_tokens=rng.randint(0, 10),
                        cached_tokens=rng.randint(0, 2**32 - 1),
                        itl_bucket_counts=[rng.randint(0, 2**32 - 1)] * 15,
                        itl_bucket_layout=1,
                    ),
                    metadata=md2,
                )
            except grpc.aio.AioRpcError as e:
                note("final", e, set())

        if act < 0.3:
            ops = [pull_full(), first(), final()]
        elif act < 0.45:
            ops = [pull_full(), pull_full(), abort(), abort()]
        elif act < 0.6:
            ops = [pull_part(), abort(), final(), final(), first()]
        elif act < 0.7:
            ops = [abort(), first(), final(), pull_full()]
        elif act < 0.8:
            ops = [final(), first(), abort()]
        elif act < 0.9:
            ops = []  # abandon
        else:
            ops = [pull_full(), pull_part(), abort(), final()]
        rng.shuffle(ops)
        if rng.random() < 0.5:
            await asyncio.gather(*ops)
        else:
            for o in ops:
                await o


async def test_chaos(start_picker: PickerFactory) -> None:
    picker = await start_picker(
        body_ttl_s=2.0,
        request_ttl_s=2.0,
        max_body_bytes=2 * MiB,
        max_buffered_bytes=int(os.environ.get("BUF", "24")) * MiB,
    )
    seed = int(os.environ.get("SEED", "1"))
    crowd = int(os.environ.get("CROWD", "32"))
    clients = [PickerClient(picker.target) for _ in range(4)]
    await asyncio.gather(
        *[
            caller(clients[i % 4], random.Random(seed * 100 + i), int(os.environ.get("N", "12")), i)
            for i in range(crowd)
        ]
    )
    print(sorted(SEEN.items()))
    print("BAD", BAD[:20], len(BAD))
    app = picker.app
    print(
        "budget",
        app.store.budget.used,
        "held",
        app.store.held_bodies,
        "inflight",
        len(app.inflight),
        app.inflight.per_endpoint(),
        "res",
        len(app.service.reports._reservations),
    )
    await wait_nothing_held(picker, within_s=15)
    print(
        "res", len(app.service.reports._reservations), "early", len(app.service.preparation._early)
    )
    assert not BAD
    for c in clients:
        await c.close()


from kinference.session_client import SessionClient
from kinference.v1 import session_pb2 as spb
from kinference.client import pick_request


async def session_caller(channel: Any, rng: random.Random, n: int, idx: int) -> None:
    session = await SessionClient.open(channel, lambda frames: None)
    assert session is not None

    async def one(k: int) -> None:
        body = a_body(rng, idx * 1000 + k)
        declared = len(body) if rng.random() < 0.8 else None
        start = spb.Start(
            declared_length=declared,
            pick=pick_request(0, "", pb.PickRequest.INTERACTIVE, None, "r"),
            inline_body_max=rng.choice([0, 1 << 20]),
        )
        size = rng.choice([1, 1000, 64 * KiB])
        if len(body) // size > 5000:
            size = 64 * KiB

        async def gen() -> Any:
            for c in chunked(body, size):
                yield c
                if rng.random() < 0.01:
                    await asyncio.sleep(0)

        task = asyncio.ensure_future(session.push_and_pick(gen(), start))
        if rng.random() < 0.15:
            await asyncio.sleep(rng.random() * 0.01)
            task.cancel()
        try:
            pick, extras = await task
        except asyncio.CancelledError:
            SEEN["s-push:cancelled"] += 1
            return
        except grpc.aio.AioRpcError as e:
            note(
                "s-push",
                e,
                {C.RESOURCE_EXHAUSTED, C.INVALID_ARGUMENT} if declared is None or True else set(),
            )
            return
        rid = pick.response_id
        if pick.outcome not in (pb.PickResponse.OK, pb.PickResponse.DEGRADED):
            return
        if extras.body is not None:
            if len(extras.body) != pick.body_total_bytes:
                BAD.append("session inline size mismatch")
        elif rng.random() < 0.7:
            try:
                got = b"".join(
                    [
                        m.chunk
                        async for m in channel_stub(channel).PullBody(
                            pb.PullBodyRequest(response_id=rid)
                        )
                    ]
                )
                if len(got) != pick.body_total_bytes:
                    BAD.append("session pull short")
            except grpc.aio.AioRpcError as e:
                note("s-pull", e, {C.NOT_FOUND})
        r = rng.random()
        if r < 0.4:
            session.report(
                spb.ClientFrame(
                    final_token=pb.ReportFinalTokenRequest(
                        response_id=rid, model=MODEL, prompt_tokens=3
                    )
                )
            )
        elif r < 0.7:
            session.report(spb.ClientFrame(abort=pb.AbortRequest(response_id=rid)))
            session.report(spb.ClientFrame(abort=pb.AbortRequest(response_id=rid)))
        elif r < 0.85:
            session.report(
                spb.ClientFrame(
                    first_token=pb.ReportFirstTokenRequest(response_id=rid, observed_ttft_ms=5)
                )
            )
            session.report(
                spb.ClientFrame(
                    final_token=pb.ReportFinalTokenRequest(
                        response_id=rid, model=MODEL, prompt_tokens=3
                    )
                )
            )

    await asyncio.gather(*[one(k) for k in range(n)])
    if rng.random() < 0.5:
        await session.aclose(5)
    else:
        session._call.cancel()


def channel_stub(channel: Any) -> Any:
    from kinference.v1 import picker_pb2_grpc as pb_grpc

    return pb_grpc.PickerStub(channel)


async def test_session_chaos(start_picker: PickerFactory) -> None:
    picker = await start_picker(
        body_ttl_s=2.0,
        request_ttl_s=2.0,
        max_body_bytes=2 * MiB,
        max_buffered_bytes=int(os.environ.get("BUF", "24")) * MiB,
    )
    seed = int(os.environ.get("SEED", "1"))
    crowd = int(os.environ.get("CROWD", "16"))
    clients = [PickerClient(picker.target) for _ in range(4)]
    await asyncio.gather(
        *[
            session_caller(
                clients[i % 4].channel,
                random.Random(seed * 100 + i),
                int(os.environ.get("N", "12")),
                i,
            )
            for i in range(crowd)
        ]
    )
    print(sorted(SEEN.items()))
    print("BAD", BAD[:20], len(BAD))
    app = picker.app
    print(
        "budget",
        app.store.budget.used,
        "held",
        app.store.held_bodies,
        "inflight",
        len(app.inflight),
        "uploads",
        app.store._uploads,
    )
    await wait_nothing_held(picker, within_s=15)
    assert not BAD
    for c in clients:
        await c.close()
