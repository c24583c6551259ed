"""A big body's translation in the parse worker (`Offload.translate`): the same bytes as the
loop's own translation of the request Pick holds, the refusals the same, and its memory
charged to the body budget while it runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kinference.bodies import Body, ByteBudget
from kinference.errors import ResourceExhausted
from kinference.requests import InferenceRequest, RewritePlan, Shape, parse_request, rewrite
from kinference.requests.fields import LargeValue
from kinference.requests.offload import Offload
from kinference.requests.rewrite import Translation, heavy_translation
from kinference.requests.translation import Untranslatable
from tests.requests import uploaded_body

MiB = 1 << 20
BLOCKS = 40_000  # small text blocks: ~1.3 MiB of messages, a large value at Pick


def anthropic_doc(**extra: Any) -> dict[str, Any]:
    blocks = [{"type": "text", "text": f"w{index % 7}"} for index in range(BLOCKS)]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": "QUJD" * 1000}}  # fmt: skip
    return {
        "model": "m",
        "max_tokens": 9,
        "system": "be brief",
        "stop_sequences": ["END"],
        "messages": [{"role": "user", "content": [*blocks, image]}],
        **extra,
    }


def chat_doc() -> dict[str, Any]:
    parts = [{"type": "text", "text": f"p{index % 5}"} for index in range(BLOCKS)]
    return {
        "model": "m",
        "max_completion_tokens": 7,
        "stream": True,
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": parts}],
    }


def joined(body: Body) -> bytes:
    return b"".join(bytes(piece) for piece in body.pieces)


async def picked(offload: Offload, data: bytes, path: str) -> tuple[Body, InferenceRequest]:
    """The body and the request as Pick holds them: parsed in the worker, large values as
    spans."""
    body = uploaded_body(data)
    body.request_path = path
    request = await offload.parse(ByteBudget(256 * MiB), body, abandoned=lambda: None)
    assert isinstance(request, InferenceRequest)
    return body, request


@pytest.mark.parametrize(
    ("doc", "path", "sent", "model"),
    [
        (anthropic_doc(), "/v1/messages", Shape.CHAT, "served"),
        (anthropic_doc(), "/v1/messages", Shape.CHAT, "m"),  # the model as written
        (anthropic_doc(), "/v1/messages", Shape.CHAT, None),
        (anthropic_doc(metadata={"user_id": "u"}), "/v1/messages", Shape.CHAT, "served"),
        (chat_doc(), "/v1/chat/completions", Shape.ANTHROPIC_MESSAGES, "claude-x"),
    ],
)
async def test_the_worker_s_translation_splices_to_the_loop_s_bytes(
    doc: dict[str, Any], path: str, sent: Shape, model: str | None
) -> None:
    offload, budget = Offload(), ByteBudget(512 * MiB)
    try:
        body, request = await picked(offload, json.dumps(doc).encode(), path)
        assert heavy_translation(body, request)
        ahead = await offload.translate(budget, body, request, sent, abandoned=lambda: None)
    finally:
        await offload.aclose()
    assert isinstance(ahead, Translation) and ahead.sent is sent
    assert budget.used == 0
    plan = RewritePlan(model=model, sent_shape=sent)
    on_loop = rewrite(body, request, plan)
    assert joined(rewrite(body, request, plan, ahead)) == joined(on_loop)
    # and both are what the translation of the request parsed whole makes
    whole = Body([json.dumps(doc).encode()], reserved=0)
    assert joined(on_loop) == joined(rewrite(whole, parse_request(whole, path=path), plan))


async def test_an_untranslatable_body_is_refused_with_the_loop_s_reason() -> None:
    doc = chat_doc()
    doc["messages"][1]["content"].append({"type": "input_audio", "input_audio": {"data": ""}})
    offload = Offload()
    try:
        body, request = await picked(offload, json.dumps(doc).encode(), "/v1/chat/completions")
        ahead = await offload.translate(
            ByteBudget(512 * MiB), body, request, Shape.ANTHROPIC_MESSAGES, abandoned=lambda: None
        )
    finally:
        await offload.aclose()
    assert isinstance(ahead, Untranslatable)
    plan = RewritePlan(sent_shape=Shape.ANTHROPIC_MESSAGES)
    with pytest.raises(Untranslatable) as on_loop:
        rewrite(body, request, plan)
    with pytest.raises(Untranslatable) as from_worker:
        rewrite(body, request, plan, ahead)
    assert str(from_worker.value) == str(on_loop.value)


async def test_a_translation_the_budget_cannot_hold_is_refused_and_nothing_stays_charged() -> None:
    offload, released = Offload(), []
    try:
        body, request = await picked(offload, json.dumps(anthropic_doc()).encode(), "/v1/messages")
        budget = ByteBudget(4 * MiB)  # the body fits; its translation's objects do not
        with pytest.raises(ResourceExhausted, match="translating this body needs"):
            await offload.translate(
                budget, body, request, Shape.CHAT, abandoned=lambda: released.append(1)
            )
        assert budget.used == 0 and released == [1]
        after = await offload.translate(
            ByteBudget(512 * MiB), body, request, Shape.CHAT, abandoned=lambda: None
        )
        assert isinstance(after, Translation)  # the worker dropped it and went on
    finally:
        await offload.aclose()


def test_only_a_body_with_large_values_is_heavy_to_translate() -> None:
    small = Body([json.dumps(anthropic_doc() | {"messages": []}).encode()], reserved=0)
    assert not heavy_translation(small, parse_request(small, path="/v1/messages"))
    big = uploaded_body(json.dumps(anthropic_doc()).encode())
    request = parse_request(big, path="/v1/messages")
    assert isinstance(request.fields.values["messages"], LargeValue)
    assert heavy_translation(big, request)
