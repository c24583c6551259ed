"""`kinference providers list | clear` on a real redis-server (the blacklist's keys:
tests/cluster/test_blacklist_keys.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kinference.cli import main
from kinference.routing.health import UNAUTHORIZED
from loadtest.redis_server import RedisServer
from tests.cluster.blacklists import KEY, P, Q, blacklist_by_hand
from tests.test_cli import clean_env, one_line_error  # noqa: F401 (clean_env: a fixture)


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """A redis-server the CLI finds in KINFERENCE_REDIS_URL (no other KINFERENCE_* set)."""
    server = RedisServer().start()
    monkeypatch.setenv("KINFERENCE_REDIS_URL", server.url)
    yield server
    server.stop()


def test_cli_list(cli_env: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["providers", "list"]) == 0
    assert capsys.readouterr().out == "no provider is blacklisted\n"
    blacklist_by_hand(cli_env, P)
    blacklist_by_hand(cli_env, Q, ttl_ms=3_600_000)
    assert main(["providers", "list"]) == 0
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["PROVIDER", "REASON", "COUNT", "TTL"]
    assert first.split()[:3] == [Q, UNAUTHORIZED, "4"]
    assert first.split()[3] in ("59m59s", "1h00m")
    assert second.split()[3].endswith("s") and float(second.split()[3][:-1]) > 50
    assert second.split()[4:7] == ["2025-05-01T12:00:00.000Z", "2025-05-01T12:03:00.000Z", "pod-1"]
    assert second.endswith("401 from upstream")
    assert main(["providers", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["provider"] for item in listed] == [Q, P]
    assert listed[1]["count"] == 4 and 50_000 < listed[1]["ttl_ms"] <= 60_000


def test_cli_clear(cli_env: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    blacklist_by_hand(cli_env, P)
    blacklist_by_hand(cli_env, Q)
    assert main(["providers", "clear", P]) == 0
    assert capsys.readouterr().out.startswith(f"cleared {P};")
    assert cli_env.cli("EXISTS", KEY) == "0"
    assert main(["providers", "clear", P]) == 0
    assert capsys.readouterr().out == f"{P} was not blacklisted\n"
    blacklist_by_hand(cli_env, P)
    assert main(["providers", "clear", "--all"]) == 0
    assert capsys.readouterr().out.startswith("cleared 2 providers;")
    assert cli_env.cli("DBSIZE") == "0"


def test_cli_prefix_flag(cli_env: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    cli_env.cli("HSET", "{prod}:blacklist:ai/openai", "reason", "manual")
    assert main(["providers", "--prefix", "prod:", "list", "--json"]) == 0
    assert [item["provider"] for item in json.loads(capsys.readouterr().out)] == [P]
    assert main(["providers", "list", "--json"]) == 0  # the default prefix sees none
    assert json.loads(capsys.readouterr().out) == []


def test_cli_errors(
    cli_env: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["providers", "clear", "openai"]) == 2
    assert "NAMESPACE/NAME" in one_line_error(capsys)
    with pytest.raises(SystemExit) as caught:  # a provider or --all, not both, not neither
        main(["providers", "clear", P, "--all"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit):
        main(["providers", "clear"])
    capsys.readouterr()
    stopped = RedisServer()  # a free port nobody listens on
    assert main(["providers", "--redis-url", stopped.url, "list"]) == 1
    assert "Redis" in one_line_error(capsys)
    stopped.stop()
    monkeypatch.setenv("KINFERENCE_REDIS_URL", "")
    assert main(["providers", "list"]) == 2
    assert "KINFERENCE_REDIS_URL" in one_line_error(capsys)
