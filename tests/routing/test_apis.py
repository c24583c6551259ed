"""The shape a request goes out in, for each API a destination speaks."""

from __future__ import annotations

import pytest

from kinference.config import parse_policy
from kinference.requests import Shape
from kinference.routing.apis import sent_shape, translated_shape

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


POLICY = """
pools:
  - {namespace: default, name: chat, endpoints: ["127.0.0.1:1"], models: [local]}
providers:
  - {namespace: ai, name: claude, api: anthropic}
  - {namespace: ai, name: raw, api: anthropic}
models:
  - {name: claude, targets: [{provider: ai/claude, model: claude-x}]}
  - name: mixed
    targets:
      - {provider: ai/claude, model: claude-x}
      - {pool: default/chat, model: local, use: overflow}
  - {name: as-written, targets: [{provider: ai/raw, model: r, path: /v1/raw}]}
"""


@pytest.mark.parametrize(
    ("shape", "model", "translated"),
    [
        (S.ANTHROPIC_MESSAGES, "local", S.CHAT),  # a pool speaks openai
        (S.CHAT, "local", None),
        (S.CHAT, "claude", S.ANTHROPIC_MESSAGES),
        (S.ANTHROPIC_MESSAGES, "claude", None),
        (S.ANTHROPIC_MESSAGES, "mixed", S.CHAT),  # an overflow target may translate
        (S.CHAT, "mixed", S.ANTHROPIC_MESSAGES),
        (S.CHAT, "as-written", None),  # a target's own path takes it as written
        (S.EMBEDDINGS, "claude", None),  # no target takes it at all
        (S.CHAT, "nobody", None),
    ],
)
def test_translated_shape_is_any_target_s_other_api(
    shape: Shape, model: str, translated: Shape | None
) -> None:
    assert translated_shape(parse_policy(POLICY), shape, model) is translated
