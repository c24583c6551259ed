"""Request bodies and credentials never reach logs or metrics.

Bodies carrying a marker (well-formed, malformed, large and scanned, rewritten) go through
the whole flow, including its failure paths, against replicas whose Redis URL carries a
password (one right, one wrong, so the connection-error paths log too). Every log record at
DEBUG, everything written to the process's stdout and stderr (gRPC's own C logging
included), every metric sample and every settings error must be free of the markers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from kinference.config import parse_policy
from kinference.settings import SettingsError, load_settings
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, push, wait_nothing_held, wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker

BODY_MARKER = "b0dy-m4rker-7f3a"
PASSWORD = "redis-pa55-m4rker-91c2"
WRONG_PASSWORD = "wr0ng-pa55-m4rker-55d1"
MARKERS = (BODY_MARKER, PASSWORD, WRONG_PASSWORD)
POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["10.0.0.1:8000"], models: ["{MODEL}"]}}
providers:
  - {{namespace: ai, name: openai, api: openai}}
models:
  - name: gpt
    targets: [{{provider: ai/openai, model: gpt-4o-mini}}]
tenants:
  - {{tenant: team-a, models: [gpt]}}
"""


def bodies() -> Iterator[bytes]:
    """Bodies with the marker in every place a body can carry it."""
    yield chat_body(content=BODY_MARKER)
    yield chat_body(model="gpt", content=BODY_MARKER, max_tokens=5)  # rewritten for provider
    yield chat_body(content="x", tools=[{"type": "function", "function": {"name": BODY_MARKER}}])
    yield chat_body(content=BODY_MARKER * 20_000)  # over 256 KiB: scanned while it arrives
    yield json.dumps({"model": MODEL, "prompt": BODY_MARKER, "stream": BODY_MARKER}).encode()
    yield b'{"model": "' + BODY_MARKER.encode() + b'", "messages": [{"content": "' + b"\xff"
    yield b'{"model": 1, "messages": "' + BODY_MARKER.encode() + b'"}'
    yield b'{"' + BODY_MARKER.encode() + b'": ' + b"[" * 100_000
    yield b"\xef\xbb\xbf" + chat_body(content=BODY_MARKER)  # with a BOM


async def run_flows(picker: RunningPicker, tenant: str) -> None:
    for body in bodies():
        pushed = await push(picker, body)
        pick = await picker.client.pick(pushed.stream_id, tenant=tenant)
        if pick.response_id == 0:
            continue
        if pick.HasField("provider"):
            await picker.client.abort(pick.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "401")
            continue
        await picker.client.pull_all(pick.response_id)
        await picker.client.final_token(pick.response_id, prompt_tokens=3, completion_tokens=4)
    undeclared = await push(picker, chat_body(content=BODY_MARKER), declared=False)
    pick = await picker.client.pick(undeclared.stream_id, tenant=tenant)
    if pick.response_id:
        await picker.client.abort(pick.response_id, pb.AbortRequest.PULL_FAILED)


@pytest.fixture
def locked_redis() -> Iterator[RedisServer]:
    server = RedisServer(extra_args=("--requirepass", PASSWORD)).start()
    yield server
    server.stop()


async def test_markers_never_reach_logs_or_metrics(
    start_picker: PickerFactory,
    locked_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    base = f"redis://default:{{}}@127.0.0.1:{locked_redis.port}/0"
    policy = parse_policy(POLICY)
    right = await start_picker(policy, redis_url=base.format(PASSWORD))
    wrong = await start_picker(
        policy, redis_url=base.format(WRONG_PASSWORD), redis_stale_after_s=0.2
    )
    for picker in (right, wrong):
        for tenant in ("", "team-a"):
            await run_flows(picker, tenant)
        await wait_nothing_held(picker)
    await wait_until(lambda: wrong.app.cluster is not None and wrong.app.cluster.last_error != "")
    assert any(record.levelno >= logging.WARNING for record in caplog.records)  # it did log
    texts = [record.getMessage() for record in caplog.records]
    texts += [str(record.exc_info[1]) for record in caplog.records if record.exc_info]
    texts += [caplog.text, *capfd.readouterr()]
    texts += [generate_latest(p.app.metrics.registry).decode() for p in (right, wrong)]
    leaks = [(marker, text[:300]) for text in texts for marker in MARKERS if marker in text]
    assert not leaks


@pytest.mark.parametrize(
    "url",
    [
        f"http://user:{PASSWORD}@127.0.0.1:6379/0",
        f"redis+sentinel://user:{PASSWORD}@/kinference",
        f"redis+sentinel://user:{PASSWORD}@host:port/kinference",
        f"redis+sentinel://user:{PASSWORD}@127.0.0.1:26379",
    ],
)
def test_settings_errors_do_not_quote_the_password(url: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"redis_url": url})
    assert PASSWORD not in str(caught.value)
