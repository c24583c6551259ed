"""The shape a request goes out in, for each API a destination speaks."""

from __future__ import annotations

import pytest

from kinference.requests import Shape
from kinference.routing.apis import sent_shape

S = Shape


@pytest.mark.parametrize(
    ("shape", "api", "sent"),
    [
        (S.CHAT, "openai", S.CHAT),
        (S.ANTHROPIC_MESSAGES, "openai", S.CHAT),
        (S.CHAT, "anthropic", S.ANTHROPIC_MESSAGES),
        (S.ANTHROPIC_MESSAGES, "anthropic", S.ANTHROPIC_MESSAGES),
        (S.RESPONSES, "openai", S.RESPONSES),
        (S.EMBEDDINGS, "anthropic", None),
        (S.COMPLETION, "anthropic", None),
        (S.RESPONSES, "anthropic", None),
        (S.ANTHROPIC_MESSAGES, None, S.ANTHROPIC_MESSAGES),  # a target's own path: as written
        (S.EMBEDDINGS, None, S.EMBEDDINGS),
    ],
)
def test_sent_shape(shape: Shape, api: str | None, sent: Shape | None) -> None:
    assert sent_shape(shape, api) is sent  # type: ignore[arg-type]


def test_an_anthropic_pool_gets_chat_translated_and_nothing_else() -> None:
    from tests.routing.test_router import make, shaped

    env = make(
        """
pools:
  - {namespace: default, name: claude, endpoints: ["10.0.0.1:8000"], models: [c]}
models:
  - name: m
    targets: [{pool: default/claude, model: c, api: anthropic}]
"""
    )
    decision = env.route(shaped("m", "chat"))
    assert decision.local is not None
    assert (decision.sent_shape, decision.local_path) == (S.ANTHROPIC_MESSAGES, "/v1/messages")
    decision = env.route(shaped("m", "embeddings"))
    assert decision.local is None
    assert decision.reason == "pool default/claude takes no embeddings requests"
