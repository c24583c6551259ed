"""The backends file, credentials read at dispatch, and where a pick is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinference.gateway.backends import Backend, BackendsError, CredentialMissing, load_backends
from kinference.gateway.upstream import (
    BackendUnresolved,
    request_headers,
    resolve,
    response_headers,
)
from kinference.v1 import picker_pb2 as pb


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "backends.yaml"
    path.write_text(text)
    return path


def test_load_and_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "key"
    secret.write_text("sk-file\n")
    path = write(
        tmp_path,
        "backends:\n"
        "  ai/openai: {base_url: 'https://api.example.com/', api_key_env: GW_TEST_KEY}\n"
        f"  ai/filed: {{base_url: 'http://10.0.0.9:8000', api_key_file: '{secret}'}}\n"
        "  ai/open: {base_url: 'http://open:8000'}\n",
    )
    backends = load_backends(path)
    assert backends["ai/openai"].base_url == "https://api.example.com"
    with pytest.raises(CredentialMissing, match="GW_TEST_KEY"):
        backends["ai/openai"].credential()
    monkeypatch.setenv("GW_TEST_KEY", "sk-env")
    assert backends["ai/openai"].credential() == "sk-env"
    assert backends["ai/filed"].credential() == "sk-file"
    assert backends["ai/open"].credential() is None
    secret.unlink()
    with pytest.raises(CredentialMissing, match="cannot read"):
        backends["ai/filed"].credential()
    assert load_backends(None) == {}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("backends:\n  openai: {base_url: 'http://a'}\n", "NAMESPACE/NAME"),
        ("backends:\n  ai/x: {base_url: 'ftp://a'}\n", "http:// or https://"),
        ("backends:\n  ai/x: {base_url: 'http://a', api_key_env: A, api_key_file: b}", "not both"),
        ("backends:\n  ai/x: {base_url: 'http://a', token: t}\n", "ai/x.token"),
        ("backend: {}\n", "backend"),
        ("[", "not YAML"),
    ],
)  # fmt: skip
def test_bad_files(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(BackendsError, match=r"backends\.yaml") as raised:
        load_backends(write(tmp_path, text))
    assert problem in str(raised.value)


def local_pick(endpoint: str) -> pb.PickResponse:
    pick = pb.PickResponse(outcome=pb.PickResponse.OK, response_id=7)
    pick.local.endpoint = endpoint
    return pick


def provider_pick(ref: tuple[str, str], path: str) -> pb.PickResponse:
    pick = pb.PickResponse(outcome=pb.PickResponse.OK, response_id=7)
    pick.provider.backend_ref.namespace, pick.provider.backend_ref.name = ref
    pick.provider.path = path
    return pick


def test_resolve_targets() -> None:
    backends = {"ai/x": Backend(base_url="https://x.example.com/base")}
    local = resolve(local_pick("10.0.0.5:8000"), backends, "/v1/chat/completions", "a=1")
    assert local.url == "http://10.0.0.5:8000/v1/chat/completions?a=1"
    assert local.provider is None and local.credential is None
    remote = resolve(provider_pick(("ai", "x"), "/v2/chat?v=3"), backends, "/v1/chat", "a=1")
    assert remote.url == "https://x.example.com/base/v2/chat?v=3"  # pick's path and query win
    assert remote.provider == "ai/x"
    kept = resolve(provider_pick(("ai", "x"), ""), backends, "/v1/chat", "")
    assert kept.url == "https://x.example.com/base/v1/chat"  # empty path: the client's
    with pytest.raises(BackendUnresolved) as raised:
        resolve(provider_pick(("ai", "ghost"), "/v1"), backends, "/v1", "")
    assert raised.value.ref == "ai/ghost"


def test_headers_drop_credentials_and_hop_by_hop() -> None:
    received = [
        ("content-type", "application/json"),
        ("authorization", "Bearer client-key"),
        ("x-api-key", "client-key"),
        ("content-length", "12"),
        ("connection", "keep-alive"),
        ("accept-encoding", "gzip"),
        ("expect", "100-continue"),
        ("x-kinference-tenant", "a"),
        ("x-request-id", "r1"),
    ]
    target = resolve(
        provider_pick(("ai", "x"), "/v1"), {"ai/x": Backend(base_url="http://x")}, "/", ""
    )
    object.__setattr__(target, "credential", "sk-backend")
    sent = request_headers(received, target, length=99, drop=["x-kinference-tenant"])
    assert sorted(sent) == sorted(
        [
            ("content-type", "application/json"),
            ("x-request-id", "r1"),
            ("content-length", "99"),
            ("accept-encoding", "identity"),
            ("authorization", "Bearer sk-backend"),
        ]
    )
    back = response_headers(
        [("content-type", "text/event-stream"), ("transfer-encoding", "chunked"),
         ("content-encoding", "gzip"), ("x-ratelimit-remaining", "9"),
         ("date", "Tue, 01 Dec 2026 20:00:00 GMT"), ("server", "uvicorn")]
    )  # fmt: skip
    # date and server are the gateway's own (never sent twice); framing is redone
    assert back == [("content-type", "text/event-stream"), ("x-ratelimit-remaining", "9")]
