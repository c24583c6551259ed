"""Which API shape a request is sent in, for the API a destination speaks.

A target speaks `openai` or `anthropic` (`kinference.config.target_api`). Conversations
(OpenAI chat, Anthropic Messages) go to either, translated to the destination's; the other
OpenAI shapes (completions, embeddings, responses) only to an `openai` one.
"""

from __future__ import annotations

from kinference.config import Policy, target_api
from kinference.config.models import TargetApi
from kinference.requests import Shape

# The conversation shape each target API takes; the other one is translated to it.
_CONVERSATION = {"openai": Shape.CHAT, "anthropic": Shape.ANTHROPIC_MESSAGES}
_CONVERSATIONS = frozenset(_CONVERSATION.values())
# Where a local engine serves a conversation that was translated for it.
LOCAL_PATHS = {Shape.CHAT: "/v1/chat/completions", Shape.ANTHROPIC_MESSAGES: "/v1/messages"}


def sent_shape(shape: Shape, api: TargetApi | None) -> Shape | None:
    """The shape a request of `shape` is sent in to a destination speaking `api` (None: as
    written); None when that API has no such request (Anthropic takes conversations only)."""
    if api is None:
        return shape
    if shape in _CONVERSATIONS:
        return _CONVERSATION[api]
    return shape if api == "openai" else None


def translated_shape(config: Policy, shape: Shape, model: str) -> Shape | None:
    """The shape some target of `model` would take a `shape` request translated into, or
    None when every target takes it as written (or the model has no route). Asked before
    routing, so that a big body's translation can be prepared off the loop."""
    route = config.resolve_model(model)
    if route is None:
        return None
    for target in route.targets:
        provider = config.provider(target.destination) if target.provider is not None else None
        sent = sent_shape(shape, target_api(target, provider))
        if sent is not None and sent is not shape:
            return sent
    return None
