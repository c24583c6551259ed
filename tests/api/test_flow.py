"""The happy path of the per-request flow over a real channel."""

from __future__ import annotations

import json

from kinference.client import split_chunks
from kinference.v1 import picker_pb2 as pb
from tests.conftest import MODEL, RunningPicker


def chat_body(model: str = MODEL, content: str = "hello") -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}).encode()


async def test_full_flow_round_trips_the_body(picker: RunningPicker) -> None:
    body = chat_body(content="x" * 10_000)
    pushed = await picker.client.push(split_chunks(body, 1000), declared_length=len(body))
    assert pushed.stream_id != 0
    assert pushed.total_bytes == len(body)

    pick = await picker.client.pick(pushed.stream_id, tenant="")
    assert pick.outcome == pb.PickResponse.OK
    assert pick.WhichOneof("destination") == "local"
    assert pick.local.endpoint in {"10.0.0.5:8000", "10.0.0.6:8000", "10.0.1.5:8000"}
    assert pick.response_id != 0
    assert pick.requested_model == MODEL
    assert pick.body_total_bytes == len(body)

    assert await picker.client.pull_all(pick.response_id) == body
    assert (await picker.client.first_token(pick.response_id, 12)).acknowledged
    final = await picker.client.final_token(
        pick.response_id,
        model=MODEL,
        prompt_tokens=10,
        completion_tokens=3,
        itl_bucket_counts=[1] + [0] * 14,
    )
    assert final.acknowledged
    assert picker.app.store.budget.used == 0
    assert len(picker.app.inflight) == 0
    assert picker.metric("kinference_picks_total", {"outcome": "ok"}) == 1
