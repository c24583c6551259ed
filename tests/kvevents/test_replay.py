"""The replay socket's answers as each producer frames them (`kinference.kvevents.replay`):
vLLM's `ZmqEventPublisher` puts one empty delimiter before `(seq, payload)`, Dynamo's mocker
(`--zmq-replay-ports`, seen on ai-dynamo 1.6.1) two; anything else is malformed."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

from kinference.kvevents.replay import Outcome, ReplayLimits, fetch
from kinference.kvevents.wire import MalformedBatch, decode_batch
from tests.kvevents.vllm_format import encode, seq_bytes, stored

LIMITS = ReplayLimits.of()


async def _answering(router: zmq.asyncio.Socket, envelope: list[bytes], last: int) -> None:
    """Answer one replay request with batches 0..last, then the end marker, after `envelope`."""
    client, *_request = await router.recv_multipart()
    for seq in range(last + 1):
        payload = encode([stored([100 + seq], [1, 2, 3, 4])])
        await router.send_multipart([client, *envelope, seq_bytes(seq), payload])
    await router.send_multipart([client, *envelope, seq_bytes(-1), b""])


async def _fetched(envelope: list[bytes]) -> dict[int, bytes]:
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        answering = asyncio.create_task(_answering(router, envelope, last=2))
        got: dict[int, bytes] = {}
        try:
            outcome = await fetch(
                context, f"tcp://127.0.0.1:{port}", 0, None, got=got, limits=LIMITS
            )
            if outcome is Outcome.MALFORMED:
                raise MalformedBatch("replay answer of a wrong framing")
        finally:
            answering.cancel()
        return got
    finally:
        router.close(linger=0)
        context.term()


@pytest.mark.parametrize("envelope", [[b""], [b"", b""]], ids=["vllm", "dynamo-mocker"])
async def test_answers_after_one_or_two_empty_delimiters_are_read(envelope: list[bytes]) -> None:
    got = await _fetched(envelope)
    assert sorted(got) == [0, 1, 2]
    assert all(len(decode_batch(payload).events) == 1 for payload in got.values())


@pytest.mark.parametrize("envelope", [[], [b"x"], [b"", b"", b""]], ids=["none", "topic", "three"])
async def test_other_framings_are_malformed(envelope: list[bytes]) -> None:
    with pytest.raises(MalformedBatch, match="replay answer of"):
        await _fetched(envelope)
