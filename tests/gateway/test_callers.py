"""Tenant from the API key map or the header; QoS from its header; the keys file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinference.config.tenants import MAX_TENANT_BYTES
from kinference.gateway.callers import (
    ApiKeys,
    ApiKeysError,
    CallerRejected,
    CallerResolver,
    load_api_keys,
)
from kinference.v1 import picker_pb2 as pb

TENANT, QOS = "x-kinference-tenant", "x-kinference-qos"


def test_header_tenant_and_default_qos() -> None:
    resolver = CallerResolver(None, TENANT, QOS)
    caller = resolver.resolve({TENANT: " team-a ", "authorization": "Bearer whatever"})
    assert (caller.tenant, caller.qos) == ("team-a", pb.PickRequest.INTERACTIVE)
    assert resolver.resolve({}).tenant == ""  # unknown is "" (spec)


@pytest.mark.parametrize(
    ("text", "qos"),
    [("batch", pb.PickRequest.BATCH), ("DEFERRABLE", pb.PickRequest.DEFERRABLE), ("", 0)],
)
def test_qos_header(text: str, qos: int) -> None:
    assert CallerResolver(None, TENANT, QOS).resolve({QOS: text}).qos == qos


def test_unknown_qos_is_400() -> None:
    with pytest.raises(CallerRejected) as raised:
        CallerResolver(None, TENANT, QOS).resolve({QOS: "urgent"})
    assert raised.value.status == 400


def test_a_tenant_header_longer_than_the_picker_takes_is_400_invalid_tenant() -> None:
    """Before: sent on, the picker's INVALID_ARGUMENT came back as 400 `invalid_body`,
    naming a body that was fine; the bound is the picker's, in bytes (`é`: two)."""
    resolver = CallerResolver(None, TENANT, QOS)
    assert resolver.resolve({TENANT: "é" * (MAX_TENANT_BYTES // 2)}).tenant
    with pytest.raises(CallerRejected) as raised:
        resolver.resolve({TENANT: "é" * (MAX_TENANT_BYTES // 2 + 1)})
    assert (raised.value.status, raised.value.code) == (400, "invalid_tenant")


def test_api_key_decides_the_tenant() -> None:
    resolver = CallerResolver(ApiKeys({"sk-a": "team-a"}), TENANT, QOS)
    assert resolver.resolve({"authorization": "Bearer sk-a", TENANT: "other"}).tenant == "team-a"
    for headers in ({}, {"authorization": "Bearer sk-b"}, {"authorization": "Basic sk-a"}):
        with pytest.raises(CallerRejected) as raised:
            resolver.resolve(headers)
        assert (raised.value.status, raised.value.code) == (401, "invalid_api_key")


def test_keys_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("keys:\n  sk-a: team-a\n  sk-b: team-b\n")
    keys = load_api_keys(path)
    assert keys is not None and len(keys) == 2 and keys.tenant("sk-b") == "team-b"
    assert load_api_keys(None) is None


@pytest.mark.parametrize("text", ["keys: [sk-a]\n", "sk-a: team-a\n", "keys: {sk-a: 3}\n", "{"])
def test_bad_keys_file_never_quotes_a_key(tmp_path: Path, text: str) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(ApiKeysError) as raised:
        load_api_keys(path)
    assert "sk-a" not in str(raised.value)
    assert str(path) in str(raised.value)


def test_missing_keys_file(tmp_path: Path) -> None:
    with pytest.raises(ApiKeysError, match="No such file"):
        load_api_keys(tmp_path / "absent.yaml")


def test_anthropic_sdks_x_api_key_decides_the_tenant_too() -> None:
    resolver = CallerResolver(ApiKeys({"sk-a": "team-a"}), TENANT, QOS)
    assert resolver.resolve({"x-api-key": "sk-a"}).tenant == "team-a"
    bearer_wins = {"authorization": "Bearer sk-b", "x-api-key": "sk-a"}
    with pytest.raises(CallerRejected):
        resolver.resolve(bearer_wins)
    with pytest.raises(CallerRejected):
        resolver.resolve({"x-api-key": "sk-b"})
