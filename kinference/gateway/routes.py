"""Which client paths are inference requests (and so reach the picker), by their route label.

Only these consume a pick: anything else is answered by the gateway itself (`/health`,
`/v1/models`, `/metrics`) or with 404, without a PushBody. The labels are the values of the
gateway metrics' `route` label.
"""

from __future__ import annotations

INFERENCE_ROUTES = {
    "/v1/chat/completions": "chat_completions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}
OTHER_ROUTE = "other"


def inference_route(path: str) -> str | None:
    """The route label of an inference path, else None."""
    return INFERENCE_ROUTES.get(path)
