"""kinference's protocol extensions over a real server: the client's path on PushBody, and
the reason code, Retry-After and translation in Pick's trailing metadata."""

from __future__ import annotations

import json

from kinference.api import extensions
from kinference.api.extensions import PickExtras, pick_metadata, read_pick_metadata
from kinference.config import parse_policy
from kinference.requests import Shape
from kinference.routing.reasons import Reason
from kinference.v1 import picker_pb2 as pb
from tests.conftest import MODEL, PickerFactory

POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["127.0.0.1:1"], models: ["{MODEL}"]}}
providers:
  - {{namespace: ai, name: gpt, api: openai}}
  - {{namespace: ai, name: claude, api: anthropic}}
models:
  - {{name: gpt, targets: [{{provider: ai/gpt, model: gpt-4o}}]}}
  - {{name: claude, targets: [{{provider: ai/claude, model: claude-x}}]}}
"""


async def picked(
    factory: PickerFactory, doc: dict[str, object], path: str = ""
) -> tuple[pb.PickResponse, PickExtras, bytes]:
    picker = await factory(parse_policy(POLICY))
    body = json.dumps(doc).encode()
    pushed = await picker.client.push([body], declared_length=len(body), request_path=path)
    pick, extras = await picker.client.pick_with_extras(pushed.stream_id)
    pulled = await picker.client.pull_all(pick.response_id) if pick.response_id else b""
    return pick, extras, pulled


async def test_the_path_tells_a_minimal_responses_call_from_embeddings(
    start_picker: PickerFactory,
) -> None:
    doc = {"model": "gpt", "input": "hi"}
    pick, extras, _ = await picked(start_picker, doc, "/v1/responses")
    assert pick.provider.path == "/v1/responses"
    assert extras == PickExtras()  # nothing to say: no metadata sent
    pick, _, _ = await picked(start_picker, doc)  # no path: the body alone decides
    assert pick.provider.path == "/v1/embeddings"


async def test_reason_codes_and_retry_after_travel_in_trailing_metadata(
    start_picker: PickerFactory,
) -> None:
    hi = [{"role": "user", "content": "hi"}]
    pick, extras, _ = await picked(start_picker, {"model": "nobody", "messages": hi})
    assert pick.outcome == pb.PickResponse.NO_WORKERS
    assert extras.code is Reason.UNKNOWN_MODEL
    pick, extras, _ = await picked(start_picker, {"model": "gpt", "messages": "x"})
    assert (pick.outcome, extras.code) == (pb.PickResponse.BAD_REQUEST, Reason.MALFORMED)


async def test_a_translated_pick_says_so_and_pulls_the_other_apis_body(
    start_picker: PickerFactory,
) -> None:
    doc = {"model": "claude", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    pick, extras, body = await picked(start_picker, doc, "/v1/chat/completions")
    assert pick.provider.path == "/v1/messages"
    assert extras.translated == (Shape.CHAT, Shape.ANTHROPIC_MESSAGES)
    assert extras.usage_asked is False
    assert json.loads(body) == {
        "model": "claude-x",
        "stream": True,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert len(body) == pick.body_total_bytes
    asked = {**doc, "stream_options": {"include_usage": True}}
    _, extras, _ = await picked(start_picker, asked, "/v1/chat/completions")
    assert extras.usage_asked is True
    anthropic = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    pick, extras, body = await picked(start_picker, anthropic, "/v1/messages")
    assert extras.translated == (Shape.ANTHROPIC_MESSAGES, Shape.CHAT)
    assert extras.upstream_path == "/v1/chat/completions"  # a local pick: the path changes
    assert json.loads(body)["messages"] == [{"role": "user", "content": "hi"}]


def test_metadata_round_trip_and_hostile_values() -> None:
    extras = PickExtras(
        Reason.PROVIDER_COOLING, 7, (Shape.CHAT, Shape.ANTHROPIC_MESSAGES), "/v1/messages", True
    )
    assert read_pick_metadata(pick_metadata(extras)) == extras
    assert pick_metadata(PickExtras()) == []
    hostile = [
        (extensions.REASON_CODE, "no-such-code"),
        (extensions.RETRY_AFTER, "-3"),
        (extensions.TRANSLATED, "chat"),
        (extensions.UPSTREAM_PATH, "http://elsewhere/"),
    ]
    assert read_pick_metadata(hostile) == PickExtras(code=Reason.OTHER)
    assert extensions.request_path([(extensions.REQUEST_PATH, "/v1/responses")]) == "/v1/responses"
    for bad in ("v1/responses", "/v1/\x00", "/" + "x" * 5000):
        assert extensions.request_path([(extensions.REQUEST_PATH, bad)]) == ""
