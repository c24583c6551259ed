"""Provider health as a pipeline step: a provider cooling down is not a candidate."""

from __future__ import annotations

from typing import ClassVar

from kinference.config import Policy, Target, UnsupportedShape, provider_path
from kinference.requests import Shape
from kinference.routing.health import ProviderHealth
from kinference.routing.plugins.base import Rejection
from kinference.routing.reasons import Reason


class ProviderHealthFilter:
    name: ClassVar[str] = "provider_health"

    def __init__(self, health: ProviderHealth) -> None:
        self.health = health

    def check(self, ref: str) -> Rejection | None:
        """None when `ref` may be used, else why not."""
        cooled = self.health.cooled(ref)
        if cooled is None:
            return None
        left = cooled.remaining(self.health.now())
        text = f"provider {ref} is cooling down ({cooled.reason}, {left:.0f}s left)"
        return Rejection(Reason.PROVIDER_COOLING, text)


# The provider endpoint kind of each shape a body may be sent in.
_SHAPE_KINDS = {
    Shape.CHAT: "chat",
    Shape.COMPLETION: "completion",
    Shape.EMBEDDINGS: "embeddings",
    Shape.RESPONSES: "responses",
    Shape.ANTHROPIC_MESSAGES: "messages",
}


def provider_path_for(policy: Policy, shape: Shape, target: Target, ref: str) -> str | None:
    """The path to send a body of `shape` to at provider `ref`; None if it has none."""
    provider = policy.provider(ref)
    kind = _SHAPE_KINDS.get(shape)
    if provider is None or kind is None:
        return target.path
    try:
        return provider_path(provider, target, kind)
    except UnsupportedShape:
        return None
