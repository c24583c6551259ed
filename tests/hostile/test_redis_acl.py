"""Redis over TLS with the least-privilege ACL users of docs/security.md.

A real redis-server listens only on TLS, requires client certificates and knows no default
user. Two replicas run every flow that touches Redis (load, prefix events, scrape leadership
and engine readings, blacklist, tenant leases and usage, statistics, leaving) as the picker
user; the server's ACL LOG must stay empty, so no command the picker needs is missing from
its ACL. The read-only user serves `kinference providers list` and cannot write.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from kinference.cli import main
from kinference.cluster.keys import Keys
from kinference.config import parse_policy
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body, push, wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.hostile.certs import Authority
from tests.hostile.redis_tls import PICKER, READER, TlsRedisServer, tls_supported
from tests.scenarios.conftest import start_engines  # noqa: F401 (a fixture, shared)
from tests.scenarios.helpers import routing_yaml, vllm_pool, wait_engine

pytestmark = pytest.mark.skipif(
    not tls_supported(), reason="the installed redis-server was built without TLS"
)
KEYS = Keys()


def policy(endpoints: list[str]) -> str:
    return (
        "pools:\n"
        + vllm_pool("chat", endpoints, [MODEL])
        + "providers:\n  - {namespace: ai, name: openai, api: openai}\n"
        + "models:\n  - name: gpt\n    targets: [{provider: ai/openai, model: gpt-4o-mini}]\n"
        + "tenants:\n  - {tenant: team-a, tokens_per_minute: 100000}\n"
        + routing_yaml()
    )


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[TlsRedisServer]:
    server = TlsRedisServer(Authority(tmp_path)).start()
    yield server
    server.stop()


def denials(server: TlsRedisServer) -> list[str]:
    """What the ACL LOG recorded: one line per refused command or key."""
    with server.client() as admin:
        entries = admin.acl_log()
    return [f"{e['username']} {e['reason']} {e['object']}" for e in entries]


def all_keys(server: TlsRedisServer) -> list[str]:
    with server.client() as admin:
        return sorted(admin.scan_iter(count=1000))


async def exercise(a: RunningPicker, b: RunningPicker, engine: str) -> None:
    """Every Redis-backed flow, each confirmed by what the other replica or Redis sees."""
    await wait_engine(b, engine)  # the leader scraped and shared the engine's readings
    for replica in (a, b):
        pushed = await push(replica, chat_body())
        pick = await replica.client.pick(pushed.stream_id, tenant="team-a")  # leased budget
        assert pick.outcome == pb.PickResponse.OK, pick
        await replica.client.first_token(pick.response_id, 40)
        await replica.client.final_token(pick.response_id, prompt_tokens=5, completion_tokens=7)
    pushed = await push(a, chat_body(model="gpt"))
    pick = await a.client.pick(pushed.stream_id)
    await a.client.abort(pick.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "401")
    await wait_until(lambda: b.app.router.health.cooled("ai/openai") is not None, what="shared")


def reader_env(server: TlsRedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment of an operator's `kinference` command run as the read-only user."""
    for name in list(os.environ):
        if name.upper().startswith("KINFERENCE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KINFERENCE_REDIS_URL", server.url(READER))
    for name, value in server.tls_settings().items():
        monkeypatch.setenv(f"KINFERENCE_{name.upper()}", str(value))


async def test_replicas_run_every_flow_under_the_picker_acl(
    tls_redis: TlsRedisServer,
    start_picker: PickerFactory,
    start_engines,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    engines = await start_engines(1)
    settings = {"redis_url": tls_redis.url(PICKER), **tls_redis.tls_settings()}
    rules = parse_policy(policy(engines.endpoints))
    a = await start_picker(rules, **settings)
    b = await start_picker(rules, **settings)
    await exercise(a, b, engines.endpoints[0])
    wanted = (KEYS.stats(0).rsplit(":", 1)[0], KEYS.usage("team-a"))
    await wait_until(
        lambda: all(any(key.startswith(w) for key in all_keys(tls_redis)) for w in wanted),
        what="statistics and tenant usage written",
    )
    reader_env(tls_redis, monkeypatch)
    assert await asyncio.to_thread(main, ["state", "--json"]) == 0  # the dashboard view
    state = capsys.readouterr().out
    assert a.app.cluster is not None and a.app.cluster.instance in state
    assert "team-a" in state
    for replica in (a, b):
        await replica.app.close()  # leaving deletes its heartbeat and resigns leadership
    assert a.app.store.budget.used == 0
    assert denials(tls_redis) == []
    # Global keys under `{kinference}`, the pool's shard under `{kinference:<pool>}`.
    assert all(key.startswith(("{kinference}:", "{kinference:")) for key in all_keys(tls_redis))


def test_picker_user_is_confined_to_its_keys_and_commands(tls_redis: TlsRedisServer) -> None:
    with tls_redis.client(PICKER) as picker:
        assert picker.set("{kinference}:probe", "1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            picker.set("someone-else:key", "1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            picker.flushall()
        with pytest.raises(redis.exceptions.NoPermissionError):
            picker.config_get("requirepass")


def test_reader_lists_providers_and_cannot_write(
    tls_redis: TlsRedisServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = KEYS.blacklist("ai/openai")
    tls_redis.cli("HSET", key, "reason", "BACKEND_UNAUTHORIZED", "count", "1")
    tls_redis.cli("PEXPIRE", key, "60000")
    reader_env(tls_redis, monkeypatch)
    assert main(["providers", "list"]) == 0
    assert "ai/openai" in capsys.readouterr().out
    assert main(["providers", "clear", "--all"]) != 0
    assert "no permissions to run the 'del' command" in capsys.readouterr().err
    assert tls_redis.cli("EXISTS", key) == "1"
    with tls_redis.client(READER) as reader, pytest.raises(redis.exceptions.NoPermissionError):
        reader.hset(key, "count", "2")


def test_a_client_without_a_certificate_is_refused(tls_redis: TlsRedisServer) -> None:
    anonymous = redis.Redis(
        port=tls_redis.port,
        username=PICKER[0],
        password=PICKER[1],
        ssl=True,
        ssl_ca_certs=str(tls_redis.ca.cert),
        socket_timeout=1,  # seconds; with TLS 1.3 the refusal may only show as silence
        retry=Retry(NoBackoff(), 0),
    )
    refusals = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
    with anonymous, pytest.raises(refusals):
        anonymous.ping()
