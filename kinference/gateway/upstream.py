"""Where a picked request goes, and the headers that go with it in each direction.

A local pick is `http://<endpoint>` with the client's path and query. A provider pick is its
backend's base URL followed by `ProviderTarget.path`, which replaces the client's path and
query when set (spec). The client's own credential never travels upstream: a provider gets
the backend's, a local engine none.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kinference.gateway.backends import Backend
from kinference.v1 import picker_pb2 as pb

# Connection-specific (RFC 9110 section 7.6.1) or set by us; never forwarded as received.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
     "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
)  # fmt: skip
# Client credentials in the forms OpenAI, Azure and Anthropic clients send them.
_CREDENTIALS = frozenset({"authorization", "api-key", "x-api-key", "cookie"})


class BackendUnresolved(Exception):
    """The pick names a provider the backends file does not know."""

    def __init__(self, ref: str) -> None:
        super().__init__(ref)
        self.ref = ref


@dataclass(frozen=True)
class Target:
    """Where to send one request: URL, bearer credential, and the provider (None = local)."""

    url: str
    credential: str | None = None
    provider: str | None = None
    auth: str = "bearer"  # or "x-api-key"
    extra_headers: tuple[tuple[str, str], ...] = ()  # the backend's, unless the client's


def resolve(
    pick: pb.PickResponse, backends: Mapping[str, Backend], path: str, query: str
) -> Target:
    """The upstream for a dispatching pick; `path` and `query` are the client's.

    Raises `BackendUnresolved`, or `CredentialMissing` from the backend.
    """
    client_path = f"{path}?{query}" if query else path
    if pick.WhichOneof("destination") == "local":
        return Target(url=f"http://{pick.local.endpoint}{client_path}")
    ref = f"{pick.provider.backend_ref.namespace}/{pick.provider.backend_ref.name}"
    backend = backends.get(ref)
    if backend is None:
        raise BackendUnresolved(ref)
    target_path = pick.provider.path or client_path
    return Target(
        url=f"{backend.base_url}{target_path}",
        credential=backend.credential(),
        provider=ref,
        auth=backend.auth,
        extra_headers=tuple(backend.headers.items()),
    )


@functools.lru_cache(maxsize=16)
def _skipped(drop: tuple[str, ...]) -> frozenset[str]:
    """The client's headers not sent upstream, with `drop` (one gateway's: made once)."""
    # `expect: 100-continue` asks the next hop about a body the gateway already holds.
    return _HOP_BY_HOP | _CREDENTIALS | {"accept-encoding", "expect"} | frozenset(drop)


def request_headers(
    received: Iterable[tuple[str, str]], target: Target, *, length: int, drop: Iterable[str]
) -> list[tuple[str, str]]:
    """Headers for the upstream request: the client's, less hop-by-hop, credentials and
    `drop` (the gateway's own tenant/QoS headers), with the exact body length."""
    skipped = _skipped(tuple(drop))
    headers = [(name, value) for name, value in received if name.lower() not in skipped]
    headers.append(("content-length", str(length)))
    # Identity keeps the bytes readable for usage and timing as they pass.
    headers.append(("accept-encoding", "identity"))
    sent = {name.lower() for name, _ in headers}
    headers.extend((name, value) for name, value in target.extra_headers if name not in sent)
    if target.credential is not None and target.auth == "x-api-key":
        headers.append(("x-api-key", target.credential))
    elif target.credential is not None:
        headers.append(("authorization", f"Bearer {target.credential}"))
    return headers


# Set by the gateway's own HTTP server (`date`) or not sent at all (`server`: the engine's
# identity is nobody's business); relaying them too would send each twice.
_OWN_RESPONSE = frozenset({"date", "server", "content-encoding", "set-cookie"})


def response_headers(received: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers to relay to the client (names lower-case): less hop-by-hop, framing and the
    gateway's own; the body is re-framed and already decoded. The upstream's own
    `x-request-id` (a provider's, or an engine's echo) goes as `x-upstream-request-id`:
    the client's is the gateway's (before, a client got two)."""
    skipped = _HOP_BY_HOP | _OWN_RESPONSE
    return [
        (_UPSTREAM_ID if name == _REQUEST_ID else name, value)
        for name, value in received
        if name not in skipped
    ]


_REQUEST_ID = "x-request-id"
_UPSTREAM_ID = "x-upstream-request-id"
